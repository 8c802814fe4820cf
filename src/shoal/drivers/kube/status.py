"""What the scheduler writes back: pod conditions, nominations, events, PodGroup status.

`shoal.drivers.kube.effects.KubeEffects` (the effects port for a cluster) queues work
here from inside scheduling and binding cycles; `PodStatusWriter` and `EventRecorder`
carry it out asynchronously:

* unschedulable: a strategic merge patch of `pods/status` setting
  `PodScheduled=False` (reason `Unschedulable`, or `SchedulerError` for errors) with the
  explanation, plus `status.nominatedNodeName` when preemption nominated a node; and a
  `FailedScheduling` Warning event (events.k8s.io/v1);
* bound: a `Scheduled` Normal event (the binding itself sets `PodScheduled=True`);
* bind failed: a `FailedScheduling` event; the core forgets the pod and requeues it.

Status patches carry the resourceVersion the informer last saw as a precondition, and
are skipped when the pod is bound or gone by the time they are sent, so a stale
"Unschedulable" can never land on a pod that was bound in between. Updates for one pod
coalesce (the latest wins) and unchanged conditions are not rewritten, as in
kube-scheduler.

Events are best effort: a bounded buffer (the oldest are dropped and counted when the
API is slower than the scheduler), a repeat of the same event for the same object within
`repeat_after` seconds is counted rather than written, and a later repeat updates the
first event's `series`.

`PodGroupStatusWriter` writes the core's `GroupStatus` effects to the status subresource
of the PodGroup objects behind them, in each API's own terms (`group_status_patch`):
scheduler-plugins' phases and counts, Volcano's phases (computed from the counts the way
Volcano's session does) and conditions. Updates for a group coalesce (the latest wins),
writes are spaced out to at most `qps` per second, unchanged statuses are not rewritten,
and objects that are gone or being deleted are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypedDict, TypeVar, Unpack

from shoal.api.podinfo import PodInfo
from shoal.api.resources import format_quota
from shoal.drivers.kube.client import (
    JSON,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    KubeClient,
)
from shoal.drivers.kube.resources import (
    EVENTS,
    PODS,
    QUEUE_BINDINGS,
    QUEUES,
    UPSTREAM_PODGROUPS,
    VOLCANO_PODGROUPS,
    ResourceKind,
    object_ref,
)
from shoal.framework.effects import BindingStatus, GroupStatus, QueueStatus
from shoal.web.metrics import SchedulerMetrics

__all__ = [
    "BindingStatusWriter",
    "EventRecorder",
    "ObjectStatusWriter",
    "PodGroupStatusWriter",
    "PodStatusWriter",
    "QueueStatusWriter",
    "WriterPacing",
    "binding_status_patch",
    "elastic_quota_status_patch",
    "group_status_patch",
    "micro_time",
    "pod_ref",
    "queue_status_patch",
    "volcano_phase",
    "with_removals",
]

log = logging.getLogger("shoal.kube.status")

NOTE_LIMIT = 1024  # events.k8s.io/v1 note is at most 1 kB


def micro_time(at: float | None = None) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds."""
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339(at: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_ref(pod: PodInfo) -> dict[str, str]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": pod.namespace,
        "name": pod.name,
        "uid": pod.uid,
        "resourceVersion": pod.pod.metadata.resource_version,
    }


@dataclass
class _Series:
    name: str
    namespace: str
    count: int
    last_written: float


