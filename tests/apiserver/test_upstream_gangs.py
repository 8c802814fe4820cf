"""Kubernetes' own gangs (v1.36, GenericWorkload) against a real kube-apiserver serving
`scheduling.k8s.io/v1alpha2` (see conftest.py): pods naming a PodGroup in
`spec.schedulingGroup.podGroupName` are placed all-or-nothing with its
`schedulingPolicy.gang.minCount`, wait while the PodGroup does not exist, keep to one
domain of its `schedulingConstraints.topology` key, and the PodGroup's
`PodGroupScheduled` condition says why a gang waits and when it was placed. The same
gang in scheduler-plugins' terms (its PodGroup CRD, from deploy/crds) comes out the same.

Every node here has 1 cpu and every member asks for 1 cpu: a gang of N needs N nodes,
one member on each."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from apihelpers import JSON, MERGE, Running, Space, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import NODES, PODGROUPS, PODS, UPSTREAM_PODGROUPS

SCHEDULER_PLUGINS_LABEL = "scheduling.x-k8s.io/pod-group"
SCHEDULED = "PodGroupScheduled"
GANG = 8
SHORT = 6  # nodes at first: two fewer than the gang needs
QUIET = 3.0  # seconds a short gang is watched for a bind that must not come


def upstream_group(s: Space, name: str, min_count: int, topology_key: str = "") -> JSON:
    spec: JSON = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology_key:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    return {
        "apiVersion": UPSTREAM_PODGROUPS.api_version,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": s.name},
        "spec": spec,
    }


def plugins_group(s: Space, name: str, min_member: int) -> JSON:
    return {
        "apiVersion": PODGROUPS.api_version,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": s.name},
        "spec": {"minMember": min_member},
    }


async def create_upstream_member(s: Space, name: str, group: str) -> JSON:
    body = s.pod(name, "1")
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    created = await s.create(PODS.path(s.name), body)
    # The apiserver drops fields of a disabled gate without a word: make sure it kept it.
    assert created["spec"].get("schedulingGroup") == {"podGroupName": group}, created["spec"]
    return created


async def add_nodes(
    s: Space, prefix: str, count: int, labels: dict[str, str] | None = None
) -> list[str]:
    names = []
    for i in range(count):
        name = await s.add_node(f"{prefix}{i}", cpu="1")
        if labels:
            await s.client.request(
                "PATCH",
                NODES.path(name=name),
                body={"metadata": {"labels": labels}},
                content_type=MERGE,
            )
        names.append(name)
    return names


async def upstream_condition(s: Space, group: str) -> dict[str, Any] | None:
    found = await s.get(UPSTREAM_PODGROUPS.path(s.name, group)) or {}
    conditions = (found.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == SCHEDULED), None)


async def nothing_bound_for(s: Space, seconds: float) -> None:
    """No pod of the space gets bound during `seconds` (polled)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    while loop.time() < until:
        bound = await s.bound()
        assert bound == {}, bound
        await asyncio.sleep(0.2)


@dataclass(frozen=True)
class Outcome:
    """What became of a gang of GANG on SHORT nodes, then on GANG nodes."""

    bound_while_short: int
    bound_in_the_end: int
    distinct_nodes: int
    on_own_nodes: bool


EXPECTED = Outcome(
    bound_while_short=0, bound_in_the_end=GANG, distinct_nodes=GANG, on_own_nodes=True
)


async def gang_of_eight(
    s: Space, running: Running, group: str, *, waiting: Callable[[], Awaitable[bool]]
) -> Outcome:
    """With SHORT nodes and the gang's GANG members created (Shoal running): nothing is
    bound for QUIET seconds and `waiting()` holds; then two more nodes, and the whole
    gang is bound."""
    await wait_for(waiting, timeout=30, what=f"gang {group} reported unschedulable")
    await nothing_bound_for(s, QUIET)
    short = len(await s.bound())
    await add_nodes(s, "late", GANG - SHORT)

    async def whole() -> bool:
        return len(await s.bound()) == GANG

    await wait_for(whole, timeout=30, what=f"all {GANG} of gang {group} bound")
    await asyncio.sleep(0.5)  # a bind too many would show now
    bound = await s.bound()
    assert running.failed_binds() == 0
    return Outcome(
        bound_while_short=short,
        bound_in_the_end=len(bound),
        distinct_nodes=len(set(bound.values())),
        on_own_nodes=set(bound.values()) <= set(s.nodes),
    )


