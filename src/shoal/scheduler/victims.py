"""Committing a preemption, and preemptors waiting for their victims.

Victims are chosen elsewhere (PostFilter plugins, job-level preemption in the gang
cycle, the Rescheduler's plans, a suspended gang's members); what is done with them is
the same for all, so it is here once: the victims are marked evicting and the preemptors
nominated in one transaction, then `Evict` and `Nominate` effects go out. A victim
stays counted on its node until the cluster says it is gone, and a preemptor nominated
where victims are still terminating waits for them (`awaiting_victims`) instead of
preempting again; it is woken when the last one is gone (queue key `AWAITING_VICTIMS`).
"""

from __future__ import annotations

from collections.abc import Iterable

from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import ClusterState
from shoal.cache.transaction import Transaction
from shoal.framework.effects import Effects, Evict, Nominate
from shoal.framework.interfaces import Victim
from shoal.rescheduler.holds import is_hold

__all__ = ["AWAITING_VICTIMS", "awaiting_victims", "commit_preemption", "emit_nominations"]

AWAITING_VICTIMS = "shoal/awaiting-victims"  # queue key of preemptors awaiting victims


def commit_preemption(
    cluster: ClusterState,
    effects: Effects,
    nominations: Iterable[tuple[PodInfo, str]],
    victims: Iterable[Victim],
) -> None:
    """Evict the victims and nominate the preemptors, as one transaction. Victims
    stay counted (and are never chosen again) until the API reports them gone."""
    nominations = list(nominations)
    preemptors = ", ".join(p.key for p, _ in nominations if not is_hold(p))
    with Transaction(cluster) as tx:
        for victim in victims:
            uid = victim.pod.uid
            record = cluster.placed.get(uid)
            if record is None or record.assumed or uid in cluster.evicting:
                continue
            if not tx.is_evicted(uid):
                tx.evict(record.pod, victim.reason)
        for pod, node in nominations:
            tx.nominate(pod, node)
        decision = tx.commit()
    for evicted in decision.evicted:
        effects.emit(Evict(evicted.pod, evicted.node, evicted.reason, preemptors))
    emit_nominations(effects, decision.nominated)


def emit_nominations(effects: Effects, nominated: Iterable[tuple[PodInfo, str]]) -> None:
    for pod, node in nominated:
        if not is_hold(pod):  # a migration hold's stand-in is no pod of the cluster
            effects.emit(Nominate(pod, node))


def awaiting_victims(cluster: ClusterState, pod: PodInfo) -> tuple[str, str] | None:
    """(node, why) when the pod is nominated to a node where pods evicted for it
    are still terminating: ours (`evicting`), or, for a scheduler that has just started
    and reads the nomination from the pod's status, lower-priority pods being deleted
    (kube's podTerminatingByPreemption, which Shoal's evictions through the Eviction API
    do not mark as preemptions)."""
    found = cluster.nominations.get(pod.uid)
    if found is None:
        return None
    node = found[0]
    evicting = cluster.evicting
    leaving = sum(
        1
        for p in cluster.pods_on(node)
        if p.uid in evicting
        or (p.pod.metadata.deletion_timestamp is not None and p.priority < pod.priority)
    )
    if not leaving:
        return None
    return node, f"waiting for {leaving} preempted pod(s) on node {node} to terminate."
