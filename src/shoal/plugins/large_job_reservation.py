"""LargeJobReservation (Filter, PostFilter, PreScore, Score, Reserve): large pods are not
starved. A thin adapter over `shoal.gang.large_jobs` (see there and
docs/gpu-sharing.md, "Large jobs in the dynamic replay").

* PostFilter: a large pod that fits nowhere and has waited `reservationAfterSeconds`
  reserves the `nodesPerReservation` nodes closest to fitting it (at most
  `maxReservations` at once, each for at most `reservationMaxSeconds`). It never makes
  room itself (the pod stays Unschedulable); its message names the reserved nodes.
* Filter: other pods of lower or equal priority are rejected on reserved nodes unless
  they backfill (they fit there together with the large pod and the pods placed since
  the reservation began).
* Reserve: the large pod landed: its reservation ends (Unreserve restores it).
* PreScore/Score, with `protectIdle`: for `protectIdleSeconds` after a large pod was
  placed or failed, small pods score 0 on the nodes that could host such a pod now and
  100 elsewhere (give the plugin a weight above the policy's to make it decide).

Args: `minGpus`, `minMilliCpu` (what is large; either may be null), `reservationAfterSeconds`,
`reservationMaxSeconds`, `maxReservations` (0: no reservations, e.g. protectIdle alone),
`nodesPerReservation`, `protectIdle`, `protectIdleSeconds`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from pydantic import Field, model_validator

from shoal.api.podinfo import PodInfo
from shoal.cache.gpu_devices import request_of
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.interfaces import NodeFilterStatuses, PostFilterResult
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    MAX_NODE_SCORE,
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    FilterResult,
)
from shoal.gang.large_jobs import LargeJobs, LargeJobSettings
from shoal.plugins.args import Args

__all__ = ["NAME", "LargeJobReservation", "LargeJobReservationArgs"]

NAME = "LargeJobReservation"
_RELEASED_KEY = "Reserve" + NAME
_PROTECT_KEY = "PreScore" + NAME


class LargeJobReservationArgs(Args):
    """pluginConfig args (camelCase in YAML)."""

    min_gpus: float | None = Field(default=8.0, gt=0)
    """A pod asking for at least this many GPUs is large (null: GPUs do not decide)."""
    min_milli_cpu: int | None = Field(default=None, gt=0)
    """A pod asking for at least this many milli-cpu is large (null: cpu does not decide)."""
    reservation_after_seconds: float = Field(default=60.0, ge=0)
    """A large pod that has waited this long since its first attempt may reserve nodes."""
    reservation_max_seconds: float = Field(default=1800.0, gt=0)
    """A reservation ends after this long; the pod may not reserve again for as long."""
    max_reservations: int = Field(default=1, ge=0)
    """Reservations held at once (0: none; protectIdle alone)."""
    nodes_per_reservation: int = Field(default=2, ge=1)
    """Nodes each reservation holds (the large pod takes whichever fits first)."""
    protect_idle: bool = False
    """While large pods are around, small pods avoid the nodes that could host them now."""
    protect_idle_seconds: float = Field(default=3600.0, gt=0)
    """protectIdle lasts this long after a large pod was last placed or failed."""

    @model_validator(mode="after")
    def _something_is_large(self) -> LargeJobReservationArgs:
        if self.min_gpus is None and self.min_milli_cpu is None:
            raise ValueError("set minGpus or minMilliCpu (or both): with neither, no pod is large")
        if self.max_reservations == 0 and not self.protect_idle:
            raise ValueError(
                "maxReservations is 0 and protectIdle is false: the plugin would do "
                "nothing; set maxReservations >= 1 or protectIdle: true"
            )
        return self

    def settings(self) -> LargeJobSettings:
        return LargeJobSettings(
            min_gpus=self.min_gpus,
            min_milli_cpu=self.min_milli_cpu,
            reservation_after=self.reservation_after_seconds,
            reservation_max=self.reservation_max_seconds,
            max_reservations=self.max_reservations,
            nodes_per_reservation=self.nodes_per_reservation,
            protect_idle=self.protect_idle,
            protect_seconds=self.protect_idle_seconds,
        )


class LargeJobReservation:
    name = NAME
    # The Filter's verdict on a node depends only on the pods there (those placed since
    # the reservation began) and only improves when pods go: preemption may judge all
    # candidate nodes at once (shoal.preemption).
    preemption_local = True

    def __init__(self, handle: Handle, args: LargeJobReservationArgs) -> None:
        self.handle = handle
        self.jobs = LargeJobs(handle, args.settings())

    # ---- Filter / PostFilter -------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        blocked = self.jobs.blocked_rows(pod)
        if not blocked:
            return FilterResult.all_pass(nodes.size)
        n = self.handle.snapshot.n
        mask = np.zeros(n, dtype=bool)
        for row, _ in blocked:
            if row < n:
                mask[row] = True
        passed = ~mask[nodes.index]
        # Code UNSCHEDULABLE: the reservation is temporary, unlike a label mismatch.
        return FilterResult.from_mask(passed, "node(s) were reserved for a waiting large pod")

    def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: NodeFilterStatuses
    ) -> tuple[PostFilterResult | None, Status]:
        n = self.handle.snapshot.n
        held = self.jobs.pod_failed(pod, statuses.resolvable(np.arange(n, dtype=np.intp)))
        if held is None:
            return None, Status(Code.UNSCHEDULABLE)
        nodes = ", ".join(held.nodes)
        return None, Status(
            Code.UNSCHEDULABLE,
            f"large pod: node(s) {nodes} reserved for it until {held.until:.0f}s "
            "(other pods may only backfill there)",
        )

    # ---- Reserve -------------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        released = self.jobs.pod_placed(pod, request_of(state, pod))
        if released is not None:
            state.write(_RELEASED_KEY, released)
        return Status()

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        released = state.get(_RELEASED_KEY)
        if released is not None:
            state.delete(_RELEASED_KEY)
            self.jobs.placement_undone(pod, released)

    # ---- PreScore / Score: idle-node protection --------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> Status:
        large = self.jobs.protecting(pod, request_of(state, pod))
        if not large:
            return Status(Code.SKIP)
        state.write(_PROTECT_KEY, large)
        return Status()

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        hosts = self.jobs.could_host(state.read(_PROTECT_KEY), nodes.index)
        return np.where(hosts, 0, MAX_NODE_SCORE).astype(np.int64)

    def events_to_register(self) -> Sequence[ClusterEvent]:
        # A pod kept off a reserved node may fit when the large pod lands (or pods
        # leave, or nodes change).
        return [
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD | ActionType.DELETE),
            ClusterEvent(EventResource.NODE, ActionType.ALL),
        ]

    @classmethod
    def new(cls, args: LargeJobReservationArgs | None, handle: Handle) -> LargeJobReservation:
        return cls(handle, args or LargeJobReservationArgs())
