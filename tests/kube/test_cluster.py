"""Against a real cluster: `KUBECONFIG=~/.kube/config pytest -m cluster tests/kube`.

Skipped when KUBECONFIG is unset. Needs rights to create nodes, namespaces, pods,
events and leases (a kind/minikube admin context is fine). It creates plain Node
objects (no kubelet: pods are bound, never started), tainted so that nothing else lands
on them, runs Shoal in-process with a profile name unique to the run, and checks that
every pod is bound to a feasible node by the right profile and that an infeasible pod is
reported. Everything it created is deleted at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubehelpers import async_test, eventually, fast_options

from shoal.api.quantity import to_milli
from shoal.config import parse_config
from shoal.drivers.kube.backend import KubeBackend
from shoal.drivers.kube.client import ApiError, ClientSettings, KubeClient, connect
from shoal.drivers.kube.resources import EVENTS, NAMESPACES, NODES, PODS

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="KUBECONFIG is not set"),
]

RUN = uuid.uuid4().hex[:6]
LABEL = "shoal.dev/e2e"
SCHEDULER = f"shoal-e2e-{RUN}"
NAMESPACE = f"shoal-e2e-{RUN}"
# What a node without a kubelet gets from the node lifecycle controller, plus our own.
TOLERATIONS = [
    {"key": LABEL, "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},
]
NODES_SPEC = [(f"shoal-e2e-{RUN}-{i}", "4", "8Gi", "a" if i < 2 else "b") for i in range(4)]


def _node(name: str, cpu: str, memory: str, zone: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {LABEL: RUN, "kubernetes.io/hostname": name, "e2e-zone": zone},
        },
        "spec": {"taints": [{"key": LABEL, "value": RUN, "effect": "NoSchedule"}]},
    }


def _pod(name: str, cpu: str, zone: str = "") -> dict[str, Any]:
    selector = {LABEL: RUN}
    if zone:
        selector["e2e-zone"] = zone
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedulerName": SCHEDULER,
            "nodeSelector": selector,
            "tolerations": TOLERATIONS,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
                }
            ],
        },
    }


async def _cleanup(client: KubeClient) -> None:
    for name, *_ in NODES_SPEC:
        with contextlib.suppress(ApiError):
            await client.request("DELETE", NODES.path(name=name))
    try:
        listing = await client.request("GET", PODS.path(NAMESPACE))
        for item in listing.get("items") or []:
            await client.request(
                "DELETE",
                PODS.path(NAMESPACE, item["metadata"]["name"]),
                body={"gracePeriodSeconds": 0},  # no kubelet will confirm a graceful stop
            )
        await client.request("DELETE", NAMESPACES.path(name=NAMESPACE))
    except ApiError:
        pass


@async_test(timeout=300)
async def test_pods_are_bound_to_feasible_nodes_by_the_right_profile(tmp_path: Path) -> None:
    connection = await connect(os.environ["KUBECONFIG"])
    client = connection.client("e2e", ClientSettings(qps=0, timeout=30))
    try:
        await client.request("POST", NAMESPACES.path(), body={"metadata": {"name": NAMESPACE}})
        for name, cpu, memory, zone in NODES_SPEC:
            await client.request("POST", NODES.path(), body=_node(name, cpu, memory, zone))
            capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
            await client.request(
                "PATCH",
                NODES.path(name=name, subresource="status"),
                body={"status": {"capacity": capacity, "allocatable": capacity}},
                content_type="application/merge-patch+json",
            )
        pods = [_pod(f"p{i}", "500m") for i in range(10)]
        pods += [_pod(f"zone-b-{i}", "1", zone="b") for i in range(3)]
        pods.append(_pod("infeasible", "64"))
        for obj in pods:
            await client.request("POST", PODS.path(NAMESPACE), body=obj)

        scheduler_config = parse_config({"profiles": [{"schedulerName": SCHEDULER}]})
        kube = KubeBackend(scheduler_config, connection, fast_options(f"e2e-{RUN}"))
        task = asyncio.create_task(kube.run())
        try:

            async def listing() -> list[dict[str, Any]]:
                found = await client.request("GET", PODS.path(NAMESPACE))
                return list(found.get("items") or [])

            state: list[dict[str, Any]] = []

            async def all_bound() -> bool:
                state[:] = await listing()
                return sum(1 for p in state if p["spec"].get("nodeName")) == len(pods) - 1

            deadline = asyncio.get_running_loop().time() + 120
            while not await all_bound():
                assert asyncio.get_running_loop().time() < deadline, "pods not bound in time"
                await asyncio.sleep(0.5)
            nodes = {name: (to_milli(cpu), zone) for name, cpu, _, zone in NODES_SPEC}
            used: dict[str, int] = {}
            for p in state:
                name, node_name = p["metadata"]["name"], p["spec"].get("nodeName")
                if name == "infeasible":
                    assert not node_name
                    continue
                assert node_name in nodes, (name, node_name)
                if name.startswith("zone-b"):
                    assert nodes[node_name][1] == "b"
                request = p["spec"]["containers"][0]["resources"]["requests"]["cpu"]
                used[node_name] = used.get(node_name, 0) + to_milli(request)
            assert all(used[n] <= nodes[n][0] for n in used), used

            async def reported() -> bool:
                events = await client.request("GET", EVENTS.path(NAMESPACE))
                return any(
                    e.get("reason") == "FailedScheduling"
                    and e.get("regarding", {}).get("name") == "infeasible"
                    and e.get("reportingController") == SCHEDULER
                    for e in events.get("items") or []
                )

            while not await reported():
                assert asyncio.get_running_loop().time() < deadline, "no FailedScheduling event"
                await asyncio.sleep(0.5)
            await eventually(lambda: kube.metrics.binds.labels("bound")._value.get() >= 13)
        finally:
            kube.stop()
            await asyncio.wait_for(task, 30)
    finally:
        await _cleanup(client)
        await connection.close()
