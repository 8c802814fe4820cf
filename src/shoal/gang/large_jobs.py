"""Large pods are not starved: reservations with backfill, and idle-node protection.

A pod asking for a whole 8-GPU node can wait a long time behind a stream of small pods:
as soon as a node frees a few GPUs, a small pod takes them, and no node ever becomes
free enough. Batch schedulers answer this with a reservation for the waiting large job
and backfill around it (Slurm's backfill, YuniKorn's and Volcano's reservations). This
module is that logic for single large pods (gangs have their own head-of-line
reservation, `shoal.gang.reservation`); `LargeJobReservation` is its thin plugin.

* **Large**: the pod asks for at least `min_gpus` GPUs (whole devices x count, in GPUs)
  or at least `min_milli_cpu` milli-cpu (either threshold may be unset).
* **Reservation**: when a large pod fails a scheduling cycle (PostFilter) after waiting
  `reservation_after` seconds since its first attempt, it reserves the
  `nodes_per_reservation` nodes closest to fitting it: nodes it could run on if they
  held no other work (no unresolvable Filter rejection, allocatable and GPU devices
  enough, GPU model allowed) ordered by how much of its request is still missing there
  (the sum over cpu, memory and GPU devices of the missing fraction). At most
  `max_reservations` reservations exist at once. Each later failed attempt of the pod
  picks the closest nodes again: a held node keeps draining (nothing new lands there)
  and stays the closest, unless pods left another node first.
* **Backfill**: while a node is reserved, a pod of lower or equal priority may still be
  placed there only if it does not delay the reservation. Without run-time estimates
  the scheduler cannot know when pods end, so "does not delay" means: the pods placed
  on the node since the reservation began, plus this pod, plus the large pod, fit the
  node's allocatable (and its GPU devices) together. The pods that were there before
  will leave and make room; backfilled ones never stand in the way.
* **Release**: when the large pod is placed (anywhere: Reserve), or when
  `reservation_max` seconds pass; an expired pod may not reserve again for another
  `reservation_max` seconds, so small work flows on those nodes in between. A pod that
  has not failed a cycle for `STALE_SECONDS` is gone (deleted): its reservation ends.
* **Idle-node protection** (`protect_idle`, a cheaper variant): while large pods are
  typically around (one was placed or failed a cycle within the last `protect_seconds`),
  small pods prefer nodes that could not host any of those large shapes now: Score gives
  0 to the nodes that could and 100 to the others, so small pods use such nodes only
  when nothing else fits (with a weight above the policy's, see the plugin).

Time comes from the handle's clock (virtual in the simulator); nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import GPU_MILLI, GpuRequest
from shoal.api.podinfo import PodInfo
from shoal.api.resources import CPU, MEMORY, PODS
from shoal.cache.gpu_devices import GpuDevices, request_of
from shoal.framework.handle import Handle

__all__ = ["STALE_SECONDS", "LargeJobSettings", "LargeJobs", "Reservation", "closest_nodes"]

STALE_SECONDS = 900.0
"""A reservation whose pod has not failed a cycle for this long ends: the pod was
deleted (or placed by another profile). The scheduling queue retries an unschedulable
pod at least every 5 minutes, so a pod that still waits fails well within this."""


@dataclass(frozen=True, slots=True)
class LargeJobSettings:
    min_gpus: float | None = 8.0
    min_milli_cpu: int | None = None
    reservation_after: float = 60.0
    reservation_max: float = 1800.0
    max_reservations: int = 1
    nodes_per_reservation: int = 2
    protect_idle: bool = False
    protect_seconds: float = 3600.0


@dataclass(slots=True)
class Reservation:
    """Nodes held for one waiting large pod."""

    owner: PodInfo
    request: GpuRequest
    nodes: tuple[str, ...]
    # Per node: the pods that were there when the reservation began (they will leave).
    incumbents: dict[str, frozenset[str]]
    since: float
    until: float
    last_failed: float = 0.0


@dataclass(slots=True)
class _Seen:
    """A large pod shape, and when a pod of that shape was last placed or failed."""

    pod: PodInfo
    request: GpuRequest
    last_seen: float


@dataclass
class LargeJobs:
    """The reservations and waiting large pods of one scheduler (see the module doc)."""

    handle: Handle
    settings: LargeJobSettings
    reservations: dict[str, Reservation] = field(default_factory=dict)  # by owner uid
    recent: dict[object, _Seen] = field(default_factory=dict)  # large shapes seen
    cooldown: dict[str, float] = field(default_factory=dict)  # uid -> may reserve again at

    # ---- classification ------------------------------------------------------------

    def is_large(self, pod: PodInfo, request: GpuRequest) -> bool:
        s = self.settings
        if s.min_gpus is not None and request.total_milli >= s.min_gpus * GPU_MILLI:
            return True
        return s.min_milli_cpu is not None and pod.requests.get(CPU, 0) >= s.min_milli_cpu

    # ---- time ----------------------------------------------------------------------

    def expire(self, now: float) -> None:
        """Drop reservations whose time is up and large shapes not seen for long."""
        for uid, held in list(self.reservations.items()):
            if now >= held.until or now - held.last_failed > STALE_SECONDS:
                del self.reservations[uid]
                self.cooldown[uid] = now + self.settings.reservation_max
        for key, seen in list(self.recent.items()):
            if now - seen.last_seen > self.settings.protect_seconds:
                del self.recent[key]
        for uid, until in list(self.cooldown.items()):
            if now >= until:
                del self.cooldown[uid]

    # ---- PostFilter: a large pod fits nowhere --------------------------------------

    def pod_failed(self, pod: PodInfo, resolvable: NDArray[np.bool_]) -> Reservation | None:
        """Note a large pod that fit nowhere; reserve nodes for it when it has waited
        long enough. `resolvable[row]`: the pod failed on that node only for reasons
        other pods cause. Returns the pod's reservation (new or held), if any."""
        request = request_of(None, pod)
        if not self.is_large(pod, request):
            return None
        now = self.handle.clock.now()
        self.expire(now)
        self._seen(pod, request, now)
        held = self.reservations.get(pod.uid)
        s = self.settings
        since = pod.initial_attempt_time if pod.initial_attempt_time is not None else now
        if held is None and (
            len(self.reservations) >= s.max_reservations
            or now - since < s.reservation_after
            or pod.uid in self.cooldown
        ):
            return None
        # Held or new: the nodes closest to fitting now (a held node that drains stays
        # the closest; one where others left first takes over).
        taken = {node for uid, r in self.reservations.items() if uid != pod.uid for node in r.nodes}
        names = closest_nodes(self.handle, pod, request, resolvable, taken, s.nodes_per_reservation)
        if held is not None:
            held.last_failed = now
        if not names:
            return held
        snap = self.handle.snapshot
        incumbents = {}
        for name in names:
            if held is not None and name in held.incumbents:
                incumbents[name] = held.incumbents[name]
                continue
            row = snap.row(name)
            incumbents[name] = frozenset(snap.pods_on(row) if row is not None else ())
        if held is not None:
            held.nodes, held.incumbents = names, incumbents
            return held
        held = Reservation(pod, request, names, incumbents, now, now + s.reservation_max, now)
        self.reservations[pod.uid] = held
        return held

    # ---- Filter: keep other pods off reserved nodes unless they backfill -------------

    def blocked_rows(self, pod: PodInfo) -> list[tuple[int, Reservation]]:
        """Rows `pod` may not use now, with the reservation that holds each."""
        if not self.reservations:
            return []
        now = self.handle.clock.now()
        self.expire(now)
        snap = self.handle.snapshot
        out = []
        for uid, held in self.reservations.items():
            if uid == pod.uid or pod.priority > held.owner.priority:
                continue
            for name in held.nodes:
                row = snap.row(name)
                if row is not None and not self._backfills(pod, held, name, row):
                    out.append((row, held))
        return out

    def _backfills(self, pod: PodInfo, held: Reservation, name: str, row: int) -> bool:
        """Does placing `pod` on the reserved node leave room for the large pod once the
        incumbents have left (see the module doc)?"""
        snap = self.handle.snapshot
        devices = GpuDevices.of(self.handle)
        incumbents = held.incumbents.get(name, frozenset())
        used = snap.pod_vector(pod) + snap.pod_vector(held.owner)
        touched: set[int] = set()
        for uid, other in snap.pods_on(row).items():
            if uid in incumbents:
                continue
            used = used + snap.pod_vector(other)
            touched.update(devices.devices_of(uid) or ())
        if not bool((used <= snap.allocatable[row]).all()):
            return False
        request = request_of(None, pod)
        needed = len(touched) + request.count + held.request.count
        return needed <= int(devices.count[row]) if (request or held.request) else True

    # ---- Reserve / Unreserve -------------------------------------------------------

    def pod_placed(self, pod: PodInfo, request: GpuRequest) -> Reservation | None:
        """A pod was placed; if it is large, release its reservation (returned, for
        Unreserve) and remember its shape."""
        if not self.is_large(pod, request):
            return None
        if self.settings.protect_idle:
            self._seen(pod, request, self.handle.clock.now())
        self.cooldown.pop(pod.uid, None)
        return self.reservations.pop(pod.uid, None)

    def _seen(self, pod: PodInfo, request: GpuRequest, now: float) -> None:
        key = (tuple(sorted(pod.requests.items())), request)
        self.recent[key] = _Seen(pod, request, now)

    def placement_undone(self, pod: PodInfo, released: Reservation | None) -> None:
        if released is not None and self.handle.clock.now() < released.until:
            self.reservations.setdefault(pod.uid, released)

    # ---- Score: idle-node protection -----------------------------------------------

    def protecting(self, pod: PodInfo, request: GpuRequest) -> list[_Seen]:
        """The large shapes that small `pod` should keep nodes free for (empty: none)."""
        if not self.settings.protect_idle or not self.recent or self.is_large(pod, request):
            return []
        self.expire(self.handle.clock.now())
        return list(self.recent.values())

    def could_host(self, large: list[_Seen], index: slice | NDArray[np.intp]) -> NDArray[np.bool_]:
        """Which indexed nodes could take one of the `large` pods right now."""
        snap = self.handle.snapshot
        devices = GpuDevices.of(self.handle)
        free = snap.free[index]
        out = np.zeros(free.shape[0], dtype=bool)
        for w in large:
            vector = snap.pod_vector(w.pod)
            fits = (free >= vector).all(axis=1)
            if w.request:
                fits &= devices.enough(w.request, index)
                allowed = devices.model_allowed(w.request, index)
                if allowed is not None:
                    fits &= allowed
            out |= fits
        return out


