"""The discrete-event loop: a virtual clock, an event heap and the sans-I/O scheduler.

Each step handles every event due now (in the heap's fixed order), then runs the core
through the same driver loop as the test harness and the Kubernetes backend
(`shoal.drivers.loop.Driver`): backoffs expire, scheduling cycles run until there is no
work, binding cycles are stepped to completion, and the in-memory effects port feeds
binds and evictions back as a watch would. Then the clock jumps to the next event, the next
scheduler wakeup (a backoff or Permit deadline) or, with `cycle_seconds`, to the end of
the running cycle. Nothing reads the wall clock or global randomness, so the same
scenario and seed always give the same results.

The run stops at `until`, or when no events remain and no pod is waiting out a backoff
(pods left unschedulable would only be retried by the queue's periodic flush, against
a cluster that no longer changes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from shoal.api.dra import claims_from_templates
from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import ClusterState
from shoal.cache.dra import DeviceCatalog
from shoal.config.types import KubeSchedulerConfiguration
from shoal.drivers.extenders import http_extenders
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.gang.manager import sub_groups_problem
from shoal.preemption.budgets import DisruptionBudgets
from shoal.rescheduler.commit import next_hold_expiry
from shoal.rescheduler.planner import BIND_ANNOTATIONS
from shoal.scheduler import CycleResult, Scheduler, new_scheduler
from shoal.scheduler.dra import upsert_dra
from shoal.scheduler.volumes import upsert_storage
from shoal.sim.events import (
    BindingsDue,
    Event,
    EventQueue,
    NodeAdd,
    NodeRemove,
    PodArrival,
    PodFinish,
)
from shoal.sim.queue_metrics import QueueMonitor
from shoal.sim.results import PodRecord, PodState, Recorder, Summary, UtilisationTracker, summarize
from shoal.sim.scenario import FINISHED_PHASES, Scenario
from shoal.sim.workload import PodSource

__all__ = ["ProgressCallback", "SimOptions", "SimResult", "Simulation", "simulate"]

ProgressCallback = Callable[[float, int, int], None]
"""Called now and then with (virtual time, events handled, events scheduled so far)."""

# With no events left, give up after this many scheduler wakeups that bound nothing
# (a pod that keeps failing with errors would otherwise back off forever).
MAX_IDLE_WAKEUPS = 1000
PROGRESS_EVERY = 256


@dataclass(frozen=True)
class SimOptions:
    seed: int = 0
    until: float | None = None
    cycle_seconds: float = 0.0
    # Re-create pods evicted by preemption or reclaim, as their controllers would.
    recreate_evicted: bool = True
    # Seconds between an eviction and the arrival of its replacement (a controller's
    # reaction time; the room a migration plan holds must survive it).
    recreate_delay: float = 0.0
    queue_sample_seconds: float = 60.0
    config: KubeSchedulerConfiguration = field(default_factory=KubeSchedulerConfiguration)

    def __post_init__(self) -> None:
        if self.cycle_seconds < 0:
            raise ValueError("cycle_seconds must be >= 0")
        if self.recreate_delay < 0:
            raise ValueError("recreate_delay must be >= 0")
        if self.until is not None and self.until < 0:
            raise ValueError("until must be >= 0")


@dataclass(frozen=True)
class SimResult:
    records: list[PodRecord]
    summary: Summary
    warnings: list[str]
    queues: QueueMonitor | None = None
    # Pod groups at the end: phase, counts and reason (shoal.gang.GangManager.status()).
    groups: dict[str, dict[str, object]] = field(default_factory=dict)


class Simulation:
    def __init__(
        self,
        scenario: Scenario,
        options: SimOptions | None = None,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.scenario = scenario
        self.options = options or SimOptions()
        self.progress = progress
        self.clock = ManualClock()
        self.cluster = ClusterState()
        self.recorder = Recorder(self.clock, self._bound)
        self.effects = MemoryEffects(self.clock)
        self.effects.node_exists = lambda node: node in self.cluster.table.row_of
        self.effects.listeners.append(self.recorder)
        self.effects.on_evicted.append(self._evicted)
        self.scheduler: Scheduler = new_scheduler(
            self.options.config,
            clock=self.clock,
            effects=self.effects,
            seed=self.options.seed,
            cluster=self.cluster,
            extenders=http_extenders(self.options.config),
        )
        self.events = EventQueue()
        self.driver = Driver(
            self.scheduler, self.effects, on_cycle=self._note, hold_bindings=self._busy
        )
        self.utilisation = UtilisationTracker(self.cluster.table)
        self.queue_monitor = QueueMonitor(
            self.scheduler.tenant_queues, self.cluster.table, self.options.queue_sample_seconds
        )
        self.warnings: list[str] = []
        self.cycles = 0
        self.handled = 0
        self._busy_until = 0.0
        self._bindings_due = False  # a BindingsDue event is queued
        self._idle_wakeups = 0
        self._steps = 0
        self._recreated = 0
        self._stop_reason = ""

    # ---- setup ---------------------------------------------------------------------

    def _load(self) -> None:
        for pc in self.scenario.priority_classes:
            self.scheduler.add_priority_class(pc)
        sc = self.scenario
        for namespace, labels in sc.namespaces.items():
            self.scheduler.set_namespace_labels(namespace, labels)
        if sc.queues or sc.elastic_quotas or sc.queue_bindings or sc.node_pools:
            problems = self.scheduler.apply_queues(
                sc.queues, sc.elastic_quotas, sc.queue_bindings, sc.node_pools
            )
            # Each object is validated on its own: the valid ones are in force.
            for problem in problems:
                self.warnings.append(f"queue object rejected (the others apply): {problem}")
        budgets = DisruptionBudgets.of(self.scheduler.handle)
        for pdb in sc.disruption_budgets:
            budgets.add(pdb)
        for group in self.scenario.pod_groups:
            problem = sub_groups_problem(group.metadata.annotations)
            if problem:
                key = f"{group.metadata.namespace or 'default'}/{group.metadata.name}"
                self.warnings.append(f"PodGroup {key} skipped: {problem}")
                continue
            self.scheduler.add_pod_group(group)
        for hypernode in sc.hypernodes:
            self.scheduler.upsert_hypernode(hypernode)
        if sc.hypernodes:  # as they stand once every HyperNode is in
            self.warnings.extend(self.scheduler.hypernode_problems().values())
        for topology in sc.kueue_topologies:  # each checked on its own
            problem = self.scheduler.upsert_kueue_topology(topology)
            if problem:
                self.warnings.append(problem)
        for obj in sc.storage:
            try:
                upsert_storage(self.scheduler, obj)
            except ValueError as err:
                self.warnings.append(f"{obj.kind} ignored: {err}")
        for dra in sc.dra:
            try:
                upsert_dra(self.scheduler, dra)
            except ValueError as err:
                self.warnings.append(f"{dra.kind} ignored: {err}")
        for node in self.scenario.nodes:
            self.scheduler.add_node(node)
        for change in self.scenario.node_changes:
            if change.node is not None:
                self.events.push(change.at, NodeAdd(change.node))
            else:
                self.events.push(change.at, NodeRemove(change.remove))
        for source in self.scenario.pods:
            self.events.push(source.time, PodArrival(source))

    # ---- the loop ------------------------------------------------------------------

    def run(self) -> SimResult:
        self.start()
        while self.step():
            pass
        return self.finish()

    def start(self) -> None:
        """Load the scenario (then `step` until it returns False, then `finish`)."""
        self._load()
        self._stop_reason = ""

    def step(self) -> bool:
        """Handle what is due now and schedule, or move the clock on. False: the run is
        over (`finish` gives the result). Callers that interleave other work (a server)
        call this in a loop; `run` does it all at once."""
        until = self.options.until
        now = self.clock.now()
        self._handle_due(now)
        self.driver.tick()
        if self.scheduler.has_work() and now >= self._busy_until:
            self._schedule(now)
            return True
        nxt = self._next_time(now)
        if nxt is None:
            self._stop_reason = "no events left"
            if self._idle_wakeups > MAX_IDLE_WAKEUPS:
                self._stop_reason = "pods kept failing with no events left"
            return False
        if until is not None and nxt > until:
            self._stop_reason = "reached --until"
            return False
        self._advance(nxt)
        return True

    def finish(self, interrupted: bool = False) -> SimResult:
        """The result (`interrupted`: the caller stopped stepping before the end)."""
        until = self.options.until
        stop_reason = "interrupted" if interrupted else self._stop_reason
        if not interrupted and until is not None and self.clock.now() < until:
            stop_reason += ", idle until --until"
            self._advance(until)
        self._report_progress(force=True)
        return self._result(stop_reason)

    def _handle_due(self, now: float) -> None:
        while (t := self.events.peek_time()) is not None and t <= now:
            _, event = self.events.pop()
            self._dispatch(event)
            self.handled += 1
            self._idle_wakeups = 0

    def _schedule(self, now: float) -> None:
        cost = self.options.cycle_seconds
        if cost == 0:
            self.driver.run()
            return
        self._busy_until = now + cost
        self.driver.cycle()

    def _note(self, result: CycleResult) -> None:
        self.cycles += 1
        record = self.recorder.records.get(result.pod.uid)
        if record is not None:
            record.attempts += 1

    def _next_time(self, now: float) -> float | None:
        times: list[float] = []
        external = self.events.peek_time()
        if external is not None:
            times.append(external)
        if self.scheduler.has_work() and self._busy_until > now:
            times.append(self._busy_until)
        if external is not None or self._retries_pending():
            wake = self.scheduler.next_wakeup()
            if wake is not None and wake > now:
                times.append(wake)
                if external is None:
                    self._idle_wakeups += 1
        if not times or self._idle_wakeups > MAX_IDLE_WAKEUPS:
            return None
        return min(times)

    def _retries_pending(self) -> bool:
        """Pods waiting out a backoff, at Permit or behind a gang reservation that will
        end (not merely parked as unschedulable, which only a cluster change can help)."""
        scheduler = self.scheduler
        return (
            scheduler.scheduling_queue.counts()["backoff"] > 0
            or len(scheduler.handle.waiting_pods) > 0
            or scheduler.gangs.blocking is not None
            or next_hold_expiry(scheduler.handle) is not None  # room held for moved pods
        )

    def _advance(self, t: float) -> None:
        now = self.clock.now()
        self.queue_monitor.maybe_sample(t)
        self.utilisation.advance(t - now)
        self.clock.advance_to(t)
        self._report_progress()

    def _report_progress(self, force: bool = False) -> None:
        self._steps += 1
        if self.progress is not None and (force or self._steps % PROGRESS_EVERY == 0):
            self.progress(self.clock.now(), self.handled, self.events.scheduled)

    # ---- events ----------------------------------------------------------------------

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, PodArrival):
            self._arrive(event)
        elif isinstance(event, PodFinish):
            self._finish(event.uid)
        elif isinstance(event, NodeAdd):
            self.scheduler.add_node(event.node)
        elif isinstance(event, NodeRemove):
            self._remove_node(event.name)
        else:
            self._bindings_due = False
            self.driver.start_bindings()

    def _arrive(self, event: PodArrival) -> None:
        source = event.source
        pod = source.build()
        if pod.spec.resource_claims and not pod.spec.node_name:
            # The resource-claim controller: a claim per template entry, named in the
            # pod's status.
            templates = DeviceCatalog.of(self.scheduler.handle).templates
            pod, claims = claims_from_templates(pod, templates)
            for claim in claims:
                upsert_dra(self.scheduler, claim)
        info = self.scheduler.pod_info(pod)
        refused = self._kubelet_refuses(info) if pod.status.phase not in FINISHED_PHASES else ""
        if refused:
            record = self.recorder.arrived(info, source.duration)
            record.origin = source.origin
            record.state = PodState.REFUSED
            record.node = pod.spec.node_name
            record.prebound = True
            record.message = refused
            return
        self.scheduler.add_pod(info)  # a finished pod holds nothing there
        record = self.recorder.arrived(info, source.duration)
        record.origin = source.origin
        phase = pod.status.phase
        if phase in FINISHED_PHASES:
            # Ran to completion before the start (a dump of a live cluster).
            record.state = PodState.FINISHED
            record.node = pod.spec.node_name
            record.prebound = bool(record.node)
            record.finished_at = self.clock.now()
            record.message = f"{phase} before the simulation started: holds no resources"
        elif info.node_name:
            record.prebound = True
            self.recorder.mark_bound(record, info.node_name)
            record.message = "bound by spec.nodeName"
        elif not self.scheduler.is_ours(info):
            profiles = ", ".join(sorted(self.scheduler.profiles))
            record.message = (
                f"spec.schedulerName {info.scheduler_name!r} matches no scheduler profile "
                f"({profiles}); the simulator leaves it pending"
            )

    def _kubelet_refuses(self, info: PodInfo) -> str:
        """What the node of a pod bound by spec.nodeName says of it ("" when it runs it):
        a node that does not exist runs nothing (the pod garbage collector deletes such
        pods); a kubelet's admission refuses a pod its free allocatable cannot hold
        (OutOfcpu, OutOfmemory, OutOfpods, ...), so the pod fails instead of
        overcommitting the node and keeping every other pod off it."""
        node = info.pod.spec.node_name
        if not node:
            return ""
        table = self.scheduler.cluster.table
        row = table.row_of.get(node)
        if row is None:
            return (
                f"spec.nodeName {node!r} names no node: no kubelet runs the pod (the pod "
                "garbage collector deletes it)"
            )
        asks = {**info.requests, "pods": 1}
        for resource, amount in asks.items():
            col = table.resource_index.get(resource)
            allocatable = int(table.allocatable[row, col]) if col is not None else 0
            used = int(table.requested[row, col]) if col is not None else 0
            if amount > allocatable - used:
                return (
                    f"OutOf{resource}: refused by node {node}'s kubelet: Node didn't have enough "
                    f"resource: {resource}, requested: {amount}, used: {used}, capacity: "
                    f"{allocatable}"
                )
        return ""

    def _bound(self, record: PodRecord) -> None:
        self._idle_wakeups = 0
        if record.duration is not None:
            self.events.push(self.clock.now() + record.duration, PodFinish(record.uid))

    def _finish(self, uid: str) -> None:
        record = self.recorder.records.get(uid)
        if record is None or record.state is not PodState.RUNNING:
            return  # evicted before it could finish
        self.scheduler.finish_pod(uid, succeeded=True)
        record.state = PodState.FINISHED
        record.finished_at = self.clock.now()

    def _remove_node(self, name: str) -> None:
        now = self.clock.now()
        if name not in self.cluster.table.row_of:
            self.warnings.append(f"t={now:g}s: cannot remove node {name}: no such node")
            return
        for pod in self.cluster.pods_on(name):
            record = self.recorder.records.get(pod.uid)
            if record is None or record.state is not PodState.RUNNING:
                continue  # assumed, not bound yet: its bind will fail and it is retried
            self.scheduler.delete_pod(pod.uid)
            self.events.cancel_finish(pod.uid)
            record.state = PodState.EVICTED
            record.finished_at = now
            record.message = f"evicted: node {name} was removed at t={now:g}s"
        self.scheduler.delete_node(name)

    def _evicted(self, pod: PodInfo, reason: str) -> None:
        """Preempted or reclaimed: the pod is gone; its controller creates a new one."""
        now = self.clock.now()
        record = self.recorder.records.get(pod.uid)
        if record is None:
            return
        self.events.cancel_finish(pod.uid)
        record.state = PodState.EVICTED
        record.finished_at = now
        record.message = f"evicted at t={now:g}s: {reason}"
        if not self.options.recreate_evicted:
            return
        self._recreated += 1
        replacement = pod.pod
        meta = msgspec.structs.replace(
            replacement.metadata,
            name=f"{pod.name}-r{self._recreated}",
            uid="",
            resource_version="",
            # The GPU devices written at the old pod's bind are not in a controller's
            # template: the replacement gets devices where it is placed.
            annotations={
                k: v
                for k, v in replacement.metadata.annotations.items()
                if k not in BIND_ANNOTATIONS
            },
        )
        spec = msgspec.structs.replace(replacement.spec, node_name="")
        fresh = msgspec.structs.replace(replacement, metadata=meta, spec=spec)
        at = now + self.options.recreate_delay
        source = PodSource(
            at, record.duration, pod.namespace, meta.name, pod=fresh, origin=record.origin
        )
        self.events.push(at, PodArrival(source))

    def _busy(self) -> bool:
        """With `cycle_seconds`: the scheduling cycle that made binding cycles ready has
        not ended yet in virtual time (they start then, at a `BindingsDue` event)."""
        if self.options.cycle_seconds > 0 and self.clock.now() < self._busy_until:
            if not self._bindings_due:
                self._bindings_due = True
                self.events.push(self._busy_until, BindingsDue())
            return True
        return False

    # ---- results ---------------------------------------------------------------------

    def _result(self, stop_reason: str) -> SimResult:
        records = list(self.recorder.records.values())
        for record in records:
            if record.state is PodState.PENDING:
                why = self.scheduler.explain(record.uid)
                if why:
                    record.message = why
                elif not record.message:
                    record.message = "not scheduled before the simulation stopped"
        summary = summarize(
            records,
            end_time=self.clock.now(),
            stop_reason=stop_reason,
            not_arrived=self.events.pending_arrivals(),
            rejected=len(self.scenario.errors),
            cycles=self.cycles,
            utilisation=self.utilisation,
        )
        monitor = self.queue_monitor if self.queue_monitor.active else None
        if monitor is not None:
            monitor.sample(self.clock.now())
        return SimResult(records, summary, self.warnings, monitor, self.scheduler.gangs.status())


def simulate(
    scenario: Scenario,
    options: SimOptions | None = None,
    progress: ProgressCallback | None = None,
) -> SimResult:
    """Run a scenario to the end (or to `options.until`)."""
    return Simulation(scenario, options, progress).run()
