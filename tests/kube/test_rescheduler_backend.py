"""The Rescheduler through the Kubernetes backend, against the fake API server.

The requirements' case: node1 runs podA (4 GPUs) and podB (3 GPUs), node2 runs other
work with 5 GPUs; podC asks for 4 GPUs. The backend evicts podB through the Eviction API
(a `Rescheduled` event naming the plan), podC is bound to node1, and podB's replacement,
created by its ReplicaSet (here: by the test, as there is no controller), is bound to
node2 where the plan held room for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubehelpers import async_test, bound_pods, events_for, eventually, node, pod
from kubehelpers import backend as running

from shoal.config import parse_config
from shoal.plugins.rescheduler import with_rescheduler
from shoal.testing.fake_apiserver import FakeApiServer

GPU = "nvidia.com/gpu"
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True}


def gpu_node(name: str) -> dict[str, Any]:
    obj = node(name, cpu="64", memory="256Gi")
    for key in ("capacity", "allocatable"):
        obj["status"][key][GPU] = "8"
    return obj


def gpu_pod(name: str, gpus: int, node_name: str = "", owner: str = "") -> dict[str, Any]:
    obj = pod(name, cpu="1", node_name=node_name)
    obj["spec"]["containers"][0]["resources"]["requests"][GPU] = str(gpus)
    obj["spec"]["containers"][0]["resources"]["limits"] = {GPU: str(gpus)}
    owner = owner or f"rs-{name}"
    obj["metadata"]["ownerReferences"] = [{**OWNER, "name": owner, "uid": f"uid-{owner}"}]
    return obj


@async_test(timeout=40)
async def test_the_requirements_case_through_the_eviction_api(tmp_path: Path) -> None:
    config = with_rescheduler(
        parse_config({"profiles": [{"schedulerName": "shoal"}]}), {"minRunSeconds": 0}
    )
    async with FakeApiServer() as api:
        for name in ("node1", "node2"):
            api.create("v1", "nodes", gpu_node(name))
        for name, gpus, where in (
            ("podA", 4, "node1"),
            ("podB", 3, "node1"),
            ("other", 5, "node2"),
        ):
            api.create("v1", "pods", gpu_pod(name, gpus, where))
            api.set_pod_phase("default", name, "Running")
        api.create("v1", "pods", gpu_pod("podC", 4))
        async with running(api, tmp_path, scheduler_config=config) as (kube, _):
            await eventually(lambda: api.evictions == ["default/podB"], what="eviction")
            await eventually(lambda: bool(events_for(api, "podB", "Rescheduled")))
            note = events_for(api, "podB", "Rescheduled")[0]["note"]
            assert note.startswith("rescheduled by plan migration-1: moving from node node1")
            assert "to node node2 to make room for default/podC on node node1" in note
            await eventually(lambda: api.get("", "pods", "default", "podB") is None)
            # The ReplicaSet's replacement (no controller manager here: the test is it).
            api.create("v1", "pods", gpu_pod("podB-x7k2p", 3, owner="rs-podB"))
            await eventually(
                lambda: bound_pods(api).get("default/podC") == "node1", timeout=15, what="podC"
            )
            await eventually(
                lambda: bound_pods(api).get("default/podB-x7k2p") == "node2",
                timeout=15,
                what="podB's replacement",
            )
            assert api.evictions == ["default/podB"]
            registry = kube.metrics.registry
            assert registry.get_sample_value("shoal_rescheduler_plans_total") == 1
            assert registry.get_sample_value("shoal_rescheduler_moves_total") == 1
            await eventually(
                lambda: (
                    registry.get_sample_value(
                        "shoal_rescheduler_holds_total", {"outcome": "claimed"}
                    )
                    == 1
                )
            )