def closest_nodes(
    handle: Handle,
    pod: PodInfo,
    request: GpuRequest,
    resolvable: NDArray[np.bool_],
    taken: set[str],
    count: int,
) -> tuple[str, ...]:
    """The nodes closest to fitting `pod`, at most `nodes_per_reservation` of them:
    among the nodes it could run on if they held nothing else, those where the smallest
    share of its request is missing now (sum over cpu, memory and GPU devices of the
    missing fraction; ties: fewer pods to wait for, then row order)."""
    snap = handle.snapshot
    n = snap.n
    if not n:
        return ()
    vector = snap.pod_vector(pod)
    eligible = resolvable[:n] & (snap.allocatable[:n] >= vector).all(axis=1)
    missing = np.zeros(n, dtype=float)
    free = snap.free[:n]
    for resource in (CPU, MEMORY):
        col = snap.resource_index.get(resource)
        want = pod.requests.get(resource, 0)
        if col is not None and want > 0:
            missing += np.clip(want - free[:, col], 0, None) / want
    if request:
        devices = GpuDevices.of(handle)
        rows = slice(0, n)
        eligible &= devices.count[:n] >= request.count
        allowed = devices.model_allowed(request, rows)
        if allowed is not None:
            eligible &= allowed
        if request.shared:
            have = (devices.max_free[:n] >= request.milli).astype(float)
            missing += 1.0 - have
        else:
            missing += np.clip(request.count - devices.full[:n], 0, None) / request.count
    for name in taken:
        row = snap.row(name)
        if row is not None and row < n:
            eligible[row] = False
    rows_ok = np.flatnonzero(eligible)
    if not len(rows_ok):
        return ()
    pods_col = snap.resource_index.get(PODS)
    pods = snap.requested[rows_ok, pods_col] if pods_col is not None else np.zeros(len(rows_ok))
    order = np.lexsort((rows_ok, pods, missing[rows_ok]))
    chosen = rows_ok[order[:count]]
    return tuple(str(snap.names[int(r)]) for r in chosen)
