"""The scheduling queue: active, backoff and unschedulable pods (kube's PriorityQueue).

* activeQ: pods ready to be tried, ordered by the profile's QueueSort key.
* backoffQ: pods that failed recently; each waits 1 s, doubling per attempt up to 10 s.
* unschedulable: pods rejected by plugins; a cluster event that one of those plugins
  registered for moves them back (to backoffQ if their backoff has not expired yet).
  Pods left there longer than `max_unschedulable_seconds` are retried anyway.
* gated: pods a PreEnqueue plugin keeps out of the queue until they are updated.

Time comes from the caller (`now`), never from the wall clock.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from shoal.api.podinfo import PodInfo
from shoal.framework.status import Status
from shoal.framework.types import ClusterEvent

__all__ = ["QueueConfig", "QueuedPod", "SchedulingQueue"]

SortKey = Callable[[PodInfo], tuple[object, ...]]


@dataclass(frozen=True)
class QueueConfig:
    initial_backoff_seconds: float = 1.0
    max_backoff_seconds: float = 10.0
    max_unschedulable_seconds: float = 300.0


@dataclass(eq=False)
class QueuedPod:
    pod: PodInfo
    added_at: float  # when it last (re-)entered the queue
    attempts: int = 0
    # Plugins that rejected the pod in its last attempt; events for them move it back.
    rejected_by: frozenset[str] = frozenset()
    gated_by: str = ""
    last_status: Status | None = None
    message: str = ""
    # The move-request cycle counter seen when the pod was popped (see kube's
    # moveRequestCycle): an event during its cycle sends it to backoff, not to sleep.
    popped_cycle: int = -1
    # When its last answer may change by time alone (a reclaim delay ending): its backoff
    # ends then at the latest (None: no such time).
    retry_by: float | None = None


class Partitions(Protocol):
    """Fair sharing between tenant queues, as the scheduling queue sees it (implemented
    by `shoal.tenancy.QueueManager`): active pods are kept in one heap per partition (a
    leaf queue, 0 for pods in none), and the partitions say which heap pops next."""

    def partition_of(self, pod: PodInfo) -> int: ...

    def choose_partition(self) -> int:
        """The partition whose pod is tried next (-1 or an empty one: any)."""
        ...

    def on_active_delta(self, partition: int, delta: int) -> None:
        """A pod became active (+1) in the partition, or stopped being active (-1)."""
        ...

    def on_pending(self, pod: PodInfo, delta: int) -> None:
        """A pod entered the queue (+1) or left it (-1)."""
        ...


@dataclass
class SchedulingQueue:
    sort_key: SortKey
    config: QueueConfig = field(default_factory=QueueConfig)
    # Per plugin, the events after which pods it rejected are worth retrying. Pods whose
    # rejecting plugins registered nothing are moved by any event.
    plugin_events: dict[str, list[ClusterEvent]] = field(default_factory=dict)
    pre_enqueue: Callable[[PodInfo], Status] | None = None
    # Fair sharing between tenant queues (see `Partitions`); None: one heap for all.
    partitions: Partitions | None = None
    # A pod was gated by PreEnqueue (first time, or for a new reason): it should say why.
    on_gated: Callable[[QueuedPod, Status], None] | None = None

    def __post_init__(self) -> None:
        self._entries: dict[str, QueuedPod] = {}
        self._active: dict[int, list[tuple[tuple[object, ...], int, str]]] = {0: []}
        self._in_active: dict[str, int] = {}  # uid -> partition
        self._backoff: list[tuple[float, int, str]] = []
        self._in_backoff: set[str] = set()
        self._unschedulable = _UnschedulablePods(self.plugin_events)
        self._gated: dict[str, QueuedPod] = {}
        self._in_flight: set[str] = set()
        self._seq = itertools.count()
        self._cycle = 0
        self._move_request_cycle = -1

    # ---- intake --------------------------------------------------------------------

    def add(self, pod: PodInfo, now: float) -> None:
        entry = QueuedPod(pod, added_at=now)
        if self.partitions is not None and pod.uid not in self._entries:
            self.partitions.on_pending(pod, 1)
        if pod.initial_attempt_time is None:
            pod.timestamp = pod.timestamp or now
        self._entries[pod.uid] = entry
        self._enqueue_checked(entry)

    def update(self, pod: PodInfo, now: float) -> None:
        """A queued pod changed; an unschedulable or gated one gets another try."""
        entry = self._entries.get(pod.uid)
        if entry is None:
            self.add(pod, now)
            return
        pod.timestamp = entry.pod.timestamp
        pod.attempts = entry.pod.attempts
        pod.initial_attempt_time = entry.pod.initial_attempt_time
        entry.pod = pod
        if pod.uid in self._in_active or pod.uid in self._in_backoff:
            if pod.uid in self._in_active:
                self._push_active(entry)  # re-key; the stale heap item is skipped
            return
        if pod.uid in self._unschedulable or pod.uid in self._gated:
            self._unschedulable.remove(pod.uid)
            self._gated.pop(pod.uid, None)
            self._enqueue_checked(entry)

    def delete(self, uid: str) -> None:
        entry = self._entries.pop(uid, None)
        if entry is not None and self.partitions is not None:
            self.partitions.on_pending(entry.pod, -1)
        self._deactivate(uid)
        self._in_backoff.discard(uid)
        self._unschedulable.remove(uid)
        self._gated.pop(uid, None)
        self._in_flight.discard(uid)

    def _enqueue_checked(self, entry: QueuedPod) -> None:
        if self.pre_enqueue is not None:
            status = self.pre_enqueue(entry.pod)
            if not status.ok:
                changed = entry.gated_by != status.plugin or entry.message != status.message
                entry.gated_by = status.plugin
                entry.message = status.message
                self._gated[entry.pod.uid] = entry
                if changed and self.on_gated is not None:
                    self.on_gated(entry, status)
                return
        entry.gated_by = ""
        self._push_active(entry)

    def _push_active(self, entry: QueuedPod) -> None:
        uid = entry.pod.uid
        partition = self.partitions.partition_of(entry.pod) if self.partitions is not None else 0
        if self._in_active.get(uid, partition) != partition:
            self._deactivate(uid)
        if uid not in self._in_active:
            self._in_active[uid] = partition
            if self.partitions is not None:
                self.partitions.on_active_delta(partition, 1)
        heap = self._active.setdefault(partition, [])
        heapq.heappush(heap, (self.sort_key(entry.pod), next(self._seq), uid))

    def repartition(self) -> None:
        """Partitions changed (the queue tree was replaced): re-file every active pod and
        re-announce pending ones."""
        active = [self._entries[uid] for uid in self._in_active if uid in self._entries]
        self._active = {0: []}
        self._in_active = {}
        for entry in active:
            self._push_active(entry)
        if self.partitions is not None:
            for entry in self._entries.values():
                self.partitions.on_pending(entry.pod, 1)

    def _deactivate(self, uid: str) -> None:
        partition = self._in_active.pop(uid, None)
        if partition is not None and self.partitions is not None:
            self.partitions.on_active_delta(partition, -1)

    # ---- popping -------------------------------------------------------------------

    def pop(self) -> QueuedPod | None:
        """The next pod to schedule, or None when the active queue is empty."""
        while self._in_active:
            partition = 0
            if self.partitions is not None:
                partition = self.partitions.choose_partition()
            heap = self._active.get(partition) if partition >= 0 else None
            if not heap:  # no preference, or nothing there: any partition with pods
                heap = next(h for h in self._active.values() if h)
            _, _, uid = heapq.heappop(heap)
            if uid not in self._in_active:
                continue  # stale: deleted, re-keyed or moved
            self._deactivate(uid)
            entry = self._entries[uid]
            entry.attempts += 1
            entry.pod.attempts = entry.attempts
            # kube's Pop: the cycle counter moves first, so an event that arrived before
            # this pop (moveRequestCycle < popped_cycle) does not count as "during" it.
            self._cycle += 1
            entry.popped_cycle = self._cycle
            self._in_flight.add(uid)
            return entry
        return None

    def __len__(self) -> int:
        return len(self._in_active)

    def take(self, uids: list[str]) -> list[QueuedPod]:
        """Take these pods out of active, backoff and unschedulable (not gated or in
        flight) to be tried together with the pod just popped (a gang)."""
        taken = []
        for uid in uids:
            entry = self._entries.get(uid)
            if entry is None or uid in self._in_flight or uid in self._gated:
                continue
            self._deactivate(uid)
            self._in_backoff.discard(uid)
            self._unschedulable.remove(uid)
            entry.attempts += 1
            entry.pod.attempts = entry.attempts
            entry.popped_cycle = self._cycle
            self._in_flight.add(uid)
            taken.append(entry)
        return taken

    def regate(self, uids: list[str]) -> None:
        """Re-run PreEnqueue for gated pods (their group may have become complete)."""
        for uid in uids:
            entry = self._gated.pop(uid, None)
            if entry is not None:
                self._enqueue_checked(entry)

    def recheck(self, uids: Iterable[str] | None = None) -> None:
        """Re-run PreEnqueue for these pods (default: every pod waiting), those not in
        flight: the ones it now keeps out leave active, backoff and unschedulable for
        gated (saying why); gated ones it lets through are queued again. For a change
        that can gate pods already queued (a tenant queue closed, a gang suspended)."""
        chosen = list(self._entries) if uids is None else list(uids)
        for uid in chosen:
            entry = self._entries.get(uid)
            if entry is None or uid in self._in_flight:
                continue
            if uid in self._gated:
                self.regate([uid])
                continue
            if self.pre_enqueue is None or self.pre_enqueue(entry.pod).ok:
                continue
            self._deactivate(uid)
            self._in_backoff.discard(uid)
            self._unschedulable.remove(uid)
            self._enqueue_checked(entry)

    # ---- after an attempt ----------------------------------------------------------

    def done(self, uid: str) -> None:
        """The pod was scheduled (assumed) or has left; stop tracking it."""
        self._in_flight.discard(uid)
        entry = self._entries.pop(uid, None)
        if entry is not None and self.partitions is not None:
            self.partitions.on_pending(entry.pod, -1)

    def readd(self, entry: QueuedPod) -> None:
        """Track a pod again after its binding failed (it was `done`)."""
        if entry.pod.uid not in self._entries:
            self._entries[entry.pod.uid] = entry
            self._in_flight.add(entry.pod.uid)
            if self.partitions is not None:
                self.partitions.on_pending(entry.pod, 1)

    def requeue_unschedulable(
        self,
        entry: QueuedPod,
        now: float,
        rejected_by: frozenset[str],
        status: Status,
        message: str = "",
        retry_soon: bool = False,
        retry_by: float | None = None,
    ) -> None:
        """The attempt failed. Errors back off; rejections wait for a useful event,
        unless an event already arrived during the attempt or `retry_soon` (something
        time-based, like a reclaim delay, will change the answer; at `retry_by` when
        known, even if the backoff lasts longer)."""
        uid = entry.pod.uid
        self._in_flight.discard(uid)
        if uid not in self._entries:
            return  # deleted while in flight
        entry.added_at = now
        entry.rejected_by = rejected_by
        entry.last_status = status
        entry.message = message
        entry.retry_by = retry_by
        if retry_soon or not status.rejected or self._move_request_cycle >= entry.popped_cycle:
            self._push_backoff(entry)
        else:
            self._unschedulable.add(entry)

    def _push_backoff(self, entry: QueuedPod) -> None:
        uid = entry.pod.uid
        self._in_backoff.add(uid)
        heapq.heappush(self._backoff, (self.backoff_expiry(entry), next(self._seq), uid))

    def backoff_duration(self, attempts: int) -> float:
        duration = self.config.initial_backoff_seconds
        for _ in range(1, attempts):
            duration *= 2
            if duration >= self.config.max_backoff_seconds:
                return self.config.max_backoff_seconds
        return min(duration, self.config.max_backoff_seconds)

    def backoff_expiry(self, entry: QueuedPod) -> float:
        expiry = entry.added_at + self.backoff_duration(entry.attempts)
        retry_by = entry.retry_by
        return expiry if retry_by is None or retry_by >= expiry else retry_by

    # ---- time and events -----------------------------------------------------------

    def flush(self, now: float) -> None:
        """Move pods whose backoff has expired to active, and long-unschedulable ones back."""
        while self._backoff and self._backoff[0][0] <= now:
            _, _, uid = heapq.heappop(self._backoff)
            if uid in self._in_backoff:
                self._in_backoff.discard(uid)
                self._push_active(self._entries[uid])
        limit = self.config.max_unschedulable_seconds
        for entry in self._unschedulable.pop_older_than(now - limit):
            self._activate_or_backoff(entry, now)

    def on_event(self, event: ClusterEvent, now: float) -> int:
        """A cluster event: retry the unschedulable pods it may help. Returns how many."""
        self._move_request_cycle = self._cycle
        moved = self._unschedulable.take_for(event)
        for entry in moved:
            self._activate_or_backoff(entry, now)
        return len(moved)

    def hurry(self, uids: Iterable[str]) -> None:
        """What these pods waited for is here (a preemptor's last victim is gone, node
        shards lent for their gang for a limited time): unschedulable or backing off,
        they are tried at once; their waits were not failures. Pods elsewhere in the
        queue stay where they are."""
        for uid in uids:
            entry = self._unschedulable.remove(uid)
            if entry is None and uid in self._in_backoff:
                self._in_backoff.discard(uid)  # its heap entry is skipped when it comes up
                entry = self._entries.get(uid)
            if entry is not None:
                self._push_active(entry)

    def _activate_or_backoff(self, entry: QueuedPod, now: float) -> None:
        if self.backoff_expiry(entry) > now:
            self._push_backoff(entry)
        else:
            self._push_active(entry)

    def next_wakeup(self) -> float | None:
        """The earliest time at which `flush` would move a pod (for event-driven callers)."""
        times = [t for t, _, uid in self._backoff[:1] if uid in self._in_backoff]
        if self._backoff and not times:
            live = [t for t, _, uid in self._backoff if uid in self._in_backoff]
            times = [min(live)] if live else []
        oldest = self._unschedulable.oldest()
        if oldest is not None:
            times.append(oldest.added_at + self.config.max_unschedulable_seconds)
        return min(times) if times else None

    # ---- inspection ----------------------------------------------------------------

    def pending(self) -> Iterator[QueuedPod]:
        """Every pod not yet scheduled (active, backoff, unschedulable, gated)."""
        return iter(list(self._entries.values()))

    def gated(self) -> Iterator[QueuedPod]:
        """Pods PreEnqueue keeps out of the queue, with why (`gated_by`, `message`)."""
        return iter(list(self._gated.values()))

    def get(self, uid: str) -> QueuedPod | None:
        return self._entries.get(uid)

    def gated_entry(self, uid: str) -> QueuedPod | None:
        """The pod's entry while PreEnqueue keeps it out of the queue, else None."""
        return self._gated.get(uid)

    def counts(self) -> dict[str, int]:
        return {
            "active": len(self._in_active),
            "backoff": len(self._in_backoff),
            "unschedulable": len(self._unschedulable),
            "gated": len(self._gated),
        }


