"""Node shards against a real kube-apiserver: several active replicas (no leader election,
or different schedulerNames) share the nodes through the shard map Lease and never
overcommit one; a replica killed without releasing anything leaves its shards to the
survivor once its member Lease expires (see shoal.drivers.kube.shards).

Every test runs in a namespace of its own, which is also its leader-election namespace:
the shard map and member Leases of one test are not seen by another. The nodes have
exactly 1 cpu each and the pods ask for 100m: a node with more than 10 pods is
overcommitted."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import replace
from typing import Any

from apihelpers import JSON, Running, Space, space, wait_for
from kubehelpers import async_test

from shoal.config import parse_config
from shoal.drivers.kube.backend import KubeOptions
from shoal.drivers.kube.binder import SCHEDULED_BY
from shoal.drivers.kube.resources import LEASES
from shoal.drivers.kube.shards import MAP_ANNOTATION, MAP_NAME, ROLE_LABEL, ShardTable, slot_of

SLOTS = 16
NODES = 8
PER_NODE = 10  # 1 cpu / 100m


def shard_options(s: Space, identity: str, **more: Any) -> KubeOptions:
    """Short lease timings (the shard keeper uses the leader-election settings, whose
    namespace is the test's own) and a quick hand-off of unschedulable pods."""
    options = s.options(identity, **more)
    leader = replace(options.leader, lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)
    return replace(options, leader=leader, shard_handoff_seconds=0.5)


def usable(running: Running) -> int:
    keeper = running.kube.shards
    assert keeper is not None
    return len(keeper.state.usable)


async def split_evenly(*replicas: Running, timeout: float = 30.0) -> None:
    share = SLOTS // len(replicas)

    async def even() -> bool:
        return all(usable(r) == share for r in replicas)

    await wait_for(even, timeout=timeout, what=f"each replica holding {share} of {SLOTS} shards")


async def add_nodes(s: Space) -> list[str]:
    return [await s.add_node(f"n{i}", cpu="1") for i in range(NODES)]


def per_node(bound: dict[str, str]) -> Counter[str]:
    return Counter(bound.values())


def binder_of(pod: JSON) -> str:
    return str((pod["metadata"].get("annotations") or {}).get(SCHEDULED_BY, ""))


async def shard_table(s: Space) -> ShardTable:
    lease = await s.get(LEASES.path(s.name, MAP_NAME))
    assert lease is not None, "no shard map Lease"
    assert lease["metadata"]["labels"][ROLE_LABEL] == "map"
    return ShardTable.decode(lease["metadata"]["annotations"][MAP_ANNOTATION])


async def settled(s: Space, quiet: float = 2.0, timeout: float = 30.0) -> dict[str, str]:
    """The placements once nothing was bound for `quiet` seconds."""
    deadline = time.monotonic() + timeout
    last = await s.bound()
    since = time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, f"binds still coming after {timeout}s"
        await asyncio.sleep(0.2)
        now = await s.bound()
        if now != last:
            last, since = now, time.monotonic()
    return last


@async_test(timeout=90)
async def test_two_active_replicas_of_one_scheduler_name_fill_the_nodes_exactly(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "shards") as s:
        nodes = await add_nodes(s)
        async with (
            s.shoal(shard_options(s, "alpha")) as alpha,
            s.shoal(shard_options(s, "beta")) as beta,
        ):
            await split_evenly(alpha, beta)
            for i in range(90):
                await s.create_pod(f"p{i:02d}", "100m")

            async def eighty() -> bool:
                return len(await s.bound()) >= NODES * PER_NODE

            await wait_for(eighty, timeout=40, what="80 pods bound")
            await asyncio.sleep(2.0)  # time for an 81st, which must not come
            pods = await s.pods()
            bound = {n: p["spec"]["nodeName"] for n, p in pods.items() if p["spec"].get("nodeName")}
            counts = per_node(bound)
            print(
                f"\nper node: {sorted(counts.values())}; alpha {alpha.binds()}, beta {beta.binds()}"
            )
            assert len(bound) == NODES * PER_NODE, counts
            assert max(counts.values()) <= PER_NODE, counts
            assert set(counts) <= set(nodes)
            binders = Counter(binder_of(pods[n]) for n in bound)
            assert set(binders) == {"alpha", "beta"}, binders  # both did work
            assert alpha.binds() + beta.binds() == len(bound)
            assert alpha.failed_binds() == beta.failed_binds() == 0
            assert alpha.kube.foreign_binds == beta.kube.foreign_binds == 0
            # Each bound only to nodes of the shards it holds (nothing moved meanwhile).
            table = await shard_table(s)
            keeper = alpha.kube.shards
            assert keeper is not None and set(table.held_by("alpha")) == keeper.state.usable
            for name, node in bound.items():
                assert table.holders[slot_of(node, table.slots)] == binder_of(pods[name])


@async_test(timeout=90)
async def test_replicas_of_different_scheduler_names_share_the_nodes_without_overcommit(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "shardteams") as s:
        await add_nodes(s)
        team_a, team_b = f"{s.name}-team-a", f"{s.name}-team-b"
        async with (
            s.shoal(
                shard_options(s, "alpha"), parse_config({"profiles": [{"schedulerName": team_a}]})
            ) as alpha,
            s.shoal(
                shard_options(s, "beta"), parse_config({"profiles": [{"schedulerName": team_b}]})
            ) as beta,
        ):
            await split_evenly(alpha, beta)
            for i in range(45):
                await s.create_pod(f"a{i:02d}", "100m", scheduler=team_a)
                await s.create_pod(f"b{i:02d}", "100m", scheduler=team_b)
            bound = await settled(s, quiet=2.0, timeout=40)
            pods = await s.pods()
            counts = per_node(bound)
            table = await shard_table(s)
            nodes_of = Counter(table.holders[slot_of(node, table.slots)] for node in s.nodes)
            by_team = Counter(pods[n]["spec"]["schedulerName"] for n in bound)
            print(
                f"\nnodes per replica: {dict(nodes_of)}; bound per schedulerName: "
                f"{dict(by_team)}; per node: {sorted(counts.values())}"
            )
            assert len(bound) <= NODES * PER_NODE
            assert max(counts.values()) <= PER_NODE, counts
            for name in bound:
                expected = "alpha" if name.startswith("a") else "beta"
                assert binder_of(pods[name]) == expected, (name, pods[name]["metadata"])
                assert table.holders[slot_of(bound[name], table.slots)] == expected
            assert alpha.failed_binds() == beta.failed_binds() == 0
            assert alpha.kube.foreign_binds == beta.kube.foreign_binds == 0
            # Each fills the nodes of its own shards (a pod of one schedulerName never
            # goes to the other replica's nodes, even when they have room).
            assert by_team[team_a] == min(45, PER_NODE * nodes_of["alpha"])
            assert by_team[team_b] == min(45, PER_NODE * nodes_of["beta"])


@async_test(timeout=90)
async def test_a_killed_replica_leaves_its_shards_to_the_survivor(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "shardfail") as s:
        await add_nodes(s)
        async with (
            s.shoal(shard_options(s, "alpha")) as alpha,
            # Slow binds, so that it dies with pods of its own still pending.
            s.shoal(shard_options(s, "beta", qps=4.0, burst=1)) as beta,
        ):
            await split_evenly(alpha, beta)
            for i in range(90):
                await s.create_pod(f"p{i:02d}", "100m")

            async def beta_working() -> bool:
                return beta.binds() >= 3

            await wait_for(beta_working, timeout=30, what="beta binding")
            killed = time.monotonic()
            await beta.crash()  # no shard given back, member Lease left as it was
            at_kill = len(await s.bound())
            assert at_kill < NODES * PER_NODE

            async def survivor_holds_all() -> bool:
                return usable(alpha) == SLOTS

            await wait_for(survivor_holds_all, timeout=30, what="alpha holding all 16 shards")
            takeover = time.monotonic() - killed

            async def eighty() -> bool:
                return len(await s.bound()) >= NODES * PER_NODE

            await wait_for(eighty, timeout=40, what="80 pods bound")
            filled = time.monotonic() - killed
            await asyncio.sleep(2.0)  # time for an 81st, which must not come
            pods = await s.pods()
            bound = {n: p["spec"]["nodeName"] for n, p in pods.items() if p["spec"].get("nodeName")}
            counts = per_node(bound)
            binders = Counter(binder_of(pods[n]) for n in bound)
            print(
                f"\nfailover: {at_kill} bound at the kill; all {SLOTS} shards held by the "
                f"survivor {takeover:.2f}s after the kill; 80 bound after {filled:.2f}s; "
                f"binders {dict(binders)}"
            )
            assert len(bound) == NODES * PER_NODE, counts
            assert max(counts.values()) <= PER_NODE, counts
            assert set(binders) == {"alpha", "beta"}, binders
            assert binders["alpha"] == alpha.binds()
            assert alpha.failed_binds() == 0
            assert beta.binds("conflict") == 0  # its cancelled binds count as errors
            assert alpha.kube.foreign_binds == 0
            table = await shard_table(s)
            assert table.holders == ["alpha"] * SLOTS
            # The dead replica's member Lease was not deleted (it crashed): it expired.
            members = await s.client.request(
                "GET", LEASES.path(s.name), query={"labelSelector": f"{ROLE_LABEL}=member"}
            )
            holders = {m["spec"]["holderIdentity"] for m in members.get("items") or []}
            assert holders == {"alpha", "beta"}, holders
