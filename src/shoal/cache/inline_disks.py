"""InlineDisks: the inline disks (GCE persistent disks, AWS EBS volumes, iSCSI targets,
Ceph RBD images) of the pods placed on each node row, for VolumeRestrictions.

A `PlacementObserver` kept by placement events, so a preemption what-if that takes a
pod off a row takes its disks off too. Only pods with such disks are recorded: the
index is as small as their number, and pods without volumes cost one attribute test.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.api.volumes import InlineDisk, inline_disks
from shoal.cache.cluster import ClusterState, observer_service

__all__ = ["InlineDisks"]

_SERVICE = "inline-disks"


class _Services(Protocol):
    services: dict[str, object]
    cluster: ClusterState


class InlineDisks:
    def __init__(self, cluster: ClusterState) -> None:
        # (kind, disk) -> placed pod uid -> (row, the pod's mount of it)
        self._by_disk: dict[tuple[str, str], dict[str, tuple[int, InlineDisk]]] = {}
        self._of_pod: dict[str, tuple[int, tuple[InlineDisk, ...]]] = {}

    @classmethod
    def of(cls, handle: _Services) -> InlineDisks:
        """The scheduler's index (created on first use, watching the cluster)."""
        return observer_service(handle.services, handle.cluster, _SERVICE, cls, cls)

    def conflicting_rows(self, disks: tuple[InlineDisk, ...]) -> NDArray[np.intp]:
        """Rows where a placed pod mounts one of `disks` in a way that conflicts with it
        (kube's isVolumeConflict), sorted."""
        rows: set[int] = set()
        for disk in disks:
            for row, mounted in self._by_disk.get((disk.kind, disk.disk), {}).values():
                if disk.conflicts(mounted):
                    rows.add(row)
        return np.array(sorted(rows), dtype=np.intp)

    # ---- PlacementObserver ---------------------------------------------------------

    def pod_placed(self, row: int, pod: PodInfo) -> None:
        if not pod.pod.spec.volumes:
            return
        disks = inline_disks(pod.pod)
        if not disks:
            return
        self._of_pod[pod.uid] = (row, disks)
        for disk in disks:
            users = self._by_disk.setdefault((disk.kind, disk.disk), {})
            held = users.get(pod.uid)
            if held is None or held[1].read_only:  # a pod mounting it twice: read-write wins
                users[pod.uid] = (row, disk)

    def pod_unplaced(self, row: int, pod: PodInfo) -> None:
        found = self._of_pod.pop(pod.uid, None)
        if found is None:
            return
        for disk in found[1]:
            key = (disk.kind, disk.disk)
            users = self._by_disk.get(key)
            if users is not None:
                users.pop(pod.uid, None)
                if not users:
                    del self._by_disk[key]

    def row_moved(self, src: int, dst: int) -> None:
        for uid, (row, disks) in list(self._of_pod.items()):
            if row != src:
                continue
            self._of_pod[uid] = (dst, disks)
            for disk in disks:
                users = self._by_disk[(disk.kind, disk.disk)]
                users[uid] = (dst, users[uid][1])

    def node_changed(self, row: int) -> None:
        return None