class EventRecorder:
    """Writes events.k8s.io/v1 Events; never blocks the scheduler.

    Events give way to binds, as the status writers do: while `busy()` (binds in
    flight) at most `busy_workers` writes are out at once, otherwise up to `workers`.
    A burst of binds is thus not slowed by its own events, which are written right
    after it. With 4 writers throughout, a burst of 10000 pods on a real API server
    left most events queued behind the binds and dropped 43 % of them once the queue
    was full; kube-scheduler, whose broadcaster writes each event in its own goroutine,
    wrote all of them. The queue holds `max_pending` events (a 10000-pod burst's
    and more); once it is half full, all `workers` write even while binds go on (binds
    that never stop must not starve the events), and past full the oldest is dropped,
    counted and logged.
    """

    def __init__(
        self,
        client: KubeClient,
        instance: str,
        metrics: SchedulerMetrics,
        *,
        max_pending: int = 20_000,
        repeat_after: float = 60.0,
        workers: int = 32,
        busy_workers: int = 4,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        self.client = client
        self.instance = instance
        self.metrics = metrics
        self.repeat_after = repeat_after
        self.workers = max(1, workers)
        self.busy_workers = max(1, min(busy_workers, self.workers))
        self.busy = busy
        self.enabled = True  # only the leader writes; a standby logs instead
        self._pending: deque[JSON] = deque()
        self._max_pending = max_pending
        self._wake = asyncio.Event()
        self._freed = asyncio.Event()  # a write ended
        self._in_flight = 0
        self._writes: set[asyncio.Task[None]] = set()
        self._series: OrderedDict[tuple[str, str, str], _Series] = OrderedDict()
        self.written = 0
        self.dropped = 0

    def record(
        self,
        regarding: dict[str, str],
        type_: str,
        reason: str,
        action: str,
        note: str,
        controller: str,
    ) -> bool:
        """Queue an event; True when it is new (not a repeat counted into a series)."""
        if not self.enabled:
            return False
        note = note if len(note) <= NOTE_LIMIT else note[: NOTE_LIMIT - 3] + "..."
        key = (regarding.get("uid") or regarding.get("name", ""), reason, note)
        now = time.monotonic()
        series = self._series.get(key)
        if series is not None:
            series.count += 1
            if now - series.last_written < self.repeat_after:
                return False
            series.last_written = now
            self._push({"series": series, "time": micro_time()})
            return False
        namespace = regarding.get("namespace") or "default"
        name = f"{regarding.get('name', 'object')}.{time.time_ns():x}"
        self._series[key] = _Series(name, namespace, 1, now)
        while len(self._series) > 10_000:
            self._series.popitem(last=False)
        self._push(
            {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "eventTime": micro_time(),
                "reportingController": controller,
                "reportingInstance": self.instance,
                "action": action,
                "reason": reason,
                "type": type_,
                "note": note,
                "regarding": regarding,
            }
        )
        return True

    def _push(self, item: JSON) -> None:
        if len(self._pending) >= self._max_pending:
            self._pending.popleft()
            self.metrics.events_dropped.inc()
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning(
                    "%d events dropped so far: more than %d waited to be written",
                    self.dropped,
                    self._max_pending,
                    extra={"dropped": self.dropped},
                )
        self._pending.append(item)
        self._wake.set()

    @property
    def backlog(self) -> int:
        """Events queued or being written."""
        return len(self._pending) + self._in_flight

    def _limit(self) -> int:
        if len(self._pending) > self._max_pending // 2:
            return self.workers  # binds never stop: keep up rather than drop events
        return self.busy_workers if self.busy is not None and self.busy() else self.workers

    async def run(self) -> None:
        while True:
            while not self._pending:
                self._wake.clear()
                await self._wake.wait()
            if self._in_flight >= self._limit():
                # Wait for a write to end; look again within 0.1 s, as the binds may
                # be done by then (more writers may go).
                self._freed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._freed.wait(), 0.1)
                continue
            item = self._pending.popleft()
            self._in_flight += 1
            task = asyncio.create_task(self._write_one(item))
            self._writes.add(task)  # held here until done, also after `run` is cancelled
            task.add_done_callback(self._writes.discard)

    async def _write_one(self, item: JSON) -> None:
        try:
            await self._write(item)
            self.written += 1
        except ApiError as err:
            log.debug("event not written: %s", err, extra={"error": str(err)})
        except Exception:  # never let one bad write stop the recorder
            if not self.client.closed:
                log.exception("writing an event failed")
        finally:
            self._in_flight -= 1
            self._freed.set()

    async def _write(self, item: JSON) -> None:
        series = item.get("series")
        if isinstance(series, _Series):
            patch = {"series": {"count": series.count, "lastObservedTime": item["time"]}}
            try:
                await self.client.request(
                    "PATCH",
                    EVENTS.path(series.namespace, series.name),
                    body=patch,
                    content_type="application/merge-patch+json",
                )
            except ApiError as err:
                if not err.not_found:
                    raise
            return
        namespace = item["metadata"]["namespace"]
        await self.client.request("POST", EVENTS.path(namespace), body=item)


