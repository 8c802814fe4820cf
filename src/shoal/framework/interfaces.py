"""The plugin contract: one protocol per extension point.

A plugin is an object with a `name` that implements one or more of these protocols; the
framework finds out which by the methods present. Contracts (what each point may do and
return) follow kube-scheduler's `framework` package:

* Filter and Score are *vectorised*: they receive the candidate node rows and return one
  value per candidate (numpy arrays). To write a plain per-node function instead, see
  `shoal.framework.adapters`.
* Nothing a plugin receives may be mutated except its own CycleState entries.
* PreBind, Bind and PostBind are coroutines: they run in the asynchronous binding cycle,
  the only place where a plugin may wait on I/O (through `Handle.binder`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.status import Status
from shoal.framework.types import Candidates, ClusterEvent, FilterResult, PreFilterResult

if TYPE_CHECKING:
    pass

__all__ = [
    "BindPlugin",
    "EnqueueExtensions",
    "FilterPlugin",
    "NodeFilterStatuses",
    "PermitPlugin",
    "Plugin",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreBindPlugin",
    "PreBindPreFlightPlugin",
    "PreEnqueuePlugin",
    "PreFilterPlugin",
    "PreScorePlugin",
    "ProfilePolicy",
    "QueueSortPlugin",
    "ReservePlugin",
    "ScoreNormalizer",
    "ScorePlugin",
    "Victim",
]

Scores = NDArray[np.int64]


@runtime_checkable
class Plugin(Protocol):
    name: str


@runtime_checkable
class PreEnqueuePlugin(Plugin, Protocol):
    """Called before a pod enters the active queue; non-success keeps it out (gated)."""

    def pre_enqueue(self, pod: PodInfo) -> Status: ...


@runtime_checkable
class QueueSortPlugin(Plugin, Protocol):
    """Orders the active queue. Exactly one per profile.

    `sort_key` must be consistent with `less`: the queue uses the key (a tuple compared
    lexicographically) because it is much faster than pairwise calls.
    """

    def less(self, a: PodInfo, b: PodInfo) -> bool: ...
    def sort_key(self, pod: PodInfo) -> tuple[object, ...]: ...


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    """Runs once per cycle before Filter. SKIP turns off this plugin's Filter for the pod;
    UNSCHEDULABLE(_AND_UNRESOLVABLE) rejects the pod on every node."""

    def pre_filter(
        self, state: CycleState, pod: PodInfo
    ) -> tuple[PreFilterResult | None, Status]: ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    """Which candidate nodes can run the pod (one boolean per candidate, with reasons)."""

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult: ...


class NodeFilterStatuses(Protocol):
    """What PostFilter sees of the failed Filter run."""

    def status_of(self, node: str) -> Status: ...
    def unresolvable(self) -> NDArray[np.bool_]: ...
    def resolvable(self, rows: NDArray[np.intp]) -> NDArray[np.bool_]:
        """For node rows: did the pod fail there with a status preemption may resolve
        (Unschedulable, not UnschedulableAndUnresolvable, and not left out by PreFilter)?"""
        ...

    def rejected_first_by(self, plugin: str, rows: NDArray[np.intp]) -> NDArray[np.bool_]:
        """For node rows: was `plugin` the first Filter to reject the pod there?"""
        ...

    def reasons_at(self, rows: NDArray[np.intp]) -> Counter[str]:
        """The Filter reasons the pod failed with on these node rows, counted as in the
        pod's message (the first rejecting plugin's reasons; with
        `pre_filter_resolvable`, the PreFilter's message on every row)."""
        ...

    @property
    def pre_filter_resolvable(self) -> bool:
        """Was the pod rejected by a PreFilter whose Unschedulable removing pods may
        resolve on any node (`Status.resolvable_by_preemption`, e.g. its queue at its
        max)? Then a victim search may try every node, re-running PreFilter with the
        victims gone (`resolvable` stays False for all rows: no Filter ran)."""
        ...


