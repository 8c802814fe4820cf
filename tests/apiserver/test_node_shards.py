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

from apihelpers import JSON, Running, Space, counted, space, wait_for
from kubehelpers import async_test

from shoal.config import parse_config
from shoal.drivers.kube.backend import KubeOptions
from shoal.drivers.kube.binder import SCHEDULED_BY
from shoal.drivers.kube.resources import LEASES, QUEUES
from shoal.drivers.kube.shards import MAP_ANNOTATION, MAP_NAME, ROLE_LABEL, ShardTable, slot_of

SLOTS = 16
NODES = 8
PER_NODE = 10  # 1 cpu / 100m


def shard_options(
    s: Space, identity: str, timings: tuple[float, float, float] = (2.0, 1.5, 0.2), **more: Any
) -> KubeOptions:
    """Short lease timings (the shard keeper uses the leader-election settings, whose
    namespace is the test's own: lease duration, renew deadline, retry period) and a
    quick hand-off of unschedulable pods."""
    options = s.options(identity, **more)
    duration, deadline, retry = timings
    leader = replace(
        options.leader, lease_duration=duration, renew_deadline=deadline, retry_period=retry
    )
    return replace(options, leader=leader, shard_handoff_seconds=0.5)


# Tests that need both replicas alive throughout (the loan tests, and those checking
# that both did work): longer leases leave room for a loaded machine. (Rounds slower than
# the retry period were abandoned until 2026-11-29, and a fresh-clone CI run saw one
# replica bind all 80 pods that way even with these timings; a round may now take until
# the renew deadline.)
LOAN_TIMINGS = (4.0, 3.0, 0.4)


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
            s.shoal(shard_options(s, "alpha", LOAN_TIMINGS)) as alpha,
            s.shoal(shard_options(s, "beta", LOAN_TIMINGS)) as beta,
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
            await counted(lambda: alpha.binds() + beta.binds() == len(bound), "every bind counted")
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


GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
QUEUE_LABEL = "shoal.dev/queue"


async def split_nodes(s: Space, per_half: int) -> list[str]:
    """`per_half` 1-cpu nodes in shards 0..7 and as many in 8..15: the map's creator
    keeps the low half and gives the high half to the other replica (it gives back its
    highest first), so each replica holds exactly `per_half` of them."""
    low: list[str] = []
    high: list[str] = []
    i = 0
    while len(low) < per_half or len(high) < per_half:
        name = f"{s.name}-n{i}"
        half = low if slot_of(name, SLOTS) < SLOTS // 2 else high
        if len(half) < per_half:
            half.append(await s.add_node(f"n{i}", cpu="1"))
        i += 1
    return low + high


async def create_gang(s: Space, name: str, size: int, cpu: str, **labels: str) -> None:
    await s.add_pod_group(name, size)
    for i in range(size):
        await s.create_pod(f"{name}-{i:02d}", cpu, labels={GROUP_LABEL: name, **labels})


def node_counts(replica: Running, nodes: list[str]) -> int:
    keeper = replica.kube.shards
    assert keeper is not None
    return sum(1 for n in nodes if slot_of(n, SLOTS) in keeper.state.usable)


def loan_free(*replicas: Running) -> bool:
    return all(r.kube.shards is not None and r.kube.shards.state.loan is None for r in replicas)


