"""Node shards: several active replicas, each binding only to the nodes it holds.

Nodes are split into `slots` shards by a hash of their name (`shoal.cache.node_fence`).
Who holds which shard is written in one Lease, `shoal-node-shards` (annotation
`shoal.io/node-shards`: the slot count and a holder per slot), changed only by updates
with its resourceVersion as a precondition, so two replicas never both win a shard.
Every replica that schedules also renews a member Lease of its own (`shoal-member-...`)
saying who it is and which schedulerNames it serves. All of them live in the leader
election namespace and are shared by every Shoal deployment of the cluster, whatever
its schedulerNames or leader-election Lease: Shoal replicas that share nodes always
coordinate, and none overcommits a node because another one runs.

The rules (client-go's leader election, per shard):

* A replica binds to a node only while it holds the node's shard and its member Lease
  was renewed less than `renew_deadline` ago (checked before each Binding is sent).
* It takes a shard that nobody holds, or whose holder's member Lease has not changed for
  `lease_duration` as measured on its own clock from when it observed the last change
  (the holder stopped binding `renew_deadline < lease_duration` after its last renewal);
  a holder that shares our leader-election Lease while we lead is not binding either.
* It gives a shard back (holder "") only after it stopped deciding on its nodes and no
  Binding to them is in flight. A shard taken over is used once our pod watch has caught
  up with the write that took it (so the last holder's binds are in the cache), or after
  leaseDuration when nothing newer arrives.
* Each replica aims at `ceil(slots / live members)` shards: a replica that joins gets
  shards from the others, a replica that dies leaves its shards to be taken over.

Loans (borrowing shards, Volcano's "soft" shard mode): a gang that fits in no single
replica's shards but in the whole cluster asks its home replica to borrow the shards it
would use (`want`). The map holds at most one loan at a time (`Loan`: the borrower, the
slots, their holders when asked), added and removed by the same resourceVersion-checked
updates, so borrowers are served one after another and two can never each hold half of
what the other needs. While a loan stands:

* the holders of its slots give them back through the ordinary give-back path (fenced
  at once, written free once no Binding to them is in flight) even below their target,
  and nobody but the borrower claims them when free;
* the borrower claims them (the ordinary claim: usable once its pod watch caught up)
  and gives nothing back; its lenders stay in the routing, so pods do not move;
* it ends when the borrower withdraws it (the gang placed and its binds answered, or no
  longer asking) or after `loan_seconds` on the borrower's clock (a loan not used is
  returned; the borrower then asks again only `loan_seconds` later, else two rounds
  later, so that others get their turn); a loan whose
  borrower died, or that others have seen for `loan_seconds + lease_duration`, may be
  removed by anyone. Afterwards the ordinary balancing toward `ceil(slots / live)`
  brings the shards back, the borrowed ones given back first.

Pods are routed so that replicas do not decide the same things twice: the home replica
of a pod is chosen by rendezvous hashing over the live holders that serve its
schedulerName, keyed by its tenant queue when that queue (or one above it) has a max
(the max then holds across replicas), else its gang (placed whole), else the pod. A pod
its home found unschedulable (PodScheduled=False, reason Unschedulable) passes to the
next replica in its order after `handoff_seconds`, to the one after that after twice as
long, and so on.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from shoal.cache.node_table import node_hash
from shoal.drivers.kube.client import JSON, ApiError, KubeClient
from shoal.drivers.kube.resources import LEASES
from shoal.drivers.kube.status import micro_time

__all__ = [
    "CONFIG_ANNOTATION",
    "DEFAULT_SLOTS",
    "MAP_NAME",
    "Loan",
    "Member",
    "Routing",
    "ShardKeeper",
    "ShardSettings",
    "ShardState",
    "ShardTable",
    "home_order",
    "loan_counts",
    "loan_text",
    "member_lease_names",
    "plan",
    "read_leases",
    "slot_of",
    "unschedulable_since",
]

log = logging.getLogger("shoal.kube.shards")

MAP_NAME = "shoal-node-shards"
MEMBER_PREFIX = "shoal-member-"
ROLE_LABEL = "shoal.io/node-shards"  # "map" or "member"
MAP_ANNOTATION = "shoal.io/node-shards"
NAMES_ANNOTATION = "shoal.io/scheduler-names"
LEADER_ANNOTATION = "shoal.io/leader-lease"
# Published on each member Lease every round (shoal get shards shows them).
RATE_ANNOTATION = "shoal.io/binds-per-second"
CONFLICTS_ANNOTATION = "shoal.io/conflicts"
# The replica's effective KubeSchedulerConfiguration (profiles, extenders; compact JSON),
# so `shoal explain` judges with what the running scheduler runs, not a default.
CONFIG_ANNOTATION = "shoal.io/config"
DEFAULT_SLOTS = 16


@dataclass(frozen=True)
class ShardSettings:
    identity: str = "shoal"
    namespace: str = "kube-system"
    slots: int = DEFAULT_SLOTS  # used when this replica creates the shard map
    scheduler_names: tuple[str, ...] = ()
    leader_lease: str = ""  # "namespace/name" when leader election is on
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    handoff_seconds: float = 10.0
    config: str = ""  # CONFIG_ANNOTATION's value
    # How long a loan of shards stands at most, on the borrower's clock (0: twice
    # lease_duration plus four rounds).
    loan_seconds: float = 0.0

    @property
    def loan_limit(self) -> float:
        if self.loan_seconds > 0:
            return self.loan_seconds
        return 2 * self.lease_duration + 4 * self.retry_period

    def __post_init__(self) -> None:
        if not 1 <= self.slots <= 1024:
            raise ValueError(f"node shards: slots must be 1..1024, got {self.slots}")


@dataclass(frozen=True)
class Member:
    identity: str
    scheduler_names: frozenset[str]
    leader_lease: str = ""


MEMBER_LEASES = 32  # replicas with node shards at most: one member Lease each


def member_lease_names() -> list[str]:
    """The member Leases' names: a fixed set (`shoal-member-0` ..), so that RBAC can grant
    updates on them by name and on no other Lease of the namespace."""
    return [f"{MEMBER_PREFIX}{k}" for k in range(MEMBER_LEASES)]


def _rank(member: str, key: str) -> bytes:
    return hashlib.blake2b(f"{member}\0{key}".encode(), digest_size=8).digest()


def home_order(key: str, members: Iterable[str]) -> list[str]:
    """Rendezvous hashing: the members in the order they take `key` (first = home).
    A member joining or leaving moves only the keys it wins or held."""
    return sorted(members, key=lambda m: _rank(m, key), reverse=True)


# ---- the shard table and the plan --------------------------------------------------------


@dataclass(frozen=True)
class Loan:
    """Shards a replica asked the others to lend it (one loan in the map at a time)."""

    to: str  # the borrower
    slots: tuple[int, ...]  # what it asked for (held by others when it asked)
    lenders: tuple[str, ...]  # their holders then (kept in the routing meanwhile)
    id: str  # unique per request: every replica times it on its own clock
    why: str = ""  # what it is for (a gang's key), for readyz and `shoal get shards`

    def encode(self) -> dict[str, object]:
        return {
            "to": self.to,
            "slots": list(self.slots),
            "lenders": list(self.lenders),
            "id": self.id,
            "for": self.why,
        }

    @staticmethod
    def decode(data: object, slots: int) -> Loan | None:
        """None when absent or unreadable (a loan is only a request: dropping it is
        safe)."""
        if not isinstance(data, dict):
            return None
        try:
            asked = tuple(sorted({int(x) for x in data["slots"]}))
            loan = Loan(
                to=str(data["to"]),
                slots=asked,
                lenders=tuple(str(x) for x in data.get("lenders") or ()),
                id=str(data["id"]),
                why=str(data.get("for") or ""),
            )
        except (KeyError, TypeError, ValueError):
            return None
        if not loan.to or not loan.id or not all(0 <= x < slots for x in asked):
            return None
        return loan


@dataclass
class ShardTable:
    """The decoded shard map: a holder per slot ("" = free), and the loan asked for."""

    slots: int
    holders: list[str]
    loan: Loan | None = None

    @staticmethod
    def decode(text: str) -> ShardTable:
        data = json.loads(text)
        slots = int(data["slots"])
        holders = [str(h) for h in data["holders"]]
        if slots < 1 or len(holders) != slots:
            raise ValueError(f"{slots} slots but {len(holders)} holders")
        return ShardTable(slots, holders, Loan.decode(data.get("loan"), slots))

    def encode(self) -> str:
        data: dict[str, object] = {"slots": self.slots, "holders": self.holders}
        if self.loan is not None:
            data["loan"] = self.loan.encode()
        return json.dumps(data, separators=(",", ":"))

    def held_by(self, identity: str) -> list[int]:
        return [s for s, h in enumerate(self.holders) if h == identity]


def plan(
    table: ShardTable,
    me: str,
    live: Collection[str],
    takeable: Collection[str],
    *,
    lent: Collection[int] = (),
    borrowing: Collection[int] = (),
    give_first: Collection[int] = (),
) -> tuple[list[int], list[int]]:
    """(slots to claim, slots to give back) for `me`: aim at ceil(slots / members) with
    the live members (`live`, us included). Free slots are claimed first, then those of
    holders in `takeable` (gone, or fenced by a leader lease we hold).

    Loans: `lent` are the slots of another replica's standing loan (given back if we
    hold them, whatever our target; never claimed); `borrowing` those of our own (claimed
    when free or takeable, and nothing is given back meanwhile). `give_first`: slots we
    borrowed, given back before the others once we are above our target."""
    members = set(live) | {me}
    target = math.ceil(table.slots / len(members))
    mine = table.held_by(me)
    if borrowing:
        return [
            s
            for s in sorted(borrowing)
            if table.holders[s] == "" or (table.holders[s] != me and table.holders[s] in takeable)
        ], []
    lent = set(lent)
    give = [s for s in mine if s in lent]
    keep = [s for s in mine if s not in lent]
    if len(keep) > target:
        # Give back the highest slots first (after borrowed ones): the same ones every
        # time, so a replica that could not give them back yet (binds in flight) keeps
        # its choice.
        first = set(give_first)
        order = sorted(s for s in keep if s not in first) + sorted(s for s in keep if s in first)
        return [], sorted(give + order[target:])
    free = [s for s, h in enumerate(table.holders) if h == "" and s not in lent]
    orphaned = [
        s for s, h in enumerate(table.holders) if h and h != me and h in takeable and s not in lent
    ]
    need = target - len(keep)
    return (free + orphaned)[:need], sorted(give)


# ---- routing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Routing:
    """Which pending pods this replica decides (see the module docstring). `members`
    None: routing is off (one replica, the simulator): every pod is ours."""

    me: str
    members: tuple[Member, ...] | None = None
    handoff_seconds: float = 10.0

    def order(self, key: str, scheduler_name: str) -> list[str]:
        """The replicas serving `scheduler_name` (all of them for "") in the order they
        take `key`."""
        assert self.members is not None
        serving = [
            m.identity
            for m in self.members
            if not scheduler_name or scheduler_name in m.scheduler_names
        ]
        return home_order(key, serving)

    def writes_status(self, key: str, scheduler_name: str) -> bool:
        """Does this replica write the status of the object decided under `key` (a
        PodGroup, a Queue)? Its home does; any replica when routing is off. Without a
        schedulerName, the home among all replicas."""
        if self.members is None:
            return True
        return self.order(key, scheduler_name)[:1] == [self.me]

    def mine(
        self, key: str, scheduler_name: str, unschedulable_since: float | None, now: float
    ) -> bool:
        """Is the pod ours to decide now? `unschedulable_since`: wall-clock time its
        home last reported it unschedulable (None: never)."""
        if self.members is None:
            return True
        order = self.order(key, scheduler_name)
        if self.me not in order:
            return False
        rank = order.index(self.me)
        if rank == 0:
            return True
        if unschedulable_since is None:
            return False
        return now - unschedulable_since >= rank * self.handoff_seconds


def unschedulable_since(raw: JSON) -> float | None:
    """When the pod's PodScheduled condition turned False with reason Unschedulable."""
    status = raw.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for condition in conditions if isinstance(conditions, list) else ():
        if (
            isinstance(condition, dict)
            and condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            stamp = condition.get("lastTransitionTime")
            if not stamp:
                return None
            try:
                return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
            except ValueError:
                return None
    return None


# ---- the keeper ---------------------------------------------------------------------------


@dataclass
class ShardState:
    """What the keeper last established (read by the backend on the I/O loop)."""

    slots: int = 1
    held: frozenset[int] = frozenset()  # slots we hold in the map
    usable: frozenset[int] = frozenset()  # held, settled and not being given back
    holders: dict[int, str] = field(default_factory=dict)
    members: tuple[Member, ...] = ()  # live members holding a shard
    last_renew: float = -math.inf  # monotonic send time of our last member-lease renewal
    conflicts: int = 0  # map updates that lost a race
    loan: Loan | None = None  # the loan standing in the map (ours or another's)


class ShardKeeper:
    """Renews this replica's member Lease and keeps its share of the shard map (see the
    module docstring). Runs on the I/O loop; `on_change` is told the new state."""

    def __init__(
        self,
        client: KubeClient,
        settings: ShardSettings,
        *,
        leading: Callable[[], bool] = lambda: False,
        binds_in_flight: Callable[[Collection[int], int], bool] = lambda slots, count: False,
        watch_caught_up: Callable[[int], bool] = lambda rv: True,
        on_change: Callable[[ShardState], None] = lambda state: None,
        on_round: Callable[[ShardState], None] = lambda state: None,
        binds: Callable[[], tuple[int, int]] = lambda: (0, 0),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.settings = settings
        self.leading = leading
        self.binds_in_flight = binds_in_flight
        self.watch_caught_up = watch_caught_up
        self.on_change = on_change
        self.on_round = on_round
        self.binds = binds  # (pods bound, Bindings refused as conflicts) so far
        self._last_binds: tuple[float, int] | None = None  # (when, pods bound) last round
        self.clock = clock
        self.state = ShardState()
        self._member: JSON | None = None
        self._observed: dict[str, tuple[str, float]] = {}  # identity -> (renewTime+rv, seen at)
        self._settling: dict[int, tuple[int, float]] = {}  # slot -> (map rv, taken at)
        self._releasing: set[int] = set()
        # Releasing shards with no Binding left, being written free now: no Binding may
        # start for them any more (see `may_bind`).
        self._freeing: set[int] = set()
        self.error = ""  # why the last round failed ("" when it did not)
        # Loans: what the core asks to borrow (key -> (slots, last asked)), when each
        # loan id was first seen, the slots we borrowed (given back first), and until
        # when we ask for no new loan (after one that was not used).
        self._wants: dict[str, tuple[frozenset[int], float]] = {}
        self._loan_seen: dict[str, float] = {}
        self._borrowed: set[int] = set()
        self._no_loan_until = -math.inf
        self._ending: tuple[Loan, bool, float] | None = None  # our loan, unused?, how long
        self.loans = 0  # loans asked for by this replica
        self.loans_unused = 0  # ... that ended by their time limit with the want still there

    # ---- loans (see the module docstring) --------------------------------------------

    def want(self, key: str, slots: Collection[int]) -> None:
        """The core's wish to borrow `slots` for `key` (a gang); empty: withdrawn. A wish
        not repeated within the loan time limit lapses."""
        if slots:
            self._wants[key] = (frozenset(slots), self.clock())
        else:
            self._wants.pop(key, None)

    def _live_wants(self) -> dict[str, frozenset[int]]:
        now, limit = self.clock(), self.settings.loan_limit
        for key, (_, asked) in list(self._wants.items()):
            if now - asked >= limit:
                del self._wants[key]
        return {key: slots for key, (slots, _) in self._wants.items()}

    def _loan_step(self, table: ShardTable, live: Collection[str]) -> bool:
        """Ask for a loan, end ours, or clear a dead one, in `table` (True: changed,
        to be written). Called with the map as read this round."""
        me, now, limit = self.settings.identity, self.clock(), self.settings.loan_limit
        wants = self._live_wants()
        loan = table.loan
        if loan is None:
            self._loan_seen.clear()
            if not wants or now < self._no_loan_until:
                return False
            key = next(iter(wants))
            ask = sorted(s for s in wants[key] if 0 <= s < table.slots and table.holders[s] != me)
            if not ask:
                return False
            lenders = sorted({table.holders[s] for s in ask if table.holders[s]})
            table.loan = Loan(me, tuple(ask), tuple(lenders), f"{me}/{uuid.uuid4().hex[:12]}", key)
            return True
        seen = self._loan_seen.setdefault(loan.id, now)
        for other in [i for i in self._loan_seen if i != loan.id]:
            del self._loan_seen[other]
        if loan.to == me:
            if loan.why in wants and now - seen < limit:
                return False
            self._ending = (loan, loan.why in wants, now - seen)
            table.loan = None
            return True
        if loan.to not in live or now - seen >= limit + self.settings.lease_duration:
            table.loan = None  # its borrower is gone, or it stood too long
            return True
        return False

    def _loan_ended(self) -> None:
        """Our loan's end is written: others get a turn. We ask again two rounds later
        (so each of them reads the map without a loan), a whole loan's time after one
        that was not used."""
        if self._ending is None:
            return
        loan, unused, stood = self._ending
        self._ending = None
        now = self.clock()
        self._no_loan_until = now + 2 * self.settings.retry_period
        if unused:
            self.loans_unused += 1
            self._no_loan_until = now + self.settings.loan_limit
            log.info(
                "node shards: the loan of shards %s for %s ends unused after %.0fs",
                _slots_text(loan.slots),
                loan.why,
                stood,
            )

    def _loan_active(self, loan: Loan | None) -> bool:
        if loan is None:
            return False
        seen = self._loan_seen.get(loan.id)
        limit = self.settings.loan_limit
        if loan.to != self.settings.identity:
            limit += self.settings.lease_duration
        return seen is not None and self.clock() - seen < limit

    # ---- the fence ------------------------------------------------------------------

    def may_bind(self, slot: int) -> str:
        """Why a Binding to a node of `slot` must not be sent now ("" when it may). A
        shard being given back still takes the Bindings already decided for it (no new
        decision lands there): it is written free only once none is queued or in
        flight, so a gang decided there is not cut in two by the hand-over."""
        s, state = self.settings, self.state
        if self.clock() >= state.last_renew + s.renew_deadline:
            return "this replica's member Lease is not renewed (node shards)"
        if slot in self._releasing and slot not in self._freeing and slot in state.held:
            return ""
        if slot not in state.usable:
            holder = state.holders.get(slot, "")
            return (
                f"node shard {slot} is held by {holder!r}"
                if holder and holder != s.identity
                else (f"node shard {slot} is not usable by this replica now")
            )
        return ""

    # ---- the loop -------------------------------------------------------------------

    async def run(self) -> None:
        s = self.settings
        while True:
            try:
                # A round may take until the renew deadline, as a leader's renewal may: a
                # slow API server (a round slower than the retry period) must not cost
                # this replica its member Lease and its shards; the fence (`may_bind`)
                # stops binds whenever the last renewal is older than the deadline.
                await asyncio.wait_for(self.round(), timeout=s.renew_deadline)
                self.error = ""
            except (ApiError, TimeoutError, OSError) as err:
                # A timed-out round raises TimeoutError(), whose str() is empty.
                self.error = (
                    str(err) or f"{type(err).__name__} (round took over {s.renew_deadline} s)"
                )
                log.warning("node shards: %s", self.error, extra={"error": self.error})
            await asyncio.sleep(s.retry_period)

    async def round(self) -> None:
        """One pass: renew our member Lease, read the others and the map, claim or give
        back shards, publish what we may use."""
        items = await self._list()
        # Read (and observe) the others first: a member Lease is free only once its
        # holder has been seen silent for leaseDuration.
        members, shard_map = self._read(items)
        sent = self.clock()
        await self._renew_member(items)
        self.state.last_renew = sent
        live = {m.identity for m in members if self._alive(m.identity) and not self._standby(m)}
        live.add(self.settings.identity)
        table = self._table_of(shard_map)
        if table is None:
            # Nobody holds anything yet: we create the map holding every shard (no
            # earlier holder can have binds in flight, so nothing needs to settle).
            table = await self._create_map()
            if table is None:
                return  # another replica created it first: read it next round
            shard_map = None
        me = self.settings.identity
        takeable = {h for h in set(table.holders) if h and h != me and self._takeable(h, members)}
        self._ending = None
        loan_changed = shard_map is not None and self._loan_step(table, live)
        loan = table.loan if self._loan_active(table.loan) else None
        ours = loan is not None and loan.to == me
        self._borrowed &= set(table.held_by(me))
        claim, give_back = plan(
            table,
            me,
            live,
            takeable,
            lent=loan.slots if loan is not None and not ours else (),
            borrowing=loan.slots if loan is not None and ours else (),
            give_first=self._borrowed,
        )
        self._releasing = set(give_back)
        if give_back:
            # Fence first (no Binding to these nodes starts from now on), then give back
            # the shards no Binding is in flight for; the others next round.
            self.state = replace(self.state, usable=self.state.usable - self._releasing)
        ready = [s for s in give_back if not self.binds_in_flight([s], table.slots)]
        if (claim or ready or loan_changed) and shard_map is not None:
            for slot in ready:
                table.holders[slot] = ""
            for slot in claim:
                table.holders[slot] = me
            # A write that fails without an answer may have landed: its shards then take
            # no Binding until a later write settles what the map says.
            self._freeing = set(ready)
            written = await self._write_map(shard_map, table)
            self._freeing = set()
            if written is None:
                self.state.conflicts += 1
                return  # another replica wrote first: read again next round
            for slot in claim:
                self._settling[slot] = (written, self.clock())
            if ours:
                self._borrowed |= set(claim)
            self._releasing -= set(ready)
            self._loan_ended()
            if loan_changed and table.loan is not None and table.loan.to == me:
                self.loans += 1
                self._loan_seen[table.loan.id] = self.clock()
                log.info(
                    "node shards: asking %s to lend shards %s for %s",
                    ", ".join(table.loan.lenders) or "nobody",
                    _slots_text(table.loan.slots),
                    table.loan.why,
                )
        self._publish(table, members, live)

    def _publish(self, table: ShardTable, members: Sequence[Member], live: set[str]) -> None:
        me = self.settings.identity
        held = frozenset(table.held_by(me))
        now = self.clock()
        for slot, (rv, taken) in list(self._settling.items()):
            # Usable once our pod watch has seen the write that took the shard (so the
            # last holder's binds are in the cache); a watch that hears of no newer
            # pod writes (an idle cluster, bookmarks a minute apart) is trusted after
            # leaseDuration.
            if (
                slot not in held
                or self.watch_caught_up(rv)
                or now - taken >= self.settings.lease_duration
            ):
                del self._settling[slot]
        usable = held - set(self._settling) - self._releasing
        holders = {s: h for s, h in enumerate(table.holders)}
        loan = table.loan if self._loan_active(table.loan) else None
        # A lender keeps its place in the routing while its shards are out on loan.
        routed = set(table.holders) | set(loan.lenders if loan is not None else ())
        serving = tuple(m for m in members if m.identity in live and m.identity in routed)
        if me in set(table.holders) and not any(m.identity == me for m in serving):
            serving = (*serving, self._me())
        state = ShardState(
            slots=table.slots,
            held=held,
            usable=usable,
            holders=holders,
            members=tuple(sorted(serving, key=lambda m: m.identity)),
            last_renew=self.state.last_renew,
            conflicts=self.state.conflicts,
            loan=loan,
        )
        changed = (state.slots, state.usable, state.holders, state.members, state.loan) != (
            self.state.slots,
            self.state.usable,
            self.state.holders,
            self.state.members,
            self.state.loan,
        )
        self.state = state
        if changed:
            self.on_change(state)
        self.on_round(state)

    def _me(self) -> Member:
        s = self.settings
        return Member(s.identity, frozenset(s.scheduler_names), s.leader_lease)

    # ---- liveness -------------------------------------------------------------------

    def _observe(self, identity: str, version: str) -> None:
        seen = self._observed.get(identity)
        if seen is None or seen[0] != version:
            self._observed[identity] = (version, self.clock())

    def _alive(self, identity: str) -> bool:
        if identity == self.settings.identity:
            return True
        seen = self._observed.get(identity)
        return seen is not None and self.clock() < seen[1] + self.settings.lease_duration

    def _standby(self, member: Member) -> bool:
        """Does `member` share our leader-election Lease while we lead? Then it is not
        scheduling (a previous leader, dead or standing by): not counted among the
        replicas the shards are split between, and its shards are takeable. Without
        this, a leader restarted after a crash aimed at a share of the shards for each
        such member until it had watched its Lease unchanged for leaseDuration."""
        s = self.settings
        return (
            bool(s.leader_lease)
            and member.identity != s.identity
            and member.leader_lease == s.leader_lease
            and self.leading()
        )

    def _takeable(self, holder: str, members: Sequence[Member]) -> bool:
        """May a shard of `holder` be taken over (it is not binding)?"""
        if not self._alive(holder):
            return True
        # It shares our leader-election Lease, which we hold: it is not binding.
        return any(m.identity == holder and self._standby(m) for m in members)

    # ---- API ------------------------------------------------------------------------

    async def _list(self) -> list[JSON]:
        page = await self.client.request(
            "GET",
            LEASES.path(self.settings.namespace),
            query={"labelSelector": ROLE_LABEL},
        )
        return [item for item in page.get("items") or () if isinstance(item, dict)]

    def _read(self, items: list[JSON]) -> tuple[list[Member], JSON | None]:
        shard_map, found = read_leases(items)
        for member, lease in found:
            meta, spec = lease.get("metadata") or {}, lease.get("spec") or {}
            self._observe(member.identity, f"{spec.get('renewTime')}/{meta.get('resourceVersion')}")
        return [member for member, _ in found], shard_map

    def _table_of(self, shard_map: JSON | None) -> ShardTable | None:
        if shard_map is None:
            return None
        meta = shard_map.get("metadata") or {}
        text = str((meta.get("annotations") or {}).get(MAP_ANNOTATION, ""))
        try:
            table = ShardTable.decode(text)
        except (ValueError, KeyError, TypeError) as err:
            raise ApiError(
                422,
                "Invalid",
                f"Lease {self.settings.namespace}/{MAP_NAME}: annotation {MAP_ANNOTATION} "
                f"is not a shard map ({err}); delete the Lease to start over",
            ) from None
        if table.slots != self.settings.slots and not self._warned_slots:
            self._warned_slots = True
            log.warning(
                "node shards: the cluster's shard map has %d slots (this replica was "
                "configured with %d); using the map's",
                table.slots,
                self.settings.slots,
            )
        return table

    _warned_slots = False

    async def _renew_member(self, items: list[JSON]) -> None:
        """Renew our member Lease, or take one: ours from before (a restart with the
        same identity), else one released or left by a replica gone for leaseDuration,
        else a new one under the lowest free name (`member_lease_names`: a fixed set, so
        RBAC can name them)."""
        s = self.settings
        now = micro_time()
        spec = {
            "holderIdentity": s.identity,
            "leaseDurationSeconds": max(1, math.ceil(s.lease_duration)),
            "renewTime": now,
        }
        if self._member is not None:
            name = str((self._member.get("metadata") or {}).get("name", ""))
            body = dict(self._member)
            meta = dict(body.get("metadata") or {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **self._annotations()}
            body["metadata"] = meta
            body["spec"] = {**(body.get("spec") or {}), **spec}
            try:
                self._member = await self.client.request(
                    "PUT", LEASES.path(s.namespace, name), body=body
                )
                return
            except ApiError as err:
                if not (err.conflict or err.not_found):
                    raise
                self._member = None  # taken over or deleted: find one again below
        by_name = {
            str((item.get("metadata") or {}).get("name", "")): item
            for item in items
            if ((item.get("metadata") or {}).get("labels") or {}).get(ROLE_LABEL) == "member"
        }
        names = member_lease_names()
        holder = {
            n: str(((by_name[n].get("spec") or {}).get("holderIdentity")) or "") for n in by_name
        }
        mine = [n for n in names if holder.get(n) == s.identity]
        free = [n for n in names if n in by_name and not self._alive_or_mine(holder[n])]
        missing = [n for n in names if n not in by_name]
        for name in (*mine, *free):
            body = dict(by_name[name])
            meta = dict(body.get("metadata") or {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **self._annotations()}
            body["metadata"] = meta
            acquire = {} if holder[name] == s.identity else {"acquireTime": now}
            body["spec"] = {**(body.get("spec") or {}), **spec, **acquire}
            try:
                self._member = await self.client.request(
                    "PUT", LEASES.path(s.namespace, name), body=body
                )
                return
            except ApiError as err:
                if not err.conflict:
                    raise
        for name in missing:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": s.namespace,
                    "labels": {ROLE_LABEL: "member"},
                    "annotations": self._annotations(),
                },
                "spec": {**spec, "acquireTime": now},
            }
            try:
                self._member = await self.client.request(
                    "POST", LEASES.path(s.namespace), body=body
                )
                return
            except ApiError as err:
                if not err.conflict:
                    raise
        raise ApiError(
            409,
            "Conflict",
            f"no free member Lease: all {len(names)} ({names[0]} .. {names[-1]}) are held by "
            "live replicas; node shards take at most that many replicas",
        )

    def _annotations(self) -> dict[str, str]:
        """Who we are, and our binds per second since the last round and conflicts so
        far (map writes that lost a race, Bindings refused as conflicting)."""
        s = self.settings
        now = self.clock()
        bound, refused = self.binds()
        rate = 0.0
        if self._last_binds is not None and now > self._last_binds[0]:
            rate = (bound - self._last_binds[1]) / (now - self._last_binds[0])
        self._last_binds = (now, bound)
        out = {
            NAMES_ANNOTATION: ",".join(sorted(s.scheduler_names)),
            LEADER_ANNOTATION: s.leader_lease,
            RATE_ANNOTATION: f"{rate:.1f}",
            CONFLICTS_ANNOTATION: str(self.state.conflicts + refused),
        }
        if s.config:
            out[CONFIG_ANNOTATION] = s.config
        return out

    def _alive_or_mine(self, holder: str) -> bool:
        """Is a member Lease's holder a live replica (or us): not to be taken?"""
        return bool(holder) and self._alive(holder)

    async def _create_map(self) -> ShardTable | None:
        s = self.settings
        table = ShardTable(s.slots, [s.identity] * s.slots)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": MAP_NAME,
                "namespace": s.namespace,
                "labels": {ROLE_LABEL: "map"},
                "annotations": {MAP_ANNOTATION: table.encode()},
            },
            "spec": {"holderIdentity": "", "renewTime": micro_time()},
        }
        try:
            created = await self.client.request("POST", LEASES.path(s.namespace), body=body)
        except ApiError as err:
            if err.conflict:
                return None
            raise
        del created
        log.info("node shards: created the shard map with %d slots", s.slots)
        return table

    async def _write_map(self, shard_map: JSON | None, table: ShardTable) -> int | None:
        """The map's new resourceVersion, or None when another replica wrote first."""
        assert shard_map is not None
        body = dict(shard_map)
        meta = dict(body.get("metadata") or {})
        meta["annotations"] = {**(meta.get("annotations") or {}), MAP_ANNOTATION: table.encode()}
        body["metadata"] = meta
        body["spec"] = {**(body.get("spec") or {}), "renewTime": micro_time()}
        try:
            written = await self.client.request(
                "PUT", LEASES.path(self.settings.namespace, MAP_NAME), body=body
            )
        except ApiError as err:
            if err.conflict:
                return None
            raise
        return _int_rv(written)

    async def release_all(self) -> None:
        """On a clean shutdown (after binding stopped): give every shard back, end our
        loan, and release our member Lease (empty holder), so others take over at once.
        A write that lost a race (a round cancelled mid-write, another replica writing
        the map) is read again and retried, a few times."""
        s = self.settings
        try:
            for _ in range(3):
                items = await self._list()
                _, shard_map = self._read(items)
                table = self._table_of(shard_map)
                ours = table is not None and table.loan is not None and table.loan.to == s.identity
                if table is None or not (table.held_by(s.identity) or ours):
                    break
                for slot in table.held_by(s.identity):
                    table.holders[slot] = ""
                if ours:
                    table.loan = None
                if await self._write_map(shard_map, table) is not None:
                    break
            if self._member is not None:
                name = str((self._member.get("metadata") or {}).get("name", ""))
                path = LEASES.path(s.namespace, name)
                for _ in range(3):
                    body = dict(self._member)
                    body["spec"] = {**(body.get("spec") or {}), "holderIdentity": ""}
                    try:
                        await self.client.request("PUT", path, body=body)
                        break
                    except ApiError as err:
                        if not err.conflict:
                            raise
                    fresh = await self.client.request("GET", path)
                    if str((fresh.get("spec") or {}).get("holderIdentity") or "") != s.identity:
                        break  # not ours any more
                    self._member = fresh
                self._member = None
        except (ApiError, OSError, TimeoutError) as err:
            log.warning(
                "node shards: giving shards back failed: %s", str(err) or type(err).__name__
            )


