"""Against a real cluster: `KUBECONFIG=~/.kube/config pytest -m cluster tests/kube`.

Skipped when KUBECONFIG is unset. Needs rights to create nodes, namespaces, pods,
events and leases (a kind/minikube admin context is fine). It creates plain Node
objects (no kubelet: pods are bound, never started), tainted so that nothing else lands
on them, runs Shoal in-process with a profile name unique to the run, and checks that
every pod is bound to a feasible node by the right profile and that an infeasible pod is
reported. Everything it created is deleted at the end.

The gang test applies Shoal's CRDs (it needs the right to create
CustomResourceDefinitions; the ones it created are deleted again) and checks that a gang
backed by a PodGroup runs whole and the PodGroup's status says so, and that a gang that
cannot fit says why on its PodGroup.
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
from shoal.drivers.kube.crds import render
from shoal.drivers.kube.resources import EVENTS, NAMESPACES, NODES, PODGROUPS, PODS

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


def _pod(
    name: str,
    cpu: str,
    zone: str = "",
    *,
    namespace: str = NAMESPACE,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    selector = {LABEL: RUN}
    if zone:
        selector["e2e-zone"] = zone
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
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


async def _cleanup(
    client: KubeClient, nodes: list[str] | None = None, namespace: str = NAMESPACE
) -> None:
    for name in nodes if nodes is not None else [n for n, *_ in NODES_SPEC]:
        with contextlib.suppress(ApiError):
            await client.request("DELETE", NODES.path(name=name))
    try:
        listing = await client.request("GET", PODS.path(namespace))
        for item in listing.get("items") or []:
            await client.request(
                "DELETE",
                PODS.path(namespace, item["metadata"]["name"]),
                body={"gracePeriodSeconds": 0},  # no kubelet will confirm a graceful stop
            )
        await client.request("DELETE", NAMESPACES.path(name=namespace))
    except ApiError:
        pass


async def _add_node(client: KubeClient, name: str, cpu: str, memory: str, zone: str) -> None:
    await client.request("POST", NODES.path(), body=_node(name, cpu, memory, zone))
    capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
    await client.request(
        "PATCH",
        NODES.path(name=name, subresource="status"),
        body={"status": {"capacity": capacity, "allocatable": capacity}},
        content_type="application/merge-patch+json",
    )


@async_test(timeout=300)
async def test_pods_are_bound_to_feasible_nodes_by_the_right_profile(tmp_path: Path) -> None:
    connection = await connect(os.environ["KUBECONFIG"])
    client = connection.client("e2e", ClientSettings(qps=0, timeout=30))
    try:
        await client.request("POST", NAMESPACES.path(), body={"metadata": {"name": NAMESPACE}})
        for name, cpu, memory, zone in NODES_SPEC:
            await _add_node(client, name, cpu, memory, zone)
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


CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


async def _install_crds(client: KubeClient) -> list[str]:
    """Apply Shoal's CRDs that are missing and wait until they are served; the names of
    the ones created."""
    import yaml

    created = []
    for text in render().values():
        crd = yaml.safe_load(text)
        try:
            await client.request("POST", CRDS_PATH, body=crd)
            created.append(crd["metadata"]["name"])
        except ApiError as err:
            if not err.conflict:
                raise
    for name in created:
        for _ in range(100):
            found = await client.request("GET", f"{CRDS_PATH}/{name}")
            conditions = (found.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            await asyncio.sleep(0.1)
    return created


@async_test(timeout=300)
async def test_gangs_run_whole_and_their_pod_groups_say_how_they_are(tmp_path: Path) -> None:
    namespace = f"{NAMESPACE}-gang"
    nodes = [f"shoal-e2e-{RUN}-g{i}" for i in range(2)]
    connection = await connect(os.environ["KUBECONFIG"])
    client = connection.client("e2e", ClientSettings(qps=0, timeout=30))
    created: list[str] = []
    try:
        created = await _install_crds(client)
        await client.request("POST", NAMESPACES.path(), body={"metadata": {"name": namespace}})
        for name in nodes:
            await _add_node(client, name, "4", "8Gi", "a")
        groups = {"fits": 3, "too-big": 2}
        for group, min_member in groups.items():
            body = {
                "apiVersion": PODGROUPS.api_version,
                "kind": "PodGroup",
                "metadata": {"name": group, "namespace": namespace},
                "spec": {"minMember": min_member},
            }
            for attempt in range(50):  # discovery may lag the CRD's Established
                try:
                    await client.request("POST", PODGROUPS.path(namespace), body=body)
                    break
                except ApiError as err:
                    if not err.not_found or attempt == 49:
                        raise
                    await asyncio.sleep(0.2)
        label = "scheduling.x-k8s.io/pod-group"
        for i in range(3):
            obj = _pod(f"fits-{i}", "1", namespace=namespace, labels={label: "fits"})
            await client.request("POST", PODS.path(namespace), body=obj)
        for i in range(2):  # 5 cpu on 4-cpu nodes: never fits
            obj = _pod(f"too-big-{i}", "5", namespace=namespace, labels={label: "too-big"})
            await client.request("POST", PODS.path(namespace), body=obj)

        scheduler_config = parse_config({"profiles": [{"schedulerName": SCHEDULER}]})
        kube = KubeBackend(scheduler_config, connection, fast_options(f"e2e-gang-{RUN}"))
        task = asyncio.create_task(kube.run())
        try:
            deadline = asyncio.get_running_loop().time() + 120

            async def status_of(group: str) -> dict[str, Any]:
                found = await client.request("GET", PODGROUPS.path(namespace, group))
                return dict(found.get("status") or {})

            # Running once the cluster's kubelets started the members (Scheduled before).
            while (await status_of("fits")).get("phase") != "Running":
                assert asyncio.get_running_loop().time() < deadline, "fits is not Running"
                await asyncio.sleep(0.5)
            status = await status_of("fits")
            assert status["running"] == 3 and status["scheduleStartTime"]
            listing = await client.request("GET", PODS.path(namespace))
            placed = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in listing["items"]}
            assert all(placed[f"fits-{i}"] in nodes for i in range(3)), placed
            assert not placed["too-big-0"] and not placed["too-big-1"]
            while (await status_of("too-big")).get("phase") != "Scheduling":
                assert asyncio.get_running_loop().time() < deadline, "too-big not Scheduling"
                await asyncio.sleep(0.5)
            why = next(
                c for c in (await status_of("too-big"))["conditions"] if c["type"] == "Scheduled"
            )
            assert why["status"] == "False" and why["reason"] == "Unschedulable"
            assert "too-big" in why["message"]
        finally:
            kube.stop()
            await asyncio.wait_for(task, 30)
    finally:
        with contextlib.suppress(ApiError):
            for group in ("fits", "too-big"):
                await client.request("DELETE", PODGROUPS.path(namespace, group))
        await _cleanup(client, nodes, namespace)
        for name in created:
            with contextlib.suppress(ApiError):
                await client.request("DELETE", f"{CRDS_PATH}/{name}")
        await connection.close()