@dataclass
class _StatusUpdate:
    key: str
    uid: str
    reason: str  # "": no PodScheduled condition to write, only the nomination
    message: str
    nominated: str  # "": nominatedNodeName left as it is (unless `clear_nominated`)
    clear_nominated: bool = False


class PodStatusWriter:
    """Coalesced, precondition-guarded PodScheduled=False condition patches."""

    def __init__(
        self,
        client: KubeClient,
        lookup: Callable[[str], JSON | None],
        *,
        workers: int = 2,
    ) -> None:
        self.client = client
        self.lookup = lookup  # the informer's latest copy of a pod, by namespace/name
        self.workers = workers
        self._pending: dict[str, _StatusUpdate] = {}
        self._order: deque[str] = deque()
        self._wake = asyncio.Event()
        self.written = 0
        self.skipped = 0

    def set_unschedulable(self, pod: PodInfo, reason: str, message: str, nominated: str) -> None:
        pending = self._pending.get(pod.key)
        if pending is None:
            self._order.append(pod.key)
        update = _StatusUpdate(pod.key, pod.uid, reason, message, nominated)
        if pending is not None and pending.uid == pod.uid and not nominated:
            update.clear_nominated = pending.clear_nominated  # a clearing still owed
        self._pending[pod.key] = update
        self._wake.set()

    def set_nominated(self, pod: PodInfo, node: str) -> None:
        """`status.nominatedNodeName` = node ("": cleared), alone or with the pod's
        pending condition update (kube's NominatedNodeNameForExpectation)."""
        pending = self._pending.get(pod.key)
        if pending is not None and pending.uid == pod.uid:
            pending.nominated, pending.clear_nominated = node, not node
        else:
            if pending is None:
                self._order.append(pod.key)
            self._pending[pod.key] = _StatusUpdate(pod.key, pod.uid, "", "", node, not node)
        self._wake.set()

    async def run(self) -> None:
        await asyncio.gather(*(self._worker() for _ in range(self.workers)))

    async def _worker(self) -> None:
        while True:
            while not self._order:
                self._wake.clear()
                await self._wake.wait()
            key = self._order.popleft()
            update = self._pending.pop(key, None)
            if update is None:
                continue
            try:
                await self._write(update)
            except ApiError as err:
                if err.conflict or err.not_found:
                    self.skipped += 1  # the pod changed or left: the next attempt reports
                else:
                    log.warning(
                        "could not update the status of pod %s: %s",
                        update.key,
                        err,
                        extra={"pod": update.key, "error": str(err)},
                    )

    def patch_for(self, update: _StatusUpdate, latest: JSON | None) -> JSON | None:
        """The patch to send, or None when there is nothing (left) to write."""
        if latest is None:
            return None
        meta = latest.get("metadata") or {}
        spec = latest.get("spec") or {}
        status = latest.get("status") or {}
        if meta.get("uid") != update.uid or spec.get("nodeName") or meta.get("deletionTimestamp"):
            return None
        current = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None
        )
        nominated_now = status.get("nominatedNodeName") or ""
        written: JSON = {}
        if update.nominated and update.nominated != nominated_now:
            written["nominatedNodeName"] = update.nominated
        elif update.clear_nominated and not update.nominated and nominated_now:
            written["nominatedNodeName"] = None  # removed
        unchanged = not update.reason or (
            current is not None
            and current.get("status") == "False"
            and current.get("reason") == update.reason
            and current.get("message") == update.message
        )
        if unchanged and not written:
            return None
        if not unchanged:
            transition = (
                current.get("lastTransitionTime")
                if current is not None and current.get("status") == "False"
                else None
            ) or rfc3339()
            condition: dict[str, Any] = {
                "type": "PodScheduled",
                "status": "False",
                "reason": update.reason,
                "message": update.message,
                "lastProbeTime": None,
                "lastTransitionTime": transition,
            }
            written["conditions"] = [condition]
        return {"metadata": {"resourceVersion": meta.get("resourceVersion", "")}, "status": written}

    async def _write(self, update: _StatusUpdate) -> None:
        body = self.patch_for(update, self.lookup(update.key))
        if body is None:
            self.skipped += 1
            return
        namespace, _, name = update.key.partition("/")
        await self.client.request(
            "PATCH",
            PODS.path(namespace, name, "status"),
            body=body,
            content_type=STRATEGIC_MERGE_PATCH,
        )
        self.written += 1


