"""Optimistic workers (Omega): decisions made on replicas, committed against row
generations by the single writer.

Several workers each hold a replica of the cluster state (a `Scheduler` built from the
same objects) and decide pods against it, possibly stale; the committer (the scheduler
whose cache is the truth) checks each proposal against the generation of the row it
chose (`NodeTable.row_generation`) and places it with the very code a scheduling cycle
uses after choosing a node (`Scheduler.place`), or rejects it as a conflict, and the pod
is decided again on a refreshed replica. This module is the sans-I/O half: what a
proposal is, which pods may be decided on a replica, the committer's check, and the
replica's side (applying what the truth did, deciding). The processes and pipes are
`shoal.drivers.optimistic`.

**What a generation check proves.** A proposal carries the node's row generation as the
worker last heard it from the truth (`seen`). At commit the row's generation must equal
it, or equal the generation the same worker's own last commit on that row left (the
replica already held the worker's in-flight pods when it decided: changes it made
itself are no conflict). Generations are the table-wide counter's value at the row's
last change, so they never repeat and an equal generation means an identical row. That
makes the decision valid for every filter that reads only the chosen node's row and the
pod, which is why only such pods go to workers (`row_local`): pods whose verdict depends
on other rows (required inter-pod affinity or anti-affinity, DoNotSchedule spread,
placed pods carrying required anti-affinity), on state outside the table (gangs,
nominations, gang reservations, volumes, resource claims, tenant queues and node pools,
extenders, node shards), or on a Reserve that reads PreFilter state are decided by the committer
itself, serially.
Scores read other rows too (least allocated, spreading): a stale replica may pick a
worse node than the truth would, never an infeasible one.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import Node, Pod
from shoal.api.podinfo import PodInfo
from shoal.cache.pod_topology import REQUIRED_ANTI_AFFINITY, PodTopologyIndex
from shoal.framework.cycle_state import CycleState
from shoal.framework.runtime import Framework
from shoal.scheduler.scheduler import CycleResult, Scheduler
from shoal.scheduling_queue.queue import QueuedPod

__all__ = [
    "Committer",
    "Observed",
    "PlacementLog",
    "Proposal",
    "Replica",
    "Update",
    "cluster_not_row_local",
    "pod_not_row_local",
    "row_local",
]


@dataclass(frozen=True, slots=True)
class Proposal:
    """A worker's decision: `node` ("" when nothing fits in its view) and the row
    generation of that node as the worker last heard it from the truth."""

    uid: str
    node: str
    seen: int


@dataclass(frozen=True, slots=True)
class Observed:
    """An intake call the truth received (`add_node`, `add_pod`, ...), replayed on every
    replica in the order it happened."""

    method: str
    obj: Node | Pod | str


# A placement in the truth: ("+", uid, node) assigned, ("-", uid, node) released.
Placement = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Update:
    """What one worker is told at once: its proposals that conflicted, what happened in
    the truth since its last update (in order), the generations of the rows that changed
    since then, and the pods to decide next."""

    conflicts: tuple[str, ...]
    log: tuple[Placement | Observed, ...]
    generations: dict[str, int]
    decide: tuple[str, ...]


def row_local(sched: Scheduler, pod: PodInfo) -> str:
    """Why a pod's placement cannot be decided on a replica and validated by the chosen
    row's generation alone ("" when it can: see the module docstring)."""
    return pod_not_row_local(sched, pod) or cluster_not_row_local(sched)


def pod_not_row_local(sched: Scheduler, pod: PodInfo) -> str:
    """The pod's own reasons (its spec and profile: they do not change while it waits)."""
    if sched.gangs.group_of_uid(pod.uid) is not None:
        return "a gang member"
    spec = pod.pod.spec
    if spec.resource_claims:
        return "resource claims"
    if spec.volumes and any(
        v.persistent_volume_claim or v.ephemeral or v.csi for v in spec.volumes
    ):
        return "volumes"
    if pod.affinity_terms or pod.anti_affinity_terms:
        return "required pod affinity"
    if pod.spread_constraints and any(
        c.when_unsatisfiable == "DoNotSchedule" for c in pod.spread_constraints
    ):
        return "hard topology spread"
    fwk = sched.profiles.get(pod.scheduler_name)
    if fwk is None:
        return "no profile"
    if not _filters_row_local(fwk):
        return "a filter that reads more than the node's row"
    return ""


_PROFILES: weakref.WeakKeyDictionary[Framework, bool] = weakref.WeakKeyDictionary()


def _filters_row_local(fwk: Framework) -> bool:
    found = _PROFILES.get(fwk)
    if found is None:
        # A filter declares `row_local` when its verdict on a node reads only that node's
        # row and the pod (for the pods `pod_not_row_local` lets through: the volume,
        # claim, affinity and spread plugins pass them on any node). A profile with any
        # other filter is decided serially.
        found = _PROFILES[fwk] = all(getattr(p, "row_local", False) for p in fwk.plugins.filter)
    return found


def cluster_not_row_local(sched: Scheduler) -> str:
    """The cluster's reasons, which may change at any time: checked again at commit."""
    if sched.cluster.nominations:
        return "nominated pods hold room"
    if sched.gangs.reservation is not None:
        # Taken by the truth's gang cycle: replicas do not hold it, and taking it changes
        # no row's generation.
        return "a gang reservation holds nodes"
    queues = sched.tenant_queues.objects
    if queues.queues or queues.elastic or queues.bindings or queues.pools:
        return "tenant queues"
    if sched.handle.extenders:
        return "extenders"
    if sched.cluster.fence.held is not None:
        return "node shards"  # which rows are usable is not a row's generation
    if PodTopologyIndex.of(sched.handle).has_groups(REQUIRED_ANTI_AFFINITY):
        return "placed pods with required anti-affinity"
    return ""


