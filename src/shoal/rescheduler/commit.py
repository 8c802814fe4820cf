"""The scheduler's side of migration holds (`shoal.rescheduler.holds`).

The Rescheduler plugin proposes holds; the scheduler nominates their stand-ins when it
commits a plan (`shoal.scheduler.victims.commit_preemption`), and here: lets a re-created
pod take over its hold when it arrives (the nomination moves to it, so it is tried on that
node first and the room is its own), and ends holds nobody claimed in time. Without a
Rescheduler in any profile there is no registry and each call returns at once.
"""

from __future__ import annotations

from shoal.api.podinfo import PodInfo
from shoal.cache.transaction import Transaction
from shoal.framework.effects import Nominate
from shoal.framework.handle import Handle
from shoal.framework.interfaces import PostFilterResult
from shoal.rescheduler.holds import MigrationHolds

__all__ = ["claim_hold", "defragment", "expire_holds", "next_hold_expiry"]


def claim_hold(handle: Handle, pod: PodInfo, now: float) -> str:
    """Nominate a newly arrived pod to the node a plan held for it; returns the node
    ("" when no hold is its)."""
    holds = MigrationHolds.find(handle.services)
    if holds is None or not holds.holds:
        return ""
    hold = holds.claim(pod, now)
    if hold is None:
        return ""
    with Transaction(handle.cluster) as tx:
        tx.clear_nomination(hold.stand_in)
        tx.nominate(pod, hold.node)
        tx.commit()
    handle.effects.emit(Nominate(pod, hold.node))
    return hold.node


def expire_holds(handle: Handle, now: float) -> bool:
    """End the holds past their time; True if room was given back."""
    holds = MigrationHolds.find(handle.services)
    if holds is None or not holds.holds:
        return False
    gone = holds.expire(now)
    if not gone:
        return False
    with Transaction(handle.cluster) as tx:
        for hold in gone:
            tx.clear_nomination(hold.stand_in)
        tx.commit()
    return True


def next_hold_expiry(handle: Handle) -> float | None:
    holds = MigrationHolds.find(handle.services)
    return None if holds is None else holds.next_expiry()


def defragment(handle: Handle, now: float) -> list[PostFilterResult]:
    """The periodic defragmentation pass of the first profile's Rescheduler that has one
    due (its evictions and holds, for the scheduler to commit)."""
    if MigrationHolds.find(handle.services) is None:
        return []
    for framework in handle.frameworks.values():
        for plugin in framework.plugins.post_filter:
            run = getattr(plugin, "defragment", None)
            if run is not None:
                result = run(now)
                return [result] if isinstance(result, PostFilterResult) else []
    return []