# ---- PodGroup status -------------------------------------------------------------------

# Volcano's condition reasons (volcano.sh/apis scheduling/v1beta1).
VOLCANO_NOT_ENOUGH_RESOURCES = "NotEnoughResources"
VOLCANO_READY = "tasks in gang are ready to be scheduled"

GroupObjects = Callable[[str], list[tuple[ResourceKind, JSON]]]


def _unschedulable(status: GroupStatus) -> bool:
    """The group's last attempt found no room for its minimum (not: a member failed)."""
    return status.phase == "Scheduling" or (status.phase == "Failed" and status.failed == 0)


def volcano_phase(status: GroupStatus) -> str:
    """Volcano's PodGroup phase for Shoal's counts, as Volcano's session computes it
    (framework/session.go getPodGroupPhase): Unknown while some members run but the rest
    cannot be placed; Running once minMember are placed, Completed once all of those
    finished (succeeded or failed); otherwise Inqueue, because Shoal has no separate
    enqueue step (Volcano moves a Pending group to Inqueue itself when its `enqueue`
    action is off), and Volcano's job controller creates a job's pods only after its
    PodGroup left Pending."""
    placed = status.scheduled + status.succeeded + status.failed
    if status.scheduled and placed < status.min_member and _unschedulable(status):
        return "Unknown"
    if placed >= status.min_member:
        return "Running" if status.scheduled else "Completed"
    return "Inqueue"


def _merge_conditions(
    current: list[JSON], wanted: list[JSON], now: str, keep: tuple[str, ...]
) -> list[JSON]:
    """`current` with the `wanted` conditions put in by type; a condition whose status did
    not change keeps its lastTransitionTime (and the fields in `keep`)."""
    out = [dict(c) for c in current if isinstance(c, dict)]
    for condition in wanted:
        index = next((i for i, c in enumerate(out) if c.get("type") == condition["type"]), None)
        new = dict(condition)
        if index is not None and out[index].get("status") == new["status"]:
            new["lastTransitionTime"] = out[index].get("lastTransitionTime") or now
            for name in keep:
                if name in out[index]:
                    new[name] = out[index][name]
        else:
            new["lastTransitionTime"] = now
        if index is None:
            out.append(new)
        else:
            out[index] = new
    return out


def _upstream_conditions(status: GroupStatus, conditions: list[JSON], now: str) -> list[JSON]:
    """Kubernetes' `PodGroupScheduled` condition, as kube-scheduler's GangScheduling
    writes it: True (reason Scheduled) once minCount members are bound, False (reason
    Unschedulable, with why) while the gang cannot be placed. Like upstream it records
    the initial decision: once True it stays, whatever happens to the pods later."""
    done = any(
        c.get("type") == UPSTREAM_SCHEDULED and c.get("status") == "True" for c in conditions
    )
    if done:
        return conditions
    if status.scheduled >= status.min_member or status.phase in (
        "Scheduled",
        "Running",
        "Finished",
    ):
        wanted = {
            "type": UPSTREAM_SCHEDULED,
            "status": "True",
            "reason": "Scheduled",
            "message": "",
        }
    elif _unschedulable(status) and status.reason:
        wanted = {
            "type": UPSTREAM_SCHEDULED,
            "status": "False",
            "reason": "Unschedulable",
            "message": status.reason,
        }
    else:
        return conditions
    return _merge_conditions(conditions, [wanted], now, ())


UPSTREAM_SCHEDULED = "PodGroupScheduled"


