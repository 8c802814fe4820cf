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
    "/dashboard/api/queues/history",
    "/dashboard/api/gangs",
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
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infer}, "
        "2 node(s) didn't match Pod's node affinity/selector."
    )
    assert lost["examples"][0]["queue"] == "a"


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
