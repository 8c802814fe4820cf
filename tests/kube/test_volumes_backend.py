"""The kube backend's side of the volume plugins, against the fake API server (for
fault injection): malformed storage objects are reported and left out while the rest
applies; a failed volume write fails the bind, the pod is retried and bound once the
write goes through, and the write always precedes the Binding; the Binding waits until
the claim is bound (a stand-in plays the PersistentVolume controller and provisioner),
a failed provisioning places the pod again, and bindTimeoutSeconds ends the wait."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from kubehelpers import async_test, bound_pods, config, events_for, eventually, node, pod
from kubehelpers import backend as running

from shoal.config import parse_config
from shoal.testing.fake_apiserver import FakeApiServer, Fault
from shoal.testing.volume_controller import VolumeControllerStandIn, volume_controller

SELECTED = "volume.kubernetes.io/selected-node"


def claim(name: str, storage: str = "1Gi", storage_class: str = "wffc") -> dict[str, Any]:
    spec = {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class}
    spec["resources"] = {"requests": {"storage": storage}}
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def user(name: str, claim_name: str) -> dict[str, Any]:
    p = pod(name, cpu="100m")
    p["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": claim_name}}]
    return p


@contextlib.asynccontextmanager
async def provisioning(
    api: FakeApiServer, tmp_path: Path, **options: Any
) -> AsyncIterator[VolumeControllerStandIn]:
    """The PersistentVolume controller and a provisioner, played for `default`."""
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig-volume-controller")
    async with volume_controller(str(kubeconfig), "default", **options) as stand_in:
        yield stand_in


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
        async with running(api, tmp_path), provisioning(api, tmp_path):
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
        async with running(api, tmp_path), provisioning(api, tmp_path):
            await eventually(lambda: "default/db" in bound_pods(api), timeout=20, what="bound")
        patches = [
            i
            for i, r in enumerate(api.requests)
            if r.resource == "persistentvolumeclaims"
            and r.verb == "patch"
            and "volume-controller" not in r.user_agent
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


def binding_index(api: FakeApiServer, name: str) -> int:
    return next(
        i
        for i, r in enumerate(api.requests)
        if r.resource == "pods" and r.subresource == "binding" and r.name == name
    )


@async_test(timeout=60)
async def test_the_binding_waits_until_the_claim_is_provisioned(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1"))
        wffc(api)
        api.create("v1", "persistentvolumeclaims", claim("data"))
        api.create("v1", "pods", user("db", "data"))
        async with running(api, tmp_path), provisioning(api, tmp_path, delay=1.5) as stand_in:

            def marked() -> bool:
                data = api.get("", "persistentvolumeclaims", "default", "data") or {}
                return SELECTED in ((data.get("metadata") or {}).get("annotations") or {})

            await eventually(marked, what="the claim marked for n1")

            def nominated() -> str:
                db = api.get("", "pods", "default", "db") or {}
                return str((db.get("status") or {}).get("nominatedNodeName", ""))

            # Meanwhile the pod says where it is going (kube's NominatedNodeName for
            # expectation), and the API server clears that at binding.
            await eventually(lambda: nominated() == "n1", what="nominatedNodeName n1")
            await asyncio.sleep(0.8)  # provisioning takes 1.5 s: no Binding yet
            assert "default/db" not in bound_pods(api)
            await eventually(lambda: "default/db" in bound_pods(api), timeout=20, what="bound")
            assert stand_in.provisioned == {"data": "n1"}
            assert nominated() == ""
        data = api.get("", "persistentvolumeclaims", "default", "data")
        assert data is not None and data["spec"]["volumeName"].startswith("pvc-")
        # The claim was bound (by the stand-in) before the pod's Binding was sent.
        claim_bound = max(
            i
            for i, r in enumerate(api.requests)
            if r.resource == "persistentvolumeclaims"
            and r.verb == "patch"
            and "volume-controller" in r.user_agent
        )
        assert claim_bound < binding_index(api, "db")


@async_test(timeout=60)
async def test_a_failed_provisioning_places_the_pod_again(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1"))
        wffc(api)
        api.create("v1", "persistentvolumeclaims", claim("data"))
        api.create("v1", "pods", user("db", "data"))
        async with (
            running(api, tmp_path),
            provisioning(api, tmp_path, failing={"n1": 1}) as stand_in,
        ):
            await eventually(lambda: "default/db" in bound_pods(api), timeout=20, what="bound")
            assert stand_in.failures == [("data", "n1")]
            assert stand_in.provisioned == {"data": "n1"}
        notes = [e["note"] for e in events_for(api, "db", "FailedScheduling")]
        assert any('provisioning failed for PVC "data"' in n for n in notes), notes
        assert len(api.binds_of(api.get("", "pods", "default", "db")["metadata"]["uid"])) == 1  # type: ignore[index]


@async_test(timeout=60)
async def test_bind_timeout_seconds_ends_the_wait(tmp_path: Path) -> None:
    raw = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": config().profiles[0].scheduler_name,
                "pluginConfig": [{"name": "VolumeBinding", "args": {"bindTimeoutSeconds": 1}}],
            }
        ],
    }
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1"))
        wffc(api)
        api.create("v1", "persistentvolumeclaims", claim("data"))
        api.create("v1", "pods", user("db", "data"))
        # No PersistentVolume controller: the claim is never bound.
        async with running(api, tmp_path, scheduler_config=parse_config(raw)):

            def timed_out() -> bool:
                return any(
                    "timed out after 1 s waiting for persistentvolumeclaim default/data"
                    in e["note"]
                    for e in events_for(api, "db", "FailedScheduling")
                )

            await eventually(timed_out, timeout=20, what="the bind timed out")
            assert "default/db" not in bound_pods(api)
