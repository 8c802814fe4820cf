"""Head-of-line reservation for gangs that keep failing.

A failed gang holds nothing (the gang cycle discards its transaction), so smaller work
keeps flowing (backfill). To keep a large gang from waiting forever behind a stream of
small pods, a gang that has failed for longer than `reservation_after` seconds takes a
head-of-line reservation: pods of lower or equal priority outside the gang are held back
until the gang is placed or `reservation_max` seconds pass; the same gang cannot reserve
again for another `reservation_max` seconds. See docs/gang-scheduling.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.api.podinfo import PodInfo
from shoal.gang.manager import GangManager

__all__ = ["GangConfig", "held_by_reservation", "update_reservation"]


@dataclass(frozen=True)
class GangConfig:
    reservation_after: float = 120.0
    reservation_max: float = 300.0


def update_reservation(manager: GangManager, config: GangConfig, now: float) -> None:
    """Start or end the head-of-line reservation. O(1): only the group that has been
    failing the longest can take it."""
    if manager.blocking is not None:
        group = manager.groups.get(manager.blocking)
        over = now >= manager.blocking_until
        if group is None or over or group.phase in ("Running", "Finished"):
            manager.no_block_until[manager.blocking] = now + config.reservation_max
            manager.release()
        else:
            return
    oldest = next(iter(manager.failing), None)
    if oldest is None:
        return
    since = manager.failing[oldest]
    if now - since < config.reservation_after or now < manager.no_block_until.get(oldest, 0.0):
        return
    manager.blocking = oldest
    manager.blocking_until = now + config.reservation_max


def held_by_reservation(manager: GangManager, pod: PodInfo, now: float, config: GangConfig) -> str:
    """Why a pod outside the reserving gang is held back ("" if it is not)."""
    update_reservation(manager, config, now)
    if manager.blocking is None:
        return ""
    group = manager.groups[manager.blocking]
    member = manager.group_of_uid(pod.uid)
    if member is group or pod.priority > group.priority:
        return ""
    return (
        f"held back: gang {group.key} has a head-of-line reservation until "
        f"t={manager.blocking_until:g}s"
    )
