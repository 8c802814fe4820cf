"""The requests a DRA bind makes, against the fake API server (which counts them and
injects faults): as kube-scheduler's PreBind, a claim to allocate takes two (the
finalizer, then the status with the allocation and reservedFor, named at the
finalizer's answer's resourceVersion), no read, then the Binding; a 409 on the status
reads the claim and writes again; a status write whose answer was lost is read back
and recognised as done (not written twice); either way the pod is bound once, to the
node of its devices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubehelpers import async_test, bound_pods, eventually, node, pod
from kubehelpers import backend as running

from shoal.drivers.kube.dra import FINALIZER
from shoal.testing.fake_apiserver import FakeApiServer, Fault, RecordedRequest

GROUP = "resource.k8s.io"


def dra_cluster(api: FakeApiServer) -> None:
    """Nodes n1 (no devices) and gpu (one GPU in a ResourceSlice); claim `dra` for one
    GPU and pod `uses-dra` naming it."""
    for plural, kind, namespaced in (
        ("deviceclasses", "DeviceClass", False),
        ("resourceslices", "ResourceSlice", False),
        ("resourceclaims", "ResourceClaim", True),
        ("resourceclaimtemplates", "ResourceClaimTemplate", True),
    ):
        api.register(GROUP, "v1", plural, kind, namespaced)
    api.create("v1", "nodes", node("n1"))
    api.create("v1", "nodes", node("gpu"))
    api.create(f"{GROUP}/v1", "deviceclasses", {"metadata": {"name": "gpu"}, "spec": {}})
    api.create(
        f"{GROUP}/v1",
        "resourceslices",
        {
            "metadata": {"name": "gpu-slice"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": "gpu",
                "pool": {"name": "gpu", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        },
    )
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu"}}
    api.create(
        f"{GROUP}/v1",
        "resourceclaims",
        {"metadata": {"name": "dra"}, "spec": {"devices": {"requests": [request]}}},
    )
    user = pod("uses-dra", cpu="10m")
    user["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "dra"}]
    api.create("v1", "pods", user)


def claim_writes(api: FakeApiServer) -> list[str]:
    """The claim requests that are not list/watch, in order, as `verb [status] code`,
    and the Binding as `bind`."""
    out = []
    for r in api.requests:
        if r.resource == "resourceclaims" and r.verb not in ("list", "watch"):
            out.append(" ".join(filter(None, (r.verb, r.subresource, str(r.status)))))
        elif _binding(r):
            out.append("bind")
    return out


def _binding(r: RecordedRequest) -> bool:
    return r.resource == "pods" and r.subresource == "binding"


def _written(api: FakeApiServer) -> dict[str, Any]:
    claim = api.get(GROUP, "resourceclaims", "default", "dra")
    assert claim is not None
    return claim


def _check_written(api: FakeApiServer) -> None:
    claim = _written(api)
    assert claim["metadata"]["finalizers"] == [FINALIZER]
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result["device"]) == ("gpu", "gpu-0")
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["uses-dra"]
    assert bound_pods(api) == {"default/uses-dra": "gpu"}


@async_test(timeout=60)
async def test_a_claim_to_allocate_takes_two_writes_and_no_read(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        dra_cluster(api)
        async with running(api, tmp_path):
            await eventually(lambda: "default/uses-dra" in bound_pods(api), what="bound")
        assert claim_writes(api) == ["patch 200", "patch status 200", "bind"]
        _check_written(api)


@async_test(timeout=60)
async def test_a_conflict_on_the_status_reads_the_claim_and_writes_again(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        dra_cluster(api)
        api.inject(Fault(method="PATCH", path="resourceclaims/dra/status", status=409))
        async with running(api, tmp_path):
            await eventually(lambda: "default/uses-dra" in bound_pods(api), what="bound")
        assert claim_writes(api) == [
            "patch 200",
            "patch status 409",
            "get 200",
            "patch status 200",
            "bind",
        ]
        _check_written(api)


@async_test(timeout=60)
async def test_a_status_write_whose_answer_was_lost_is_recognised(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        dra_cluster(api)
        # The status lands, the connection drops before the answer: the writer cannot
        # know; it reads the claim, finds the allocation and the pod reserved, and goes
        # on to the Binding without writing the claim again.
        api.inject(Fault(method="PATCH", path="resourceclaims/dra/status", drop=True, applied=True))
        async with running(api, tmp_path):
            await eventually(lambda: "default/uses-dra" in bound_pods(api), what="bound")
        # (The fake records the dropped write as it was applied: 200.)
        assert claim_writes(api) == ["patch 200", "patch status 200", "get 200", "bind"]
        _check_written(api)
