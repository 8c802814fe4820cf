"""The gang cycle: decide a group's minimum members in one transaction.

When the queue yields a member of a group, the scheduler takes every pending member of
that group out of the queue and hands them here. They are placed one after another
inside one `Transaction` (Volcano's Statement), each seeing the ones placed before it.
If at least the still-needed number of members (minMember minus those already running)
fits, the transaction is committed and every placement goes to binding; otherwise it is
discarded before anything is bound, so a gang that does not fit holds nothing and two
large gangs can never deadlock each other half-placed. Members beyond the minimum that
do not fit stay queued on their own (elastic members, e.g. Spark executors above the
minimum).

Job-level preemption and reclaim: a member that fits nowhere runs the profile's
PostFilter plugins *inside the gang's transaction*, so the victims they choose for it
are already off their nodes when the next member is placed (victims are chosen for all
members together). If the minimum is then reached, the placements are dropped and the
decision becomes: evict every victim, nominate every member to the node the plan gave
it; the members are retried when the victims are gone, and their nominations hold the
room against lower-priority work. If the minimum is not reached, nothing is evicted.

Spark driver-first: with `min_executors`, phantom executors of the remaining
minResources shape are placed through the normal filters and scores after the driver,
inside the same transaction, then rolled back.

This module decides; the scheduler acts on the `GangOutcome` (binding, requeueing,
effects). It never touches the scheduling queue or the effects port.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field

import msgspec
import numpy as np

from shoal.api.objects import Container, ObjectMeta, Pod, ResourceRequirements
from shoal.api.podinfo import PodInfo
from shoal.api.resources import CPU, MEMORY
from shoal.cache.cluster import ClusterState
from shoal.cache.transaction import Transaction
from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import Diagnosis
from shoal.framework.interfaces import Victim
from shoal.framework.runtime import Framework
from shoal.framework.status import Code, Status
from shoal.framework.types import Candidates
from shoal.gang.manager import Group, SubGroup, sub_group_of
from shoal.gang.topology import (
    choose_domains,
    choose_levels,
    fitting_domains,
    members_per_node,
)
from shoal.scheduler.algorithm import PlacementAlgorithm
from shoal.scheduling_queue.queue import QueuedPod

__all__ = ["GangCycle", "GangOutcome", "Placement"]


@dataclass
class Placement:
    entry: QueuedPod
    node: str
    state: CycleState


@dataclass
class GangOutcome:
    """What the gang cycle decided.

    * `placed`: members assumed in the cache (committed), to run Permit and bind;
    * `failed`: members that did not fit (each with its status and diagnosis), requeued;
    * `rejected`: set when the whole gang failed: every entry is requeued with it;
    * `victims` / `nominations`: job-level preemption decided (placements dropped);
    * `retry_soon`: a member's PostFilter will act after a delay (reclaim waits for
      `reclaimDelaySeconds`): retry the gang after its backoff, not on an event.
    """

    placed: list[Placement] = field(default_factory=list)
    failed: list[tuple[QueuedPod, Status, Diagnosis | None]] = field(default_factory=list)
    rejected: tuple[Status, str, frozenset[str]] | None = None
    victims: list[Victim] = field(default_factory=list)
    nominations: list[tuple[PodInfo, str]] = field(default_factory=list)
    retry_soon: bool = False


def _fmt(resource: str, amount: int) -> str:
    if resource == CPU:
        return f"{amount / 1000:g} {resource}"
    if resource == MEMORY:
        return f"{amount / 2**30:.1f}Gi {resource}"
    return f"{amount} {resource}"


def _shortfall(unplaced: list[PodInfo], diagnoses: list[Diagnosis | None]) -> str:
    """ "needs 16 nvidia.com/gpu more": what the members that did not fit ask for, of the
    resources the filters found insufficient."""
    short: Counter[str] = Counter()
    for diag in diagnoses:
        if diag is None:
            continue
        for reason in diag.reasons:
            if reason.startswith("Insufficient "):
                short[reason.removeprefix("Insufficient ")] += 1
    if not short:
        return ""
    parts = []
    for resource, _ in short.most_common(2):
        total = sum(p.requests.get(resource, 0) for p in unplaced)
        if total:
            parts.append(_fmt(resource, total))
    return f", needs {' and '.join(parts)} more" if parts else ""


class GangCycle:
    """Places gangs against the cache through a transaction (see the module docstring)."""

    def __init__(self, cluster: ClusterState, algorithm: PlacementAlgorithm) -> None:
        self.cluster = cluster
        self.algorithm = algorithm

    def decide(
        self,
        entries: list[QueuedPod],
        group: Group,
        fwk: Framework,
        now: float,
        may_preempt: bool = True,
    ) -> GangOutcome:
        entries.sort(key=lambda e: (-e.pod.priority, e.pod.timestamp, e.pod.key))
        need = group.needed()
        snap = self.algorithm.snapshot
        snap.refresh()
        restrict = None
        capacity: np.ndarray | None = None
        if need > 0 and group.min_resources:
            rejected = self._min_resources_rejection(group)
            if rejected is not None:
                return GangOutcome(rejected=rejected)
        if need > 0 and (group.topology_required or group.topology_preferred):
            representative = entries[0].pod
            state = CycleState()
            fwk.run_pre_filter(state, representative)
            passed = fwk.run_filters(state, representative, Candidates.all(snap.n)).passed
            shape = np.max([snap.pod_vector(e.pod) for e in entries[:need]], axis=0)
            capacity = np.where(passed, members_per_node(snap, shape), 0)
            if group.topology_preferred:
                choice = choose_levels(
                    snap, group.topology_required, group.topology_preferred, capacity, need
                )
            else:
                choice = choose_domains(snap, group.topology_required, capacity, need, True)
            if choice.rows is None:
                message = f"gang {group.key}: {choice.message}"
                status = Status(Code.UNSCHEDULABLE, message, plugin="Coscheduling")
                return GangOutcome(rejected=(status, message, frozenset({"Coscheduling"})))
            restrict = choice.rows

        candidates: list[np.ndarray | None] = [restrict]
        if group.sub_groups:
            # Role by role, in the order the PodGroup lists them (a role's members are
            # placed together, each role in its own domain, after the ones before it).
            order = {name: i for i, name in enumerate(group.sub_groups)}
            entries.sort(key=lambda e: order.get(sub_group_of(e.pod), len(order)))
            if capacity is not None and group.topology_required and restrict is not None:
                # A required domain that holds the gang may still lack room for each
                # role inside its own sub-domain: try the fitting ones, smallest first.
                candidates = [
                    c.rows for c in fitting_domains(snap, group.topology_required, capacity, need)
                ] or [restrict]
        outcome = GangOutcome()
        for rows in candidates:
            tx = Transaction(self.cluster)
            try:
                outcome = self._place(tx, entries, group, fwk, now, need, rows, may_preempt)
            finally:
                if not tx.closed:
                    tx.discard()
            if outcome.rejected is None or not outcome.rejected[1].startswith(
                f"gang {group.key}: sub-group "
            ):
                return outcome
        return outcome

    def _sub_domain(
        self,
        fwk: Framework,
        sub: SubGroup,
        mates: list[QueuedPod],
        count: int,
        restrict: np.ndarray | None,
    ) -> tuple[np.ndarray | None, str]:
        """The nodes a role may use: a domain of its topology level that holds `count`
        of its members as the cluster is now (with the roles placed before it in this
        transaction), inside the gang's own domain; (None, why) when there is none."""
        snap = self.algorithm.snapshot
        snap.refresh()
        representative = mates[0].pod
        state = CycleState()
        fwk.run_pre_filter(state, representative)
        outcome = fwk.run_filters(state, representative, Candidates.all(snap.n))
        shape = np.max([snap.pod_vector(m.pod) for m in mates[: max(count, 1)]], axis=0)
        capacity = np.where(outcome.passed, members_per_node(snap, shape), 0)
        if restrict is not None:
            capacity = np.where(restrict[: snap.n], capacity, 0)
        if sub.topology_preferred:
            choice = choose_levels(
                snap, sub.topology_required, sub.topology_preferred, capacity, count
            )
        else:
            choice = choose_domains(snap, sub.topology_required, capacity, count, True)
        if choice.rows is None:
            return None, choice.message
        rows = choice.rows if restrict is None else choice.rows & restrict[: snap.n]
        return rows, choice.message

    def _min_resources_rejection(self, group: Group) -> tuple[Status, str, frozenset[str]] | None:
        snap = self.algorithm.snapshot
        n = snap.n
        for resource, amount in group.min_resources.items():
            col = snap.resource_index.get(resource)
            free = 0 if col is None else int(snap.free[:n, col].sum())
            if free < amount:
                message = (
                    f"gang {group.key}: minResources {_fmt(resource, amount)} exceed the "
                    f"cluster's free {_fmt(resource, max(free, 0))}"
                )
                status = Status(Code.UNSCHEDULABLE, message, plugin="Coscheduling")
                return status, message, frozenset({"Coscheduling"})
        return None

    def _place(
        self,
        tx: Transaction,
        entries: list[QueuedPod],
        group: Group,
        fwk: Framework,
        now: float,
        need: int,
        restrict: np.ndarray | None,
        may_preempt: bool,
    ) -> GangOutcome:
        # A retried gang competes with others for room, not with its own nominations.
        # Every member is attempted now, also those the loop below never reaches once
        # the minimum is out of reach: waiting (e.g. reclaim's delay) counts from here.
        for e in entries:
            tx.clear_nomination(e.pod)
            if e.pod.initial_attempt_time is None:
                e.pod.initial_attempt_time = now
        placed: list[Placement] = []
        failed: list[tuple[QueuedPod, Status, Diagnosis | None]] = []
        victims: dict[str, Victim] = {}
        holds: list[tuple[PodInfo, str]] = []  # migration plans' stand-ins (see below)
        member_uids = set(group.members)
        retry_soon = False
        # Sub-groups (roles): each must reach its own minimum, inside its own domain.
        sub_need = {name: group.sub_group_needed(name) for name in group.sub_groups}
        sub_placed: Counter[str] = Counter()
        sub_domain: dict[str, tuple[np.ndarray | None, str]] = {}
        for i, e in enumerate(entries):
            if len(placed) < need and len(placed) + len(entries) - i < need:
                failed.extend((rest, Status(Code.UNSCHEDULABLE), None) for rest in entries[i:])
                break  # the minimum can no longer be reached
            pod = e.pod
            state = CycleState()
            restrict_now = restrict if len(placed) < need else None
            role = sub_group_of(pod) if group.sub_groups else ""
            sub = group.sub_groups.get(role)
            if (
                sub is not None
                and sub_placed[role] < sub_need[role]
                and (sub.topology_required or sub.topology_preferred)
            ):
                if role not in sub_domain:
                    mates = [x for x in entries[i:] if sub_group_of(x.pod) == role]
                    sub_domain[role] = self._sub_domain(fwk, sub, mates, sub_need[role], restrict)
                mask, problem = sub_domain[role]
                if mask is None:
                    status = Status(Code.UNSCHEDULABLE, problem, plugin="Coscheduling")
                    failed.append((e, status, None))
                    continue
                restrict_now = mask
            try:
                node, status, diagnosis = self.algorithm.schedule_pod(fwk, state, pod, restrict_now)
            except Exception as err:  # a plugin bug must not stop the scheduler
                node, diagnosis = None, None
                status = Status.error(f"scheduling cycle failed: {type(err).__name__}: {err}")
            if (
                node is None
                and may_preempt
                and len(placed) < need
                and diagnosis is not None
                and status.rejected
                and fwk.plugins.post_filter
            ):
                node, post = self._preempt_for(
                    tx, fwk, state, pod, diagnosis, member_uids, victims, holds
                )
                retry_soon = retry_soon or post.code == Code.PENDING
                if node is not None:
                    state = CycleState()
                    fwk.run_pre_filter(state, pod)  # fresh state for Reserve on that node
            if node is None:
                failed.append((e, status, diagnosis))
                continue
            mark = tx.mark()
            tx.assume(pod, node)
            # kube runs Unreserve after a failed Reserve too; so does taking the gang back.
            tx.on_undo(functools.partial(fwk.run_unreserve, state, pod, node))
            status = fwk.run_reserve(state, pod, node)
            if not status.ok:
                tx.rollback(mark)
                failed.append((e, status, None))
                continue
            placed.append(Placement(e, node, state))
            if role:
                sub_placed[role] += 1

        short = [name for name, wanted in sub_need.items() if sub_placed[name] < wanted]
        if short:
            tx.discard()  # a role below its minimum: the gang does not start
            name = short[0]
            why = sub_domain.get(name, (None, ""))[1]
            message = (
                f"gang {group.key}: sub-group {name}: {sub_placed[name]}/{sub_need[name]} "
                f"members placeable" + (f" ({why})" if why else "")
            )
            status = Status(Code.UNSCHEDULABLE, message, plugin="Coscheduling")
            return GangOutcome(rejected=(status, message, frozenset({"Coscheduling"})))

        if len(placed) < need:
            tx.discard()  # Unreserve and forget every member placed, newest first
            first = next((d for _, _, d in failed if d is not None), None)
            unplaced = [e.pod for e, _, _ in failed][: need - len(placed)]
            message = (
                f"gang {group.key}: {len(placed)}/{need} members placeable"
                f"{_shortfall(unplaced, [d for _, _, d in failed])}"
            )
            if first is not None:
                message += f"; {first.message()}"
            rejectors = frozenset(p for _, _, d in failed if d for p in d.unschedulable_plugins)
            return GangOutcome(
                rejected=(Status(Code.UNSCHEDULABLE, message), message, rejectors),
                retry_soon=retry_soon,
            )

        if victims:
            # Job-level preemption: the plan placed the gang only with the victims gone.
            plan = [(p.entry.pod, p.node) for p in placed]
            tx.discard()
            return GangOutcome(
                failed=[(p.entry, Status(), None) for p in placed] + failed,
                victims=list(victims.values()),
                nominations=plan + holds,
            )

        if group.min_executors and placed:
            missing = self._missing_executors(tx, group, fwk, placed)
            if missing:
                tx.discard()
                message = f"gang {group.key}: {missing}"
                status = Status(Code.UNSCHEDULABLE, message)
                return GangOutcome(rejected=(status, message, frozenset({"Coscheduling"})))

        tx.commit()
        return GangOutcome(placed=placed, failed=failed)

    def _preempt_for(
        self,
        tx: Transaction,
        fwk: Framework,
        state: CycleState,
        pod: PodInfo,
        diagnosis: Diagnosis,
        members: set[str],
        victims: dict[str, Victim],
        holds: list[tuple[PodInfo, str]],
    ) -> tuple[str | None, Status]:
        """Run PostFilter for one member inside the gang's transaction; take its victims
        off their nodes in the transaction. Returns the node it nominated (or None) and
        the PostFilter's status, whose message goes into the member's diagnosis as for a
        single pod ("reclaim for queue b starts after 30s of waiting")."""
        result, status = fwk.run_post_filter(state, pod, diagnosis)
        if status.message:
            diagnosis.post_filter_message = status.message
        if not status.ok or result is None or not result.nominated_node:
            return None, status
        if any(v.pod.uid in members for v in result.victims):
            return None, status  # never preempt the gang's own members
        for victim in result.victims:
            if not tx.is_evicted(victim.pod.uid) and victim.pod.uid in self.cluster.placed:
                tx.evict(victim.pod, victim.reason)
                victims[victim.pod.uid] = victim
        for stand_in, node in result.holds:
            # Room a migration plan keeps for the pods it moves: the next members must
            # not take it, and it is nominated with the members when the plan commits.
            tx.nominate(stand_in, node)
            holds.append((stand_in, node))
        return result.nominated_node, status

    def _missing_executors(
        self, tx: Transaction, group: Group, fwk: Framework, placed: list[Placement]
    ) -> str:
        """Spark driver-first what-if: would `min_executors` executors of the shape left
        in minResources fit next to what was just placed? Returns why not ("" if so)."""
        existing = len(group.members) - 1  # members other than the driver already exist
        count = group.min_executors - max(0, existing)
        if count <= 0 or not group.min_resources:
            return ""
        driver = placed[0].entry.pod
        left = {
            r: max(0, amount - sum(p.entry.pod.requests.get(r, 0) for p in placed))
            for r, amount in group.min_resources.items()
        }
        shape = {r: -(-amount // count) for r, amount in left.items() if amount}
        spec = msgspec.structs.replace(
            driver.pod.spec,
            containers=[
                Container(
                    name="executor",
                    resources=ResourceRequirements(
                        requests={r: (f"{v}m" if r == CPU else v) for r, v in shape.items()}
                    ),
                )
            ],
            init_containers=[],
            overhead={},
            node_name="",
        )
        mark = tx.mark()
        try:
            for i in range(count):
                meta = ObjectMeta(
                    name=f"{group.name}-phantom-executor-{i}",
                    namespace=group.namespace,
                    uid=f"shoal-phantom/{group.key}/{i}",
                    labels=dict(driver.labels),
                )
                phantom = PodInfo(Pod(metadata=meta, spec=spec), timestamp=driver.timestamp)
                node, _, _ = self.algorithm.schedule_pod(fwk, CycleState(), phantom)
                if node is None:
                    return (
                        f"the driver fits but only {i}/{count} minimum executors would fit "
                        f"(each {', '.join(f'{r}={v}' for r, v in shape.items())})"
                    )
                tx.assume(phantom, node)
        finally:
            tx.rollback(mark)
        return ""
