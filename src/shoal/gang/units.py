"""Eviction units of gang members for victim searches (`shoal.preemption`).

A member goes alone while its group keeps at least minMember members running without
it; otherwise the group's running members go together, so preemption and reclaim never
leave a partial gang running. A Kubernetes PodGroup says so itself
(`spec.disruptionMode`): `Pod` (its default) lets its members go one by one like any
pods, `PodGroup` makes all its running members go together.
"""

from __future__ import annotations

from collections.abc import Iterable

from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import PlacedPods
from shoal.gang.manager import GangManager

__all__ = ["GangUnits"]


class GangUnits:
    """Eviction units of gang members, judged against the cache as it is now.

    A member goes alone while its group keeps at least minMember members running
    without it; otherwise the group's running members go together. Members being
    evicted (`cluster.evicting`) or off their nodes in an open transaction do not count
    as running: two evictions must not each take "the one spare member".
    """

    def __init__(self, gangs: GangManager, cluster: PlacedPods) -> None:
        self.gangs = gangs
        self.cluster = cluster

    def running(self, pod: PodInfo) -> tuple[str, int, list[PodInfo]] | None:
        """(group key, members that may go one by one, the running members), or None
        for a pod outside any group."""
        group = self.gangs.group_of_uid(pod.uid)
        if group is None or group.disruption_mode == "Pod":
            return None
        placed, evicting = self.cluster.placed, self.cluster.evicting
        members = [
            record.pod
            for uid in sorted(group.members)
            if uid not in evicting and (record := placed.get(uid)) is not None
        ]
        if group.disruption_mode == "PodGroup":
            return group.key, 0, members
        return group.key, len(members) - group.min_member, members

    def any_grouped(self, uids: Iterable[str]) -> bool:
        uids = list(uids)
        if not self.gangs.any_member(uids):
            return False
        return any(
            (group := self.gangs.group_of_uid(uid)) is not None and group.disruption_mode != "Pod"
            for uid in uids
        )

    def __call__(self, pod: PodInfo) -> list[PodInfo]:
        found = self.running(pod)
        if found is None or found[1] > 0 or all(p.uid != pod.uid for p in found[2]):
            return [pod]
        return found[2]
