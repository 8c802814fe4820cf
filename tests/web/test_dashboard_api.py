"""The dashboard's JSON API against a harness run with known queues, gangs and pending pods."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.web.dashboard import Dashboard, DashboardSource, QueueHistory, attach_dashboard
from shoal.web.server import Check, HealthServer

GPU = "nvidia.com/gpu"
GROUP = "pod-group.scheduling.sigs.k8s.io/name"
MIN = "pod-group.scheduling.sigs.k8s.io/min-available"
QUEUE = "shoal.dev/queue"
API = [
    "/dashboard/api",
    "/dashboard/api/summary",
    "/dashboard/api/queues",
    "/dashboard/api/queues/top",
    "/dashboard/api/queues/history",
    "/dashboard/api/gangs",
    "/dashboard/api/pods?gang=ml/big",
    "/dashboard/api/pending",
    "/dashboard/api/nodes",
    "/dashboard/api/nodes/heat",
]


def queue(name: str, **spec: Any) -> Queue:
    return decode({"metadata": {"name": name}, "spec": spec}, Queue)


def scenario() -> tuple[SchedulerHarness, QueueHistory]:
    """org (guarantees 6 GPUs) over a (2) and b (4, weight 2); two 4-GPU nodes and a
    tainted CPU node. Gang ml/small (2 x 1 GPU, queue a) runs; gang ml/big (3 x 4 GPUs,
    queue b) cannot borrow beyond b's guarantee; a GPU share runs; one pod selects a zone
    no node has, one waits for a scheduling gate."""
    h = SchedulerHarness()
    h.add_nodes(
        *(make_node(f"gpu-{i}").capacity({GPU: 4}, cpu="16", memory="64Gi") for i in (0, 1))
    )
    h.add_nodes(make_node("cpu-0").capacity(cpu="8", memory="32Gi").taint("dedicated", "infer"))
    problems = h.scheduler.apply_queues(
        [
            queue("org", guaranteed={GPU: 6}),
            queue("a", parent="org", guaranteed={GPU: 2}),
            queue("b", parent="org", guaranteed={GPU: 4}, weight=2),
        ]
    )
    assert problems == []
    history = QueueHistory(h.scheduler.tenant_queues, h.scheduler.cluster.table, interval=10)
    h.driver.samplers.append(history.maybe_sample)
    small = {GROUP: "small", MIN: "2", QUEUE: "a"}
    big = {GROUP: "big", MIN: "3", QUEUE: "b"}
    h.add_pods(
        *(make_pod(f"small-{i}", "ml").labels(small).req({GPU: 1}, cpu="1") for i in range(2))
    )
    h.add_pods(*(make_pod(f"big-{i}", "ml").labels(big).req({GPU: 4}, cpu="1") for i in range(3)))
    h.add_pods(
        make_pod("share")
        .labels({QUEUE: "a"})
        .annotations({"alibabacloud.com/gpu-milli": "500"})
        .req(cpu="1"),
        make_pod("lost").labels({QUEUE: "a"}).node_selector(zone="mars").req(cpu="1"),
        make_pod("held").labels({QUEUE: "a"}).scheduling_gates("example.com/wait").req(cpu="1"),
    )
    h.run()
    h.advance(30)
    return h, history


def call(dashboard: Dashboard, test: Callable[[TestClient[Any, Any]], Awaitable[None]]) -> None:
    async def main() -> None:
        async with TestClient(TestServer(dashboard.application())) as client:
            await test(client)

    asyncio.run(main())


def get_all(dashboard: Dashboard, *paths: str) -> list[Any]:
    out: list[Any] = []

    async def test(client: TestClient[Any, Any]) -> None:
        for path in paths:
            response = await client.get(path)
            assert response.status == 200, (path, await response.text())
            assert response.content_type == "application/json"
            out.append(await response.json())

    call(dashboard, test)
    return out


@pytest.fixture(scope="module")
def run() -> tuple[SchedulerHarness, Dashboard]:
    h, history = scenario()
    return h, Dashboard(DashboardSource(h.scheduler), history, ttl=0.0)


def test_queue_tree_allocation_guarantee_fair_share(
    run: tuple[SchedulerHarness, Dashboard],
) -> None:
    _, dashboard = run
    (body,) = get_all(dashboard, "/dashboard/api/queues")
    assert body["capacity"][GPU] == 8000  # quota units: milli-GPU
    rows = {q["name"]: q for q in body["queues"]}
    # Parents before their children, children indented one level.
    assert [(q["name"], q["parent"], q["depth"]) for q in body["queues"]] == [
        ("default", None, 0),
        ("org", None, 0),
        ("a", "org", 1),
        ("b", "org", 1),
    ]
    a, b, org = rows["a"], rows["b"], rows["org"]
    # a runs small-0, small-1 (1 GPU each) and the GPU share (half a GPU).
    assert a["allocated"] == {"cpu": 3000, GPU: 2500}
    assert a["guaranteed"] == {GPU: 2000} and b["guaranteed"] == {GPU: 4000}
    assert a["running"] == 3 and a["pending"] == 2  # lost, held
    assert b["running"] == 0 and b["pending"] == 3  # the big gang
    assert org["running"] == 3 and org["pending"] == 5 and not org["leaf"]
    assert b["weight"] == 2.0
    # Dominant shares of the cluster: a holds 2.5/8 GPUs; b is guaranteed 4/8 and its fair
    # share is its guarantee.
    assert a["share"]["allocated"] == pytest.approx(2.5 / 8)
    assert b["share"]["guaranteed"] == pytest.approx(0.5)
    assert b["share"]["fairShare"] == pytest.approx(0.5)
    assert b["fairShare"][GPU] == 4000
    assert org["share"]["guaranteed"] == pytest.approx(0.75)


def test_queue_history_is_sampled_by_the_driver_loop(
    run: tuple[SchedulerHarness, Dashboard],
) -> None:
    _, dashboard = run
    gpu, dominant = get_all(
        dashboard, f"/dashboard/api/queues/history?resource={GPU}", "/dashboard/api/queues/history"
    )
    # The harness ran at t=0, then advanced to t=30: the driver sampled at both instants
    # (nothing in between moved the clock past a due sample).
    assert gpu["times"] == [0.0, 30.0]
    assert gpu["resource"] == GPU
    assert set(gpu["resources"]) == {"dominant", "cpu", "memory", GPU}
    a = gpu["queues"]["a"]
    assert a["allocated"][-1] == pytest.approx(2.5 / 8)  # two GPUs and half a GPU
    assert a["guaranteed"] == [pytest.approx(0.25)] * 2
    assert gpu["queues"]["b"]["allocated"] == [0.0, 0.0]
    assert dominant["queues"]["a"]["allocated"][-1] == pytest.approx(2.5 / 8)


def test_history_is_a_bounded_ring_buffer_on_the_driver_clock() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n0").capacity(cpu="4", memory="8Gi"))
    history = QueueHistory(
        h.scheduler.tenant_queues, h.scheduler.cluster.table, interval=5, capacity=3
    )
    h.driver.samplers.append(history.maybe_sample)
    for _ in range(10):
        h.add_pods(make_pod().req(cpu="100m"))
        h.advance(7)
    assert len(history.samples) == 3
    assert history.samples[-1].time == h.clock.now() == 70.0
    times = [s.time for s in history.samples]
    assert times == sorted(times) and all(b - a >= 5 for a, b in itertools.pairwise(times))
    with pytest.raises(ValueError, match="interval"):
        QueueHistory(h.scheduler.tenant_queues, h.scheduler.cluster.table, interval=0)


def test_gangs_with_phase_and_member_counts(run: tuple[SchedulerHarness, Dashboard]) -> None:
    _, dashboard = run
    everything, scheduling = get_all(
        dashboard, "/dashboard/api/gangs", "/dashboard/api/gangs?phase=Scheduling"
    )
    assert everything["total"] == 2
    assert everything["phases"] == {"Scheduling": 1, "Running": 1}
    big, small = everything["items"]  # not running first
    assert (big["key"], big["phase"], big["queue"]) == ("ml/big", "Scheduling", "b")
    assert (big["minMember"], big["members"], big["running"], big["waiting"]) == (3, 3, 0, 3)
    assert "queue b may not borrow nvidia.com/gpu beyond its guarantee" in big["reason"]
    assert (small["key"], small["phase"], small["queue"]) == ("ml/small", "Running", "a")
    assert (small["members"], small["running"], small["waiting"]) == (2, 2, 0)
    assert [g["key"] for g in scheduling["items"]] == ["ml/big"]


def test_pending_pods_grouped_by_their_last_explanation(
    run: tuple[SchedulerHarness, Dashboard],
) -> None:
    h, dashboard = run
    (body,) = get_all(dashboard, "/dashboard/api/pending")
    assert body["total"] == 5
    groups = {g["reason"]: g for g in body["groups"]}
    assert list(groups) == [
        "Unschedulable: QueueCapacity",
        "Gated by SchedulingGates",
        "Unschedulable: NodeAffinity, TaintToleration",
    ]
    big = groups["Unschedulable: QueueCapacity"]
    assert big["count"] == 3 and big["kind"] == "unschedulable"
    assert [e["pod"] for e in big["examples"]] == ["ml/big-0", "ml/big-1", "ml/big-2"]
    assert big["examples"][0]["message"] == h.message("ml/big-0")
    held = groups["Gated by SchedulingGates"]
    assert held["kind"] == "gated" and held["examples"][0]["pod"] == "default/held"
    assert "example.com/wait" in held["topMessage"]
    lost = groups["Unschedulable: NodeAffinity, TaintToleration"]
    assert lost["examples"][0]["message"] == (
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), "
        "2 node(s) didn't match Pod's node affinity/selector."
        " preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
        "scheduling."
    )
    assert lost["examples"][0]["queue"] == "a"


def test_queue_pages_searches_and_children(run: tuple[SchedulerHarness, Dashboard]) -> None:
    _, dashboard = run
    everything, top, org, second, search, none = get_all(
        dashboard,
        "/dashboard/api/queues",
        "/dashboard/api/queues?parent=",
        "/dashboard/api/queues?parent=org",
        "/dashboard/api/queues?parent=org&offset=1&limit=1",
        "/dashboard/api/queues?q=B",
        "/dashboard/api/queues?q=zzz",
    )
    names = lambda body: [q["name"] for q in body["queues"]]  # noqa: E731
    # Without parameters: the whole tree, as before.
    assert names(everything) == ["default", "org", "a", "b"]
    assert everything["count"] == everything["total"] == 4
    assert {q["name"]: q["children"] for q in everything["queues"]} == {
        "default": 0,
        "org": 2,
        "a": 0,
        "b": 0,
    }
    # One level of the tree at a time, paged; `count` is the whole tree, `total` the matches.
    assert names(top) == ["default", "org"] and top["total"] == 2 and top["count"] == 4
    assert names(org) == ["a", "b"] and org["total"] == 2
    assert names(second) == ["b"] and second["total"] == 2 and second["offset"] == 1
    assert org["capacity"] == everything["capacity"] and org["resources"] == everything["resources"]
    # A search: a substring of the name, any case, anywhere in the tree.
    assert names(search) == ["b"] and search["total"] == 1
    assert names(none) == [] and none["total"] == 0


def test_top_queues_rank_leaves_and_sum_the_rest(run: tuple[SchedulerHarness, Dashboard]) -> None:
    _, dashboard = run
    allocated, guaranteed, pending, gpu = get_all(
        dashboard,
        "/dashboard/api/queues/top?n=1",
        "/dashboard/api/queues/top?n=2&by=guaranteed",
        "/dashboard/api/queues/top?n=1&by=pending",
        f"/dashboard/api/queues/top?n=1&resource={GPU}",
    )
    # Leaf queues only (default, a, b): org is a parent.
    assert allocated["total"] == 3 and allocated["by"] == "allocated"
    (a,) = allocated["items"]
    assert a["name"] == "a" and a["parent"] == "org"
    assert a["allocated"] == pytest.approx(2.5 / 8)  # dominant share: GPUs
    others = allocated["others"]
    assert others["count"] == 2 and others["pending"] == 3 and others["running"] == 0
    assert others["guaranteed"] == pytest.approx(0.5)  # b's 4 of 8 GPUs
    assert [q["name"] for q in guaranteed["items"]] == ["b", "a"]
    assert guaranteed["others"]["count"] == 1
    assert [(q["name"], q["pending"]) for q in pending["items"]] == [("b", 3)]
    # One resource: shares of its capacity.
    assert gpu["resource"] == GPU
    assert gpu["items"][0]["allocated"] == pytest.approx(2500 / 8000)
    assert gpu["items"][0]["guaranteed"] == pytest.approx(2000 / 8000)


def test_history_of_some_queues_from_a_time(run: tuple[SchedulerHarness, Dashboard]) -> None:
    _, dashboard = run
    one, two, recent, missing = get_all(
        dashboard,
        "/dashboard/api/queues/history?queue=a",
        "/dashboard/api/queues/history?queue=a,b",
        "/dashboard/api/queues/history?queue=a&from=30",
        "/dashboard/api/queues/history?queue=nope",
    )
    assert set(one["queues"]) == {"a"} and one["times"] == [0.0, 30.0]
    assert one["queues"]["a"]["allocated"][-1] == pytest.approx(2.5 / 8)
    assert set(two["queues"]) == {"a", "b"}
    # From a time on: the samples taken then or later, for a client to append.
    assert recent["start"] == 30.0 and recent["times"] == [30.0]
    assert recent["queues"]["a"]["allocated"] == [one["queues"]["a"]["allocated"][-1]]
    assert missing["queues"] == {} and missing["times"] == [0.0, 30.0]


def test_gangs_by_queue_subtree_and_name(run: tuple[SchedulerHarness, Dashboard]) -> None:
    _, dashboard = run
    org, a, big, none = get_all(
        dashboard,
        "/dashboard/api/gangs?queue=org",
        "/dashboard/api/gangs?queue=a",
        "/dashboard/api/gangs?q=BIG",
        "/dashboard/api/gangs?queue=b&phase=Running",
    )
    keys = lambda body: [g["key"] for g in body["items"]]  # noqa: E731
    assert keys(org) == ["ml/big", "ml/small"] and org["total"] == 2  # a parent: its subtree
    assert keys(a) == ["ml/small"] and a["total"] == 1
    assert keys(big) == ["ml/big"]
    assert keys(none) == [] and none["total"] == 0
    assert none["phases"] == {"Scheduling": 1, "Running": 1}  # counts over every gang


def test_pods_of_a_gang_and_of_a_queue_with_why_they_wait(
    run: tuple[SchedulerHarness, Dashboard],
) -> None:
    h, dashboard = run
    big, small, a, org, page = get_all(
        dashboard,
        "/dashboard/api/pods?gang=ml/big",
        "/dashboard/api/pods?gang=ml/small",
        "/dashboard/api/pods?queue=a",
        "/dashboard/api/pods?queue=org",
        "/dashboard/api/pods?queue=org&offset=1&limit=2",
    )
    # A gang's members, with where each is or why it waits (what `shoal explain` says).
    assert big["gang"] == "ml/big" and big["total"] == 3 and big["pending"] == 3
    pod = big["items"][0]
    assert (pod["pod"], pod["state"], pod["node"], pod["queue"]) == ("ml/big-0", "Pending", "", "b")
    assert pod["gang"] == "ml/big" and pod["attempts"] >= 1
    assert (pod["kind"], pod["reason"]) == ("unschedulable", "Unschedulable: QueueCapacity")
    assert pod["message"] == h.message("ml/big-0")
    assert "may not borrow nvidia.com/gpu beyond its guarantee" in pod["message"]
    assert small["pending"] == 0
    assert [(p["pod"], p["state"]) for p in small["items"]] == [
        ("ml/small-0", "Running"),
        ("ml/small-1", "Running"),
    ]
    assert {p["node"] for p in small["items"]} <= {"gpu-0", "gpu-1"}
    assert all(p["message"] == "" and p["node"] for p in small["items"])
    # A queue's pending pods, the longest waiting first; a parent: its subtree's.
    assert {p["pod"] for p in a["items"]} == {"default/lost", "default/held"}
    held = next(p for p in a["items"] if p["pod"] == "default/held")
    assert held["kind"] == "gated" and "example.com/wait" in held["message"]
    assert a["queue"] == "a" and a["gang"] is None
    assert org["total"] == 5 and len(org["items"]) == 5
    assert [p["pod"] for p in page["items"]] == [p["pod"] for p in org["items"][1:3]]
    assert page["total"] == 5 and page["offset"] == 1

    async def test(client: TestClient[Any, Any]) -> None:
        response = await client.get("/dashboard/api/pods?gang=ml/nope")
        assert response.status == 404
        assert (await response.json())["error"] == "no pod group 'ml/nope'"

    call(dashboard, test)


def test_unchanged_parts_are_answered_in_a_few_bytes() -> None:
    """A client that sends the version of its last answer (?since=, or If-None-Match)
    hears "unchanged" until what the answer is cut from changes; sections change apart."""
    h, history = scenario()
    dashboard = Dashboard(DashboardSource(h.scheduler), history, ttl=0.0)  # a frame per call
    paths = [
        "/dashboard/api/summary",
        "/dashboard/api/queues?parent=org",
        "/dashboard/api/queues/top",
        "/dashboard/api/queues/history?queue=a",
        "/dashboard/api/gangs",
        "/dashboard/api/pods?gang=ml/big",
        "/dashboard/api/pending",
        "/dashboard/api/nodes",
        "/dashboard/api/nodes/heat?format=packed",
    ]
    first = dict(zip(paths, get_all(dashboard, *paths), strict=True))
    versions = {path: body["version"] for path, body in first.items()}
    assert all(isinstance(v, str) and v for v in versions.values())

    def poll() -> dict[str, Any]:
        out: dict[str, Any] = {}

        async def test(client: TestClient[Any, Any]) -> None:
            for path in paths:
                sep = "&" if "?" in path else "?"
                response = await client.get(f"{path}{sep}since={versions[path]}")
                assert response.status == 200
                assert response.headers["ETag"].startswith('W/"')
                out[path] = (len(await response.read()), await response.json())

        call(dashboard, test)
        return out

    # Frames are rebuilt (ttl 0) but nothing changed: every answer is "unchanged".
    builds = dashboard.builds
    for path, (size, body) in poll().items():
        assert body == {"unchanged": True, "version": versions[path]}, path
        assert size < 60
    assert dashboard.builds > builds

    async def conditional(client: TestClient[Any, Any]) -> None:
        tag = f'W/"{versions["/dashboard/api/pending"]}"'
        response = await client.get("/dashboard/api/pending", headers={"If-None-Match": tag})
        assert response.status == 304 and response.headers["ETag"] == tag
        response = await client.get("/dashboard/api/pending", headers={"If-None-Match": '"x"'})
        assert response.status == 200

    call(dashboard, conditional)

    # A pod no node can hold arrives: queues, pending, the summary change; the nodes,
    # the gangs and the history (no sample taken) do not.
    h.add_pods(make_pod("huge").labels({QUEUE: "a"}).req(cpu="100"))
    h.run()
    answers = poll()
    fresh = {path for path, (_, body) in answers.items() if not body.get("unchanged")}
    assert fresh == {
        "/dashboard/api/summary",
        "/dashboard/api/queues?parent=org",
        "/dashboard/api/queues/top",
        "/dashboard/api/pods?gang=ml/big",  # cut from the whole frame
        "/dashboard/api/pending",
    }
    assert answers["/dashboard/api/pending"][1]["total"] == 6
    # The history changes when a sample is taken.
    h.advance(60)
    (after,) = get_all(
        dashboard,
        f"/dashboard/api/queues/history?queue=a&since={versions['/dashboard/api/queues/history?queue=a']}",
    )
    assert after["times"][-1] == 90.0
    # Another server process never takes a version of this one for its own.
    other = Dashboard(DashboardSource(h.scheduler), history, ttl=0.0)
    (elsewhere,) = get_all(
        other, f"/dashboard/api/pending?since={versions['/dashboard/api/pending']}"
    )
    assert "groups" in elsewhere


def test_gpu_nodes_use_and_fragmentation() -> None:
    """Two 2-GPU nodes: a 500m share on n0's device 0, a whole GPU on n1's device 0. The
    target workload is those two shapes, half each; F(n0) = 0.5 x 0 (a 500m share fits
    both devices) + 0.5 x 500 (device 0 is too small for a whole GPU) = 250 milli;
    F(n1) = 0: its free device fits either shape."""
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity({GPU: 2}, cpu="8", memory="16Gi") for i in (0, 1)))
    h.add_nodes(make_node("cpu").capacity(cpu="8", memory="16Gi"))
    h.add_pods(
        make_pod("share").annotations({"alibabacloud.com/gpu-milli": "500"}).node("n0"),
        make_pod("whole").req({GPU: 1}).node("n1"),
    )
    h.run()
    dashboard = Dashboard(DashboardSource(h.scheduler), ttl=0.0)
    by_frag, by_name, page2, heat, all_nodes = get_all(
        dashboard,
        "/dashboard/api/nodes",
        "/dashboard/api/nodes?sort=name",
        "/dashboard/api/nodes?sort=name&offset=1&limit=1",
        "/dashboard/api/nodes/heat",
        "/dashboard/api/nodes?gpu=all&sort=name",
    )
    summary = by_frag["summary"]
    assert summary["gpuNodes"] == 2 and summary["gpus"] == 4
    assert summary["gpuMilli"] == {"capacity": 4000, "used": 1500, "free": 2500}
    assert summary["fragMilli"] == 250.0
    assert summary["fragOfFree"] == pytest.approx(0.1)
    assert summary["freeDevices"] == 2
    assert sorted(
        (t["gpuMilli"], t["gpuCount"], t["popularity"]) for t in by_frag["targetWorkload"]
    ) == [(500, 1, 0.5), (1000, 1, 0.5)]
    n0, n1 = by_frag["items"]  # most fragmented first
    assert (n0["name"], n0["fragMilli"], n0["deviceFreeMilli"]) == ("n0", 250.0, [500, 1000])
    assert (n1["name"], n1["fragMilli"], n1["deviceFreeMilli"]) == ("n1", 0.0, [0, 1000])
    assert n0["gpuUsedMilli"] == 500 and n1["gpuUsedMilli"] == 1000
    assert by_frag["total"] == 2  # GPU nodes only, by default
    assert [n["name"] for n in by_name["items"]] == ["n0", "n1"]
    assert [n["name"] for n in page2["items"]] == ["n1"] and page2["total"] == 2
    assert [n["name"] for n in all_nodes["items"]] == ["cpu", "n0", "n1"]
    assert heat["names"] == ["n0", "n1"]
    assert heat["usePercent"] == [25, 50]
    assert heat["fragPercentOfFree"] == [16, 0]  # 250 of 1500 free milli
    # Packed: one character per node and value, its index in `encoding` x 2 = percent.
    (packed,) = get_all(dashboard, "/dashboard/api/nodes/heat?format=packed&names=0")
    assert "names" not in packed and "usePercent" not in packed
    decode = packed["encoding"].index
    assert [2 * decode(c) for c in packed["use"]] == [26, 50]  # 25 % rounds to 26
    assert [2 * decode(c) for c in packed["frag"]] == [16, 0]
    assert packed["namesVersion"] == heat["namesVersion"] and packed["total"] == 2


def test_no_gpus_no_fragmentation() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n0").capacity(cpu="2", memory="1Gi"))
    h.add_pods(make_pod("big").req(cpu="4"))
    h.run()
    summary, nodes = get_all(
        Dashboard(DashboardSource(h.scheduler), ttl=0.0),
        "/dashboard/api/summary",
        "/dashboard/api/nodes",
    )
    assert summary["gpuNodes"] == 0 and summary["pendingPods"] == 1
    assert nodes["total"] == 0 and nodes["summary"]["fragMilli"] == 0.0


@pytest.mark.parametrize("path", API)
def test_api_is_read_only(path: str, run: tuple[SchedulerHarness, Dashboard]) -> None:
    _, dashboard = run

    async def test(client: TestClient[Any, Any]) -> None:
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            response = await client.request(method, path, json={"phase": "Running"})
            assert response.status == 405, (method, path)
        assert (await client.get(path)).status == 200
        assert (await client.head(path)).status == 200

    call(dashboard, test)


def test_bad_query_parameters_are_named(run: tuple[SchedulerHarness, Dashboard]) -> None:
    _, dashboard = run

    async def test(client: TestClient[Any, Any]) -> None:
        for path, message in [
            (
                "/dashboard/api/nodes?limit=5000",
                "query parameter limit=5000 must be between 1 and 500",
            ),
            ("/dashboard/api/nodes?offset=x", "query parameter offset='x' is not an integer"),
            (
                "/dashboard/api/nodes?sort=age",
                "query parameter sort='age' must be one of frag, used",
            ),
            (
                "/dashboard/api/queues/history?resource=gpu",
                "query parameter resource='gpu' must be one",
            ),
            ("/dashboard/api/queues/history?from=x", "query parameter from='x' is not a number"),
            ("/dashboard/api/queues?parent=zz", "query parameter parent='zz' names no queue"),
            ("/dashboard/api/queues?limit=0", "query parameter limit=0 must be between 1 and"),
            ("/dashboard/api/queues/top?by=age", "query parameter by='age' must be one of"),
            ("/dashboard/api/queues/top?resource=gpu", "query parameter resource='gpu'"),
            ("/dashboard/api/pods", "give one of the query parameters gang= and queue="),
            ("/dashboard/api/pods?gang=ml/big&queue=a", "give one of the query parameters"),
            ("/dashboard/api/nodes/heat?format=csv", "query parameter format='csv' must be"),
        ]:
            response = await client.get(path)
            assert response.status == 400
            assert message in (await response.json())["error"]

    call(dashboard, test)


def test_one_snapshot_per_ttl_whatever_the_polling() -> None:
    h, history = scenario()
    now = [0.0]
    dashboard = Dashboard(DashboardSource(h.scheduler), history, ttl=1.0, clock=lambda: now[0])
    get_all(
        dashboard,
        "/dashboard/api/summary",
        "/dashboard/api/queues",
        "/dashboard/api/gangs",
        "/dashboard/api/pending",
        "/dashboard/api/nodes",
    )
    assert dashboard.builds == 1
    now[0] = 1.0
    (summary,) = get_all(dashboard, "/dashboard/api/summary")
    assert dashboard.builds == 2
    assert summary["buildSeconds"] >= 0 and summary["clock"] == "virtual"


def test_page_and_static_files_are_served(run: tuple[SchedulerHarness, Dashboard]) -> None:
    _, dashboard = run

    async def test(client: TestClient[Any, Any]) -> None:
        root = await client.get("/", allow_redirects=False)
        assert root.status == 302 and root.headers["Location"] == "/dashboard/"
        page = await client.get("/dashboard/")
        assert page.status == 200 and "queue-table" in await page.text()
        for asset in ("dashboard.js", "dashboard.css", "vendor/chart.umd.min.js"):
            response = await client.get(f"/dashboard/static/{asset}")
            assert response.status == 200, asset
        licence = await client.get("/dashboard/static/vendor/LICENSE-chart.js.txt")
        assert "MIT License" in await licence.text()
        assert (await client.post("/dashboard/static/dashboard.js")).status == 405

    call(dashboard, test)


def test_shoal_run_serves_the_dashboard_beside_metrics() -> None:
    """`shoal run` mounts the dashboard on its /metrics server (HealthServer routes)."""
    from prometheus_client import CollectorRegistry

    h, _ = scenario()
    dashboard = attach_dashboard(h.driver, h.scheduler, interval=5)
    h.advance(10)  # the driver samples the attached history

    async def main() -> None:
        ok = [Check("ping", True)]
        server = HealthServer(
            CollectorRegistry(), lambda: ok, lambda: ok, port=0, routes=dashboard.install
        )
        await server.start()
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{server.port}") as session:
                async with session.get("/metrics") as response:
                    assert response.status == 200
                async with session.get("/dashboard/api/gangs") as response:
                    assert (await response.json())["total"] == 2
                async with session.get("/dashboard/api/queues/history") as response:
                    assert (await response.json())["times"][-1] == 40.0
                async with session.post("/dashboard/api/gangs") as response:
                    assert response.status == 405
        finally:
            await server.stop()

    asyncio.run(main())


# ---- invariants over random GPU clusters ---------------------------------------------

node_gpus = st.lists(st.integers(0, 8), min_size=1, max_size=12)  # GPUs per node
pods_st = st.lists(
    st.tuples(st.sampled_from([0, 100, 250, 500, 1000]), st.integers(1, 2)), max_size=30
)  # (milli per device, devices) of pods the scheduler places; milli 1000 = whole GPUs


@settings(max_examples=40, deadline=None)
@given(node_gpus, pods_st, st.sampled_from(["frag", "used", "free", "name"]), st.integers(1, 5))
def test_node_pages_and_aggregates_agree(
    gpus: list[int], pods: list[tuple[int, int]], sort: str, limit: int
) -> None:
    """Whatever the cluster: pages cover every GPU node once, in the order asked; the
    aggregates are the sums of the rows; fragment lies between 0 and the free GPU."""
    h = SchedulerHarness()
    h.add_nodes(
        *(
            make_node(f"n{i:02d}").capacity({GPU: g} if g else {}, cpu="64", memory="64Gi")
            for i, g in enumerate(gpus)
        )
    )
    for k, (milli, count) in enumerate(pods):
        pod = make_pod(f"p{k}").req(cpu="1")
        if milli == 1000:
            pod = pod.req({GPU: count}, cpu="1")
        elif milli:
            pod = pod.annotations({"alibabacloud.com/gpu-milli": str(milli)})
        h.add_pods(pod)
    h.run()
    dashboard = Dashboard(DashboardSource(h.scheduler), ttl=60.0)
    first, heat = get_all(
        dashboard, f"/dashboard/api/nodes?sort={sort}&limit={limit}", "/dashboard/api/nodes/heat"
    )
    total = first["total"]
    pages = [first]
    while sum(len(p["items"]) for p in pages) < total:
        offset = sum(len(p["items"]) for p in pages)
        (page,) = get_all(
            dashboard, f"/dashboard/api/nodes?sort={sort}&limit={limit}&offset={offset}"
        )
        assert page["items"], "a page came back empty before the end"
        pages.append(page)
    items = [n for p in pages for n in p["items"]]
    names = [n["name"] for n in items]
    assert sorted(names) == sorted(f"n{i:02d}" for i, g in enumerate(gpus) if g)
    assert len(names) == total == sum(1 for g in gpus if g) == heat["total"]
    key = {
        "frag": lambda n: (-n["fragMilli"], n["name"]),
        "used": lambda n: (-n["gpuUsedMilli"], n["name"]),
        "free": lambda n: (-n["gpuFreeMilli"], n["name"]),
        "name": lambda n: n["name"],
    }[sort]
    assert items == sorted(items, key=key)
    summary = first["summary"]
    assert summary["gpus"] == sum(gpus)
    assert summary["gpuMilli"]["used"] == sum(n["gpuUsedMilli"] for n in items)
    assert summary["gpuMilli"]["free"] == sum(n["gpuFreeMilli"] for n in items)
    assert summary["fragMilli"] == pytest.approx(
        sum(n["fragMilli"] for n in items), abs=0.1 * total + 0.1
    )
    assert sum(summary["histogram"]["gpuUse"]) == total
    for n in items:
        assert (
            sum(n["deviceFreeMilli"]) == n["gpuFreeMilli"] == 1000 * n["gpus"] - n["gpuUsedMilli"]
        )
        assert -1e-6 <= n["fragMilli"] <= n["gpuFreeMilli"] + 1e-6
    assert all(0 <= u <= 100 for u in heat["usePercent"])
    assert all(0 <= f <= 100 for f in heat["fragPercentOfFree"])


def test_fragmentation_target_follows_pods_that_come_and_go() -> None:
    """The target workload is counted incrementally across snapshots; it must equal the
    one a fresh source computes, as pods arrive, bind and leave."""
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity({GPU: 4}, cpu="32", memory="64Gi") for i in range(3)))
    source = DashboardSource(h.scheduler)

    def same() -> list[tuple[int, float]]:
        target = source.build().target
        assert target == DashboardSource(h.scheduler).build().target
        return sorted((t["gpuMilli"], round(t["popularity"], 3)) for t in target)

    assert same() == [(1000, 1.0)]  # no GPU pod: one whole GPU
    share = {"alibabacloud.com/gpu-milli": "250"}
    h.add_pods(*(make_pod(f"s{i}").annotations(share).req(cpu="1") for i in range(3)))
    h.add_pods(*(make_pod(f"w{i}").req({GPU: 4}, cpu="2") for i in range(4)))  # 1 waits
    assert same() == [(250, 0.429), (1000, 0.571)]
    h.run()
    assert same() == [(250, 0.429), (1000, 0.571)]
    for key in ("w0", "w1", "w2", "w3", "s0"):
        h.delete_pod(key)
    assert same() == [(250, 1.0)]
    h.add_pods(make_pod("cpu-only").req(cpu="1"))
    assert same() == [(250, 1.0)]
