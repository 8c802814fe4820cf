"""Why a pod could not be placed, in kube-scheduler's words.

Filters run on all candidates at once, but the explanation follows kube-scheduler's
per-node semantics: a node is charged to the first plugin (in Filter order) that rejected
it, and each of that plugin's reasons for the node counts once. The message is the
FitError format users already grep for:
"0/12 nodes are available: 4 node(s) had untolerated taint(s),
8 Insufficient nvidia.com/gpu."
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from shoal.framework.status import Code
from shoal.framework.types import Candidates, FilterResult

__all__ = ["Diagnosis", "fit_error_message"]


@dataclass
class Diagnosis:
    num_all_nodes: int
    reasons: Counter[str] = field(default_factory=Counter)
    unschedulable_plugins: set[str] = field(default_factory=set)
    pre_filter_message: str = ""
    # A PreFilter rejected the pod with Unschedulable flagged `resolvable_by_preemption`
    # (a queue at its max): every node carries that status, as in kube's
    # SetAbsentNodesStatus, so a victim search may try any node.
    pre_filter_resolvable: bool = False
    post_filter_message: str = ""
    # PostFilter plugins that tried and could not help yet (they said why): the pod is
    # also worth retrying on the events they registered for.
    post_filter_plugins: set[str] = field(default_factory=set)
    # Per candidate row: True where preemption cannot help (UnschedulableAndUnresolvable).
    unresolvable: NDArray[np.bool_] | None = None
    candidates: Candidates | None = None
    # Per-row explanation, kept as arrays (a failed pod must not cost a Python loop over
    # the nodes) and turned into `rejected_by` / `node_reasons` lists only when read.
    _plugins: list[str] = field(default_factory=list, repr=False)
    _plugin_of_row: NDArray[np.int64] | None = field(default=None, repr=False)
    _failures: list[tuple[str, NDArray[np.bool_]]] = field(default_factory=list, repr=False)
    _rejected_by: list[str] | None = field(default=None, repr=False)
    _node_reasons: list[tuple[str, ...]] | None = field(default=None, repr=False)

    @property
    def rejected_by(self) -> list[str]:
        """Per candidate row: the plugin that first rejected it ("" where the node passed)."""
        if self._rejected_by is None:
            size = self.candidates.size if self.candidates is not None else 0
            names = [*self._plugins, ""]
            codes = self._plugin_of_row
            self._rejected_by = (
                [names[c] for c in codes.tolist()] if codes is not None else [""] * size
            )
        return self._rejected_by

    @property
    def node_reasons(self) -> list[tuple[str, ...]]:
        """Per candidate row: the reasons the first rejecting plugin gave."""
        if self._node_reasons is None:
            size = self.candidates.size if self.candidates is not None else 0
            reasons: list[tuple[str, ...]] = [()] * size
            for reason, charged in self._failures:
                for row in np.flatnonzero(charged).tolist():
                    reasons[row] = (*reasons[row], reason)
            self._node_reasons = reasons
        return self._node_reasons

    def first_rejected_by(self, plugin: str) -> NDArray[np.bool_]:
        """Per candidate row: was `plugin` the first to reject it?"""
        size = self.candidates.size if self.candidates is not None else 0
        if plugin not in self._plugins or self._plugin_of_row is None:
            return np.zeros(size, dtype=bool)
        found: NDArray[np.bool_] = self._plugin_of_row == self._plugins.index(plugin)
        return found

    def reasons_at(self, at: NDArray[np.bool_]) -> Counter[str]:
        """`reasons` counted over the candidate rows where `at` holds."""
        found: Counter[str] = Counter()
        for reason, charged in self._failures:
            count = int(np.count_nonzero(charged & at))
            if count:
                found[reason] += count
        return found

    @classmethod
    def from_filters(
        cls,
        num_all_nodes: int,
        candidates: Candidates,
        results: list[tuple[str, FilterResult]],
    ) -> Diagnosis:
        size = candidates.size
        diagnosis = cls(num_all_nodes, candidates=candidates)
        remaining = np.ones(size, dtype=bool)
        unresolvable = np.zeros(size, dtype=bool)
        plugins: list[str] = []
        plugin_of_row = np.full(size, -1, dtype=np.int64)
        failures: list[tuple[str, NDArray[np.bool_]]] = []
        for plugin, result in results:
            first_here = remaining & ~result.passed
            if not first_here.any():
                continue
            diagnosis.unschedulable_plugins.add(plugin)
            plugin_of_row[first_here] = len(plugins)
            plugins.append(plugin)
            explained = np.zeros(size, dtype=bool)
            for failure in result.failures:
                charged = first_here & failure.nodes
                explained |= charged
                count = int(np.count_nonzero(charged))
                if count:
                    diagnosis.reasons[failure.reason] += count
                    failures.append((failure.reason, charged))
                if failure.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    unresolvable |= charged
            unexplained = int(np.count_nonzero(first_here & ~explained))
            if unexplained:
                # The pod's message would leave these nodes out ("0/3 nodes are
                # available:" and nothing after it): a plugin bug, said as one.
                raise ValueError(
                    f"plugin {plugin} rejected {unexplained} node(s) without a Failure "
                    "saying why (each node a Filter rejects must be in one)"
                )
            remaining &= result.passed
        diagnosis.unresolvable = unresolvable
        plugin_of_row[plugin_of_row < 0] = len(plugins)  # "" (passed)
        diagnosis._plugins = plugins
        diagnosis._plugin_of_row = plugin_of_row
        diagnosis._failures = failures
        return diagnosis

    def message(self) -> str:
        return fit_error_message(
            self.num_all_nodes, self.reasons, self.pre_filter_message, self.post_filter_message
        )


def fit_error_message(
    num_all_nodes: int,
    reasons: Counter[str],
    pre_filter_message: str = "",
    post_filter_message: str = "",
) -> str:
    """kube-scheduler's FitError.Error(): reasons as "count reason", sorted as strings."""
    message = f"0/{num_all_nodes} nodes are available:"
    if pre_filter_message:
        message += f" {pre_filter_message}."
    else:
        histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
        if histogram:
            message += f" {', '.join(histogram)}."
    if post_filter_message:
        message += f" {post_filter_message}."
    return message
