"""The fake API server speaks the real protocol: checked on the wire with plain HTTP."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
from kubehelpers import async_test, node, pod

from shoal.testing.fake_apiserver import FakeApiServer, Fault

PODS = "/api/v1/namespaces/default/pods"


async def call(
    http: aiohttp.ClientSession, method: str, url: str, body: Any = None, **headers: str
) -> tuple[int, dict[str, Any]]:
    async with http.request(method, url, json=body, headers=headers or None) as r:
        return r.status, await r.json()


async def watch_events(
    http: aiohttp.ClientSession, url: str, until: int, timeout: float = 3.0
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with http.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
        assert r.status == 200
        async for line in r.content:
            if line.strip():
                events.append(json.loads(line))
            if len(events) >= until:
                break
    return events


@async_test()
async def test_list_is_paginated_from_one_snapshot_with_its_resource_version() -> None:
    async with FakeApiServer() as api, aiohttp.ClientSession() as http:
        for i in range(5):
            api.create("v1", "pods", pod(f"p{i}"))
        status, page = await call(http, "GET", f"{api.url}{PODS}?limit=2")
        assert status == 200 and page["kind"] == "PodList"
        rv = page["metadata"]["resourceVersion"]
        assert rv == "5" and len(page["items"]) == 2
        assert "kind" not in page["items"][0]  # list items carry no kind, as upstream
        api.create("v1", "pods", pod("late"))  # not in the snapshot being paged
        names = [i["metadata"]["name"] for i in page["items"]]
        while page["metadata"].get("continue"):
            token = page["metadata"]["continue"]
            status, page = await call(http, "GET", f"{api.url}{PODS}?limit=2&continue={token}")
            assert page["metadata"]["resourceVersion"] == rv
            names += [i["metadata"]["name"] for i in page["items"]]
        assert names == [f"p{i}" for i in range(5)]


@async_test()
async def test_watch_replays_from_a_resource_version_and_sends_bookmarks() -> None:
    async with FakeApiServer(bookmark_interval=0.1) as api, aiohttp.ClientSession() as http:
        api.create("v1", "pods", pod("a"))
        api.create("v1", "pods", pod("b"))
        api.delete("", "pods", "default", "a")
        url = f"{api.url}{PODS}?watch=1&resourceVersion=1&allowWatchBookmarks=true"
        events = await watch_events(http, url, until=3)
        assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [
            ("ADDED", "b"),
            ("DELETED", "a"),
            ("BOOKMARK", None),
        ]
        assert events[2]["type"] == "BOOKMARK"
        assert events[2]["object"]["metadata"]["resourceVersion"] == "3"
        # No resourceVersion: synthetic ADDED for what exists, then live events.
        url = f"{api.url}{PODS}?watch=true"
        task = asyncio.create_task(watch_events(http, url, until=2))
        await asyncio.sleep(0.2)
        api.create("v1", "pods", pod("c"))
        events = await task
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "b"),
            ("ADDED", "c"),
        ]


@async_test()
async def test_watch_from_a_compacted_resource_version_gets_410_expired() -> None:
    async with FakeApiServer() as api, aiohttp.ClientSession() as http:
        api.create("v1", "pods", pod("a"))
        api.create("v1", "pods", pod("b"))
        api.compact()
        api.create("v1", "pods", pod("c"))
        events = await watch_events(http, f"{api.url}{PODS}?watch=1&resourceVersion=1", until=1)
        assert events[0]["type"] == "ERROR"
        status = events[0]["object"]
        assert status["kind"] == "Status" and status["code"] == 410
        assert status["reason"] == "Expired"
        # From the compaction point on, the history is there.
        events = await watch_events(http, f"{api.url}{PODS}?watch=1&resourceVersion=2", until=1)
        assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "c"


@async_test()
async def test_binding_subresource_binds_once() -> None:
    async with FakeApiServer() as api, aiohttp.ClientSession() as http:
        created = api.create("v1", "pods", pod("p"))
        uid = created["metadata"]["uid"]
        url = f"{api.url}{PODS}/p/binding"
        body = {"metadata": {"name": "p", "uid": uid}, "target": {"kind": "Node", "name": "n1"}}
        status, result = await call(http, "POST", url, body)
        assert status == 201 and result["status"] == "Success"
        bound = api.get("", "pods", "default", "p")
        assert bound is not None and bound["spec"]["nodeName"] == "n1"
        assert bound["status"]["conditions"][0]["type"] == "PodScheduled"
        status, result = await call(http, "POST", url, {**body, "target": {"name": "n2"}})
        assert status == 409 and result["reason"] == "Conflict"
        assert 'already assigned to node "n1"' in result["message"]
        # A stale UID (the pod was recreated) is refused too; a missing pod is 404.
        api.delete("", "pods", "default", "p")
        api.create("v1", "pods", pod("p"))
        status, _ = await call(http, "POST", url, body)
        assert status == 409
        status, result = await call(http, "POST", f"{api.url}{PODS}/nope/binding", body)
        assert status == 404 and result["reason"] == "NotFound"
        assert len(api.bindings) == 1 and api.binding_conflicts == 2


@async_test()
async def test_updates_and_patches_honour_resource_version_preconditions() -> None:
    async with FakeApiServer() as api, aiohttp.ClientSession() as http:
        url = f"{api.url}/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
        lease = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}}
        status, created = await call(http, "POST", url, lease)
        assert status == 201
        status, again = await call(http, "POST", url, lease)
        assert status == 409 and again["reason"] == "AlreadyExists"
        first = {**created, "spec": {"holderIdentity": "b"}}
        status, updated = await call(http, "PUT", f"{url}/l", first)
        assert status == 200 and updated["spec"]["holderIdentity"] == "b"
        status, refused = await call(
            http, "PUT", f"{url}/l", {**created, "spec": {"holderIdentity": "c"}}
        )
        assert status == 409 and refused["reason"] == "Conflict"
        # Strategic merge patch of pod status merges conditions by type.
        api.create("v1", "pods", pod("p"))
        api.set_pod_phase("default", "p", "Pending")
        current = api.get("", "pods", "default", "p")
        assert current is not None
        patch = {
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "status": {
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ]
            },
        }
        smp = {"Content-Type": "application/strategic-merge-patch+json"}
        async with http.patch(
            f"{api.url}{PODS}/p/status", data=json.dumps(patch), headers=smp
        ) as r:
            assert r.status == 200
        patch["status"]["conditions"][0]["reason"] = "Other"
        async with http.patch(
            f"{api.url}{PODS}/p/status", data=json.dumps(patch), headers=smp
        ) as r:
            assert r.status == 409  # the resourceVersion moved on
        patched = api.get("", "pods", "default", "p")
        assert patched is not None
        assert patched["status"]["phase"] == "Pending"
        assert patched["status"]["conditions"] == [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]


@async_test()
async def test_eviction_honours_pod_disruption_budgets() -> None:
    async with FakeApiServer() as api, aiohttp.ClientSession() as http:
        api.create("v1", "nodes", node("n"))
        for i in range(2):
            api.create("v1", "pods", pod(f"w{i}", labels={"app": "w"}, node_name="n"))
            api.set_pod_phase("default", f"w{i}", "Running")
        api.create("v1", "pods", pod("pending", labels={"app": "w"}))
        api.create(
            "policy/v1",
            "poddisruptionbudgets",
            {
                "metadata": {"name": "w"},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "w"}}},
            },
        )
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction"}
        status, body = await call(http, "POST", f"{api.url}{PODS}/w0/eviction", eviction)
        assert status == 429 and body["reason"] == "TooManyRequests"
        assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
        # Pods that are not running are not protected (upstream's canIgnorePDB).
        status, _ = await call(http, "POST", f"{api.url}{PODS}/pending/eviction", eviction)
        assert status == 201 and api.get("", "pods", "default", "pending") is None


@async_test()
async def test_fault_injection_errors_delays_and_dropped_connections() -> None:
    async with FakeApiServer() as api, aiohttp.ClientSession() as http:
        api.create("v1", "nodes", node("n"))
        api.inject(Fault(method="GET", path="/nodes$", status=503, times=2))
        for _ in range(2):
            status, body = await call(http, "GET", f"{api.url}/api/v1/nodes")
            assert status == 503 and body["reason"] == "ServiceUnavailable"
        status, _ = await call(http, "GET", f"{api.url}/api/v1/nodes")
        assert status == 200
        api.inject(Fault(path="/nodes$", status=0, delay=0.3, user_agent="slow"))
        started = time.monotonic()
        status, _ = await call(http, "GET", f"{api.url}/api/v1/nodes", **{"User-Agent": "slow"})
        assert status == 200 and time.monotonic() - started >= 0.3
        api.inject(Fault(path="/nodes$", drop=True, times=None))
        try:
            await call(http, "GET", f"{api.url}/api/v1/nodes")
            raise AssertionError("expected a dropped connection")
        except aiohttp.ClientError:
            pass
        api.clear_faults()
        # Watches are cut by drop_watches().
        task = asyncio.create_task(watch_events(http, f"{api.url}/api/v1/nodes?watch=1", until=5))
        await asyncio.sleep(0.2)
        api.drop_watches()
        try:
            await task
            raise AssertionError("expected a broken watch")
        except aiohttp.ClientError:
            pass


@async_test()
async def test_crds_register_their_resources() -> None:
    async with FakeApiServer() as api, aiohttp.ClientSession() as http:
        url = f"{api.url}/apis/shoal.dev/v1alpha1/queues"
        status, _ = await call(http, "GET", url)
        assert status == 404
        crd = {
            "metadata": {"name": "queues.shoal.dev"},
            "spec": {
                "group": "shoal.dev",
                "scope": "Cluster",
                "names": {"kind": "Queue", "plural": "queues"},
                "versions": [{"name": "v1alpha1", "served": True, "storage": True}],
            },
        }
        status, _ = await call(
            http, "POST", f"{api.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd
        )
        assert status == 201
        status, created = await call(http, "POST", url, {"metadata": {"name": "q"}, "spec": {}})
        assert (
            status == 201 and created["kind"] == "Queue" and "namespace" not in created["metadata"]
        )


@async_test()
async def test_custom_resources_honour_their_status_subresource() -> None:
    merge = {"Content-Type": "application/merge-patch+json"}
    async with FakeApiServer() as api, aiohttp.ClientSession() as http:
        api.register("example.com", "v1", "widgets", "Widget", True)
        api.register("example.com", "v1", "gadgets", "Gadget", True, status=False)
        base = f"{api.url}/apis/example.com/v1/namespaces/default"
        body = {"metadata": {"name": "w"}, "spec": {"size": 1}, "status": {"ok": True}}
        status, created = await call(http, "POST", f"{base}/widgets", body)
        assert status == 201 and "status" not in created  # create cannot set status
        status, _ = await call(http, "PATCH", f"{base}/widgets/w", {"status": {"ok": 1}}, **merge)
        assert status == 200 and "status" not in (
            api.get("example.com", "widgets", "default", "w") or {}
        )
        status, patched = await call(
            http,
            "PATCH",
            f"{base}/widgets/w/status",
            {"status": {"ok": 2}, "spec": {"size": 9}},
            **merge,
        )
        assert status == 200 and patched["status"] == {"ok": 2} and patched["spec"] == {"size": 1}
        # Without the subresource: status is an ordinary field and /status is not served.
        body = {"metadata": {"name": "g"}, "status": {"ok": True}}
        status, created = await call(http, "POST", f"{base}/gadgets", body)
        assert created["status"] == {"ok": True}
        status, _ = await call(http, "PATCH", f"{base}/gadgets/g/status", {"status": {}}, **merge)
        assert status == 404
