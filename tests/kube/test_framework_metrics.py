"""`shoal run`'s backend times its extension points and exports per-queue gauges: after
it binds pods from the fake API server, /metrics's registry says so."""

from __future__ import annotations

from pathlib import Path

import yaml
from kubehelpers import async_test, bound_pods, eventually, node, pod
from kubehelpers import backend as running
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from shoal.drivers.kube.crds import render
from shoal.testing.fake_apiserver import FakeApiServer


def _samples(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


@async_test(timeout=60)
async def test_the_backend_times_extension_points_and_exports_queue_gauges(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        for text in render().values():
            api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
        api.create("v1", "nodes", node("n1", cpu="4"))
        api.create(
            "shoal.dev/v1alpha1",
            "queues",
            {"metadata": {"name": "team"}, "spec": {"guaranteed": {"cpu": "2"}}},
        )
        for i in range(3):
            api.create("v1", "pods", pod(f"p{i}", cpu="1", labels={"shoal.dev/queue": "team"}))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 3, what="three pods bound")

            def points() -> dict[str, float]:
                return {
                    labels["extension_point"]: value
                    for labels, value in _samples(kube.metrics.registry).get(
                        "scheduler_framework_extension_point_duration_seconds_count", []
                    )
                    if labels["status"] == "Success" and labels["profile"] == "shoal"
                }

            await eventually(lambda: points().get("PostBind") == 3, what="binding cycles timed")

            def allocated_cpu() -> float | None:  # queue series: sampled about once a second
                rows = _samples(kube.metrics.registry).get("shoal_queue_allocated", [])
                for labels, value in rows:
                    if (labels["queue"], labels["resource"]) == ("team", "cpu"):
                        return float(value)
                return None

            await eventually(lambda: allocated_cpu() == 3.0, what="queue series sampled")
            samples = _samples(kube.metrics.registry)
    assert points()["Filter"] == 3 and points()["Reserve"] == 3
    # Bind hands the bind over (a `Bind` effect) and waits for its outcome event.
    waits = {
        labels["extension_point"]: value
        for labels, value in samples["scheduler_framework_extension_point_duration_seconds_count"]
        if labels["status"] == "Wait" and labels["profile"] == "shoal"
    }
    assert waits["Bind"] == 3
    allocated = {
        (labels["queue"], labels["resource"]): value
        for labels, value in samples["shoal_queue_allocated"]
    }
    assert allocated[("team", "cpu")] == 3.0
    guaranteed = {
        (labels["queue"], labels["resource"]): value
        for labels, value in samples["shoal_queue_guaranteed"]
    }
    assert guaranteed[("team", "cpu")] == 2.0
