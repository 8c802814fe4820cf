"""Queue status written back through the effects port (`QueueStatus` effects), against
the fake API server: allocation, guarantee, fair share and pod counts on the Queue's
status subresource; the scheduler's own status writes do not re-apply the queues."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubehelpers import async_test, bound_pods, eventually, node, pod
from kubehelpers import backend as running

from shoal.drivers.kube.crds import render
from shoal.testing.fake_apiserver import FakeApiServer

SHOAL = "shoal.dev/v1alpha1"


def _status(api: FakeApiServer, name: str) -> dict[str, Any]:
    obj = api.get("shoal.dev", "queues", "", name)
    return dict((obj or {}).get("status") or {})


@async_test(timeout=60)
async def test_queue_status_shows_usage_guarantee_and_pods(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        for text in render().values():
            api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
        api.create("v1", "nodes", node("n1", cpu="4"))
        api.create(
            SHOAL, "queues", {"metadata": {"name": "team"}, "spec": {"guaranteed": {"cpu": "1"}}}
        )
        for i in range(2):
            api.create("v1", "pods", pod(f"t{i}", cpu="1", labels={"shoal.dev/queue": "team"}))
        api.create("v1", "pods", pod("big", cpu="5", labels={"shoal.dev/queue": "team"}))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 2, what="two pods bound")
            await eventually(
                lambda: (
                    _status(api, "team").get("boundPods") == 2
                    and _status(api, "team").get("pendingPods") == 1
                ),
                timeout=15,
                what="the queue's status",
            )
            status = _status(api, "team")
            assert status["runningPods"] == 0  # bound, not started: no kubelet here
            assert status["allocated"] == {"cpu": "2", "memory": "512Mi"}
            assert status["guaranteed"] == {"cpu": "1"}
            assert "cpu" in status["fairShare"]
            # Our own status writes come back through the watch without re-applying the
            # queue tree (which would re-file every pod).
            version = kube.scheduler.tenant_queues.version
            writes = sum(1 for r in api.requests if r.resource == "queues" and r.subresource)
            assert writes >= 1
            assert kube.scheduler.tenant_queues.version == version


@async_test(timeout=90)
async def test_binding_and_elastic_quota_status_and_emptied_allocation(tmp_path: Path) -> None:
    """Borrowed amounts and jobs on the Queue; pods and jobs on the QueueBinding; `used`
    on an ElasticQuota; and once the pods are gone, the allocation is cleared (a merge
    patch keeps keys it does not mention: removed resources must be sent as null)."""
    async with FakeApiServer() as api:
        for text in render().values():
            api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
        api.create("v1", "nodes", node("n1", cpu="8"))
        api.create(
            SHOAL, "queues", {"metadata": {"name": "team"}, "spec": {"guaranteed": {"cpu": "1"}}}
        )
        api.create(
            SHOAL,
            "queuebindings",
            {"metadata": {"name": "team-ns"}, "spec": {"queue": "team", "namespaces": ["ml"]}},
        )
        api.create(
            "scheduling.x-k8s.io/v1alpha1",
            "elasticquotas",
            {
                "metadata": {"name": "quota", "namespace": "research"},
                "spec": {"min": {"cpu": "1"}, "max": {"cpu": "4"}},
            },
        )
        api.create(
            "scheduling.x-k8s.io/v1alpha1",
            "podgroups",
            {"metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 2}},
        )
        group = {"scheduling.x-k8s.io/pod-group": "g"}
        for i in range(2):
            api.create("v1", "pods", pod(f"g{i}", cpu="1", namespace="ml", labels=group))
        api.create("v1", "pods", pod("solo", cpu="1", namespace="ml"))
        api.create("v1", "pods", pod("r0", cpu="1", namespace="research"))
        async with running(api, tmp_path):
            await eventually(lambda: len(bound_pods(api)) == 4, what="four pods bound")

            def binding() -> dict[str, Any]:
                obj = api.get("shoal.dev", "queuebindings", "", "team-ns") or {}
                return dict(obj.get("status") or {})

            def quota() -> dict[str, Any]:
                obj = api.get("scheduling.x-k8s.io", "elasticquotas", "research", "quota") or {}
                return dict(obj.get("status") or {})

            await eventually(
                lambda: (
                    _status(api, "team").get("runningJobs") == 2
                    and binding().get("pods") == 3
                    and quota().get("used", {}).get("cpu") == "1"
                ),
                timeout=15,
                what="queue, binding and quota statuses",
            )
            status = _status(api, "team")
            assert status["borrowed"] == {"cpu": "2"}  # 3 CPUs used, 1 guaranteed
            assert status["pendingJobs"] == 0
            assert binding() == {
                "pods": 3,
                "runningJobs": 2,
                "namespaces": [{"namespace": "ml", "pods": 3, "runningJobs": 2}],
            }
            for name in ("g0", "g1", "solo"):
                api.delete("", "pods", "ml", name)
            await eventually(
                lambda: _status(api, "team").get("runningPods") == 0 and binding().get("pods") == 0,
                timeout=15,
                what="statuses after the pods left",
            )
            await eventually(
                lambda: (
                    _status(api, "team").get("allocated") == {}
                    and _status(api, "team").get("borrowed") == {}
                ),
                timeout=10,
                what="the emptied allocation cleared",
            )
            assert binding()["namespaces"] == []
