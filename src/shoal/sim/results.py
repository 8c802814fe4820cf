"""What a simulation produces: one record per pod, cluster utilisation, summary statistics."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from shoal.api.podinfo import PodInfo
from shoal.api.resources import PODS
from shoal.cache.node_table import NodeTable
from shoal.framework.effects import BindFailed, Bound, Effect, Unschedulable
from shoal.framework.handle import Clock

__all__ = [
    "PodRecord",
    "PodState",
    "Recorder",
    "Summary",
    "UtilisationTracker",
    "summarize",
]


class PodState(StrEnum):
    PENDING = "pending"  # never bound (yet)
    RUNNING = "running"  # bound, not finished when the simulation stopped
    FINISHED = "finished"  # ran its duration and was deleted
    EVICTED = "evicted"  # its node was removed while it ran
    # Bound by spec.nodeName to a node whose kubelet refuses it (not enough room, as
    # kubelet admission's OutOfcpu) or that does not exist: it never runs.
    REFUSED = "refused"


@dataclass(slots=True)
class PodRecord:
    uid: str
    name: str
    namespace: str
    arrival: float
    duration: float | None
    node: str = ""
    bound_at: float | None = None
    finished_at: float | None = None
    attempts: int = 0
    state: PodState = PodState.PENDING
    message: str = ""
    prebound: bool = False  # arrived with spec.nodeName: not placed by the scheduler
    origin: str = ""  # "cluster": from a cluster's current state; "": the workload

    @property
    def time_to_schedule(self) -> float | None:
        if self.bound_at is None or self.prebound:
            return None
        return self.bound_at - self.arrival


class Recorder:
    """Keeps the per-pod records; listens to the effects port in the simulator."""

    def __init__(self, clock: Clock, on_bound: Callable[[PodRecord], None]) -> None:
        self.clock = clock
        self.on_bound = on_bound
        self.records: dict[str, PodRecord] = {}  # by uid, in arrival order
        self.binds = 0

    def arrived(self, info: PodInfo, duration: float | None) -> PodRecord:
        record = PodRecord(info.uid, info.name, info.namespace, self.clock.now(), duration)
        self.records[info.uid] = record
        return record

    def mark_bound(self, record: PodRecord, node: str) -> None:
        record.node = node
        record.bound_at = self.clock.now()
        record.state = PodState.RUNNING
        record.message = ""
        if not record.prebound:
            # Gang members are placed in their group's cycle, not one of their own.
            record.attempts = max(record.attempts, 1)
        self.binds += 1
        self.on_bound(record)

    def __call__(self, effect: Effect) -> None:
        """An effect the core emitted (see `shoal.framework.effects`)."""
        if isinstance(effect, Bound):
            record = self.records.get(effect.pod.uid)
            if record is not None:
                self.mark_bound(record, effect.node)
        elif isinstance(effect, Unschedulable):
            record = self.records.get(effect.pod.uid)
            if record is not None:
                record.message = effect.message or effect.status.message
        elif isinstance(effect, BindFailed):
            record = self.records.get(effect.pod.uid)
            if record is not None:
                record.message = f"binding to {effect.node} failed: {effect.status.message}"


class UtilisationTracker:
    """Time-weighted mean of requested/allocatable, summed over all nodes, per resource."""

    def __init__(self, table: NodeTable, exclude: Iterable[str] = (PODS,)) -> None:
        self.table = table
        self.exclude = frozenset(exclude)
        self.elapsed = 0.0
        self._integral: dict[str, float] = {}
        self._cache: tuple[int, int, dict[str, float]] | None = None

    def current(self) -> dict[str, float]:
        """Requested/allocatable now, for every resource some node offers."""
        table = self.table
        key = (table.generation, table.n)
        if self._cache is not None and self._cache[:2] == key:
            return self._cache[2]
        n = table.n
        allocatable = table.allocatable[:n].sum(axis=0)
        requested = table.requested[:n].sum(axis=0)
        out: dict[str, float] = {}
        for name, col in table.resource_index.items():
            if name in self.exclude or allocatable[col] <= 0:
                continue
            out[name] = float(requested[col]) / float(allocatable[col])
        self._cache = (*key, out)
        return out

    def advance(self, seconds: float) -> None:
        """The current state held for `seconds` of virtual time."""
        if seconds <= 0:
            return
        for name, ratio in self.current().items():
            self._integral[name] = self._integral.get(name, 0.0) + ratio * seconds
        self.elapsed += seconds

    def means(self) -> dict[str, float]:
        now = self.current()
        if self.elapsed <= 0:
            return dict(now)
        names = list(self._integral) + [n for n in now if n not in self._integral]
        return {n: self._integral.get(n, 0.0) / self.elapsed for n in names}


@dataclass(frozen=True)
class Summary:
    end_time: float
    stop_reason: str
    arrived: int
    scheduled: int  # bound by the scheduler at some point
    running: int
    finished: int
    evicted: int
    pending: int
    not_arrived: int  # due after --until
    rejected: int  # inputs that could not be read
    cycles: int
    tts_mean: float | None
    tts_p50: float | None
    tts_p99: float | None
    tts_max: float | None
    utilisation_mean: Mapping[str, float] = field(default_factory=dict)
    utilisation_end: Mapping[str, float] = field(default_factory=dict)
    refused: int = 0  # bound by spec.nodeName, refused by the node (see PodState.REFUSED)


def _resource_order(name: str) -> tuple[int, str]:
    return ({"cpu": 0, "memory": 1}.get(name, 2), name)


def summarize(
    records: Iterable[PodRecord],
    *,
    end_time: float,
    stop_reason: str,
    not_arrived: int,
    rejected: int,
    cycles: int,
    utilisation: UtilisationTracker,
) -> Summary:
    records = list(records)
    states = {state: 0 for state in PodState}
    for record in records:
        states[record.state] += 1
    tts = np.array([t for r in records if (t := r.time_to_schedule) is not None], dtype=np.float64)
    have = tts.size > 0
    means = utilisation.means()
    end = utilisation.current()
    names = sorted(set(means) | set(end), key=_resource_order)
    return Summary(
        end_time=end_time,
        stop_reason=stop_reason,
        arrived=len(records),
        scheduled=int(tts.size),
        running=states[PodState.RUNNING],
        finished=states[PodState.FINISHED],
        evicted=states[PodState.EVICTED],
        pending=states[PodState.PENDING],
        not_arrived=not_arrived,
        rejected=rejected,
        cycles=cycles,
        tts_mean=float(tts.mean()) if have else None,
        tts_p50=float(np.percentile(tts, 50)) if have else None,
        tts_p99=float(np.percentile(tts, 99)) if have else None,
        tts_max=float(tts.max()) if have else None,
        utilisation_mean={n: means.get(n, 0.0) for n in names},
        utilisation_end={n: end.get(n, 0.0) for n in names},
        refused=states[PodState.REFUSED],
    )