class Victim:
    """A running pod a PostFilter wants evicted, and why (the reason its owner reads)."""

    __slots__ = ("pod", "reason")

    def __init__(self, pod: PodInfo, reason: str) -> None:
        self.pod = pod
        self.reason = reason

    def __repr__(self) -> str:
        return f"Victim({self.pod.key!r}, {self.reason!r})"


class PostFilterResult:
    """A PostFilter may nominate a node for the pod's next attempt and name the victims
    to evict for it (preemption, reclaim). The plugin only decides: the scheduler
    commits the evictions and the nomination in one transaction and sends them out
    through the effects port."""

    __slots__ = ("holds", "nominated_node", "victims")

    def __init__(
        self,
        nominated_node: str = "",
        victims: list[Victim] | None = None,
        holds: list[tuple[PodInfo, str]] | None = None,
    ) -> None:
        self.nominated_node = nominated_node
        self.victims = victims or []
        # Room held for evicted pods that are to come back elsewhere (a migration plan's
        # stand-ins, `shoal.rescheduler.holds`): nominated in the same commit.
        self.holds = holds or []


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    """Runs only when no node passed Filter (e.g. preemption)."""

    def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: NodeFilterStatuses
    ) -> tuple[PostFilterResult | None, Status]: ...


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    """Runs once before Score with the feasible nodes. SKIP turns off this plugin's Score."""

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> Status: ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    """Ranks feasible nodes; returns one integer per candidate.

    The framework then calls `normalize_score` when the plugin defines it; afterwards
    scores must be within 0..MAX_NODE_SCORE and are multiplied by the plugin's weight.
    """

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> Scores: ...


@runtime_checkable
class ScoreNormalizer(Protocol):
    """NormalizeScore: a ScorePlugin that also has this method gets its raw scores for all
    feasible nodes and returns them mapped into 0..MAX_NODE_SCORE."""

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: Candidates, scores: Scores
    ) -> Scores: ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    """Reserve claims plugin-side state for the chosen node; Unreserve must undo it and
    must be idempotent (it also runs for plugins whose Reserve was never called)."""

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...
    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None: ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    """Allow (SUCCESS), deny (UNSCHEDULABLE) or hold (WAIT, with a timeout in seconds)."""

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> tuple[Status, float]: ...


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    """Prepares the bind; what must reach the cluster first goes out as effects (e.g.
    `BindVolumes`), carried out before the pod's `Bind`. A PreBind plugin whose work
    delays the bind should also be a `PreBindPreFlightPlugin`."""

    def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...


@runtime_checkable
class PreBindPreFlightPlugin(Plugin, Protocol):
    """kube's PreBindPreFlight: before PreBind, SUCCESS when this plugin's PreBind will
    do work for the pod (writes that delay its bind), SKIP when it will not. When one
    says SUCCESS (or the pod waits on Permit), the pod's `status.nominatedNodeName`
    names the node meanwhile (`BindingExpected`). An error fails the binding cycle."""

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    """Binds the pod, or returns SKIP to let the next Bind plugin do it. Binding is I/O,
    so a Bind plugin does not wait for it: it emits a `Bind` effect and returns WAIT;
    the outcome comes back as an event and ends the binding cycle. A plugin that binds
    with no I/O at all may return SUCCESS (or an error) at once."""

    def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...


@runtime_checkable
class PostBindPlugin(Plugin, Protocol):
    """Informational, after the bind is known to have landed."""

    def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None: ...


@runtime_checkable
class EnqueueExtensions(Protocol):
    """The cluster events after which pods this plugin rejected are worth retrying."""

    def events_to_register(self) -> Sequence[ClusterEvent]: ...


@runtime_checkable
class ProfilePolicy(Protocol):
    """A plugin whose presence sets a policy for its whole profile, kept in a service it
    shares through the handle (Coscheduling: the profile's pods join gangs, with its
    settings, in the `GangManager`). The framework calls `register_profile` once, when it
    builds the profile, with the profile's schedulerName; the scheduler then asks the
    service, never the plugins, so another plugin can take Coscheduling's place."""

    def register_profile(self, profile_name: str) -> None: ...
