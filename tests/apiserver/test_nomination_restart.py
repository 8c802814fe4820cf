"""A preemption's nomination survives a restart, on the real API server. Shoal evicts a
low-priority pod to make room for a preemptor and nominates it (the pod's
`status.nominatedNodeName`); the victim takes its grace period to go (no kubelet here:
it stays terminating until the test deletes it). Shoal is stopped and a new one starts
(a restart, or a failover). A 1-cpu low-priority pod created then fits in what is free
on the node, but the new scheduler reads the preemptor's nomination from its status, as
kube-scheduler does, and keeps that room: the low pod waits, nobody is evicted again,
and once the victim is gone the preemptor is bound there first.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio

from apihelpers import space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import PODS


@async_test(timeout=110)
async def test_a_new_scheduler_keeps_the_room_a_preemption_freed(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "nomrestart") as s:
        n0 = await s.add_node("n0", cpu="4")
        victim = s.pod("victim", "3", node_name=n0)
        victim["spec"]["terminationGracePeriodSeconds"] = 300  # it takes its time to go
        await s.create(PODS.path(s.name), victim)
        high = await s.add_priority_class("high", 1000)
        await s.create_pod("preemptor", "3", priority_class=high)

        async def nominated() -> bool:
            pod = (await s.pods()).get("preemptor") or {}
            return (pod.get("status") or {}).get("nominatedNodeName") == n0

        async def victim_terminating() -> bool:
            pod = (await s.pods()).get("victim") or {}
            return bool((pod.get("metadata") or {}).get("deletionTimestamp"))

        async with s.shoal(s.options("first")):
            await wait_for(victim_terminating, timeout=30, what="the victim evicted")
            await wait_for(nominated, timeout=30, what="the preemptor nominated")

        async with s.shoal(s.options("second")):
            await s.create_pod("low", "1")
            await asyncio.sleep(4)  # it would have been bound by now
            placements = await s.placements()
            pods = await s.pods()
            print(
                "DBG",
                placements,
                {n: (p.get("status") or {}).get("conditions") for n, p in pods.items()},
            )
            assert placements["low"] == "", placements
            assert placements["preemptor"] == "", placements
            assert await victim_terminating()
            # Nobody was evicted again: one Preempted event, the first scheduler's.
            assert len(await s.events("victim", "Preempted")) == 1
            # The victim goes: the preemptor is bound to the node it was nominated to,
            # then the low pod fits beside it.
            await s.client.request(
                "DELETE", PODS.path(s.name, "victim"), query={"gracePeriodSeconds": "0"}
            )

            async def both_bound() -> bool:
                bound = await s.bound()
                return "preemptor" in bound and "low" in bound

            await wait_for(both_bound, timeout=60, what="the preemptor and the low pod bound")
            bound = await s.bound()
            assert bound["preemptor"] == n0 and bound["low"] == n0