def group_status_patch(kind: ResourceKind, status: GroupStatus, current: JSON, now: str) -> JSON:
    """The `status` to write on the PodGroup object `current` of `kind` (a merge patch
    body; compared with the object's status to skip writes that change nothing)."""
    existing = current.get("status") or {}
    conditions = existing.get("conditions") or []
    if kind.group == UPSTREAM_PODGROUPS.group:
        return {"conditions": _upstream_conditions(status, conditions, now)}
    if kind.group == VOLCANO_PODGROUPS.group:
        phase = volcano_phase(status)
        wanted: list[JSON] = []
        if phase in ("Running", "Completed"):
            wanted.append(
                {"type": "Scheduled", "status": "True", "reason": VOLCANO_READY, "message": ""}
            )
            if any(c.get("type") == "Unschedulable" for c in conditions):
                wanted.append(
                    {"type": "Unschedulable", "status": "False", "reason": "", "message": ""}
                )
        elif _unschedulable(status) and status.reason:
            wanted.append(
                {
                    "type": "Unschedulable",
                    "status": "True",
                    "reason": VOLCANO_NOT_ENOUGH_RESOURCES,
                    "message": status.reason,
                }
            )
        body: JSON = {
            "phase": phase,
            "running": status.running,
            "succeeded": status.succeeded,
            "failed": status.failed,
        }
        if wanted:
            body["conditions"] = _merge_conditions(conditions, wanted, now, ("transitionID",))
        return body
    # scheduler-plugins (scheduling.x-k8s.io, scheduling.sigs.k8s.io): its phase names are
    # Shoal's own (`GangManager.observed_phase`: Scheduled while minMember are bound but
    # fewer have started, as its PodGroup controller has it). A gang with roles
    # (shoal.dev/sub-groups) also gets `subGroups`: per role, its minMember, members,
    # scheduled (bound), running (started by a kubelet) and succeeded, in the words of
    # the group's own counts (Shoal's CRD keeps the field; Volcano's would drop it).
    phase = status.phase
    body = {
        "phase": phase,
        "scheduled": status.scheduled,
        "running": status.running,
        "succeeded": status.succeeded,
        "failed": status.failed,
    }
    if status.sub_groups:
        body["subGroups"] = [
            {
                "name": role.name,
                "minMember": role.min_member,
                "members": role.members,
                "scheduled": role.scheduled,
                "running": role.running,
                "succeeded": role.succeeded,
            }
            for role in status.sub_groups
        ]
    elif existing.get("subGroups") is not None:
        body["subGroups"] = None  # the roles were dropped from the PodGroup
    if status.phase != "Pending" and not existing.get("scheduleStartTime"):
        # As scheduler-plugins: when the group first got past Pending.
        body["scheduleStartTime"] = now
    wanted = []
    if status.phase in ("Scheduled", "Running", "Finished"):
        wanted.append({"type": "Scheduled", "status": "True", "reason": "Scheduled", "message": ""})
    elif _unschedulable(status) and status.reason:
        wanted.append(
            {
                "type": "Scheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": status.reason,
            }
        )
    if wanted:
        body["conditions"] = _merge_conditions(conditions, wanted, now, ())
    return body


S = TypeVar("S", GroupStatus, QueueStatus, BindingStatus)


@dataclass
class _Update(Generic[S]):
    status: S
    tries: int = 0


class WriterPacing(TypedDict, total=False):
    """How an `ObjectStatusWriter` paces and retries its writes (see its docstring)."""

    qps: float
    retries: int
    retry_delay: float
    concurrency: int
    idle_qps: float
    busy: Callable[[], bool] | None


