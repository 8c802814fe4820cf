"""Framework: runs one profile's plugins at each extension point.

Built from a profile's configuration (see `shoal.config`); knows nothing of queues or
backends. The scheduler calls it in order: PreFilter -> Filter -> (PostFilter) ->
PreScore -> Score -> Reserve -> Permit, then in the binding cycle PreBind -> Bind ->
PostBind.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.cache.node_fence import FENCE_PLUGIN
from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import Diagnosis
from shoal.framework.handle import Handle
from shoal.framework.interfaces import (
    EnqueueExtensions,
    NodeFilterStatuses,
    PostFilterResult,
    PreBindPreFlightPlugin,
    ProfilePolicy,
    QueueSortPlugin,
    ScoreNormalizer,
    ScorePlugin,
)
from shoal.framework.runner import FilterOutcome, ProfilePlugins
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    MAX_NODE_SCORE,
    Candidates,
    ClusterEvent,
    Failure,
    FilterResult,
    PreFilterResult,
    all_true,
)

__all__ = ["MAX_PERMIT_TIMEOUT", "FilterOutcome", "Framework", "ProfilePlugins"]

MAX_PERMIT_TIMEOUT = 15 * 60.0  # kube-scheduler caps Permit waits at 15 minutes
_SKIP = Status(Code.SKIP)  # returned as is (never changed)


class _Statuses(NodeFilterStatuses):
    def __init__(self, diagnosis: Diagnosis, handle: Handle) -> None:
        self._diagnosis = diagnosis
        self._handle = handle

    def status_of(self, node: str) -> Status:
        row = self._handle.snapshot.row(node)
        cands = self._diagnosis.candidates
        if row is None or cands is None:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "node not found")
        where = np.flatnonzero(cands.rows == row)
        if not len(where):
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "node was not a candidate")
        i = int(where[0])
        plugin = self._diagnosis.rejected_by[i]
        if not plugin:
            return Status()
        assert self._diagnosis.unresolvable is not None
        code = (
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            if self._diagnosis.unresolvable[i]
            else Code.UNSCHEDULABLE
        )
        return Status(code, *self._diagnosis.node_reasons[i], plugin=plugin)

    def unresolvable(self) -> NDArray[np.bool_]:
        assert self._diagnosis.unresolvable is not None
        return self._diagnosis.unresolvable

    @property
    def pre_filter_resolvable(self) -> bool:
        return self._diagnosis.pre_filter_resolvable

    def _at_rows(
        self, per_candidate: NDArray[np.bool_], rows: NDArray[np.intp]
    ) -> NDArray[np.bool_]:
        """A per-candidate mask read at node rows (False where a row was no candidate)."""
        cands = self._diagnosis.candidates
        if cands is None or not rows.size:
            return np.zeros(rows.size, dtype=bool)
        by_row = np.zeros(max(self._handle.snapshot.n, int(rows.max()) + 1), dtype=bool)
        by_row[cands.rows] = per_candidate
        found: NDArray[np.bool_] = by_row[rows]
        return found

    def rejected_first_by(self, plugin: str, rows: NDArray[np.intp]) -> NDArray[np.bool_]:
        return self._at_rows(self._diagnosis.first_rejected_by(plugin), rows)

    def reasons_at(self, rows: NDArray[np.intp]) -> Counter[str]:
        diagnosis = self._diagnosis
        if diagnosis.pre_filter_resolvable:
            return Counter({diagnosis.pre_filter_message: rows.size} if rows.size else {})
        cands = diagnosis.candidates
        if cands is None or not rows.size:
            return Counter()
        wanted = np.zeros(max(self._handle.snapshot.n, int(rows.max()) + 1), dtype=bool)
        wanted[rows] = True
        return diagnosis.reasons_at(wanted[cands.rows])

    def resolvable(self, rows: NDArray[np.intp]) -> NDArray[np.bool_]:
        unresolvable = self._diagnosis.unresolvable
        if unresolvable is None:
            return np.zeros(rows.size, dtype=bool)
        return self._at_rows(~unresolvable, rows)


def post_filter_key(plugin: str) -> str:
    """The queueing key of a PostFilter's own retry events (see `events_to_register`)."""
    return f"{plugin}/PostFilter"


