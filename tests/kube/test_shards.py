"""Node shards: the plan, the routing, and keepers against a fake API server (the real
one: tests/apiserver/test_node_shards.py)."""

from __future__ import annotations

import itertools
import json
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
    Member,
    Routing,
    ShardKeeper,
    ShardSettings,
    ShardTable,
    home_order,
    plan,
    unschedulable_since,
)
from shoal.testing.fake_apiserver import FakeApiServer

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


def test_a_shard_map_that_cannot_be_read_is_an_error_naming_the_fix() -> None:
    with pytest.raises(ValueError):
        ShardTable.decode(json.dumps({"slots": 4, "holders": ["a"]}))
    assert ShardTable.decode(ShardTable(2, ["a", ""]).encode()) == ShardTable(2, ["a", ""])


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