def read_leases(items: Iterable[JSON]) -> tuple[JSON | None, list[tuple[Member, JSON]]]:
    """The shard map Lease (None: there is none) and the member Leases with the member
    each describes, as every reader takes them: by the role label, members by
    holderIdentity (a member Lease without one is skipped)."""
    shard_map: JSON | None = None
    members: list[tuple[Member, JSON]] = []
    for item in items:
        meta = item.get("metadata") or {}
        role = (meta.get("labels") or {}).get(ROLE_LABEL)
        if meta.get("name") == MAP_NAME and role == "map":
            shard_map = item
        elif role == "member":
            identity = str((item.get("spec") or {}).get("holderIdentity") or "")
            if not identity:
                continue
            annotations = meta.get("annotations") or {}
            names = frozenset(n for n in str(annotations.get(NAMES_ANNOTATION, "")).split(",") if n)
            member = Member(identity, names, str(annotations.get(LEADER_ANNOTATION, "")))
            members.append((member, item))
    return shard_map, members


def _int_rv(obj: JSON) -> int:
    try:
        return int(str((obj.get("metadata") or {}).get("resourceVersion", "0")))
    except ValueError:
        return 0


def loan_text(state: ShardState, me: str) -> str:
    """The standing loan as readyz and the log say it ("" when none concerns us)."""
    loan = state.loan
    if loan is None:
        return ""
    if loan.to == me:
        have = sum(1 for s in loan.slots if s in state.usable)
        return (
            f"; borrowing node shards {_slots_text(loan.slots)} from "
            f"{', '.join(loan.lenders) or 'nobody'} for gang {loan.why} "
            f"({have} of {len(loan.slots)} usable here)"
        )
    if me in loan.lenders:
        return f"; lending node shards to {loan.to} for gang {loan.why}"
    return ""


def loan_counts(state: ShardState, me: str) -> dict[str, int]:
    """Shards in the standing loan, as `shoal_node_shards{state}` counts them: asked by
    us (`borrowing`), of those usable here (`borrowed`), and asked of us and still held
    here (`lending`: being given back)."""
    loan = state.loan
    mine = loan is not None and loan.to == me
    asked = loan.slots if loan is not None else ()
    return {
        "borrowing": len(asked) if mine else 0,
        "borrowed": sum(1 for s in asked if s in state.usable) if mine else 0,
        "lending": 0 if mine else sum(1 for s in asked if state.holders.get(s) == me),
    }


def _slots_text(slots: Iterable[int]) -> str:
    return ", ".join(str(s) for s in sorted(slots))


def slot_of(node: str, slots: int) -> int:
    """The shard of a node (the same hash as `NodeTable.name_hash`)."""
    return node_hash(node) % slots