@async_test(timeout=120)
async def test_a_gang_of_64_that_spans_shards_is_bound_whole_on_borrowed_shards(
    control_plane: dict[str, str],
) -> None:
    """64 pods of 125m fill 8 nodes of 1 cpu exactly, 4 in each replica's shards: no
    replica can place the gang alone. Its home borrows the other's shards (a loan in
    the shard map), binds all 64, and the shards go back to an even split."""
    async with space(control_plane["KUBECONFIG"], "shardloan") as s:
        nodes = await split_nodes(s, 4)
        async with (
            s.shoal(shard_options(s, "alpha", LOAN_TIMINGS)) as alpha,
            s.shoal(shard_options(s, "beta", LOAN_TIMINGS)) as beta,
        ):
            await split_evenly(alpha, beta)
            assert node_counts(alpha, nodes) == node_counts(beta, nodes) == 4
            started = time.monotonic()
            await create_gang(s, "big", 64, "125m")
            said: set[str] = set()  # what readyz and `explain` said meanwhile

            async def whole() -> bool:
                pods = await s.pods()
                for r in (alpha, beta):
                    said.update(c.detail for c in r.kube.readyz() if c.name == "nodeShards")
                    for name in ("big-00", "big-63"):
                        if name in pods:
                            said.add(r.kube.scheduler.explain(pods[name]["metadata"]["uid"]))
                return sum(1 for p in pods.values() if p["spec"].get("nodeName")) == 64

            await wait_for(whole, timeout=60, what="the gang of 64 bound")
            took = time.monotonic() - started
            pods = await s.pods()
            bound = {n: p["spec"]["nodeName"] for n, p in pods.items() if p["spec"].get("nodeName")}
            counts = per_node(bound)
            binders = Counter(binder_of(pods[n]) for n in bound)
            assert len(binders) == 1, binders  # its home bound it, whole
            (home,) = binders
            borrower = alpha if home == "alpha" else beta
            assert borrower.kube.shards is not None and borrower.kube.shards.loans >= 1
            assert sorted(counts.values()) == [8] * 8, counts  # every node full, none over
            assert set(counts) == set(nodes)
            assert alpha.failed_binds() == beta.failed_binds() == 0
            assert alpha.kube.foreign_binds == beta.kube.foreign_binds == 0

            # The loan ends and the shards are balanced again.
            async def returned() -> bool:
                return loan_free(alpha, beta) and usable(alpha) == usable(beta) == SLOTS // 2

            await wait_for(returned, timeout=30, what="the loan over, 8 shards each")
            back = time.monotonic() - started
            waiting = sorted(t for t in said if "lent to this replica" in t)
            loans = sorted(t for t in said if "borrowing node shards" in t)
            print(
                f"\ngang of 64 bound whole by {home} after {took:.2f}s "
                f"({borrower.kube.shards.loans} loan(s), "
                f"{borrower.kube.shards.loans_unused} unused); even split again after "
                f"{back:.2f}s; said: {waiting[:1]} {loans[:1]}"
            )
            assert waiting and loans, said


@async_test(timeout=120)
async def test_a_queues_max_holds_across_shards_with_a_borrowing_gang(
    control_plane: dict[str, str],
) -> None:
    """A capped queue (max 6 cpu) whose gang of 48 x 125m needs nodes of both replicas'
    shards: its home borrows and binds it whole; then 10 more pods of the queue find
    room on the other replica's nodes but are never bound (the max counts every bound
    pod, whoever bound it, also once they are handed over to the other replica)."""
    async with space(control_plane["KUBECONFIG"], "shardmax") as s:
        nodes = await split_nodes(s, 4)
        queue = f"{s.name}-team"
        await s.create(
            QUEUES.path(),
            {
                "apiVersion": QUEUES.api_version,
                "kind": "Queue",
                "metadata": {"name": queue},
                "spec": {"max": {"cpu": "6"}},
            },
        )
        s.cluster_objects.append(QUEUES.path(name=queue))
        async with (
            s.shoal(shard_options(s, "alpha", LOAN_TIMINGS)) as alpha,
            s.shoal(shard_options(s, "beta", LOAN_TIMINGS)) as beta,
        ):
            await split_evenly(alpha, beta)
            assert node_counts(alpha, nodes) == node_counts(beta, nodes) == 4
            await create_gang(s, "team", 48, "125m", **{QUEUE_LABEL: queue})

            async def whole() -> bool:
                return len(await s.bound()) == 48

            await wait_for(whole, timeout=60, what="the gang of 48 bound")

            async def returned() -> bool:
                return loan_free(alpha, beta) and usable(alpha) == usable(beta) == SLOTS // 2

            await wait_for(returned, timeout=30, what="the loan over, 8 shards each")
            for i in range(10):
                await s.create_pod(f"more-{i}", "125m", labels={QUEUE_LABEL: queue})
            # Time for the home to refuse them and hand them to the other replica
            # (shard_handoff_seconds 0.5), and for that one to refuse them too.
            await asyncio.sleep(4.0)
            pods = await s.pods()
            bound = {n: p["spec"]["nodeName"] for n, p in pods.items() if p["spec"].get("nodeName")}
            counts = per_node(bound)
            binders = Counter(binder_of(pods[n]) for n in bound)
            print(f"\nbound {len(bound)} (max 6 cpu = 48 x 125m); binders {dict(binders)}")
            assert len(bound) == 48 and not any(n.startswith("more-") for n in bound), counts
            assert sum(counts.values()) * 125 <= 6000
            assert len(binders) == 1
            for name in ("more-0", "more-9"):
                uid = pods[name]["metadata"]["uid"]
                why = alpha.kube.scheduler.explain(uid) or beta.kube.scheduler.explain(uid)
                assert queue in why, why
            assert alpha.failed_binds() == beta.failed_binds() == 0
