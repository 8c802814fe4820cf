"""What the scheduler writes back: pod conditions, nominations and events.

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
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shoal.api.podinfo import PodInfo
from shoal.drivers.kube.client import JSON, STRATEGIC_MERGE_PATCH, ApiError, KubeClient
from shoal.drivers.kube.resources import EVENTS, PODS
from shoal.web.metrics import SchedulerMetrics

__all__ = ["EventRecorder", "PodStatusWriter", "micro_time", "pod_ref"]

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
    """Writes events.k8s.io/v1 Events; never blocks the scheduler."""

    def __init__(
        self,
        client: KubeClient,
        instance: str,
        metrics: SchedulerMetrics,
        *,
        max_pending: int = 5000,
        repeat_after: float = 60.0,
        workers: int = 4,
    ) -> None:
        self.client = client
        self.instance = instance
        self.metrics = metrics
        self.repeat_after = repeat_after
        self.workers = workers
        self.enabled = True  # only the leader writes; a standby logs instead
        self._pending: deque[JSON] = deque()
        self._max_pending = max_pending
        self._wake = asyncio.Event()
        self._series: OrderedDict[tuple[str, str, str], _Series] = OrderedDict()
        self.written = 0

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
        self._pending.append(item)
        self._wake.set()

    async def run(self) -> None:
        await asyncio.gather(*(self._worker() for _ in range(self.workers)))

    async def _worker(self) -> None:
        while True:
            while not self._pending:
                self._wake.clear()
                await self._wake.wait()
            item = self._pending.popleft()
            try:
                await self._write(item)
                self.written += 1
            except ApiError as err:
                log.debug("event not written: %s", err, extra={"error": str(err)})

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
    reason: str
    message: str
    nominated: str


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
        if pod.key not in self._pending:
            self._order.append(pod.key)
        self._pending[pod.key] = _StatusUpdate(pod.key, pod.uid, reason, message, nominated)
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
        unchanged = (
            current is not None
            and current.get("status") == "False"
            and current.get("reason") == update.reason
            and current.get("message") == update.message
        )
        if unchanged and (not update.nominated or update.nominated == nominated_now):
            return None
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
        body: JSON = {
            "metadata": {"resourceVersion": meta.get("resourceVersion", "")},
            "status": {"conditions": [condition]},
        }
        if update.nominated:
            body["status"]["nominatedNodeName"] = update.nominated
        return body

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
