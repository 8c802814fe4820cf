"""Node shards as the backend uses them: what a `ShardKeeper` decides, carried to the
binder (which nodes it may bind to now), the intake (which pending pods are ours) and the
core (which nodes it may decide on), and what the keeper asks of them (binds in flight,
how far the pod watch has read). See shards.py for the rules.

The keeper runs on the I/O loop; what changes the core is posted to the core's inbox.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from shoal.drivers.kube.binder import KubeBinder
from shoal.drivers.kube.client import JSON, KubeClient
from shoal.drivers.kube.core import CoreThread, IoPort
from shoal.drivers.kube.informer import Informer
from shoal.drivers.kube.intake import Intake
from shoal.drivers.kube.shards import (
    Routing,
    ShardKeeper,
    ShardSettings,
    ShardState,
    loan_counts,
    loan_text,
    slot_of,
    unschedulable_since,
)
from shoal.scheduler import Scheduler
from shoal.web.metrics import SchedulerMetrics

__all__ = ["ShardLink"]

log = logging.getLogger("shoal.kube")


class ShardLink:
    """Owns the `ShardKeeper` of an active backend and wires it to the rest."""

    def __init__(
        self,
        client: KubeClient,
        settings: ShardSettings,
        *,
        scheduler: Scheduler,
        intake: Intake,
        pods: Informer,
        binder: KubeBinder,
        core: CoreThread,
        io: IoPort,
        metrics: SchedulerMetrics,
        leading: Callable[[], bool],
        bound: Callable[[], int],
        wake: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.scheduler = scheduler
        self.intake = intake
        self.pods = pods
        self.binder = binder
        self.core = core
        self.metrics = metrics
        self.wake = wake
        self.keeper = ShardKeeper(
            client,
            settings,
            leading=leading,
            binds_in_flight=self._binds_in_flight,
            watch_caught_up=self._pods_caught_up,
            on_change=self._changed,
            on_round=self._round,
            binds=lambda: (bound(), binder.conflicts),
        )
        keeper = self.keeper
        # A gang that fits only with other replicas' shards asks to borrow them.
        scheduler.borrow_shards = lambda key, slots: io.post(keeper.want, key, slots)
        # Until the first shard round: no pending pod is ours, no shared status.
        intake.routing = Routing(settings.identity, ())
        scheduler.writes_status = intake.routing.writes_status

    def may_not_bind(self, node: str) -> str:
        """Why a Binding to `node` must not be sent now ("" when it may)."""
        return self.keeper.may_bind(slot_of(node, self.keeper.state.slots))

    # ---- asked by the keeper (on the I/O loop) ----------------------------------------

    def _binds_in_flight(self, slots: Collection[int], count: int) -> bool:
        """Bindings queued or sent to nodes of these shards (a shard being given back is
        written free only once none is left: see `ShardKeeper.may_bind`)."""
        return any(slot_of(node, count) in slots for node in self.binder.pending_nodes)

    def _pods_caught_up(self, resource_version: int) -> bool:
        try:
            return int(self.pods.resource_version or 0) >= resource_version
        except ValueError:
            return False

    def _pending_pods(self, handoff_only: bool = False) -> list[JSON]:
        """Pending pods of our profiles in the informer's store (only those some replica
        reported unschedulable, for `handoff_only`)."""
        names = self.scheduler.profiles
        out = []
        for raw in self.pods.store.values():
            spec = raw.get("spec")
            if not isinstance(spec, dict):
                continue  # cannot be read: reported by the intake, never scheduled
            if spec.get("nodeName") or spec.get("schedulerName", "default-scheduler") not in names:
                continue
            if handoff_only and unschedulable_since(raw) is None:
                continue
            out.append(raw)
        return out

    # ---- told by the keeper (on the I/O loop) -----------------------------------------

    def _changed(self, state: ShardState) -> None:
        me = self.settings.identity
        routing = Routing(me, state.members, self.settings.handoff_seconds)
        self.metrics.node_shards.labels("held").set(len(state.held))
        self.metrics.node_shards.labels("usable").set(len(state.usable))
        self.metrics.node_shards.labels("total").set(state.slots)
        for what, count in loan_counts(state, me).items():
            self.metrics.node_shards.labels(what).set(count)
        log.info(
            "node shards: %d of %d usable here; replicas: %s%s",
            len(state.usable),
            state.slots,
            ", ".join(m.identity for m in state.members) or "none",
            loan_text(state, me),
            extra={"identity": me},
        )
        self.core.post(
            self._apply,
            state.slots,
            state.usable,
            dict(state.holders),
            routing,
            self._pending_pods(),
        )

    def _round(self, state: ShardState) -> None:
        """Every round: pods their home replica could not place may be ours by now."""
        if len(state.members) > 1:
            self.core.post(self._reroute, self._pending_pods(handoff_only=True))

    # ---- on the core ------------------------------------------------------------------

    def _apply(
        self,
        slots: int,
        usable: frozenset[int],
        holders: dict[int, str],
        routing: Routing,
        pending: list[JSON],
    ) -> None:
        self.scheduler.set_node_shards(slots, usable, holders, self.settings.identity)
        self.scheduler.writes_status = routing.writes_status
        self.intake.routing = routing
        self._reroute(pending)

    def _reroute(self, pending: list[JSON]) -> None:
        self.intake.reroute(pending)
        self.wake()
