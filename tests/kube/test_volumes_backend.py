"""The kube backend's side of the volume plugins, against the fake API server (for
fault injection): malformed storage objects are reported and left out while the rest
applies; a failed volume write fails the bind, the pod is retried and bound once the
write goes through, and the write always precedes the Binding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubehelpers import async_test, bound_pods, events_for, eventually, node, pod
from kubehelpers import backend as running

from shoal.testing.fake_apiserver import FakeApiServer, Fault

SELECTED = "volume.kubernetes.io/selected-node"


def claim(name: str, storage: str = "1Gi", storage_class: str = "wffc") -> dict[str, Any]:
    spec = {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class}
    spec["resources"] = {"requests": {"storage": storage}}
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def user(name: str, claim_name: str) -> dict[str, Any]:
    p = pod(name, cpu="100m")
    p["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": claim_name}}]
    return p


def wffc(api: FakeApiServer) -> None:
    body = {"metadata": {"name": "wffc"}, "provisioner": "csi.example.com"}
    body["volumeBindingMode"] = "WaitForFirstConsumer"
    api.create("storage.k8s.io/v1", "storageclasses", body)


@async_test(timeout=60)
async def test_a_malformed_claim_is_reported_and_the_others_apply(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1"))
        wffc(api)
        api.create("v1", "persistentvolumeclaims", claim("bad", storage="lots"))
        api.create("v1", "persistentvolumeclaims", claim("good"))
        api.create("v1", "pods", user("uses-good", "good"))
        api.create("v1", "pods", user("uses-bad", "bad"))
        async with running(api, tmp_path):
            await eventually(lambda: "default/uses-good" in bound_pods(api), what="good bound")
            await eventually(lambda: bool(events_for(api, "bad", "InvalidObject")), what="event")
            [event] = events_for(api, "bad", "InvalidObject")
            assert event["regarding"]["kind"] == "PersistentVolumeClaim"
            assert "PersistentVolumeClaim default/bad" in event["note"]
            assert "spec.resources" in event["note"] and "lots" in event["note"]
            # The pod of the bad claim waits: its claim is not known.
            assert "default/uses-bad" not in bound_pods(api)


@async_test(timeout=60)
async def test_a_failed_volume_write_fails_the_bind_and_is_retried(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1"))
        wffc(api)
        api.create("v1", "persistentvolumeclaims", claim("data"))
        api.create("v1", "pods", user("db", "data"))
        api.inject(Fault(method="PATCH", path="persistentvolumeclaims/data", status=500, times=1))
        async with running(api, tmp_path):
            await eventually(lambda: "default/db" in bound_pods(api), timeout=20, what="bound")
        patches = [
            i
            for i, r in enumerate(api.requests)
            if r.resource == "persistentvolumeclaims" and r.verb == "patch"
        ]
        binds = [
            i
            for i, r in enumerate(api.requests)
            if r.resource == "pods" and r.subresource == "binding"
        ]
        assert len(patches) == 2  # the failed one and the retry
        assert len(binds) == 1 and binds[0] > patches[1]  # the claim first, then the pod
        data = api.get("", "persistentvolumeclaims", "default", "data")
        assert data is not None
        assert data["metadata"]["annotations"][SELECTED] == "n1"
        assert events_for(api, "db", "FailedScheduling")