class _UnschedulablePods:
    """Pods rejected by plugins, indexed by the rejecting plugin so a cluster event only
    looks at pods it could help, and kept in arrival order so the oldest is first."""

    ANY = "*"  # pods worth retrying on any event

    def __init__(self, plugin_events: dict[str, list[ClusterEvent]]) -> None:
        self._plugin_events = plugin_events
        self._entries: dict[str, QueuedPod] = {}
        self._by_plugin: dict[str, set[str]] = {}
        self._interested: dict[ClusterEvent, list[str]] = {}

    def __contains__(self, uid: object) -> bool:
        return uid in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def _keys(self, entry: QueuedPod) -> list[str]:
        # A pod rejected by a plugin that registered no events is retried on any event.
        rejected = entry.rejected_by
        if not rejected or any(p not in self._plugin_events for p in rejected):
            return [self.ANY]
        return list(rejected)

    def add(self, entry: QueuedPod) -> None:
        uid = entry.pod.uid
        self.remove(uid)
        self._entries[uid] = entry
        for key in self._keys(entry):
            self._by_plugin.setdefault(key, set()).add(uid)

    def remove(self, uid: str) -> QueuedPod | None:
        entry = self._entries.pop(uid, None)
        if entry is not None:
            for key in self._keys(entry):
                self._by_plugin.get(key, set()).discard(uid)
        return entry

    def oldest(self) -> QueuedPod | None:
        return next(iter(self._entries.values()), None)

    def pop_older_than(self, cutoff: float) -> list[QueuedPod]:
        out = []
        for uid, entry in list(self._entries.items()):
            if entry.added_at > cutoff:
                break  # arrival order: the rest are newer
            self.remove(uid)
            out.append(entry)
        return out

    def take_for(self, event: ClusterEvent) -> list[QueuedPod]:
        """Remove and return the pods this event may help, oldest first."""
        if not self._entries:
            return []
        plugins = self._interested.get(event)
        if plugins is None:
            plugins = [
                p
                for p, events in self._plugin_events.items()
                if any(e.matches(event) for e in events)
            ]
            self._interested[event] = plugins
        uids: set[str] = set(self._by_plugin.get(self.ANY, ()))
        for p in plugins:
            uids |= self._by_plugin.get(p, set())
        if not uids:
            return []
        taken = [e for uid, e in self._entries.items() if uid in uids]
        for entry in taken:
            self.remove(entry.pod.uid)
        return taken
