"""Node shards: the plan, the routing, and keepers against a fake API server (the real
one: tests/apiserver/test_node_shards.py)."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubehelpers import async_test

from shoal.drivers.kube.client import ApiError, ClientSettings, connect
from shoal.drivers.kube.resources import LEASES
from shoal.drivers.kube.shards import (
    MAP_ANNOTATION,
    MAP_NAME,
    Loan,
    Member,
    Routing,
    ShardKeeper,
    ShardSettings,
    ShardState,
    ShardTable,
    home_order,
    loan_counts,
    loan_text,
    plan,
    unschedulable_since,
)
from shoal.testing.fake_apiserver import FakeApiServer, Fault

# ---- the plan -----------------------------------------------------------------------


def test_alone_a_replica_claims_every_free_shard() -> None:
    table = ShardTable(16, [""] * 16)
    claim, give_back = plan(table, "a", {"a"}, set())
    assert claim == list(range(16)) and give_back == []


def test_a_replica_joining_gets_half_and_the_holder_gives_back_its_highest() -> None:
    table = ShardTable(16, ["a"] * 16)
    assert plan(table, "a", {"a", "b"}, set()) == ([], list(range(8, 16)))
    # Nothing free yet, and "a" is alive: "b" waits.
    assert plan(table, "b", {"a", "b"}, set()) == ([], [])
    for slot in range(8, 16):
        table.holders[slot] = ""
    assert plan(table, "b", {"a", "b"}, set()) == (list(range(8, 16)), [])


def test_the_shards_of_a_replica_that_is_gone_are_taken_over() -> None:
    table = ShardTable(4, ["a", "a", "b", "b"])
    assert plan(table, "a", {"a"}, {"b"}) == ([2, 3], [])
    assert plan(table, "a", {"a", "b"}, set()) == ([], [])


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 32),
    st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=4, unique=True),
    st.data(),
)
def test_plans_applied_in_any_order_never_give_a_shard_two_holders_and_settle(
    slots: int, members: list[str], data: st.DataObject
) -> None:
    """Replicas taking turns (each turn: read the map, write its plan, as the keeper does
    with a resourceVersion precondition) never hold one shard twice and end balanced."""
    table = ShardTable(slots, [""] * slots)
    for _ in range(6 * len(members) + 4):
        me = data.draw(st.sampled_from(members))
        claim, give_back = plan(table, me, set(members), set())
        for slot in claim:
            assert table.holders[slot] == ""
            table.holders[slot] = me
        for slot in give_back:
            assert table.holders[slot] == me
            table.holders[slot] = ""
    for me in itertools.cycle(members):  # then everyone in turn until nothing changes
        changed = False
        for who in members:
            claim, give_back = plan(table, who, set(members), set())
            for slot in claim:
                table.holders[slot] = who
            for slot in give_back:
                table.holders[slot] = ""
            changed = changed or bool(claim or give_back)
        if not changed:
            break
        del me
    counts = [table.holders.count(m) for m in members]
    target = -(-slots // len(members))
    assert all(c <= target for c in counts)
    assert sum(counts) == slots or all(c == target for c in counts)


def test_a_loan_is_given_back_whatever_the_target_claimed_by_its_borrower_alone() -> None:
    table = ShardTable(8, ["a"] * 4 + ["b"] * 4)
    live = {"a", "b", "c"}
    # b lends 5 and 6: it gives them back although that leaves it below its target,
    # and claims nothing in their place while they stand lent.
    assert plan(table, "b", live, set(), lent=[5, 6]) == ([], [5, 6])
    table.holders[5] = table.holders[6] = ""
    assert plan(table, "b", live, set(), lent=[5, 6]) == ([], [])
    assert plan(table, "c", live, set(), lent=[5, 6]) == ([], [])  # not for a third either
    # a, the borrower, claims them above its target and gives nothing back meanwhile.
    assert plan(table, "a", live, set(), borrowing=[5, 6]) == ([5, 6], [])
    table.holders[5] = table.holders[6] = "a"
    assert plan(table, "a", live, set(), borrowing=[5, 6]) == ([], [])
    # The loan over: the borrowed ones go back first, then the highest.
    assert plan(table, "a", live, set(), give_first={5, 6}) == ([], [3, 5, 6])
    assert plan(table, "a", {"a", "b"}, set(), give_first={5, 6}) == ([], [5, 6])


def test_a_borrower_takes_a_lent_shard_of_a_holder_that_died() -> None:
    table = ShardTable(4, ["a", "a", "b", "b"])
    assert plan(table, "a", {"a"}, {"b"}, borrowing=[3]) == ([3], [])
    assert plan(table, "a", {"a", "b"}, set(), borrowing=[3]) == ([], [])


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 32),
    st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=2, max_size=4, unique=True),
    st.data(),
)
def test_plans_with_a_loan_never_give_a_shard_two_holders_and_balance_after_it(
    slots: int, members: list[str], data: st.DataObject
) -> None:
    """As above, with a loan standing for a while: the borrower ends up holding every
    lent shard, nobody else ever claims one, and balance returns once it is over."""
    table = ShardTable(slots, [m for m, _ in zip(itertools.cycle(members), range(slots))])
    borrower = data.draw(st.sampled_from(members))
    lent = data.draw(
        st.sets(st.sampled_from([s for s in range(slots)] or [0]), max_size=slots)
    ) - set(table.held_by(borrower))
    borrowed: set[int] = set()
    for _ in range(4 * len(members) + 2):
        for who in data.draw(st.permutations(members)):
            if who == borrower:
                claim, give_back = plan(table, who, set(members), set(), borrowing=lent)
                borrowed |= set(claim)
            else:
                claim, give_back = plan(table, who, set(members), set(), lent=lent)
                assert not set(claim) & lent
            for slot in claim:
                assert table.holders[slot] == ""
                table.holders[slot] = who
            for slot in give_back:
                assert table.holders[slot] == who
                table.holders[slot] = ""
    assert all(table.holders[s] == borrower for s in lent)
    for _ in range(4 * len(members) + 2):  # the loan is over
        for who in members:
            first = borrowed if who == borrower else set()
            claim, give_back = plan(table, who, set(members), set(), give_first=first)
            for slot in claim:
                assert table.holders[slot] == ""
                table.holders[slot] = who
            for slot in give_back:
                table.holders[slot] = ""
    target = -(-slots // len(members))
    counts = [table.holders.count(m) for m in members]
    assert all(c <= target for c in counts)
    assert sum(counts) == slots or all(c == target for c in counts)


def test_a_shard_map_that_cannot_be_read_is_an_error_naming_the_fix() -> None:
    with pytest.raises(ValueError):
        ShardTable.decode(json.dumps({"slots": 4, "holders": ["a"]}))
    assert ShardTable.decode(ShardTable(2, ["a", ""]).encode()) == ShardTable(2, ["a", ""])
    loan = Loan("a", (1,), ("b",), "a/1", "default/g")
    assert ShardTable.decode(ShardTable(2, ["a", "b"], loan).encode()).loan == loan
    # A loan that cannot be read is only a request: dropped, the map still read.
    text = json.dumps({"slots": 2, "holders": ["a", "b"], "loan": {"to": "a", "slots": [7]}})
    assert ShardTable.decode(text) == ShardTable(2, ["a", "b"])


# ---- routing ------------------------------------------------------------------------


def test_rendezvous_order_moves_only_the_keys_of_a_member_that_leaves() -> None:
    keys = [f"pod/{i}" for i in range(300)]
    before = {k: home_order(k, ["a", "b", "c"])[0] for k in keys}
    after = {k: home_order(k, ["a", "b"])[0] for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved and all(before[k] == "c" for k in moved)


def test_a_pod_is_tried_by_its_home_first_and_handed_on_when_unschedulable() -> None:
    members = (Member("a", frozenset({"s"})), Member("b", frozenset({"s"})))
    order = home_order("pod/x", ["a", "b"])
    home, second = order
    first = Routing(home, members, handoff_seconds=10)
    other = Routing(second, members, handoff_seconds=10)
    assert first.mine("pod/x", "s", None, 100.0)
    assert not other.mine("pod/x", "s", None, 100.0)
    assert not other.mine("pod/x", "s", 95.0, 100.0)  # home said so 5 s ago
    assert other.mine("pod/x", "s", 85.0, 100.0)  # 15 s ago: ours too
    # A replica that does not serve the schedulerName never takes it.
    assert not Routing(second, members).mine("pod/x", "other", 0.0, 100.0)
    # Routing off: everything is ours.
    assert Routing("z").mine("pod/x", "s", None, 0.0)


def test_unschedulable_since_reads_the_pod_scheduled_condition() -> None:
    raw = {
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "lastTransitionTime": "2026-01-01T00:00:10Z",
                }
            ]
        }
    }
    assert unschedulable_since(raw) == 1767225610.0
    assert unschedulable_since({"status": {}}) is None


# ---- keepers against a fake API server -------------------------------------------------


def _settings(identity: str, **overrides: object) -> ShardSettings:
    values: dict[str, object] = {
        "identity": identity,
        "namespace": "kube-system",
        "slots": 8,
        "scheduler_names": ("default-scheduler",),
        "lease_duration": 1.0,
        "renew_deadline": 0.6,
        "retry_period": 0.1,
    }
    values.update(overrides)
    return ShardSettings(**values)  # type: ignore[arg-type]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _disjoint(*keepers: ShardKeeper) -> None:
    seen: set[int] = set()
    for keeper in keepers:
        usable = {s for s in keeper.state.usable if not keeper.may_bind(s)}
        assert not (usable & seen), "two replicas may bind to one shard"
        seen |= usable


@async_test()
async def test_keepers_split_the_shards_hand_them_over_and_take_over_the_dead(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        clock = _Clock()
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        connection = await connect(str(kubeconfig))
        try:
            a = ShardKeeper(connection.client("a", ClientSettings()), _settings("a"), clock=clock)
            b = ShardKeeper(connection.client("b", ClientSettings()), _settings("b"), clock=clock)
            await a.round()
            assert a.state.usable == frozenset(range(8))  # created the map: all settled
            for _ in range(6):
                clock.now += 0.05
                await b.round()
                _disjoint(a, b)
                await a.round()
                _disjoint(a, b)
            clock.now += 0.2  # the shards b took settle
            await b.round()
            await a.round()
            assert len(a.state.usable) == len(b.state.usable) == 4
            assert {m.identity for m in a.state.members} == {"a", "b"}

            # a is killed: b takes its shards once a's member Lease has not changed for
            # lease_duration, not before.
            clock.now += 0.5
            await b.round()  # sees a's last renewal now
            assert len(b.state.held) == 4
            clock.now += 0.9
            await b.round()  # 0.9 s later: a may still be alive
            assert len(b.state.held) == 4
            clock.now += 0.2
            await b.round()  # more than lease_duration since a's Lease last changed
            assert len(b.state.held) == 8
            assert a.may_bind(0)  # a, had it survived, could not bind: lease overdue
            clock.now += 0.2
            await b.round()
            assert b.state.usable == frozenset(range(8))

            # a clean shutdown gives every shard back at once.
            await b.release_all()
            stored = api.get(LEASES.group, LEASES.plural, "kube-system", MAP_NAME)
            assert stored is not None
            holders = json.loads(stored["metadata"]["annotations"][MAP_ANNOTATION])["holders"]
            assert holders == [""] * 8
        finally:
            await connection.close()


async def _rounds(clock: _Clock, *keepers: ShardKeeper, times: int = 1) -> None:
    for _ in range(times):
        for keeper in keepers:
            clock.now += 0.01
            await keeper.round()
            _disjoint(*dict.fromkeys(keepers))


@async_test()
async def test_a_loan_is_lent_through_the_give_back_path_settles_and_comes_back(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        clock = _Clock()
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        connection = await connect(str(kubeconfig))
        in_flight: set[int] = set()
        caught_up = [False]
        try:
            a = ShardKeeper(
                connection.client("a", ClientSettings()),
                _settings("a"),
                clock=clock,
                watch_caught_up=lambda rv: caught_up[0],
            )
            b = ShardKeeper(
                connection.client("b", ClientSettings()),
                _settings("b"),
                clock=clock,
                binds_in_flight=lambda slots, count: bool(set(slots) & in_flight),
            )
            await a.round()
            caught_up[0] = True
            await _rounds(clock, b, a, times=6)
            clock.now += 0.2
            await _rounds(clock, b, a)
            assert len(a.state.usable) == len(b.state.usable) == 4
            lent = sorted(b.state.held)[:3]
            own_b = set(b.state.held)

            # a asks (the core's wish): the loan goes into the map, naming b.
            a.want("default/g", lent)
            caught_up[0] = False  # a's pod watch is behind the writes from now on
            await _rounds(clock, a)
            assert a.state.loan is not None and a.state.loan.slots == tuple(lent)
            assert a.state.loan.lenders == ("b",) and a.loans == 1
            # b fences them at once, gives back those no Binding is in flight for.
            in_flight.add(lent[0])
            await _rounds(clock, b)
            assert not set(lent) & b.state.usable
            assert b.state.held & set(lent) == {lent[0]}
            assert {m.identity for m in b.state.members} == {"a", "b"}
            # The shard still held takes the Bindings already decided for it (no new
            # decision lands there: it is not usable), so a gang decided on it is not
            # cut in two; the shards written free take none.
            assert b.may_bind(lent[0]) == ""
            assert all(b.may_bind(s) for s in lent[1:])
            # a takes the free ones: held, but not usable before its watch caught up.
            await _rounds(clock, a)
            assert set(lent[1:]) <= a.state.held and not set(lent) & a.state.usable
            caught_up[0] = True
            in_flight.clear()
            await _rounds(clock, b, a, times=2)
            assert set(lent) <= a.state.usable and len(a.state.usable) == 7
            assert b.may_bind(lent[0])  # written free once its Binding was answered
            assert "borrowing node shards" in loan_text(a.state, "a")
            assert "lending node shards to a" in loan_text(b.state, "b")
            # a never gives back while it borrows, b claims nothing in their place.
            await _rounds(clock, b, a, times=3)
            assert len(a.state.held) == 7 and len(b.state.held) == 1

            # The gang placed: the wish is withdrawn, the loan ends, the borrowed
            # shards go back first and the split is even again.
            a.want("default/g", ())
            await _rounds(clock, a, b, times=4)
            clock.now += 0.2
            await _rounds(clock, a, b, times=2)
            assert a.state.loan is None and b.state.loan is None
            assert len(a.state.usable) == len(b.state.usable) == 4
            assert b.state.held == own_b
            assert a.loans_unused == 0
        finally:
            await connection.close()


@async_test()
async def test_a_loan_not_used_ends_in_time_and_is_not_asked_again_at_once(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        clock = _Clock()
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        connection = await connect(str(kubeconfig))
        try:
            settings = {"loan_seconds": 2.0}
            a = ShardKeeper(
                connection.client("a", ClientSettings()), _settings("a", **settings), clock=clock
            )
            b = ShardKeeper(
                connection.client("b", ClientSettings()), _settings("b", **settings), clock=clock
            )
            await a.round()
            await _rounds(clock, b, a, times=6)
            clock.now += 0.2
            await _rounds(clock, b, a)
            lent = sorted(b.state.held)
            a.want("default/g", lent)
            await _rounds(clock, a, b, a, times=3)
            assert a.state.held == frozenset(range(8))
            # The gang keeps asking (it never got placed), but the loan has a limit.
            for _ in range(3):
                clock.now += 0.7
                a.want("default/g", lent)
                await _rounds(clock, a, b)
            assert a.loans_unused == 1 and a.state.loan is None
            clock.now += 0.2
            await _rounds(clock, a, b, times=3)
            clock.now += 0.2
            await _rounds(clock, a, b)
            assert len(a.state.usable) == len(b.state.usable) == 4
            # Asked again at once: no new loan before loan_seconds went by.
            a.want("default/g", sorted(b.state.held))
            await _rounds(clock, a, b)
            assert a.loans == 1 and a.state.loan is None
            clock.now += 2.0
            a.want("default/g", sorted(b.state.held))
            await _rounds(clock, a, b)
            assert a.loans == 2 and a.state.loan is not None

            # A borrower that dies leaves a loan nobody serves: b clears it once a's
            # member Lease is silent for lease_duration (and takes a's shards).
            for _ in range(3):
                clock.now += 0.5
                await b.round()
            assert b.state.loan is None and len(b.state.held) == 8
        finally:
            await connection.close()


@async_test()
async def test_two_keepers_racing_for_the_map_never_both_win_a_shard(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        connection = await connect(str(kubeconfig))
        try:
            keepers = [
                ShardKeeper(connection.client(name, ClientSettings()), _settings(name))
                for name in "abc"
            ]
            import asyncio

            for _ in range(15):
                results = await asyncio.gather(
                    *(k.round() for k in keepers), return_exceptions=True
                )
                for result in results:
                    if isinstance(result, BaseException) and not isinstance(result, ApiError):
                        raise result
                _disjoint(*keepers)
                await asyncio.sleep(0.03)
            await asyncio.sleep(0.15)
            for k in keepers:
                await k.round()
            _disjoint(*keepers)
            assert sorted(len(k.state.held) for k in keepers) == [2, 3, 3]
        finally:
            await connection.close()


@async_test()
async def test_a_shard_map_that_cannot_be_read_fails_readyz_naming_the_fix(
    tmp_path: Path,
) -> None:
    from kubehelpers import backend as running
    from kubehelpers import eventually, fast_options

    async with FakeApiServer() as api:
        api.create(
            "coordination.k8s.io/v1",
            "leases",
            {
                "metadata": {
                    "name": MAP_NAME,
                    "namespace": "kube-system",
                    "labels": {"shoal.io/node-shards": "map"},
                    "annotations": {MAP_ANNOTATION: "not json"},
                },
                "spec": {},
            },
        )
        async with running(api, tmp_path, fast_options("alpha")) as (kube, _):

            def shards_failed() -> str:
                # The nodeShards check's own message: another check (informers still
                # syncing on a busy machine) may be failing first.
                return next(
                    (c.message for c in kube.readyz() if c.name == "nodeShards" and not c.ok), ""
                )

            await eventually(lambda: bool(shards_failed()))
            assert "delete the Lease to start over" in shards_failed()


@async_test()
async def test_member_leases_have_fixed_names_and_are_reused_once_released(
    tmp_path: Path,
) -> None:
    """RBAC names the Leases a replica may update; a replica takes the lowest member
    Lease that is free: never one a live replica holds."""
    async with FakeApiServer() as api:
        clock = _Clock()
        connection = await connect(str(api.kubeconfig(tmp_path / "kubeconfig")))
        try:
            a = ShardKeeper(connection.client("a", ClientSettings()), _settings("a"), clock=clock)
            b = ShardKeeper(connection.client("b", ClientSettings()), _settings("b"), clock=clock)
            await a.round()
            await b.round()

            def holders() -> dict[str, str]:
                return {
                    lease["metadata"]["name"]: lease["spec"].get("holderIdentity", "")
                    for lease in api.list_objects(LEASES.group, LEASES.plural)
                    if lease["metadata"]["name"].startswith("shoal-member-")
                }

            assert holders() == {"shoal-member-0": "a", "shoal-member-1": "b"}
            # Each member Lease says how the replica does (shoal get shards -o wide).
            lease = api.get(LEASES.group, LEASES.plural, "kube-system", "shoal-member-0")
            assert lease is not None
            assert lease["metadata"]["annotations"]["shoal.io/binds-per-second"] == "0.0"
            assert lease["metadata"]["annotations"]["shoal.io/conflicts"] == "0"
            await a.release_all()
            assert holders()["shoal-member-0"] == ""
            c = ShardKeeper(connection.client("c", ClientSettings()), _settings("c"), clock=clock)
            await c.round()
            assert holders() == {"shoal-member-0": "c", "shoal-member-1": "b"}
        finally:
            await connection.close()


def test_loan_counts_for_the_borrower_a_lender_and_a_bystander() -> None:
    loan = Loan("a", (1, 2), ("b",), "a/1", "default/g")
    borrower = ShardState(slots=4, usable=frozenset({0, 1}), holders={0: "a", 1: "a", 2: "b"})
    borrower.loan = loan
    assert loan_counts(borrower, "a") == {"borrowing": 2, "borrowed": 1, "lending": 0}
    assert loan_counts(borrower, "b") == {"borrowing": 0, "borrowed": 0, "lending": 1}
    assert loan_counts(borrower, "c") == {"borrowing": 0, "borrowed": 0, "lending": 0}
    assert loan_counts(ShardState(slots=4), "a") == {"borrowing": 0, "borrowed": 0, "lending": 0}


@async_test()
async def test_a_leader_restarted_after_a_crash_takes_every_shard_at_once(
    tmp_path: Path,
) -> None:
    """The previous leader (same leader-election Lease) was killed holding every shard.
    Its successor leads, so the old one cannot be binding: it is neither counted among
    the replicas the shards are split between nor waited for. Before, the successor
    aimed at half the shards until it had watched the old member Lease unchanged for
    leaseDuration (with more stale members, a smaller share: 6 of 16 for 30 s)."""
    async with FakeApiServer() as api:
        clock = _Clock()
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        connection = await connect(str(kubeconfig))
        try:

            def leader(identity: str) -> ShardKeeper:
                return ShardKeeper(
                    connection.client(identity, ClientSettings()),
                    _settings(identity, leader_lease="kube-system/shoal"),
                    leading=lambda: True,
                    clock=clock,
                )

            old = leader("old")
            await old.round()
            assert old.state.usable == frozenset(range(8))
            clock.now += 0.1  # killed: its member Lease is never renewed again
            new = leader("new")
            await new.round()
            assert new.state.held == frozenset(range(8))
            assert {m.identity for m in new.state.members} == {"new"}
        finally:
            await connection.close()


@async_test(timeout=30)
async def test_a_keeper_on_a_slow_api_server_keeps_its_member_lease_and_shards(
    tmp_path: Path,
) -> None:
    """Every request of b answers 0.2 s late, so b's rounds (a list and a renewal) take
    about 0.4 s: longer than the retry period (0.1 s), shorter than the renew deadline
    (0.6 s). b keeps renewing and keeps its shards; a never takes them over. (A round
    cut off at the retry period renewed nothing, and b lost every shard.)"""
    async with FakeApiServer() as api:
        connection = await connect(str(api.kubeconfig(tmp_path / "kubeconfig")))
        keepers = [
            ShardKeeper(
                connection.client(n, ClientSettings(user_agent=f"shoal ({n})")), _settings(n)
            )
            for n in ("a", "b")
        ]
        a, b = keepers
        tasks = [asyncio.create_task(k.run()) for k in keepers]
        try:
            deadline = time.monotonic() + 10
            while not (len(a.state.usable) == len(b.state.usable) == 4):
                assert time.monotonic() < deadline, "the shards were never split"
                await asyncio.sleep(0.05)
            api.inject(Fault(user_agent="(b)", status=0, delay=0.2, times=None))
            end = time.monotonic() + 3.0
            while time.monotonic() < end:
                assert len(b.state.held) == 4 and len(a.state.held) == 4, (a.state, b.state)
                await asyncio.sleep(0.05)
            assert not b.error, b.error
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await connection.close()
