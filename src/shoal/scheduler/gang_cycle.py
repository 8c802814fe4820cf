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

Required topology: a gang (with or without roles) or a role with a required level that
finds no domain with room is given the domains that would hold it with lower-priority
pods preempted (`_preemptible_capacity`, an upper bound), fewest to evict first; its
victims are then searched inside that domain only, and the next domain is tried if the
search cannot give it its minimum there (a role's: `_Trial`). Nothing is evicted unless
the whole minimum fits. The gang's domains are judged without its members' own
nominations (the room preemption made for them is theirs), so a gang coming back once
its victims are gone finds that room as things are, without a second estimate.

A gang (or role) already partly placed is held where it is (`HeldDomains`): members
placed after the minimum (elastic growth, members beyond a role's minimum) and
replacements of lost members keep to the required domain its placed members occupy (a
replacement's victims are searched there only) and try the preferred domains they span
first, lowest level first, without preempting there (a preference never blocks).

Sub-groups (roles): every role's minimum is placed first, role by role, each in its own
domain; a member preempts while its role is below its minimum (or the gang below
minMember), and each member first tries the node it was nominated to.

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
from shoal.cache.snapshot import Snapshot
from shoal.cache.transaction import Transaction
from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import Diagnosis
from shoal.framework.interfaces import Victim
from shoal.framework.runtime import Framework
from shoal.framework.status import Code, Status
from shoal.framework.types import Candidates, FilterResult
from shoal.gang.manager import Group, SubGroup, sub_group_of
from shoal.gang.topology import (
    DomainChoice,
    HeldDomains,
    Levels,
    choose_domains,
    choose_levels,
    domain_words,
    fitting_domains,
    largest_domain,
    members_per_node,
    preemption_domains,
)
from shoal.scheduler.algorithm import PlacementAlgorithm
from shoal.scheduler.requeue import retry_by
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
      `reclaimDelaySeconds`): retry the gang after its backoff, not on an event, and at
      `retry_by` at the latest (when the first such delay ends).
    """

    placed: list[Placement] = field(default_factory=list)
    failed: list[tuple[QueuedPod, Status, Diagnosis | None]] = field(default_factory=list)
    rejected: tuple[Status, str, frozenset[str]] | None = None
    victims: list[Victim] = field(default_factory=list)
    nominations: list[tuple[PodInfo, str]] = field(default_factory=list)
    retry_soon: bool = False
    retry_by: float | None = None


NO_ROOM_BY_PREEMPTION = "preempting lower-priority pods would not make room either"


@dataclass
class _Trial:
    """Which of its candidate domains each role is tried in (`pick`, by index), how many
    it has (`options`), and the role that fell short in the last try (`short`): a role
    placed by preemption may not fit the domain the estimate chose (victims the search
    may not take), and is then tried in the next one."""

    pick: dict[str, int] = field(default_factory=dict)
    options: dict[str, int] = field(default_factory=dict)
    short: str = ""

    def next_option(self) -> bool:
        """Move the role that fell short to its next domain; False when it has none."""
        role, self.short = self.short, ""
        if not role or self.pick.get(role, 0) + 1 >= self.options.get(role, 1):
            return False
        self.pick[role] = self.pick.get(role, 0) + 1
        return True


def _unresolvable(n: int, results: list[tuple[str, FilterResult]]) -> np.ndarray:
    """Per node: rejected by a filter as UnschedulableAndUnresolvable (preemption cannot
    help there), from the filters' results over all `n` nodes."""
    out = np.zeros(n, dtype=bool)
    for _, result in results:
        for failure in result.failures:
            if failure.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                out |= failure.nodes[:n]
    return out


def _earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


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


def _both(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    """Nodes in both sets (None: every node)."""
    if a is None:
        return b
    if b is None:
        return a
    both: np.ndarray = a & b
    return both


def _widest(snap: Snapshot, members: list[QueuedPod]) -> np.ndarray:
    """The element-wise largest request vector of `members` (with its pod slot): the
    shape a topology's capacity per node counts. Members of one template share their
    vector (`NodeTable.pod_vector`): then it is that one, with no stacking."""
    vectors = [snap.pod_vector(m.pod) for m in members]
    first = vectors[0]
    if all(v is first for v in vectors):
        return first
    widest: np.ndarray = np.max(vectors, axis=0)
    return widest


def _capacity(snap: Snapshot, shape: np.ndarray, passed: np.ndarray) -> np.ndarray:
    """Members of `shape` each node holds, 0 where the representative failed Filter."""
    capacity = members_per_node(snap, shape)  # a new array: zeroed in place
    if not passed.all():
        capacity[~passed] = 0
    return capacity


def _where(held: HeldDomains | None, who: str) -> str:
    """ "topo/rack r0 (where gang ml/train runs)", or "" when `held` pins nothing."""
    if held is None or held.pinned is None:
        return ""
    return f"{held.describe()} (where {who} runs)"


def _outside(diagnosis: Diagnosis, n: int, where: str) -> None:
    """Count the nodes a held member was not tried on in its explanation, naming the
    domain it is held to: "4 node(s) outside topo/rack r0 (where gang ml/train runs)"."""
    if diagnosis.candidates is None:
        return
    outside = n - diagnosis.candidates.size
    if outside > 0:
        diagnosis.reasons[f"node(s) outside {where}"] += outside


def _held_short(where: str, capacity: np.ndarray, count: int) -> str:
    """Why members held where their gang (or role) is placed do not fit there."""
    room = int(capacity.sum())
    return (
        f"held to {where}, where its placed members are: room there for {room} of the "
        f"{count} member(s) still to place"
    )


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
        dry_run: bool = False,
        prefer: np.ndarray | None = None,
    ) -> GangOutcome:
        """`dry_run`: decide, then take the placements back (the outcome still says
        where the members would go; node shards' what-if). `prefer`: a mask of node rows
        each member tries first (the what-if: the nodes of the shards held)."""
        entries.sort(key=lambda e: (-e.pod.priority, e.pod.timestamp, e.pod.key))
        need = group.needed()
        snap = self.algorithm.snapshot
        snap.refresh()
        if need > 0 and group.min_resources:
            rejected = self._min_resources_rejection(group)
            if rejected is not None:
                return GangOutcome(rejected=rejected)
        # Node sets to try the gang's minimum in, in turn, each with whether its members
        # may preempt there (not in the domains a preference merely favours).
        candidates: list[tuple[np.ndarray | None, bool]] = [(None, True)]
        levels = self._levels(group)
        if need > 0 and levels.problem:
            message = f"gang {group.key}: {levels.problem}"
            status = Status(Code.UNSCHEDULABLE, message, plugin="Coscheduling")
            return GangOutcome(rejected=(status, message, frozenset({"Coscheduling"})))
        if need > 0 and levels:
            # Its members' own nominations (from job-level preemption) must not hide the
            # room they were made for (a no-op for members without one).
            with Transaction(self.cluster) as unheld:
                for e in entries:
                    unheld.clear_nomination(e.pod)
                found = self._gang_domains(entries, group, fwk, need, may_preempt)
            if isinstance(found, str):
                message = f"gang {group.key}: {found}"
                status = Status(Code.UNSCHEDULABLE, message, plugin="Coscheduling")
                return GangOutcome(rejected=(status, message, frozenset({"Coscheduling"})))
            candidates = found

        if group.sub_groups:
            # Role by role, in the order the PodGroup lists them (a role's members are
            # placed together, each role in its own domain, after the ones before it);
            # every role's minimum first, then the members beyond the minimums.
            order = {name: i for i, name in enumerate(group.sub_groups)}
            entries.sort(key=lambda e: order.get(sub_group_of(e.pod), len(order)))
            wanted = {name: group.sub_group_needed(name) for name in group.sub_groups}
            seen: Counter[str] = Counter()
            minimums: list[QueuedPod] = []
            beyond: list[QueuedPod] = []
            for e in entries:
                role = sub_group_of(e.pod)
                seen[role] += 1
                (minimums if seen[role] <= wanted.get(role, 0) else beyond).append(e)
            entries[:] = minimums + beyond
        outcome = GangOutcome()
        retry_soon = False
        retry_at: float | None = None
        for rows, preempt in candidates:
            trial = _Trial()
            while True:
                tx = Transaction(self.cluster)
                try:
                    outcome = self._place(
                        tx,
                        entries,
                        group,
                        fwk,
                        now,
                        need,
                        rows,
                        may_preempt and preempt,
                        trial,
                        dry_run,
                        prefer,
                    )
                finally:
                    if not tx.closed:
                        tx.discard()
                retry_soon = retry_soon or outcome.retry_soon
                retry_at = _earliest(retry_at, outcome.retry_by)
                if not trial.next_option():
                    break
            if outcome.rejected is None:
                return outcome
            outcome.retry_soon = retry_soon
            outcome.retry_by = retry_at
            # The next domain is tried when this one fell short: with roles, when a role
            # did (the gang's domain held it, a role's sub-domain did not); without, when
            # the victim search could not make the room the estimate promised; always
            # after a domain only preferred (where the gang already is).
            if (
                preempt
                and group.sub_groups
                and not outcome.rejected[1].startswith(f"gang {group.key}: sub-group ")
            ):
                return outcome
        return outcome

    def _gang_domains(
        self,
        entries: list[QueuedPod],
        group: Group,
        fwk: Framework,
        need: int,
        may_preempt: bool,
    ) -> list[tuple[np.ndarray | None, bool]] | str:
        """The node sets (domains of the gang's topology) to try the gang in, in turn,
        each with whether its members may preempt there, or why there is none. With
        roles and a required level: every domain that holds the gang, smallest first (a
        domain may still lack room for each role inside its own sub-domain); without
        roles, the one chosen. With a required level, when none holds it as things are
        and its members may preempt: those that would with lower-priority pods
        preempted, fewest to evict first (job-level preemption then makes the room
        inside one). The estimate runs only then: a gang that fits costs nothing more.

        A gang partly placed (members lost and re-created, or a minimum raised) is held
        where it is (`HeldDomains`): only the required domain its placed members occupy
        is considered, for placing and for preempting, and the preferred domains they
        span are tried first (without preempting there), lowest level first."""
        snap = self.algorithm.snapshot
        representative = entries[0].pod
        state = CycleState()
        fwk.run_pre_filter(state, representative)
        outcome = fwk.run_filters(state, representative, Candidates.all(snap.n))
        shape = _widest(snap, entries[:need])
        capacity = _capacity(snap, shape, outcome.passed)
        levels = self._levels(group)
        required, preferred = levels.required, levels.preferred
        held, _ = self._held(group)
        pinned = held.pinned if held is not None else None
        where = held.describe() if held is not None else ""
        if pinned is not None:
            capacity = np.where(pinned, capacity, 0)
        first = self._preferred_first(held, pinned, capacity, need)
        choice = self._choose(required, preferred, capacity, need)
        if choice.rows is not None:
            if group.sub_groups and required:
                fitting = fitting_domains(snap, required, capacity, need)
                found = [c.rows for c in fitting] or [choice.rows]
            else:
                found = [choice.rows]
            return first + [(_both(rows, pinned), True) for rows in found]
        why = _held_short(where, capacity, need) if pinned is not None else choice.message
        if not (required and may_preempt):
            return why
        room = self._preemptible_capacity(fwk, representative, shape, group, outcome.results)
        if room is None:
            return why
        if pinned is not None:
            room = np.where(pinned, room, 0)
        options = self._preemption_choices(required, preferred, capacity, room, need)
        if not options:
            return f"{why}; {self._no_room(required, room, where)}"
        return [(_both(rows, pinned), True) for rows in options]

    def _levels(self, group: Group) -> Levels:
        """The gang's topology levels now (a Volcano PodGroup's are over the HyperNode
        tiers there are now; a Kueue preferred level climbs the Topologies there are)."""
        snap = self.algorithm.snapshot
        return group.levels(snap.hypernodes, snap.kueue_topologies)

    def _held(self, group: Group) -> tuple[HeldDomains | None, dict[str, HeldDomains]]:
        """Where the group's placed members are (`HeldDomains`), for the gang when it has
        a topology level, and for each role that has one (its own members). Members
        being evicted do not count: they are leaving."""
        levels = self._levels(group)
        gang_levels = bool(levels.required or levels.preferred)
        roles = {
            name: sub
            for name, sub in group.sub_groups.items()
            if sub.topology_required or sub.topology_preferred
        }
        if not gang_levels and not roles:
            return None, {}
        snap = self.algorithm.snapshot
        n = snap.n
        placed, evicting, row_of = self.cluster.placed, self.cluster.evicting, snap.row_of
        rows: list[int] = []
        by_role: dict[str, list[int]] = {}
        for uid, pod in group.members.items():
            record = placed.get(uid)
            if record is None or uid in evicting:
                continue
            row = row_of.get(record.node)
            if row is None or row >= n:
                continue
            rows.append(row)
            if roles:
                by_role.setdefault(sub_group_of(pod), []).append(row)
        gang = (
            HeldDomains(
                snap,
                levels.required,
                levels.preferred,
                np.array(rows, dtype=np.intp),
            )
            if gang_levels
            else None
        )
        return gang, {
            name: HeldDomains(
                snap,
                sub.topology_required,
                sub.topology_preferred,
                np.array(by_role.get(name, []), dtype=np.intp),
            )
            for name, sub in roles.items()
        }

    @staticmethod
    def _held_rows(
        base: np.ndarray | None,
        gang: HeldDomains | None,
        role: HeldDomains | None,
        group: Group,
        role_name: str,
        pod: PodInfo,
    ) -> tuple[np.ndarray | None, list[tuple[tuple[object, ...], np.ndarray]], str]:
        """Where a member beyond the minimum (or a replacement) may go: the nodes of
        `base` inside the required domains its role and its gang are placed in (None:
        any), the preferred domains they span to try first (the role's, then the
        gang's, lowest level first; each keyed so that one found full is not tried
        again for members of the same shape), and the domains named when it does not
        fit."""
        if gang is None and role is None:
            return base, [], ""  # no topology level: nothing to hold
        pinned = base
        for scope in (gang, role):
            if scope is not None:
                pinned = _both(pinned, scope.pinned)
        shape = (role_name, tuple(sorted(pod.requests.items())))
        tiers: list[tuple[tuple[object, ...], np.ndarray]] = []
        for name, scope in (("role", role), ("gang", gang)):
            if scope is None:
                continue
            for level, mask in scope.tiers():
                rows = _both(mask, pinned)
                if rows is not None:
                    tiers.append(((shape, name, level, scope.version), rows))
        where = " and ".join(
            w
            for w in (
                _where(gang, f"gang {group.key}"),
                _where(role, f"sub-group {role_name}"),
            )
            if w
        )
        return pinned, tiers, where

    @staticmethod
    def _preferred_first(
        held: HeldDomains | None,
        within: np.ndarray | None,
        capacity: np.ndarray,
        count: int,
    ) -> list[tuple[np.ndarray | None, bool]]:
        """The preferred domains the placed members already span (lowest level first,
        inside `within`) that hold `count` more members as things are: tried first,
        without preempting there."""
        if held is None:
            return []
        out: list[tuple[np.ndarray | None, bool]] = []
        for _, tier in held.tiers():
            rows = _both(tier, within)
            if rows is not None and int(capacity[rows].sum()) >= count:
                out.append((rows, False))
        return out

    def _choose(
        self,
        required: str,
        preferred: tuple[str, ...],
        capacity: np.ndarray,
        count: int,
    ) -> DomainChoice:
        snap = self.algorithm.snapshot
        if preferred:
            return choose_levels(snap, required, preferred, capacity, count)
        return choose_domains(snap, required, capacity, count, True)

    def _preemption_choices(
        self,
        required: str,
        preferred: tuple[str, ...],
        capacity: np.ndarray,
        room: np.ndarray,
        count: int,
    ) -> list[np.ndarray | None]:
        """Domains that would hold `count` members with lower-priority pods preempted
        (`room`), least to evict first (with preferred levels: the one `choose_levels`
        picks on that room)."""
        snap = self.algorithm.snapshot
        if preferred:
            choice = choose_levels(snap, required, preferred, room, count)
            return [choice.rows] if choice.rows is not None else []
        return [c.rows for c in preemption_domains(snap, required, capacity, room, count)]

    def _no_room(self, required: str, room: np.ndarray, where: str = "") -> str:
        """Why preempting does not help either, with what the largest domain (or the
        one the members are held to, `where`) would hold with lower-priority pods
        preempted (`room`)."""
        if not required:
            return NO_ROOM_BY_PREEMPTION
        if where:
            most = int(room.sum())
            unit = "member" if most == 1 else "members"
            return f"{NO_ROOM_BY_PREEMPTION}: {where} would hold {most} {unit}"
        most = largest_domain(self.algorithm.snapshot, required, room)
        unit = "member" if most == 1 else "members"
        return (
            f"{NO_ROOM_BY_PREEMPTION}: the largest {domain_words(required)} would hold "
            f"{most} {unit}"
        )

    def _preemptible_capacity(
        self,
        fwk: Framework,
        pod: PodInfo,
        shape: np.ndarray,
        group: Group,
        results: list[tuple[str, FilterResult]],
    ) -> np.ndarray | None:
        """Members of `shape` each node would hold with every lower-priority pod on it
        gone (not the gang's own, nor pods being bound or already being evicted), on the
        nodes where `pod`'s rejection is one preemption may resolve (`results`: its
        filters over every node): the room job-level preemption could make, an upper
        bound the victim search then settles. None when `pod` may not preempt."""
        if not fwk.plugins.post_filter or pod.pod.spec.preemption_policy == "Never":
            return None
        snap = self.algorithm.snapshot
        n = snap.n
        cluster = self.cluster
        table = cluster.table
        free = snap.free[:n]
        width = free.shape[1]
        evicting, members, row_of = cluster.evicting, group.members, table.row_of
        rows: list[int] = []
        vectors: list[np.ndarray] = []
        for uid, record in cluster.placed.items():
            if (
                record.assumed
                or record.pod.priority >= pod.priority
                or uid in evicting
                or uid in members
            ):
                continue
            row = row_of.get(record.node)
            if row is not None and row < n:
                rows.append(row)
                vectors.append(table.pod_vector(record.pod)[:width])
        if not rows:
            return None  # nothing here is of lower priority: preemption cannot help
        room = free.copy()
        np.add.at(room, np.array(rows, dtype=np.intp), np.stack(vectors))
        eligible = ~_unresolvable(n, results)
        return np.where(eligible, members_per_node(snap, shape, room), 0)

    def _sub_domain(
        self,
        fwk: Framework,
        sub: SubGroup,
        mates: list[QueuedPod],
        count: int,
        restrict: np.ndarray | None,
        group: Group,
        may_preempt: bool,
        held: HeldDomains | None = None,
    ) -> list[tuple[np.ndarray | None, str, bool]]:
        """The node sets a role may use, best first, each with why it has none (rows
        None) and whether its members may preempt there: a domain of its topology level
        that holds `count` of its members as the cluster is now (with the roles placed
        before it in this transaction), inside the gang's own domain (`restrict`); else,
        when its members may preempt, the domains that would hold them with
        lower-priority pods preempted (fewest to evict first). [(None, why, _)] when
        there is none. A role partly placed (`held`: a replacement of a lost member)
        keeps to the required domain its placed members occupy, and tries the preferred
        domains they span first (without preempting there)."""
        snap = self.algorithm.snapshot
        snap.refresh()
        n = snap.n
        representative = mates[0].pod
        state = CycleState()
        fwk.run_pre_filter(state, representative)
        outcome = fwk.run_filters(state, representative, Candidates.all(n))
        shape = _widest(snap, mates[: max(count, 1)])
        capacity = _capacity(snap, shape, outcome.passed)
        pinned = held.pinned if held is not None else None
        where = held.describe() if held is not None else ""
        restrict = _both(None if restrict is None else restrict[:n], pinned)
        if restrict is not None:
            capacity = np.where(restrict, capacity, 0)
        required, preferred = sub.topology_required, sub.topology_preferred
        first = [
            (rows, "", False) for rows, _ in self._preferred_first(held, restrict, capacity, count)
        ]
        choice = self._choose(required, preferred, capacity, count)
        if choice.rows is not None:
            return [*first, (_both(choice.rows, restrict), choice.message, True)]
        why = _held_short(where, capacity, count) if pinned is not None else choice.message
        room = (
            self._preemptible_capacity(fwk, representative, shape, group, outcome.results)
            if may_preempt
            else None
        )
        if room is None:
            return [(None, why, True)]
        if restrict is not None:
            room = np.where(restrict, room, 0)
        options = self._preemption_choices(required, preferred, capacity, room, count)
        if not options:
            return [(None, f"{why}; {self._no_room(required, room, where)}", True)]
        return [(_both(rows, restrict), "", True) for rows in options]

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
        trial: _Trial | None = None,
        dry_run: bool = False,
        prefer: np.ndarray | None = None,
    ) -> GangOutcome:
        # A retried gang competes with others for room, not with its own nominations.
        # With roles, a member's nomination is given up only once it has been tried:
        # each first tries the room preemption made for it (members of different shapes
        # and domains), and the room made for the others stays theirs meanwhile.
        # Every member is attempted now, also those the loop below never reaches once
        # the minimum is out of reach: waiting (e.g. reclaim's delay) counts from here.
        by_member = bool(group.sub_groups)
        for e in entries:
            if not by_member:
                tx.clear_nomination(e.pod)
            if e.pod.initial_attempt_time is None:
                e.pod.initial_attempt_time = now
        trial = trial if trial is not None else _Trial()
        placed: list[Placement] = []
        failed: list[tuple[QueuedPod, Status, Diagnosis | None]] = []
        victims: dict[str, Victim] = {}
        holds: list[tuple[PodInfo, str]] = []  # migration plans' stand-ins (see below)
        member_uids = set(group.members)
        retry_soon = False
        retry_at: float | None = None
        # Sub-groups (roles): each must reach its own minimum, inside its own domain.
        sub_need = {name: group.sub_group_needed(name) for name in group.sub_groups}
        sub_placed: Counter[str] = Counter()
        sub_domain: dict[str, tuple[np.ndarray | None, str, bool]] = {}
        # Where the gang and each role with a level are placed already (grown as
        # members are placed here): later members are held there (`_held_rows`).
        snap = self.algorithm.snapshot
        # The rows of the gang's domain, found once: every member of the minimum is
        # placed inside it (read-only: the candidates of each member's cycle).
        restrict_rows = None
        if restrict is not None:
            restrict_rows = np.flatnonzero(restrict[: snap.n])
            restrict_rows.flags.writeable = False
        gang_held, role_held = self._held(group)
        # What a member that does not fit names: where the gang (or its role) was
        # placed before this transaction (the ones placed here may yet be undone).
        gang_where = _where(gang_held, f"gang {group.key}")
        role_where = {name: _where(h, f"sub-group {name}") for name, h in role_held.items()}
        full: set[tuple[object, ...]] = set()  # preferred domains found full, per shape
        # Members of each role not tried yet, and the first diagnosis of each role's.
        left: Counter[str] = (
            Counter(sub_group_of(e.pod) for e in entries) if group.sub_groups else Counter()
        )
        why_role: dict[str, Diagnosis] = {}
        hopeless = ""  # a role that can no longer reach its minimum
        for i, e in enumerate(entries):
            if len(placed) < need and len(placed) + len(entries) - i < need:
                failed.extend((rest, Status(Code.UNSCHEDULABLE), None) for rest in entries[i:])
                break  # the minimum can no longer be reached
            pod = e.pod
            state = CycleState()
            minimum = len(placed) < need
            restrict_now = restrict if minimum else None
            role = sub_group_of(pod) if group.sub_groups else ""
            sub = group.sub_groups.get(role)
            held = role_held.get(role)
            short = sub is not None and sub_placed[role] < sub_need[role]
            if role:
                left[role] -= 1
            node: str | None = None
            diagnosis: Diagnosis | None = None
            status = Status()
            preempt_here = True
            tiers: list[tuple[tuple[object, ...], np.ndarray]] = []
            where = gang_where
            if short and sub is not None and (sub.topology_required or sub.topology_preferred):
                if role not in sub_domain:
                    mates = [x for x in entries[i:] if sub_group_of(x.pod) == role]
                    # Judged without the members' nominations, as the gang's domains
                    # are: the room preemption made for them is theirs.
                    mark = tx.mark()
                    for x in entries:
                        tx.clear_nomination(x.pod)
                    options = self._sub_domain(
                        fwk,
                        sub,
                        mates,
                        sub_need[role],
                        _both(restrict, gang_held.pinned if gang_held is not None else None),
                        group,
                        may_preempt,
                        held,
                    )
                    tx.rollback(mark)
                    trial.options[role] = len(options)
                    sub_domain[role] = options[min(trial.pick.get(role, 0), len(options) - 1)]
                mask, problem, preempt_here = sub_domain[role]
                if mask is None:
                    status = Status(Code.UNSCHEDULABLE, problem, plugin="Coscheduling")
                restrict_now = mask
                where = role_where.get(role, "") or where
            elif not (minimum and restrict is not None):
                # Not the gang's minimum in the domains chosen for it: held where the
                # gang (and the member's role) already is.
                restrict_now, tiers, where = self._held_rows(
                    restrict_now, gang_held, held, group, role, pod
                )
            if status.ok:
                try:
                    for key, rows in tiers:
                        if key in full:
                            continue
                        preferred_state = CycleState()
                        node, _, _ = self.algorithm.schedule_pod(fwk, preferred_state, pod, rows)
                        if node is not None:
                            state = preferred_state
                            break
                        full.add(key)  # not for the next members of this shape either
                    if node is None and prefer is not None:
                        preferred_state = CycleState()
                        node, _, _ = self.algorithm.schedule_pod(
                            fwk, preferred_state, pod, _both(restrict_now, prefer)
                        )
                        if node is not None:
                            state = preferred_state
                    if node is None:
                        node, status, diagnosis = self.algorithm.schedule_pod(
                            fwk,
                            state,
                            pod,
                            restrict_now,
                            restrict_rows if restrict_now is restrict else None,
                        )
                except Exception as err:  # a plugin bug must not stop the scheduler
                    node, diagnosis = None, None
                    status = Status.error(f"scheduling cycle failed: {type(err).__name__}: {err}")
            if node is None and diagnosis is not None and where:
                _outside(diagnosis, snap.n, where)
            if (
                node is None
                and may_preempt
                and preempt_here
                and (len(placed) < need or short)
                and diagnosis is not None
                and status.rejected
                and fwk.plugins.post_filter
            ):
                node, post = self._preempt_for(
                    tx, fwk, state, pod, diagnosis, member_uids, victims, holds
                )
                retry_soon = retry_soon or post.code == Code.PENDING
                retry_at = _earliest(retry_at, retry_by(post, now))
                if node is not None:
                    state = CycleState()
                    fwk.run_pre_filter(state, pod)  # fresh state for Reserve on that node
            if by_member:
                tx.clear_nomination(pod)
            if node is not None:
                mark = tx.mark()
                tx.assume(pod, node)
                # kube runs Unreserve after a failed Reserve too; so does taking the gang
                # back.
                tx.on_undo(functools.partial(fwk.run_unreserve, state, pod, node))
                status = fwk.run_reserve(state, pod, node)
                if status.ok:
                    placed.append(Placement(e, node, state))
                    if role:
                        sub_placed[role] += 1
                    row = snap.row_of.get(node)
                    if row is not None:
                        for grows in (gang_held, held):
                            if grows is not None:
                                grows.add(row)
                    continue
                tx.rollback(mark)
                diagnosis = None
            failed.append((e, status, diagnosis))
            if short:
                if diagnosis is not None:
                    why_role.setdefault(role, diagnosis)
                if sub_placed[role] + left[role] < sub_need[role]:
                    # This role cannot reach its minimum: neither can the gang.
                    hopeless = role
                    failed.extend(
                        (rest, Status(Code.UNSCHEDULABLE), None) for rest in entries[i + 1 :]
                    )
                    break

        short_roles = [name for name, wanted in sub_need.items() if sub_placed[name] < wanted]
        if short_roles:
            tx.discard()  # a role below its minimum: the gang does not start
            name = hopeless or short_roles[0]
            trial.short = name
            why = sub_domain.get(name, (None, "", True))[1]
            message = (
                f"gang {group.key}: sub-group {name}: {sub_placed[name]}/{sub_need[name]} "
                f"members placeable" + (f" ({why})" if why else "")
            )
            first = why_role.get(name)
            if first is not None:
                message += f"; {first.message()}"
            status = Status(Code.UNSCHEDULABLE, message, plugin="Coscheduling")
            rejectors = frozenset(
                {"Coscheduling", *(p for _, _, d in failed if d for p in d.unschedulable_plugins)}
            )
            return GangOutcome(
                rejected=(status, message, rejectors), retry_soon=retry_soon, retry_by=retry_at
            )

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
                retry_by=retry_at,
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

        if dry_run:
            tx.discard()  # Unreserve and forget every member placed: only where they'd go
        else:
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
            # The executors' shape is minResources' (the driver's claims would tie each
            # phantom to the driver's devices, and leave plans behind for made-up uids).
            resource_claims=[],
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
