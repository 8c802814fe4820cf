"""Two replicas on one Lease, and a scheduler stopped mid-way, against a real
kube-apiserver: every pod is bound exactly once.

The API server refuses a second binding of a bound pod (409), so a double bind would show
as a failed bind in the binder's metrics; a lost pod as one left unbound; a bind counted
twice or not at all as an overcommitted or a half-empty node (the nodes have exactly
enough room)."""

from __future__ import annotations

import asyncio
import time

from apihelpers import Running, counted, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import LEASES


@async_test(timeout=120)
async def test_two_replicas_one_lease_only_the_leader_binds_and_the_other_takes_over(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "leader") as s:
        for i in range(4):
            await s.add_node(f"n{i}", cpu="8")
        for i in range(10):
            await s.create_pod(f"early{i}")
        async with (
            s.shoal(s.options("one", leader_elect=True)) as one,
            s.shoal(s.options("two", leader_elect=True)) as two,
        ):

            async def early_bound() -> bool:
                return len(await s.bound()) == 10

            await wait_for(early_bound, what="early pods bound")

            async def one_leads() -> bool:
                return one.kube.leading != two.kube.leading

            await wait_for(one_leads, what="exactly one leader")
            leader, standby = (one, two) if one.kube.leading else (two, one)
            lease = await s.get(LEASES.path(s.name, "shoal")) or {}
            assert lease["spec"]["holderIdentity"] == leader.kube.options.identity
            await counted(lambda: leader.binds() == 10, "the leader's 10 binds counted")
            assert standby.binds() == 0
            assert standby.kube.synced and standby.kube.cycles == 0  # warm, not scheduling

            await leader.crash()  # no release: the standby waits out the lease
            for i in range(10):
                await s.create_pod(f"late{i}")

            async def taken_over() -> bool:
                return standby.kube.leading

            await wait_for(taken_over, timeout=30, what="the standby leading")

            async def all_bound() -> bool:
                return len(await s.bound()) == 20

            await wait_for(all_bound, what="late pods bound by the new leader")
            await counted(lambda: standby.binds() == 10, "the new leader's 10 binds counted")
            assert standby.failed_binds() == 0
            assert leader.failed_binds() == 0
            lease = await s.get(LEASES.path(s.name, "shoal")) or {}
            assert lease["spec"]["holderIdentity"] == standby.kube.options.identity


@async_test(timeout=120)
async def test_stopped_mid_way_a_new_scheduler_binds_the_rest_and_none_twice(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "restart") as s:
        # Exactly enough room: 8 nodes x 4 cpu for 32 one-cpu pods.
        nodes = [await s.add_node(f"n{i}", cpu="4") for i in range(8)]
        for i in range(32):
            await s.create_pod(f"p{i:02d}", "1")
        # Slow binds (8 requests a second) so that it is stopped with work left.
        first: Running
        async with s.shoal(s.options("first", qps=8.0, burst=1)) as first:

            async def some() -> bool:
                return first.binds() >= 8

            await wait_for(some, what="some binds")
            # Killed with binds queued and pods assumed but not bound.
            assert any(r.assumed for r in first.kube.scheduler.cluster.placed.values())
            await first.crash()
        # Its cancelled binds count as errors; none was refused by the server.
        assert first.binds("conflict") == 0
        # Bindings it had already sent may still land after the crash: count once the
        # number has settled (read too early, second.binds() came out 2 short once).
        before = len(await s.bound())
        for _ in range(20):
            await asyncio.sleep(0.5)
            now = len(await s.bound())
            if now == before:
                break
            before = now
        assert 8 <= before < 32
        async with s.shoal(s.options("second")) as second:

            async def all_bound() -> bool:
                return len(await s.bound()) == 32

            await wait_for(all_bound, what="all 32 bound")
            await counted(lambda: second.binds() == 32 - before, "the second's binds counted")
            assert second.failed_binds() == 0
            per_node: dict[str, int] = {}
            for node in (await s.bound()).values():
                per_node[node] = per_node.get(node, 0) + 1
            assert per_node == dict.fromkeys(nodes, 4)


@async_test(timeout=120)
async def test_a_busy_scheduling_loop_does_not_cost_the_lease(
    control_plane: dict[str, str],
) -> None:
    # A scheduling pass that holds the event loop (a slow HTTP extender, a huge gang)
    # for longer than the renew deadline: the lease is renewed on its own thread.
    async with space(control_plane["KUBECONFIG"], "busy") as s:
        await s.add_node("n0", cpu="8")
        await s.create_pod("first")
        async with s.shoal(s.options("one", leader_elect=True)) as one:

            async def bound() -> bool:
                return len(await s.bound()) == 1

            await wait_for(bound, what="the first pod bound")
            assert one.kube.leading
            before = (await s.get(LEASES.path(s.name, "shoal")) or {})["spec"]["renewTime"]
            deadline = one.kube.options.leader.renew_deadline
            time.sleep(deadline * 1.5)  # the whole event loop stalls, as in a long pass
            lease = await s.get(LEASES.path(s.name, "shoal")) or {}
            assert lease["spec"]["holderIdentity"] == one.kube.options.identity
            assert lease["spec"]["renewTime"] != before  # renewed during the stall
            await asyncio.sleep(1.0)  # the loop runs again: nothing gave the lease up
            assert one.kube.leading and not one.task.done()
            await s.create_pod("second")

            async def both() -> bool:
                return len(await s.bound()) == 2

            await wait_for(both, what="the second pod bound by the same leader")
