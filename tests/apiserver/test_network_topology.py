"""Volcano's network topology on a real kube-apiserver: HyperNodes (a minimal CRD for
topology.volcano.sh/v1alpha1, installed here) and a Volcano PodGroup with
`networkTopology`.

Two leaves of three 1-cpu nodes under one spine; no node carries a topology label.
Leaf a is chosen by a regex over node names, leaf b by exact names, the spine names its
leaves. One node of leaf a is taken. A gang of three, `hard` with
`highestTierAllowed: 1`, must sit in one leaf: it binds in leaf b (leaf a has only two
free nodes). A gang of four cannot fit any leaf: it waits, saying which tier; allowed up
to the spine (tier 2), the same four bind. A HyperNode with a bad regex is an
InvalidObject naming the field."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from apihelpers import Space, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import EVENTS, HYPERNODES, VOLCANO_PODGROUPS

HYPERNODE_CRD = "hypernodes.topology.volcano.sh"
# The fields Shoal reads, loosely (Volcano's own CRD has a full schema).
MINIMAL_HYPERNODE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": HYPERNODE_CRD},
    "spec": {
        "group": "topology.volcano.sh",
        "names": {
            "kind": "HyperNode",
            "listKind": "HyperNodeList",
            "plural": "hypernodes",
            "singular": "hypernode",
            "shortNames": ["hn"],
        },
        "scope": "Cluster",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "tier": {"type": "integer"},
                                    "members": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True,
                                        },
                                    },
                                },
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            }
        ],
    },
}
GROUP_NAME = "scheduling.k8s.io/group-name"


@pytest.fixture(scope="module")
def hypernode_crd(
    kubectl: Callable[..., str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    existed = bool(kubectl("get", "crd", HYPERNODE_CRD, "--ignore-not-found"))
    path = tmp_path_factory.mktemp("hypernodes") / "crd.yaml"
    path.write_text(yaml.safe_dump(MINIMAL_HYPERNODE_CRD))
    kubectl("apply", "-f", str(path))
    kubectl(
        "wait", "--for=condition=Established", f"crd/{HYPERNODE_CRD}", "--timeout=60s", timeout=90
    )
    try:
        yield
    finally:
        if not existed:
            kubectl(
                "delete",
                "crd",
                HYPERNODE_CRD,
                "--wait=true",
                "--timeout=60s",
                timeout=90,
                check=False,
            )


def member(kind: str, **selector: Any) -> dict[str, Any]:
    return {"type": kind, "selector": selector}


async def add_hypernode(s: Space, name: str, tier: int, *members: dict[str, Any]) -> str:
    name = f"{s.name}-{name}"
    body = {
        "apiVersion": HYPERNODES.api_version,
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {"tier": tier, "members": list(members)},
    }
    await s.create(HYPERNODES.path(), body)
    s.cluster_objects.append(HYPERNODES.path(name=name))
    return name


async def volcano_gang(s: Space, name: str, size: int, highest: int) -> list[str]:
    await s.create(
        VOLCANO_PODGROUPS.path(s.name),
        {
            "apiVersion": VOLCANO_PODGROUPS.api_version,
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": s.name},
            "spec": {
                "minMember": size,
                "networkTopology": {"mode": "hard", "highestTierAllowed": highest},
            },
        },
    )
    names = [f"{name}-{i}" for i in range(size)]
    for pod in names:
        await s.create_pod(pod, "1", annotations={GROUP_NAME: name})
    return names


@async_test(timeout=180)
async def test_a_volcano_gang_with_network_topology_binds_inside_one_hypernode(
    control_plane: dict[str, str], lax_volcano_crd: None, hypernode_crd: None
) -> None:
    async with space(control_plane["KUBECONFIG"], "hypernodes") as s:
        leaf_a = [await s.add_node(f"a{i}", cpu="1") for i in range(3)]
        leaf_b = [await s.add_node(f"b{i}", cpu="1") for i in range(3)]
        a = await add_hypernode(
            s, "leaf-a", 1, member("Node", regexMatch={"pattern": f"^{s.name}-a"})
        )
        b = await add_hypernode(
            s, "leaf-b", 1, *(member("Node", exactMatch={"name": n}) for n in leaf_b)
        )
        await add_hypernode(
            s,
            "spine",
            2,
            member("HyperNode", exactMatch={"name": a}),
            member("HyperNode", exactMatch={"name": b}),
        )
        broken = await add_hypernode(s, "broken", 1, member("Node", regexMatch={"pattern": "(["}))
        await s.create_pod("busy", "1", node_name=leaf_a[0], scheduler="nobody")
        try:
            async with s.shoal(s.options("hypernodes")) as running:
                scheduler = running.kube.scheduler
                small = await volcano_gang(s, "small", 3, highest=1)

                async def small_bound() -> bool:
                    bound = await s.bound()
                    return all(p in bound for p in small)

                await wait_for(small_bound, what="the gang of 3 bound", timeout=60)
                bound = await s.bound()
                assert {bound[p] for p in small} == set(leaf_b), bound

                big = await volcano_gang(s, "big", 4, highest=1)
                uid = (await s.pods())[big[0]]["metadata"]["uid"]

                async def refused() -> bool:
                    return "no single HyperNode of tier <= 1 can hold 4 members" in (
                        scheduler.explain(uid)
                    )

                await wait_for(refused, what="the gang of 4 waiting, naming tier 1")
                print(f"\nbig: {scheduler.explain(uid)}")
                bound = await s.bound()
                assert not any(p in bound for p in big), bound

                async def reported() -> list[dict[str, Any]]:
                    # A cluster-scoped object's events are in the default namespace.
                    found = await s.client.request("GET", EVENTS.path("default"))
                    return [
                        e
                        for e in found.get("items") or []
                        if (e.get("regarding") or {}).get("name") == broken
                        and e.get("reason") == "InvalidObject"
                    ]

                async def any_reported() -> bool:
                    return bool(await reported())

                await wait_for(any_reported, what="an InvalidObject event on the broken HyperNode")
                (event,) = await reported()
                assert event["regarding"]["kind"] == "HyperNode"
                assert "field spec.members[0].selector.regexMatch.pattern" in event["note"]

                # Without the gang of 3, and allowed up to the spine (tier 2), the gang of
                # 4 fits: 2 free nodes in leaf a, 3 in leaf b.
                await s.client.request("DELETE", VOLCANO_PODGROUPS.path(s.name, "small"))
                for p in small:
                    await s.client.request("DELETE", f"/api/v1/namespaces/{s.name}/pods/{p}")
                await s.client.request(
                    "PATCH",
                    VOLCANO_PODGROUPS.path(s.name, "big"),
                    body={"spec": {"networkTopology": {"highestTierAllowed": 2}}},
                    content_type="application/merge-patch+json",
                )

                async def big_bound() -> bool:
                    bound = await s.bound()
                    return all(p in bound for p in big)

                await wait_for(big_bound, what="the gang of 4 bound within the spine", timeout=60)
                assert running.failed_binds() == 0
        finally:
            for group in ("small", "big"):
                with contextlib.suppress(Exception):
                    await s.client.request("DELETE", VOLCANO_PODGROUPS.path(s.name, group))
