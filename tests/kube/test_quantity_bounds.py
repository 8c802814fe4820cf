"""Quantities beyond int64 (kube's resource.Quantity limit) against the kube backend."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from kubehelpers import async_test, bound_pods, events_for, eventually, node, pod
from kubehelpers import backend as running

from shoal.testing.fake_apiserver import FakeApiServer


@async_test()
async def test_quantities_beyond_int64_are_reported_and_the_rest_is_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="shoal.kube")
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("good", cpu="8", memory="16Gi"))
        huge_node = node("huge-node", cpu="8")
        huge_node["status"]["allocatable"]["memory"] = "1e30"
        api.create("v1", "nodes", huge_node)
        api.create("v1", "pods", pod("huge-cpu", cpu="99999999999999999999"))
        api.create("v1", "pods", pod("huge-memory", memory="1e30"))
        # Each container fits in int64, their sum does not.
        split = pod("huge-sum", memory="5E")
        split["spec"]["containers"].append(
            {"name": "d", "image": "x", "resources": {"requests": {"memory": "5E"}}}
        )
        api.create("v1", "pods", split)
        for i in range(3):
            api.create("v1", "pods", pod(f"fine{i}", cpu="1"))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 3, what="the good pods bound")
            assert set(bound_pods(api).values()) == {"good"}
            for name in ("huge-node", "huge-cpu", "huge-memory", "huge-sum"):
                await eventually(
                    lambda n=name: bool(events_for(api, n, "InvalidObject")), what=name
                )
            notes = {
                e["regarding"]["name"]: e["note"]
                for e in api.list_objects("events.k8s.io", "events")
                if e["reason"] == "InvalidObject"
            }
            assert "allocatable.memory" in notes["huge-node"]
            assert "9223372036854775807" in notes["huge-node"]
            assert "requests.cpu" in notes["huge-cpu"]
            assert "99999999999999999999" in notes["huge-cpu"]
            assert "memory" in notes["huge-memory"] and "1e30" in notes["huge-memory"]
            assert "memory" in notes["huge-sum"]
            # The node is not added with a zero (or any) capacity.
            assert "huge-node" not in kube.scheduler.cluster.table.row_of
            assert kube.metrics.invalid_objects.labels("pods")._value.get() == 3
            assert kube.metrics.invalid_objects.labels("nodes")._value.get() == 1
            logged = {getattr(r, "object", "") for r in caplog.records}
            assert {"huge-node", "default/huge-cpu", "default/huge-sum"} <= logged
            # The scheduler keeps serving: a new pod is bound.
            api.create("v1", "pods", pod("later", cpu="1"))
            await eventually(lambda: bound_pods(api).get("default/later") == "good")


@async_test()
async def test_a_node_with_absurd_gpu_counts_is_left_out_whole(tmp_path: Path) -> None:
    """A Node reporting 1e9 GPUs made numpy allocate 238 GiB; in `shoal run` the node was
    left half-added (CPU pods went there, its GPUs were invisible)."""
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("good", cpu="8", memory="16Gi"))
        absurd = node("absurd", cpu="64", memory="256Gi")
        absurd["status"]["allocatable"]["nvidia.com/gpu"] = "1000000000"
        api.create("v1", "nodes", absurd)
        for i in range(3):
            api.create("v1", "pods", pod(f"fine{i}", cpu="1"))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 3, what="the good pods bound")
            assert set(bound_pods(api).values()) == {"good"}
            await eventually(lambda: bool(events_for(api, "absurd", "InvalidObject")))
            (note,) = [
                e["note"]
                for e in api.list_objects("events.k8s.io", "events")
                if e["reason"] == "InvalidObject" and e["regarding"]["name"] == "absurd"
            ]
            assert "status.allocatable.nvidia.com/gpu" in note and "more than 256" in note
            assert "absurd" not in kube.scheduler.cluster.table.row_of
