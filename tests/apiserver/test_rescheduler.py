"""The Rescheduler against a real kube-apiserver: the requirements' case.

node1 runs podA (4 GPUs) and podB (3 GPUs, owned by a ReplicaSet), node2 runs other work
with 5 GPUs; podC asks for 4 GPUs. Shoal evicts podB through the Eviction API with a
`Rescheduled` event, podC is bound to node1, and podB's replacement lands on node2. The
kit has no controller manager, so the test creates the replacement as the ReplicaSet
controller would (same owner reference, generated name).

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

from typing import Any

from apihelpers import MERGE, Space, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import NODES, PODS
from shoal.plugins.rescheduler import with_rescheduler

GPU = "nvidia.com/gpu"


async def gpu_node(s: Space, name: str) -> str:
    node = await s.add_node(name, cpu="64", memory="256Gi")
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "110", GPU: "8"}
    await s.client.request(
        "PATCH",
        NODES.path(name=node, subresource="status"),
        body={"status": {"capacity": capacity, "allocatable": capacity}},
        content_type=MERGE,
    )
    return node


async def replica_set(s: Space, name: str, gpus: int) -> dict[str, Any]:
    """A ReplicaSet object (nothing runs it here), for real owner references."""
    labels = {"app": name}
    template = {"metadata": {"labels": labels}, "spec": s.pod("t", "1")["spec"]}
    body = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": s.name},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template},
    }
    found: dict[str, Any] = await s.create(f"/apis/apps/v1/namespaces/{s.name}/replicasets", body)
    return found


def gpu_pod(
    s: Space, name: str, gpus: int, owner: dict[str, Any], node_name: str = ""
) -> dict[str, Any]:
    body = s.pod(name, "1", node_name=node_name, labels={"app": owner["metadata"]["name"]})
    body["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1", "memory": "64Mi", GPU: str(gpus)},
        "limits": {GPU: str(gpus)},
    }
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
            "controller": True,
        }
    ]
    return body


@async_test(timeout=120)
async def test_the_requirements_case_against_the_api_server(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "resched") as s:
        node1, node2 = await gpu_node(s, "node1"), await gpu_node(s, "node2")
        owners = {
            name: await replica_set(s, f"rs-{name}", 0)
            for name in ("pod-a", "pod-b", "other", "pod-c")
        }
        for name, gpus, where in (("pod-a", 4, node1), ("pod-b", 3, node1), ("other", 5, node2)):
            await s.create(PODS.path(s.name), gpu_pod(s, name, gpus, owners[name], where))
            await s.set_running(name)
        await s.create(PODS.path(s.name), gpu_pod(s, "pod-c", 4, owners["pod-c"]))
        config = with_rescheduler(s.config(), {"minRunSeconds": 0})
        async with s.shoal(s.options("resched"), config) as shoal:

            async def pod_b_gone() -> bool:
                return "pod-b" not in await s.pods()

            await wait_for(pod_b_gone, what="podB evicted")

            async def rescheduled_event() -> bool:
                return bool(await s.events("pod-b", "Rescheduled"))

            await wait_for(rescheduled_event, what="the Rescheduled event")
            events = await s.events("pod-b", "Rescheduled")
            assert events and "to make room for" in events[0]["note"], events
            # The ReplicaSet controller's replacement (no controller manager in the kit).
            await s.create(PODS.path(s.name), gpu_pod(s, "pod-b-7xq2k", 3, owners["pod-b"]))

            async def settled() -> bool:
                bound = await s.bound()
                return bound.get("pod-c") == node1 and bound.get("pod-b-7xq2k") == node2

            await wait_for(settled, what="podC on node1 and podB's replacement on node2")
            assert await s.bound() == {
                "pod-a": node1,
                "pod-c": node1,
                "other": node2,
                "pod-b-7xq2k": node2,
            }
            assert shoal.kube.metrics.evictions.labels("evicted")._value.get() == 1