class ObjectStatusWriter(Generic[S]):
    """Coalesced, rate-limited status writes of custom objects (PodGroups, Queues);
    never blocks the scheduler.

    Updates for one object coalesce (the latest wins); up to `concurrency` objects are
    written at once (a write waits behind the binds in flight, so one at a time fell
    far behind the rate with many gangs), never two writes of one object together, and
    requests start at most `qps` per second overall. Writes are merge patches of the
    status subresource carrying the resourceVersion the informer last saw; a write
    that would change nothing is skipped, an object that is gone or being deleted is
    not written, and a conflict or passing error is retried a few times. Subclasses
    say which objects back a status (`targets`) and what to write (`patch`).

    `idle_qps` (if above `qps`; 0: none) is the rate while `busy()` says False: the writers
    give way to the binds during a burst and catch up at the faster rate once the
    binds are done, instead of leaving statuses stale for minutes after it.
    """

    what = "object"
    default_qps = 10.0

    def __init__(
        self,
        client: KubeClient,
        *,
        qps: float | None = None,
        retries: int = 3,
        retry_delay: float = 0.5,
        concurrency: int = 4,
        idle_qps: float = 0.0,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        self.client = client
        qps = self.default_qps if qps is None else qps
        self.interval = 1.0 / qps if qps > 0 else 0.0
        # idle_qps <= 0: no other rate when idle; never slower than `qps` either.
        idle_interval = 1.0 / idle_qps if idle_qps > 0 else self.interval
        self.idle_interval = min(self.interval, idle_interval) if self.interval else 0.0
        self.busy = busy
        self.retries = retries
        self.retry_delay = retry_delay
        self.concurrency = max(1, concurrency)
        self._in_flight: set[str] = set()
        self._deferred: set[str] = set()  # updated while being written: write again after
        self._next_start = 0.0  # loop time before which no request may start
        self._retrying = 0
        self._pending: dict[str, _Update[S]] = {}
        self._order: deque[str] = deque()
        self._wake = asyncio.Event()
        self.written = 0
        self.skipped = 0
        self.failed = 0

    # ---- what a subclass says ------------------------------------------------------

    def key(self, status: S) -> str:
        raise NotImplementedError

    def targets(self, status: S) -> list[tuple[ResourceKind, JSON]]:
        """The objects (with their kind) that show this status, as last seen."""
        raise NotImplementedError

    def patch(self, kind: ResourceKind, status: S, current: JSON, now: str) -> JSON:
        """The status fields to write on `current`."""
        raise NotImplementedError

    def written_to(self, kind: ResourceKind, obj: JSON, status: S, before: JSON) -> None:
        """Called after a successful write (e.g. to record an event)."""

    # ---- queueing and writing ------------------------------------------------------

    def update(self, status: S) -> None:
        """Queue the object's latest status (replacing one not written yet)."""
        key = self.key(status)
        if key not in self._pending:
            self._order.append(key)
        self._pending[key] = _Update(status)
        self._wake.set()

    @property
    def idle(self) -> bool:
        """Nothing queued, being written or waiting for a retry."""
        return not self._pending and not self._in_flight and not self._retrying

    async def run(self) -> None:
        slots = asyncio.Semaphore(self.concurrency)
        writes: set[asyncio.Task[None]] = set()
        while True:
            while not self._order:
                self._wake.clear()
                await self._wake.wait()
            key = self._order.popleft()
            if key in self._in_flight:
                self._deferred.add(key)  # its newer status goes out after this write
                continue
            update = self._pending.pop(key, None)
            if update is None:
                continue
            await slots.acquire()
            self._in_flight.add(key)
            task = asyncio.create_task(self._write_one(key, update, slots))
            writes.add(task)
            task.add_done_callback(writes.discard)

    async def _write_one(self, key: str, update: _Update[S], slots: asyncio.Semaphore) -> None:
        try:
            await self._write(update)
        except ApiError as err:
            self._failed(key, update, err)
        except Exception:  # never let one bad write stop the writer
            self.failed += 1
            if self.client.closed:
                # Shutting down: the client closed under a write still in flight.
                log.debug("status of %s %s not written: shutting down", self.what, key)
            else:
                log.exception("writing the status of %s %s failed", self.what, key)
        finally:
            self._in_flight.discard(key)
            slots.release()
            if key in self._deferred:
                self._deferred.discard(key)
                if key in self._pending:
                    self._order.append(key)
                    self._wake.set()

    async def _pace(self) -> None:
        """Wait for this request's turn under `qps` (shared by the concurrent writes)."""
        interval = self.interval
        if self.busy is not None and not self.busy():
            interval = self.idle_interval
        if not interval:
            return
        now = asyncio.get_running_loop().time()
        start = max(now, self._next_start)
        self._next_start = start + interval
        if start > now:
            await asyncio.sleep(start - now)

    def _failed(self, key: str, update: _Update[S], err: ApiError) -> None:
        if err.not_found:
            self.skipped += 1  # deleted meanwhile
            return
        if (err.conflict or err.retryable) and update.tries < self.retries:
            # Changed under us (the informer brings the new version) or a passing error:
            # try again a little later, unless a newer status is waiting by then.
            update.tries += 1
            self._retrying += 1
            asyncio.get_running_loop().call_later(
                self.retry_delay * update.tries, self._retry, key, update
            )
            return
        self.failed += 1
        log.warning(
            "could not update the status of %s %s: %s",
            self.what,
            key,
            err,
            extra={"object": key, "error": str(err)},
        )

    def _retry(self, key: str, update: _Update[S]) -> None:
        self._retrying -= 1
        # A newer status queued or being written meanwhile supersedes the failed one.
        if key not in self._pending and key not in self._in_flight:
            self._pending[key] = update
            self._order.append(key)
            self._wake.set()

    async def _write(self, update: _Update[S]) -> int:
        """Write the update to its objects; the number of requests made."""
        status = update.status
        targets = self.targets(status)
        if not targets:
            self.skipped += 1
            return 0
        now = rfc3339()
        requests = 0
        for kind, current in targets:
            meta = current.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                self.skipped += 1
                continue
            body = self.patch(kind, status, current, now)
            existing = current.get("status") or {}
            if all(existing.get(name) == value for name, value in body.items()):
                self.skipped += 1
                continue
            requests += 1
            await self._pace()
            await self.client.request(
                "PATCH",
                kind.path(meta.get("namespace", ""), meta.get("name", ""), "status"),
                body={
                    "metadata": {"resourceVersion": meta.get("resourceVersion", "")},
                    "status": with_removals(existing, body),
                },
                content_type=MERGE_PATCH,
            )
            self.written += 1
            self.written_to(kind, current, status, existing)
        return requests


def with_removals(existing: JSON, body: JSON) -> JSON:
    """`body` as a JSON merge patch of `existing`: a map field (e.g. allocated
    resources) replaces the one written before, so a key it no longer has is sent as
    null (a merge patch keeps keys it does not mention: an emptied allocation would
    otherwise stay in the status for ever)."""
    out = dict(body)
    for name, value in body.items():
        before = existing.get(name)
        if isinstance(value, dict) and isinstance(before, dict):
            gone = {k: None for k in before if k not in value}
            if gone:
                out[name] = {**value, **gone}
    return out


class PodGroupStatusWriter(ObjectStatusWriter[GroupStatus]):
    """PodGroup status in scheduler-plugins' or Volcano's terms (`group_status_patch`).

    `objects(key)` gives the PodGroup objects (with their kind) that back the group
    `namespace/name`, as the informers last saw them: a group can only be written once
    its object arrived, and an object that is gone is not written.
    """

    what = "pod group"

    def __init__(
        self,
        client: KubeClient,
        objects: GroupObjects,
        events: EventRecorder | None = None,
        *,
        controller: str = "shoal",
        **pacing: Unpack[WriterPacing],
    ) -> None:
        super().__init__(client, **pacing)
        self.objects = objects
        self.events = events
        self.controller = controller

    def update(self, status: GroupStatus) -> None:
        if not status.has_object:
            return  # named by pod labels only: there is nothing to write to
        super().update(status)

    def key(self, status: GroupStatus) -> str:
        return f"{status.namespace}/{status.name}"

    def targets(self, status: GroupStatus) -> list[tuple[ResourceKind, JSON]]:
        return self.objects(self.key(status))

    def patch(self, kind: ResourceKind, status: GroupStatus, current: JSON, now: str) -> JSON:
        return group_status_patch(kind, status, current, now)

    def written_to(self, kind: ResourceKind, obj: JSON, status: GroupStatus, before: JSON) -> None:
        self._report(kind, obj, status, before)

    def _report(self, kind: ResourceKind, obj: JSON, status: GroupStatus, before: JSON) -> None:
        """A Warning event on the PodGroup when it newly cannot be placed, with the
        reason (scheduler-plugins' own CRD drops conditions; events always show)."""
        if self.events is None or not status.reason or not _unschedulable(status):
            return
        if any(c.get("message") == status.reason for c in before.get("conditions") or []):
            return
        self.events.record(
            object_ref(kind, obj),
            "Warning",
            "Unschedulable",
            "Scheduling",
            status.reason,
            self.controller,
        )


def queue_status_patch(status: QueueStatus, current: JSON | None, now: str) -> JSON:
    """A Queue's status: whether it admits pods (`state`) and whether the scheduler
    accepted the object (condition `Accepted`, with the problem and its fix), what it
    holds, is guaranteed, would get under fair share and borrows above its guarantee
    (quantities as Kubernetes writes them), and its pending and running pods and jobs.
    The condition's lastTransitionTime moves only when its status changes."""
    accepted = not status.problem
    if accepted:
        reason = "Defaulted" if status.note else "Valid"
        message = status.note or "the scheduler applies this queue"
    elif status.state == "Invalid":
        reason, message = "Invalid", status.problem
    else:
        reason = "EditRejected"
        message = (
            f"the latest edit was rejected; the version before it stays in force: {status.problem}"
        )
    wanted = {
        "type": "Accepted",
        "status": "True" if accepted else "False",
        "reason": reason,
        "message": message,
    }
    existing = ((current or {}).get("status") or {}).get("conditions") or []
    conditions = _merge_conditions(existing, [wanted], now, ())
    return {
        "state": status.state,
        "conditions": conditions,
        "allocated": _quantities(status.allocated),
        "guaranteed": _quantities(status.guaranteed),
        "fairShare": _quantities(status.fair_share),
        "borrowed": _quantities(status.borrowed),
        "pendingPods": status.pending_pods,
        "boundPods": status.bound_pods,
        "runningPods": status.running_pods,
        "pendingJobs": status.pending_jobs,
        "runningJobs": status.running_jobs,
    }


def elastic_quota_status_patch(status: QueueStatus) -> JSON:
    """An ElasticQuota's status as scheduler-plugins writes it: `used`, what the pods of
    its namespace (the queue of that name) hold."""
    return {"used": _quantities(status.allocated)}


def binding_status_patch(status: BindingStatus) -> JSON:
    """A QueueBinding's status: pods and running jobs in its namespaces (in total and
    per namespace; its maxPods and maxRunningJobs apply per namespace)."""
    return {
        "pods": status.pods,
        "runningJobs": status.running_jobs,
        "namespaces": [
            {"namespace": namespace, "pods": pods, "runningJobs": jobs}
            for namespace, (pods, jobs) in status.namespaces.items()
        ],
    }


def _quantities(amounts: Mapping[str, int]) -> dict[str, str]:
    return {r: format_quota(r, v) for r, v in sorted(amounts.items())}


class QueueStatusWriter(ObjectStatusWriter[QueueStatus]):
    """Queue status (`shoal.dev/v1alpha1` Queue objects, cluster-scoped). `objects(name)`
    gives the Queue object as the informer last saw it; a queue that comes from an
    ElasticQuota (named after its namespace) is written to that object's `status.used`
    (`elastic(namespace)` gives it with its kind)."""

    what = "queue"
    default_qps = 5.0

    def __init__(
        self,
        client: KubeClient,
        objects: Callable[[str], JSON | None],
        *,
        elastic: Callable[[str], tuple[ResourceKind, JSON] | None] | None = None,
        **pacing: Unpack[WriterPacing],
    ) -> None:
        super().__init__(client, **pacing)
        self.objects = objects
        self.elastic = elastic

    def key(self, status: QueueStatus) -> str:
        return status.name

    def targets(self, status: QueueStatus) -> list[tuple[ResourceKind, JSON]]:
        found = self.objects(status.name)
        if found is not None:
            return [(QUEUES, found)]
        quota = self.elastic(status.name) if self.elastic is not None else None
        return [] if quota is None else [quota]

    def patch(self, kind: ResourceKind, status: QueueStatus, current: JSON, now: str) -> JSON:
        if kind is QUEUES:
            return queue_status_patch(status, current, now)
        return elastic_quota_status_patch(status)


class BindingStatusWriter(ObjectStatusWriter[BindingStatus]):
    """QueueBinding status (`shoal.dev/v1alpha1`, cluster-scoped). `objects(name)` gives
    the QueueBinding object as the informer last saw it."""

    what = "queue binding"
    default_qps = 5.0

    def __init__(
        self,
        client: KubeClient,
        objects: Callable[[str], JSON | None],
        **pacing: Unpack[WriterPacing],
    ) -> None:
        super().__init__(client, **pacing)
        self.objects = objects

    def key(self, status: BindingStatus) -> str:
        return status.name

    def targets(self, status: BindingStatus) -> list[tuple[ResourceKind, JSON]]:
        found = self.objects(status.name)
        return [] if found is None else [(QUEUE_BINDINGS, found)]

    def patch(self, kind: ResourceKind, status: BindingStatus, current: JSON, now: str) -> JSON:
        return binding_status_patch(status)
