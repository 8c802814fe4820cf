"""Why a pod could not be placed, in kube-scheduler's words.

Filters run on all candidates at once, but the explanation follows kube-scheduler's
per-node semantics: a node is charged to the first plugin (in Filter order) that rejected
it, and each of that plugin's reasons for the node counts once. The message is the
FitError format users already grep for:
"0/12 nodes are available: 4 node(s) had untolerated taint {dedicated: infer},
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
    post_filter_message: str = ""
    # PostFilter plugins that tried and could not help yet (they said why): the pod is
    # also worth retrying on the events they registered for.
    post_filter_plugins: set[str] = field(default_factory=set)
    # Per candidate row: True where preemption cannot help (UnschedulableAndUnresolvable).
    unresolvable: NDArray[np.bool_] | None = None
    # Per candidate row: the plugin that first rejected it ("" where the node passed).
    rejected_by: list[str] = field(default_factory=list)
    # Per candidate row: the reasons the first rejecting plugin gave.
    node_reasons: list[tuple[str, ...]] = field(default_factory=list)
    candidates: Candidates | None = None

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
        rejected_by = [""] * size
        node_reasons: list[tuple[str, ...]] = [()] * size
        for plugin, result in results:
            first_here = remaining & ~result.passed
            if not first_here.any():
                continue
            diagnosis.unschedulable_plugins.add(plugin)
            rows = np.flatnonzero(first_here)
            for row in rows:
                rejected_by[row] = plugin
            for failure in result.failures:
                charged = first_here & failure.nodes
                count = int(charged.sum())
                if count:
                    diagnosis.reasons[failure.reason] += count
                    for row in np.flatnonzero(charged):
                        node_reasons[row] = (*node_reasons[row], failure.reason)
                if failure.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    unresolvable |= charged
            remaining &= result.passed
        diagnosis.unresolvable = unresolvable
        diagnosis.rejected_by = rejected_by
        diagnosis.node_reasons = node_reasons
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
