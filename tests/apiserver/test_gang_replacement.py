"""A gang required in one rack keeps a replacement member in that rack, on a real
kube-apiserver.

Rack a has three 1-cpu nodes, rack b one; the gang of three (1 cpu each, required in
one `rack`) binds in rack a. A member is deleted, as a node failure or an eviction would
have it, and its room is taken by another pod before the controller's replacement
arrives. Rack b has a free node, but the gang runs in rack a: the replacement waits,
saying which rack holds it, and binds there once room comes back."""

from __future__ import annotations

import asyncio

from apihelpers import MERGE, Space, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import NODES, PODGROUPS, PODS

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
QUIET = 3.0  # seconds the waiting replacement is watched for a bind that must not come


async def rack(s: Space, name: str, count: int) -> list[str]:
    nodes = []
    for i in range(count):
        node = await s.add_node(f"{name}{i}", cpu="1")
        await s.client.request(
            "PATCH",
            NODES.path(name=node),
            body={"metadata": {"labels": {"rack": name}}},
            content_type=MERGE,
        )
        nodes.append(node)
    return nodes


@async_test(timeout=120)
async def test_a_replacement_member_waits_for_room_in_its_gang_rack(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "gangheld") as s:
        rack_a = await rack(s, "a", 3)
        rack_b = await rack(s, "b", 1)
        await s.create(
            PODGROUPS.path(s.name),
            {
                "apiVersion": PODGROUPS.api_version,
                "kind": "PodGroup",
                "metadata": {
                    "name": "train",
                    "namespace": s.name,
                    "annotations": {"shoal.dev/topology-required": "rack"},
                },
                "spec": {"minMember": 3},
            },
        )
        for i in range(3):
            await s.create_pod(f"train-{i}", "1", labels={GROUP_LABEL: "train"})
        async with s.shoal(s.options("gangheld")) as running:
            scheduler = running.kube.scheduler

            async def whole() -> bool:
                return len(await s.bound()) == 3

            await wait_for(whole, what="the gang of 3 bound")
            bound = await s.bound()
            assert set(bound.values()) == set(rack_a), bound
            freed = bound["train-0"]

            # train-0 is lost; another pod takes its node before the replacement comes.
            await s.client.request("DELETE", PODS.path(s.name, "train-0"))

            async def gone() -> bool:
                return "train-0" not in await s.pods()

            await wait_for(gone, what="train-0 deleted")
            await s.create_pod("squatter", "1", node_name=freed)

            async def squatter_seen() -> bool:
                return any(p.name == "squatter" for p in scheduler.cluster.pods_on(freed))

            await wait_for(squatter_seen, what="the squatter counted on its node")
            created = await s.create_pod("train-0-new", "1", labels={GROUP_LABEL: "train"})
            uid = created["metadata"]["uid"]

            async def held() -> bool:
                return "held to rack a" in scheduler.explain(uid)

            await wait_for(held, what="the replacement held to rack a")
            loop = asyncio.get_running_loop()
            until = loop.time() + QUIET
            while loop.time() < until:
                placements = await s.placements()
                assert not placements["train-0-new"], placements  # never rack b's node
                await asyncio.sleep(0.2)
            print(f"\nreplacement: {scheduler.explain(uid)}")

            await s.client.request("DELETE", PODS.path(s.name, "squatter"))

            async def back() -> bool:
                return (await s.placements()).get("train-0-new") == freed

            await wait_for(back, what="the replacement bound in rack a")
            assert not set((await s.bound()).values()) & set(rack_b)
            assert running.failed_binds() == 0
