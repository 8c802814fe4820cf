"""ClaimWriter (the kube backend's side of `AllocateClaims`): the finalizer, then the
status with the allocation and reservedFor, as kube-scheduler's PreBind writes them:
two requests for a claim to allocate (no read first: the informer's copy, or our own
last answer), one for a pod joining an allocated claim; a 409 conflict or a lost answer
reads again and retries; a claim already written for the pod is not written again; a
claim allocated elsewhere meanwhile fails the bind; writes to one claim keep the order
they were emitted in."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from shoal.api.podinfo import PodInfo
from shoal.drivers.kube.client import ApiError, TransportError
from shoal.drivers.kube.dra import FINALIZER, ClaimWriter
from shoal.framework.effects import AllocateClaims, BindError, ClaimAllocation
from shoal.testing import make_pod

JSON = dict[str, Any]
RESULTS = (("gpu", "gpu.example.com", "n1", "gpu-0"),)


class StubClient:
    """One claim behind merge patches with resourceVersion preconditions."""

    def __init__(self, claim: JSON) -> None:
        self.claim = claim
        self.conflicts = 0  # answer this many status patches with 409 first
        self.lose = 0  # apply this many patches, then answer with no answer (a timeout)
        self.calls: list[tuple[str, str]] = []

    async def request(self, method: str, path: str, **kw: Any) -> JSON:
        self.calls.append((method, path))
        await asyncio.sleep(0)
        if method == "GET":
            return copy.deepcopy(self.claim)
        body = kw["body"]
        meta = self.claim["metadata"]
        if body["metadata"].get("resourceVersion") != meta["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        if path.endswith("/status") and self.conflicts:
            self.conflicts -= 1
            meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
            raise ApiError(409, "Conflict", "the object has been modified")
        if "finalizers" in body["metadata"]:
            meta["finalizers"] = body["metadata"]["finalizers"]
        if "status" in body:
            self.claim.setdefault("status", {}).update(body["status"])
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        if self.lose:
            self.lose -= 1
            raise TransportError("Timeout", "no answer")
        return copy.deepcopy(self.claim)

    def methods(self) -> list[str]:
        return [f"{m} {'status' if p.endswith('/status') else 'claim'}" for m, p in self.calls]


def _claim() -> JSON:
    return {"metadata": {"name": "c", "namespace": "default", "resourceVersion": "1"}}


def _effect(name: str, results: tuple[tuple[str, str, str, str], ...] = RESULTS) -> AllocateClaims:
    pod = PodInfo(make_pod(name).uid(f"uid-{name}").obj())
    return AllocateClaims(pod, "n1", (ClaimAllocation("default/c", results, "n1"),))


def test_the_allocation_is_written_after_a_conflict() -> None:
    client = StubClient(_claim())
    client.conflicts = 1
    writer = ClaimWriter(client)  # type: ignore[arg-type]
    asyncio.run(writer.write(_effect("a")))
    claim = client.claim
    assert FINALIZER in claim["metadata"]["finalizers"]
    allocation = claim["status"]["allocation"]
    assert allocation["devices"]["results"][0]["device"] == "gpu-0"
    term = allocation["nodeSelector"]["nodeSelectorTerms"][0]
    assert term["matchFields"][0] == {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "a", "uid": "uid-a"}]


def test_a_claim_allocated_elsewhere_fails_the_bind() -> None:
    claim = _claim()
    other = {
        "devices": {"results": [{"request": "gpu", "driver": "d", "pool": "n2", "device": "x"}]}
    }
    claim["status"] = {"allocation": other}
    writer = ClaimWriter(StubClient(claim))  # type: ignore[arg-type]
    with pytest.raises(BindError, match="allocated to other devices"):
        asyncio.run(writer.write(_effect("a")))


def test_the_allocating_pod_writes_before_the_pods_joining_it() -> None:
    client = StubClient(_claim())
    writer = ClaimWriter(client)  # type: ignore[arg-type]

    async def both() -> None:
        writer.start(_effect("a"))
        writer.start(_effect("b", results=()))  # only joins reservedFor
        await writer.wait("uid-b")
        await writer.wait("uid-a")

    asyncio.run(both())
    assert [r["name"] for r in client.claim["status"]["reservedFor"]] == ["a", "b"]


def test_a_share_is_written_with_its_share_id_and_consumed_capacity() -> None:
    client = StubClient(_claim())
    writer = ClaimWriter(client)  # type: ignore[arg-type]
    share = ("0d4c6a1e-2b7f-5c3e-9a10-3f1c2b7d9e10", (("bandwidth", "2G"), ("queues", "4")))
    results = (*RESULTS, ("gpu", "gpu.example.com", "n1", "gpu-1"))
    pod = PodInfo(make_pod("a").uid("uid-a").obj())
    effect = AllocateClaims(
        pod, "n1", (ClaimAllocation("default/c", results, "n1", (share, None)),)
    )
    asyncio.run(writer.write(effect))
    shared, whole = client.claim["status"]["allocation"]["devices"]["results"]
    assert shared == {
        "request": "gpu",
        "driver": "gpu.example.com",
        "pool": "n1",
        "device": "gpu-0",
        "shareID": share[0],
        "consumedCapacity": {"bandwidth": "2G", "queues": "4"},
    }
    assert "shareID" not in whole and "consumedCapacity" not in whole


def test_a_deallocation_clears_the_allocation_or_leaves_a_claim_changed_since_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from shoal.framework.effects import DeallocateClaim

    async def main() -> None:
        claim = _claim()
        claim["status"] = {"allocation": {"devices": {"results": []}}, "reservedFor": []}
        client = StubClient(claim)
        writer = ClaimWriter(client)  # type: ignore[arg-type]
        pod = PodInfo(make_pod("p").uid("uid-p").obj())
        # Decided on resourceVersion 0, the claim is at 1 now: 409, logged, left alone.
        writer.deallocate(DeallocateClaim(pod, "default/c", "0"))
        await asyncio.sleep(0.05)
        assert client.claim["status"]["allocation"] is not None
        assert "deallocating resourceclaim default/c not done: 409" in caplog.text
        # Decided on the version it has: allocation and reservedFor cleared (null).
        writer.deallocate(DeallocateClaim(pod, "default/c", "1"))
        await asyncio.sleep(0.05)
        assert client.claim["status"] == {"allocation": None, "reservedFor": None}
        assert client.calls[-1] == (
            "PATCH",
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c/status",
        )

    caplog.set_level("INFO", logger="shoal.kube.dra")
    asyncio.run(main())


def test_a_claim_to_allocate_takes_two_requests_from_the_informers_copy() -> None:
    # kube-scheduler's bindClaim: the finalizer (whose answer has the new
    # resourceVersion), then the status with that resourceVersion; no read.
    client = StubClient(_claim())
    informer = copy.deepcopy(client.claim)
    writer = ClaimWriter(client, lookup=lambda key: informer)  # type: ignore[arg-type]
    asyncio.run(writer.write(_effect("a")))
    assert client.methods() == ["PATCH claim", "PATCH status"]
    assert writer.requests == 2
    assert client.claim["metadata"]["finalizers"] == [FINALIZER]
    assert client.claim["status"]["reservedFor"][0]["uid"] == "uid-a"
    # Without a copy at hand (no informer), the claim is read first.
    client = StubClient(_claim())
    writer = ClaimWriter(client)  # type: ignore[arg-type]
    asyncio.run(writer.write(_effect("a")))
    assert client.methods() == ["GET claim", "PATCH claim", "PATCH status"]


def test_a_pod_joining_a_claim_just_allocated_starts_from_the_last_answer() -> None:
    # The informer has not seen the allocation yet: its copy would cost a 409 and a
    # read; the writer's own last answer is newer and is used.
    client = StubClient(_claim())
    informer = copy.deepcopy(client.claim)
    writer = ClaimWriter(client, lookup=lambda key: informer)  # type: ignore[arg-type]

    async def both() -> None:
        writer.start(_effect("a"))
        writer.start(_effect("b", results=()))
        await writer.wait("uid-a")
        await writer.wait("uid-b")

    asyncio.run(both())
    assert client.methods() == ["PATCH claim", "PATCH status", "PATCH status"]
    assert [r["name"] for r in client.claim["status"]["reservedFor"]] == ["a", "b"]


def test_a_stale_copy_costs_a_conflict_and_a_read_never_a_lost_update() -> None:
    client = StubClient(_claim())
    stale = copy.deepcopy(client.claim)
    # Someone else wrote the claim since the informer's copy (another finalizer).
    client.claim["metadata"]["finalizers"] = ["example.com/other"]
    client.claim["metadata"]["resourceVersion"] = "2"
    writer = ClaimWriter(client, lookup=lambda key: stale)  # type: ignore[arg-type]
    asyncio.run(writer.write(_effect("a")))
    assert client.methods() == ["PATCH claim", "GET claim", "PATCH claim", "PATCH status"]
    assert client.claim["metadata"]["finalizers"] == ["example.com/other", FINALIZER]


@pytest.mark.parametrize("lost", ["finalizer", "status"])
def test_a_write_whose_answer_was_lost_is_read_back_and_recognised(lost: str) -> None:
    client = StubClient(_claim())
    informer = copy.deepcopy(client.claim)
    writer = ClaimWriter(client, lookup=lambda key: informer)  # type: ignore[arg-type]
    if lost == "finalizer":
        client.lose = 1  # the finalizer landed, its answer did not
        expected = ["PATCH claim", "GET claim", "PATCH status"]
    else:  # the finalizer's answer comes; the status lands, its answer does not
        original = client.request

        async def request(method: str, path: str, **kw: Any) -> JSON:
            if method == "PATCH" and path.endswith("/status"):
                client.lose = 1
            return await original(method, path, **kw)

        client.request = request  # type: ignore[method-assign]
        expected = ["PATCH claim", "PATCH status", "GET claim"]
    asyncio.run(writer.write(_effect("a")))
    assert client.methods() == expected
    assert client.claim["metadata"]["finalizers"] == [FINALIZER]
    assert [r["uid"] for r in client.claim["status"]["reservedFor"]] == ["uid-a"]


def test_a_claim_already_written_for_the_pod_is_not_written_again() -> None:
    # A bind retried after a lost answer: the claim has the allocation wanted, the
    # finalizer and the pod in reservedFor.
    client = StubClient(_claim())
    writer = ClaimWriter(client)  # type: ignore[arg-type]
    asyncio.run(writer.write(_effect("a")))
    done = copy.deepcopy(client.claim)
    client.calls.clear()
    again = ClaimWriter(client, lookup=lambda key: done)  # type: ignore[arg-type]
    asyncio.run(again.write(_effect("a")))
    asyncio.run(again.write(_effect("a", results=())))
    assert client.calls == []


def test_a_claim_being_deleted_fails_the_bind() -> None:
    claim = _claim()
    claim["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    writer = ClaimWriter(StubClient(claim))  # type: ignore[arg-type]
    with pytest.raises(BindError, match="being deleted"):
        asyncio.run(writer.write(_effect("a")))


def test_a_stale_copy_showing_no_allocation_is_read_before_failing_a_joining_pod() -> None:
    # The informer's copy predates the allocation (written by another scheduler): read
    # the claim rather than fail the pod that only joins it.
    client = StubClient(_claim())
    stale = copy.deepcopy(client.claim)
    asyncio.run(ClaimWriter(client).write(_effect("a")))  # type: ignore[arg-type]
    client.calls.clear()
    writer = ClaimWriter(client, lookup=lambda key: stale)  # type: ignore[arg-type]
    asyncio.run(writer.write(_effect("b", results=())))
    assert client.methods() == ["GET claim", "PATCH status"]
    assert [r["name"] for r in client.claim["status"]["reservedFor"]] == ["a", "b"]