class PlacementLog:
    """An `AssignmentObserver` on the truth: every pod assigned to or released from a
    node, with the intake calls the driver forwards, in one ordered log for replicas."""

    def __init__(self) -> None:
        self.entries: list[Placement | Observed] = []

    def pod_assigned(self, pod: PodInfo, node: str) -> None:
        self.entries.append(("+", pod.uid, node))

    def pod_released(self, pod: PodInfo, node: str) -> None:
        self.entries.append(("-", pod.uid, node))

    def observed(self, method: str, obj: Node | Pod | str) -> None:
        self.entries.append(Observed(method, obj))


class Committer:
    """The single writer's side: validates proposals against row generations and places
    the valid ones (`Scheduler.place`). `proposed`, `committed` and `conflicts` count."""

    def __init__(self, sched: Scheduler, workers: int) -> None:
        self.sched = sched
        # Per worker: node -> the row generation its own last commit there left.
        self._own: list[dict[str, int]] = [{} for _ in range(workers)]
        table = sched.cluster.table
        self._sent: list[NDArray[np.int64]] = [
            table.row_generation[: table.n].copy() for _ in range(workers)
        ]
        self.proposed = 0
        self.committed = 0
        self.conflicts = 0

    def valid(self, worker: int, proposal: Proposal) -> bool:
        """Is the row as the worker read it (see the module docstring)?"""
        table = self.sched.cluster.table
        row = table.row_of.get(proposal.node)
        if row is None:
            return False
        gen = int(table.row_generation[row])
        return gen == proposal.seen or gen == self._own[worker].get(proposal.node)

    def commit(self, worker: int, entry: QueuedPod, proposal: Proposal) -> CycleResult | None:
        """Place the proposal if it is still valid and the cluster still lets a row
        decide (the pod's own reasons were checked when it was handed out; None: a
        conflict, the pod is to be decided again)."""
        self.proposed += 1
        if cluster_not_row_local(self.sched) or not self.valid(worker, proposal):
            self.conflicts += 1
            return None
        result = self.sched.place(entry, proposal.node)
        if result.node is not None:
            self.committed += 1
            table = self.sched.cluster.table
            row = table.row_of[proposal.node]
            self._own[worker][proposal.node] = int(table.row_generation[row])
        return result

    def generations_for(self, worker: int) -> dict[str, int]:
        """The rows whose generation changed since this worker was last told (all of
        them when nodes came or went), by node name."""
        table = self.sched.cluster.table
        n = table.n
        now = table.row_generation[:n]
        sent = self._sent[worker]
        rows = np.flatnonzero(now != sent) if sent.shape[0] == n else np.arange(n)
        self._sent[worker] = now.copy()
        names = table.names
        return {names[r]: int(now[r]) for r in rows.tolist()}


class Replica:
    """A worker's side: its own `Scheduler` (a replica: it never binds), kept in step
    with the truth by `apply`, deciding pods with the same `PlacementAlgorithm` as a
    scheduling cycle (`decide`). A pod it decides stays assumed in the replica until the
    truth commits it (then it is simply there) or reports a conflict (then it is taken
    back), so its next decisions see it."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        table = sched.cluster.table
        self.known: dict[str, int] = {
            table.names[r]: int(table.row_generation[r]) for r in range(table.n)
        }
        # A replica keeps no cluster-wide tallies (tenant-queue usage): a cluster with
        # queue objects decides every pod serially (`row_local`), so nothing on a
        # replica reads them. `sched` is the worker's own copy of the scheduler.
        sched.cluster.assignment_observers.clear()

    def apply(self, update: Update) -> None:
        """Bring the replica up to the truth as of the update."""
        cluster = self.sched.cluster
        for uid in update.conflicts:
            record = cluster.placed.get(uid)
            if record is not None and record.assumed:
                cluster.forget(record.pod)
        for entry in update.log:
            if isinstance(entry, Observed):
                getattr(self.sched, entry.method)(entry.obj)
                continue
            kind, uid, node = entry
            record = cluster.placed.get(uid)
            if kind == "+":
                if record is not None and record.node == node:
                    continue  # its own proposal, committed
                info = self.sched.known_pod(uid)
                if info is None:
                    raise LookupError(
                        f"pod {uid} was placed in the truth but never reached this replica "
                        "(pods must be added through the optimistic driver)"
                    )
                cluster.add_bound_pod(info, node)
            elif record is not None and record.node == node:
                cluster.remove_pod(uid)
        self.known.update(update.generations)

    def decide(self, uids: tuple[str, ...]) -> list[Proposal]:
        sched = self.sched
        out = []
        for uid in uids:
            pod = sched.known_pod(uid)
            if pod is None or pod.uid in sched.cluster.placed:
                out.append(Proposal(uid, "", 0))
                continue
            sched.snapshot.refresh()
            try:
                node, _, _ = sched.algorithm.schedule_pod(
                    sched.profiles[pod.scheduler_name], CycleState(), pod
                )
            except Exception:  # the committer's serial cycle reports it
                node = None
            if node is None:
                out.append(Proposal(uid, "", 0))
                continue
            sched.cluster.assume(pod, node)
            out.append(Proposal(uid, node, self.known.get(node, -1)))
        return out