@async_test(timeout=120)
async def test_an_upstream_gang_waits_for_room_for_all_then_binds_and_says_so(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "kgang") as s:
        await add_nodes(s, "n", SHORT)
        await s.create(UPSTREAM_PODGROUPS.path(s.name), upstream_group(s, "train", GANG))
        for i in range(GANG):
            await create_upstream_member(s, f"train-{i}", "train")
        async with s.shoal(s.options("kgang")) as running:
            seen: list[dict[str, Any]] = []

            async def unschedulable() -> bool:
                c = await upstream_condition(s, "train")
                if c is not None and c.get("status") == "False":
                    seen.append(c)
                    return True
                return False

            outcome = await gang_of_eight(s, running, "train", waiting=unschedulable)
            assert outcome == EXPECTED
            why = seen[-1]
            print(f"\nwhile short: {why}")
            assert why["reason"] == "Unschedulable" and why["message"], why

            async def scheduled() -> bool:
                c = await upstream_condition(s, "train")
                return c is not None and c.get("status") == "True"

            await wait_for(scheduled, what="PodGroupScheduled=True")
            done = await upstream_condition(s, "train")
            assert done is not None and done["reason"] == "Scheduled", done
            assert done["lastTransitionTime"]


@async_test(timeout=90)
async def test_members_created_before_their_pod_group_wait_for_it(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "kgangorder") as s:
        await add_nodes(s, "n", 3)
        for i in range(3):
            await create_upstream_member(s, f"early-{i}", "early")
        async with s.shoal(s.options("kgangorder")) as running:

            async def known() -> bool:
                uid = (await s.pods())["early-0"]["metadata"]["uid"]
                return bool(running.kube.scheduler.explain(uid))

            await wait_for(known, what="early-0 seen by the scheduler")
            await nothing_bound_for(s, QUIET)
            uid = (await s.pods())["early-0"]["metadata"]["uid"]
            print(f"\nwithout its PodGroup: {running.kube.scheduler.explain(uid)}")
            await s.create(UPSTREAM_PODGROUPS.path(s.name), upstream_group(s, "early", 3))

            async def all_bound() -> bool:
                return len(await s.bound()) == 3

            await wait_for(all_bound, what="the gang bound once its PodGroup exists")
            assert len(set((await s.bound()).values())) == 3
            assert running.failed_binds() == 0


@async_test(timeout=120)
async def test_the_same_gang_in_scheduler_plugins_terms_comes_out_the_same(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "kgangsp") as s:
        await add_nodes(s, "n", SHORT)
        await s.create(PODGROUPS.path(s.name), plugins_group(s, "train", GANG))
        for i in range(GANG):
            await s.create_pod(f"train-{i}", "1", labels={SCHEDULER_PLUGINS_LABEL: "train"})
        async with s.shoal(s.options("kgangsp")) as running:

            async def unschedulable() -> bool:
                found = await s.get(PODGROUPS.path(s.name, "train")) or {}
                return (found.get("status") or {}).get("phase") == "Scheduling"

            outcome = await gang_of_eight(s, running, "train", waiting=unschedulable)
            assert outcome == EXPECTED


@async_test(timeout=90)
async def test_an_upstream_gang_keeps_to_one_domain_of_its_topology_key(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "kgangtopo") as s:
        rack_a = await add_nodes(s, "a", 3, {"rack": "a"})
        rack_b = await add_nodes(s, "b", 4, {"rack": "b"})
        group = await s.create(
            UPSTREAM_PODGROUPS.path(s.name), upstream_group(s, "ring", 4, topology_key="rack")
        )
        # Dropped without the TopologyAwareWorkloadScheduling gate.
        assert group["spec"].get("schedulingConstraints") == {"topology": [{"key": "rack"}]}
        for i in range(4):
            await create_upstream_member(s, f"ring-{i}", "ring")
        async with s.shoal(s.options("kgangtopo")) as running:

            async def all_bound() -> bool:
                return len(await s.bound()) == 4

            await wait_for(all_bound, what="the gang of 4 bound")
            bound = await s.bound()
            assert set(bound.values()) == set(rack_b), (bound, rack_a)
            assert running.failed_binds() == 0
