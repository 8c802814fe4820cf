"""Shoal against a real kube-apiserver: binding, reporting, preemption, evictions.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from apihelpers import counted, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import PDBS, PODS


def _condition(pod: dict[str, object], kind: str = "PodScheduled") -> dict[str, str]:
    status = pod.get("status") or {}
    assert isinstance(status, dict)
    found = [c for c in status.get("conditions") or [] if c.get("type") == kind]
    return found[0] if found else {}


@async_test(timeout=60)
async def test_pods_are_bound_through_the_binding_subresource(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "bind") as s:
        nodes = [await s.add_node(f"n{i}", cpu="2") for i in range(3)]
        for i in range(10):
            await s.create_pod(f"p{i}", "500m")
        # Someone else's pod: Shoal leaves it alone.
        await s.create_pod("other", "500m", scheduler="default-scheduler")
        async with s.shoal(s.options("bind")) as shoal:

            async def all_bound() -> bool:
                return len(await s.bound()) == 10

            await wait_for(all_bound, what="10 pods bound")
            pods = await s.pods()
            used: dict[str, int] = {}
            for name, p in pods.items():
                if name == "other":
                    assert not p["spec"].get("nodeName")
                    continue
                assert p["spec"]["nodeName"] in nodes
                used[p["spec"]["nodeName"]] = used.get(p["spec"]["nodeName"], 0) + 500
                # Set by the API server's binding storage, not by a pod update.
                assert _condition(p)["status"] == "True"
                assert p["status"]["phase"] == "Pending"  # no kubelet
            assert all(milli <= 2000 for milli in used.values()), used
            await counted(lambda: shoal.binds() == 10, "the 10 binds counted")
            assert shoal.failed_binds() == 0


@async_test(timeout=60)
async def test_gpu_device_indices_travel_in_the_binding(
    control_plane: dict[str, str],
) -> None:
    """The API server copies a Binding's annotations onto the pod in the write that sets
    its node: the device index arrives with the node, and Shoal never patches pods."""
    async with space(control_plane["KUBECONFIG"], "gpuidx") as s:
        await s.add_node("g", cpu="4", gpus=2)
        for name in ("t1", "t2"):
            body = s.pod(name, "100m")
            body["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
            await s.client.request("POST", PODS.path(s.name), body=body)
        async with s.watching_pods() as seen, s.shoal(s.options("gpuidx")):

            async def both_bound() -> bool:
                return len(await s.bound()) == 2

            await wait_for(both_bound, what="2 GPU pods bound")
            indices = {
                name: p["metadata"].get("annotations", {}).get("shoal.dev/gpu-index")
                for name, p in (await s.pods()).items()
            }
            assert sorted(indices.values()) == ["0", "1"], indices
            # No version of a pod showed its node without its devices.
            for version in seen:
                if version["spec"].get("nodeName"):
                    annotations = version["metadata"].get("annotations") or {}
                    assert "shoal.dev/gpu-index" in annotations, version["metadata"]


@async_test(timeout=60)
async def test_a_pod_that_fits_nowhere_gets_kubes_message_as_event_and_condition(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "unsched") as s:
        for i in range(2):
            await s.add_node(f"n{i}", cpu="2")
        await s.create_pod("huge", "64")
        async with s.shoal(s.options("unsched")):

            async def reported() -> bool:
                return bool(await s.events("huge", "FailedScheduling"))

            await wait_for(reported, what="FailedScheduling event")
            event = (await s.events("huge", "FailedScheduling"))[0]
            assert event["type"] == "Warning"
            assert event["reportingController"] == s.scheduler
            # kube-scheduler's wording: the count of nodes, then of each reason.
            expected = r"^0/2 nodes are available: 2 Insufficient cpu\."
            assert re.match(expected, event["note"]), event["note"]

            async def conditioned() -> bool:
                return _condition((await s.pods())["huge"]).get("status") == "False"

            await wait_for(conditioned, what="PodScheduled=False")
            condition = _condition((await s.pods())["huge"])
            assert condition["reason"] == "Unschedulable"
            assert re.match(expected, condition["message"]), condition["message"]
            assert not (await s.pods())["huge"]["spec"].get("nodeName")


@async_test(timeout=90)
async def test_preemption_sets_nominated_node_name_and_evicts_through_the_api(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "preempt") as s:
        n1 = await s.add_node("n1", cpu="2")
        for name in ("protected", "free"):
            await s.create_pod(name, "1", labels={"app": name}, node_name=n1, scheduler="x")
            await s.set_running(name)
        # A budget without status (no disruption controller): nothing may be disrupted.
        budget = {"minAvailable": 1, "selector": {"matchLabels": {"app": "protected"}}}
        await s.create(PDBS.path(s.name), {"metadata": {"name": "keep"}, "spec": budget})
        high = await s.add_priority_class("high", 100)
        await s.create_pod("urgent", "1", priority_class=high)
        async with s.watching_pods() as seen, s.shoal(s.options("preempt")) as shoal:

            async def bound() -> bool:
                return (await s.bound()).get("urgent") == n1

            def history() -> list[tuple[str | None, str | None]]:
                """(nominatedNodeName, nodeName) of each version of urgent."""
                return [
                    ((p.get("status") or {}).get("nominatedNodeName"), p["spec"].get("nodeName"))
                    for p in seen
                    if p["metadata"]["name"] == "urgent"
                ]

            await wait_for(bound, what="urgent bound after the eviction")
            await wait_for(
                _true(lambda: any(node == n1 for _, node in history())), what="the bind watched"
            )
            assert (n1, None) in history(), history()  # nominated while still unbound
            pods = await s.pods()
            assert "free" not in pods and "protected" in pods
            assert shoal.kube.metrics.evictions.labels("evicted")._value.get() == 1
            assert await s.events("free", "Preempted")


@async_test(timeout=60)
async def test_evictions_go_through_the_eviction_api_and_the_server_enforces_budgets(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "pdb") as s:
        n1 = await s.add_node("n1")
        for i in range(2):
            await s.create_pod(f"web{i}", "1", labels={"app": "web"}, node_name=n1, scheduler="x")
            await s.set_running(f"web{i}")
        budget = {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
        pdb = await s.create(PDBS.path(s.name), {"metadata": {"name": "web"}, "spec": budget})
        async with s.shoal(s.options("pdb")) as shoal:
            cluster = shoal.kube.scheduler.cluster

            # Listed is not yet applied: the core takes the informers' events in its own step.
            async def both_seen() -> bool:
                return {p.name for p in cluster.pods_on(n1)} == {"web0", "web1"}

            await wait_for(both_seen, what="both pods counted on n1")
            evictor = shoal.kube.evictor
            evictor.retries = 0
            infos = {p.name: p for p in cluster.pods_on(n1)}
            # kube-apiserver refuses while the budget's status has not observed its
            # generation (no disruption controller has processed it).
            assert await evictor.evict_now(infos["web0"], "test") == "blocked"
            # Play the disruption controller: one disruption allowed.
            await s.client.request(
                "PATCH",
                PDBS.path(s.name, "web", "status"),
                body={
                    "status": {
                        "observedGeneration": pdb["metadata"]["generation"],
                        "disruptionsAllowed": 1,
                        "currentHealthy": 2,
                        "desiredHealthy": 1,
                        "expectedPods": 2,
                    }
                },
                content_type="application/merge-patch+json",
            )
            assert await evictor.evict_now(infos["web0"], "test") == "evicted"
            # The API server spent the budget: the second is refused (429).
            assert await evictor.evict_now(infos["web1"], "test") == "blocked"
            pods = await s.pods()
            assert "web0" not in pods and "web1" in pods
            status = (await s.get(PDBS.path(s.name, "web")) or {})["status"]
            assert status["disruptionsAllowed"] == 0 and "web0" in status["disruptedPods"]

            async def refused() -> bool:
                return bool(await s.events("web1", "EvictionFailed"))

            await wait_for(refused, what="EvictionFailed event")
            assert "disruption budget" in (await s.events("web1", "EvictionFailed"))[0]["note"]
            assert await evictor.evict_now(infos["web0"], "test") == "gone"


def _true(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def run() -> bool:
        return check()

    return run
