"""The finalizer on a claim whose opaque parameters were sent in a JSON layout a patch
cannot keep: the API server answers the merge patch with 422 "spec: field is
immutable" (it re-encodes the parameters); the ClaimWriter writes the claim back whole
with the finalizer, and if that is refused too, allocates it without the finalizer
(a warning) rather than never binding the pod."""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

import pytest

from shoal.api.podinfo import PodInfo
from shoal.drivers.kube.client import ApiError
from shoal.drivers.kube.dra import FINALIZER, ClaimWriter
from shoal.framework.effects import AllocateClaims, ClaimAllocation
from shoal.testing import make_pod

JSON = dict[str, Any]
RESULTS = (("gpu", "gpu.example.com", "n1", "gpu-0"),)
IMMUTABLE = (
    'ResourceClaim.resource.k8s.io "c" is invalid: spec: Invalid value: {...}: field is immutable'
)


class StubClient:
    def __init__(self, refuse_put: bool) -> None:
        self.refuse_put = refuse_put
        self.claim: JSON = {
            "metadata": {"name": "c", "namespace": "default", "resourceVersion": "1"}
        }
        self.calls: list[str] = []

    async def request(self, method: str, path: str, **kw: Any) -> JSON:
        await asyncio.sleep(0)
        status = path.endswith("/status")
        self.calls.append(method + (" status" if status else ""))
        meta = self.claim["metadata"]
        if method == "GET":
            return copy.deepcopy(self.claim)
        body = kw["body"]
        if method == "PATCH" and not status:
            raise ApiError(422, "Invalid", IMMUTABLE)
        if method == "PUT":
            if self.refuse_put:
                raise ApiError(422, "Invalid", IMMUTABLE)
            self.claim = copy.deepcopy(body)
        elif status:
            self.claim.setdefault("status", {}).update(body["status"])
        self.claim["metadata"]["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        return copy.deepcopy(self.claim)


def _effect() -> AllocateClaims:
    pod = PodInfo(make_pod("a").uid("uid-a").obj())
    return AllocateClaims(pod, "n1", (ClaimAllocation("default/c", RESULTS, "n1"),))


def test_the_claim_is_written_back_whole_with_the_finalizer() -> None:
    client = StubClient(refuse_put=False)
    asyncio.run(ClaimWriter(client).write(_effect()))  # type: ignore[arg-type]
    assert client.calls == ["GET", "PATCH", "GET", "PUT", "PATCH status"]
    assert client.claim["metadata"]["finalizers"] == [FINALIZER]
    assert client.claim["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"


def test_refused_whole_too_it_is_allocated_without_the_finalizer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = StubClient(refuse_put=True)
    with caplog.at_level(logging.WARNING, logger="shoal.kube.dra"):
        asyncio.run(ClaimWriter(client).write(_effect()))  # type: ignore[arg-type]
    assert "finalizers" not in client.claim["metadata"]
    assert client.claim["status"]["reservedFor"][0]["uid"] == "uid-a"
    assert "allocated without kube's finalizer" in caplog.text