class Framework:
    """One profile (schedulerName) with its plugins, weights and tuning."""

    def __init__(
        self,
        profile_name: str,
        plugins: ProfilePlugins,
        handle: Handle,
        percentage_of_nodes_to_score: int | None = None,
    ) -> None:
        if plugins.queue_sort is None:
            raise ValueError(f"profile {profile_name}: a QueueSort plugin is required")
        if not plugins.bind:
            raise ValueError(f"profile {profile_name}: at least one Bind plugin is required")
        self.profile_name = profile_name
        self.plugins = plugins
        self.handle = handle
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self.queue_sort: QueueSortPlugin = plugins.queue_sort
        # The plugins with timed calls, for the cycles a timer samples (framework/timing.py).
        self.sampled_plugins = plugins
        # PreBind plugins with a PreBindPreFlight, found once: a runtime-checked
        # protocol test per plugin per pod cost SchedulingBasic 18 %.
        self._pre_flights = [p for p in plugins.pre_bind if isinstance(p, PreBindPreFlightPlugin)]
        self.max_total_score = MAX_NODE_SCORE * sum(w for _, w in plugins.score)
        self._normalizers = {p.name: p for p, _ in plugins.score if isinstance(p, ScoreNormalizer)}
        for plugin in plugins.all():
            if isinstance(plugin, ProfilePolicy):
                plugin.register_profile(profile_name)

    # ---- queueing ------------------------------------------------------------------

    def has_filter(self, name: str) -> bool:
        return any(p.name == name for p in self.plugins.filter)

    def has_pre_enqueue(self, name: str) -> bool:
        return any(p.name == name for p in self.plugins.pre_enqueue)

    def run_pre_enqueue(self, pod: PodInfo) -> Status:
        for plugin in self.plugins.pre_enqueue:
            status = plugin.pre_enqueue(pod)
            if not status.ok:
                return status.with_plugin(plugin.name)
        return Status()

    def events_to_register(self) -> dict[str, list[ClusterEvent]]:
        """Per plugin, the events worth retrying its rejections for."""
        out: dict[str, list[ClusterEvent]] = {}
        for plugin in self.plugins.all():
            if isinstance(plugin, EnqueueExtensions):
                out[plugin.name] = list(plugin.events_to_register())
            # A PostFilter that could not help yet (e.g. reclaim finding no queue above
            # its level) may name other events than its Filter-side rejections need.
            post = getattr(plugin, "post_filter_events", None)
            if callable(post):
                out[post_filter_key(plugin.name)] = list(post())
        return out

    # ---- filtering -----------------------------------------------------------------

    def run_pre_filter(
        self, state: CycleState, pod: PodInfo
    ) -> tuple[PreFilterResult | None, Status]:
        merged: PreFilterResult | None = None
        for plugin in (self.sampled_plugins if state.sampled else self.plugins).pre_filter:
            result, status = plugin.pre_filter(state, pod)
            if status.code == Code.SKIP:
                state.skip_filter.add(plugin.name)
                continue
            if not status.ok:
                return None, status.with_plugin(plugin.name)
            if result is not None:
                if result.node_names is not None:
                    result = PreFilterResult(result.node_names, result.plugins | {plugin.name})
                merged = result.merge(merged)
                if merged.node_names is not None and not merged.node_names:
                    # kube's RunPreFilterPlugins wording for an empty intersection.
                    names = sorted(merged.plugins)
                    message = (
                        f"node(s) didn't satisfy plugin {names[0]}"
                        if len(names) == 1
                        else f"node(s) didn't satisfy plugin(s) [{' '.join(names)}] simultaneously"
                    )
                    return merged, Status(
                        Code.UNSCHEDULABLE_AND_UNRESOLVABLE, message, plugin=plugin.name
                    )
        return merged, Status()

    def run_filters(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterOutcome:
        everyone = all_true(nodes.size)
        # The intersection so far; the shared all-True mask while nobody rejected a node
        # (most filters pass every node most of the time: no copy, no `&=` for them).
        passed = everyone
        results: list[tuple[str, FilterResult]] = []
        fence = self.handle.snapshot.fence
        fenced = fence.fenced()
        if fenced is not None:
            # Nodes of shards another replica holds: not a plugin (no profile may turn
            # it off), and nothing on them can be preempted from here.
            out = fenced[nodes.index]
            if out.any():
                passed = ~out
                results.append(
                    (
                        FENCE_PLUGIN,
                        FilterResult(
                            ~out,
                            [Failure(fence.reason(), out, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)],
                        ),
                    )
                )
        for plugin in (self.sampled_plugins if state.sampled else self.plugins).filter:
            if plugin.name in state.skip_filter:
                continue
            result = plugin.filter(state, pod, nodes)
            results.append((plugin.name, result))
            mask = result.passed
            if mask is everyone:
                continue
            if mask.shape != (nodes.size,):
                raise ValueError(
                    f"plugin {plugin.name} returned {mask.shape} filter verdicts for "
                    f"{nodes.size} nodes"
                )
            if passed is everyone:
                passed = mask.copy()
            else:
                passed &= mask
        return FilterOutcome(nodes, passed, results, all_passed=passed is everyone)

    def run_post_filter(
        self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis
    ) -> tuple[PostFilterResult | None, Status]:
        """kube's RunPostFilterPlugins: the first that succeeds (or answers other than
        Unschedulable) decides; otherwise every plugin's reason is kept, in order (one
        message, joined with ", " as kube's), and the first to reject is named."""
        statuses = _Statuses(diagnosis, self.handle)
        reasons: list[str] = []
        rejector = ""
        for plugin in (self.sampled_plugins if state.sampled else self.plugins).post_filter:
            result, status = plugin.post_filter(state, pod, statuses)
            if status.ok or status.code != Code.UNSCHEDULABLE:
                return result, status.with_plugin(plugin.name)
            if status.message:
                reasons.append(status.message.rstrip("."))
                diagnosis.post_filter_plugins.add(plugin.name)
            rejector = rejector or plugin.name
        # kube's Status.Message(): the reasons joined with ", ".
        message = ", ".join(reasons)
        return None, Status(Code.UNSCHEDULABLE, message, plugin=rejector)

    # ---- scoring -------------------------------------------------------------------

    def run_pre_score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> Status:
        for plugin in (self.sampled_plugins if state.sampled else self.plugins).pre_score:
            status = plugin.pre_score(state, pod, nodes)
            if status.code == Code.SKIP:
                state.skip_score.add(plugin.name)
            elif not status.ok:
                return status.with_plugin(plugin.name)
        return Status()

    def run_score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        """Weighted sum of normalised plugin scores, one per candidate."""
        total = np.zeros(nodes.size, dtype=np.int64)
        for plugin, weight in (self.sampled_plugins if state.sampled else self.plugins).score:
            if plugin.name in state.skip_score:
                continue
            scores = self._normalised(plugin, state, pod, nodes)
            if weight == 1:
                total += scores
            else:
                total += scores * weight
        return total

    def score_parts(
        self, state: CycleState, pod: PodInfo, nodes: Candidates
    ) -> dict[str, NDArray[np.int64]]:
        """`run_score`'s terms (each plugin's normalised score times its weight), for
        explanations: which plugin made a node win."""
        return {
            plugin.name: self._normalised(plugin, state, pod, nodes) * weight
            for plugin, weight in self.plugins.score
            if plugin.name not in state.skip_score
        }

    def _normalised(
        self, plugin: ScorePlugin, state: CycleState, pod: PodInfo, nodes: Candidates
    ) -> NDArray[np.int64]:
        scores = plugin.score(state, pod, nodes)
        normalizer = self._normalizers.get(plugin.name)
        if normalizer is not None:
            scores = normalizer.normalize_score(state, pod, nodes, scores)
        if scores.shape != (nodes.size,):
            raise ValueError(
                f"plugin {plugin.name} returned {scores.shape} scores for {nodes.size} nodes"
            )
        return scores

    def check_scores(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> None:
        """Raise if a plugin's normalised scores leave 0..MAX_NODE_SCORE (a plugin bug)."""
        for plugin, _ in self.plugins.score:
            if plugin.name in state.skip_score:
                continue
            scores = self._normalised(plugin, state, pod, nodes)
            if scores.size and (scores.min() < 0 or scores.max() > MAX_NODE_SCORE):
                raise ValueError(
                    f"plugin {plugin.name} returned scores outside 0..{MAX_NODE_SCORE}"
                )

    # ---- reserve and permit --------------------------------------------------------

    def run_reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        for plugin in (self.sampled_plugins if state.sampled else self.plugins).reserve:
            status = plugin.reserve(state, pod, node)
            if not status.ok:
                return status.with_plugin(plugin.name)
        return Status()

    def run_unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        for plugin in reversed(self.plugins.reserve):
            plugin.unreserve(state, pod, node)

    def run_permit(
        self, state: CycleState, pod: PodInfo, node: str
    ) -> tuple[Status, float, set[str]]:
        """Returns the combined status; on WAIT also the timeout and the waiting plugins."""
        waiting: set[str] = set()
        timeout = MAX_PERMIT_TIMEOUT
        for plugin in (self.sampled_plugins if state.sampled else self.plugins).permit:
            status, plugin_timeout = plugin.permit(state, pod, node)
            if status.code == Code.WAIT:
                waiting.add(plugin.name)
                timeout = min(timeout, max(0.0, plugin_timeout))
            elif not status.ok:
                return status.with_plugin(plugin.name), 0.0, set()
        if waiting:
            return Status(Code.WAIT), timeout, waiting
        return Status(), 0.0, set()

    # ---- binding cycle -------------------------------------------------------------

    def run_pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """SUCCESS when a PreBind plugin will do work for the pod (kube's
        RunPreBindPreFlights), SKIP when none will, or the first failure."""
        result = _SKIP
        for plugin in self._pre_flights:
            status = plugin.pre_bind_pre_flight(state, pod, node)
            if status.code == Code.SKIP:
                continue
            if not status.ok:
                return status.with_plugin(plugin.name)
            result = Status()
        return result

    def run_pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        for plugin in (self.sampled_plugins if state.sampled else self.plugins).pre_bind:
            status = plugin.pre_bind(state, pod, node)
            if not status.ok:
                return status.with_plugin(plugin.name)
        return Status()

    def run_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """SUCCESS (bound), WAIT (a `Bind` effect went out; the outcome comes as an
        event) or why it failed."""
        for plugin in (self.sampled_plugins if state.sampled else self.plugins).bind:
            status = plugin.bind(state, pod, node)
            if status.code != Code.SKIP:
                return status.with_plugin(plugin.name)
        return Status(Code.ERROR, "no bind plugin bound the pod")

    def run_post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        for plugin in (self.sampled_plugins if state.sampled else self.plugins).post_bind:
            plugin.post_bind(state, pod, node)
