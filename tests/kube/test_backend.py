"""The Kubernetes backend end to end, against the fake API server over HTTP."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from kubehelpers import (
    async_test,
    bound_pods,
    condition,
    config,
    events_for,
    eventually,
    fast_options,
    node,
    pod,
)
from kubehelpers import backend as running

from shoal.drivers.kube.backend import KubeBackend
from shoal.testing.fake_apiserver import FakeApiServer, Fault


@async_test()
async def test_binds_pending_pods_of_its_profiles_to_feasible_nodes(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("small", cpu="1", memory="1Gi"))
        api.create("v1", "nodes", node("big", cpu="8", memory="16Gi", zone="b"))
        for i in range(6):
            api.create("v1", "pods", pod(f"p{i}", cpu="1"))
        api.create("v1", "pods", pod("zonal", cpu="100m", node_selector={"zone": "b"}))
        api.create("v1", "pods", pod("other", scheduler="default-scheduler"))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 7, what="7 pods bound")
            bound = bound_pods(api)
            assert "default/other" not in bound  # another scheduler's pod is left alone
            assert bound["default/zonal"] == "big"
            assert sum(1 for n in bound.values() if n == "small") <= 1  # 1 cpu fits once
            # Every bind was accepted once; nothing was bound twice.
            assert len(api.bindings) == 7
            assert len({b.uid for b in api.bindings}) == 7
            # A Scheduled event per pod.
            await eventually(lambda: len(events_for(api, "p0", "Scheduled")) == 1)
            assert kube.metrics.schedule_attempts.labels("scheduled", "shoal")._value.get() == 7


@async_test()
async def test_unschedulable_pod_gets_condition_and_failed_scheduling_event(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1", cpu="1"))
        api.create("v1", "pods", pod("huge", cpu="64"))
        async with running(api, tmp_path) as (kube, _):

            def reported() -> bool:
                cond = condition(api.get("", "pods", "default", "huge"))
                return cond is not None and cond.get("reason") == "Unschedulable"

            await eventually(reported, what="PodScheduled=False")
            cond = condition(api.get("", "pods", "default", "huge"))
            assert cond is not None and cond["status"] == "False"
            assert "Insufficient cpu" in cond["message"]
            await eventually(lambda: bool(events_for(api, "huge", "FailedScheduling")))
            event = events_for(api, "huge", "FailedScheduling")[0]
            assert event["type"] == "Warning"
            assert event["note"] == cond["message"]
            assert event["reportingController"] == "shoal"
            assert event["regarding"]["kind"] == "Pod"
            # Our own status patch is not a reason to try the pod again.
            await asyncio.sleep(0.3)
            attempts = kube.metrics.schedule_attempts.labels("unschedulable", "shoal")
            assert attempts._value.get() == 1
            # Add room: the pod is retried and bound; the condition flips to True.
            api.create("v1", "nodes", node("n2", cpu="128"))
            await eventually(lambda: bound_pods(api).get("default/huge") == "n2")
            cond = condition(api.get("", "pods", "default", "huge"))
            assert cond is not None and cond["status"] == "True"


@async_test()
async def test_bind_conflict_forgets_the_pod_and_never_binds_twice(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1", cpu="2"))
        # Another scheduler binds the pod while our binding request is in flight.
        api.inject(Fault(method="POST", path="/pods/race/binding", status=0, delay=0.3))
        api.create("v1", "pods", pod("race", cpu="1"))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: bool(kube.binder.in_flight), what="bind in flight")
            api.bind("default", "race", "n1", user_agent="other-scheduler")
            await eventually(lambda: api.binding_conflicts == 1, what="our bind refused")
            await eventually(lambda: "race" not in str(kube.scheduler.binding))
            # The pod counts as bound (by the other scheduler), not pending, not assumed.
            await eventually(lambda: kube.scheduler.scheduling_queue.get(_uid(api, "race")) is None)
            record = kube.scheduler.cluster.placed[_uid(api, "race")]
            assert record.node == "n1" and not record.assumed
            assert [b.user_agent for b in api.binds_of(_uid(api, "race"))] == ["other-scheduler"]
            # It keeps counting: a 1.5-cpu pod does not fit next to it.
            api.create("v1", "pods", pod("next", cpu="1500m"))
            await eventually(
                lambda: condition(api.get("", "pods", "default", "next")) is not None,
                what="next reported unschedulable",
            )
            assert "default/next" not in bound_pods(api)


def _uid(api: FakeApiServer, name: str) -> str:
    obj = api.get("", "pods", "default", name)
    assert obj is not None
    return str(obj["metadata"]["uid"])


@async_test()
async def test_pods_bound_by_anyone_count_from_the_start(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1", cpu="2"))
        api.create("v1", "nodes", node("n2", cpu="2"))
        api.create("v1", "pods", pod("static", cpu="2", node_name="n1", scheduler="x"))
        for i in range(2):
            api.create("v1", "pods", pod(f"p{i}", cpu="1"))
        async with running(api, tmp_path, options=fast_options(), scheduler_config=config()):
            await eventually(lambda: len(bound_pods(api)) == 3)
            assert bound_pods(api)["default/p0"] == "n2"
            assert bound_pods(api)["default/p1"] == "n2"


# ---- API errors, timeouts, dropped and expired watches ------------------------------------


@async_test(timeout=60)
async def test_api_errors_and_timeouts_on_bind_are_retried_without_double_binds(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        for i in range(3):
            api.create("v1", "nodes", node(f"n{i}", cpu="16"))
        for i in range(12):
            api.create("v1", "pods", pod(f"p{i}"))
        # Server errors, throttling, and requests that hang past the client timeout
        # (the slow ones are still carried out by the server after the client gave up).
        api.inject(Fault(method="POST", path="/p[0-3]/binding", status=500, times=4))
        api.inject(Fault(method="POST", path="/p[4-5]/binding", status=429, times=2))
        api.inject(Fault(method="POST", path="/p[6-7]/binding", status=0, delay=0.6, times=2))
        api.inject(Fault(method="POST", path="/p8/binding", drop=True, times=3))
        options = fast_options(request_timeout=0.3)
        async with running(api, tmp_path, options=options) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 12, timeout=20, what="all bound")
            for p in api.pods():
                assert len(api.binds_of(p["metadata"]["uid"])) == 1, p["metadata"]["name"]
            await eventually(lambda: not kube.scheduler.binding)
            # The slow binds landed after the client gave up: seen bound, not retried into
            # a second binding.
            assert all(not r.assumed for r in kube.scheduler.cluster.placed.values())
            # Only the 429s failed: a 500, a timeout or a dropped connection leaves the
            # outcome unknown, and the binder read the pod back (and sent again) instead.
            assert kube.metrics.binds.labels("error")._value.get() == 2
            assert kube.scheduler.scheduling_queue.counts()["active"] == 0


@async_test(timeout=60)
async def test_list_errors_at_start_are_retried(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1"))
        api.create("v1", "pods", pod("p"))
        api.inject(Fault(method="GET", path="^/api/v1/pods$", status=503, times=3, watch=False))
        api.inject(Fault(method="GET", path="^/api/v1/nodes$", delay=3.0, times=1, watch=False))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: bound_pods(api) == {"default/p": "n1"}, timeout=20)
            assert kube.informers["pods"].lists >= 1
            ops = kube.metrics.informer_operations
            assert ops.labels("pods", "list_error")._value.get() == 3
            assert ops.labels("nodes", "list_error")._value.get() == 1  # timed out


@async_test(timeout=60)
async def test_dropped_watches_and_expired_resource_versions_relist(tmp_path: Path) -> None:
    async with FakeApiServer(bookmark_interval=0.1) as api:
        api.create("v1", "nodes", node("n1", cpu="64"))
        api.create("v1", "pods", pod("before", cpu="100m", scheduler="other"))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: kube.leading and kube.synced)
            pods = kube.informers["pods"]
            # Bookmarks move the resourceVersion forward with no object changing.
            api.create("v1", "nodes", node("n2"))
            rv = api.rv
            # (>=: other writes, a Lease renewal or an Event, may move it further before the
            # bookmark that carries exactly rv arrives, as happened once under load.)
            await eventually(lambda: int(pods.resource_version or 0) >= rv, what="bookmark rv")
            # Cut the watches, and change things while they are down.
            api.inject(Fault(method="GET", path="^/api/v1/pods$", watch=True, status=503, times=2))
            api.drop_watches()
            api.create("v1", "pods", pod("during-drop", cpu="100m"))
            await eventually(lambda: "default/during-drop" in bound_pods(api))
            assert pods.lists == 1  # resumed from its resourceVersion: no relist
            # Now the history is compacted while the watch is down: 410 -> relist.
            api.inject(Fault(method="GET", path="^/api/v1/pods$", watch=True, status=503, times=1))
            api.drop_watches()
            api.create("v1", "pods", pod("after-compaction", cpu="100m"))
            api.delete("", "pods", "default", "before")
            api.compact()
            await eventually(lambda: "default/after-compaction" in bound_pods(api), timeout=15)
            await eventually(lambda: pods.lists >= 2, what="a relist")
            assert kube.metrics.informer_operations.labels("pods", "expired")._value.get() >= 1
            assert "default/before" not in pods.store
            uids = {p["metadata"]["uid"] for p in api.pods()}
            assert set(kube.scheduler.cluster.placed) <= uids


# ---- restart safety ----------------------------------------------------------------------


@async_test(timeout=60)
async def test_killed_mid_run_the_next_instance_loses_no_pod_and_binds_none_twice(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        # Exactly enough room: 8 nodes x 4 cpu for 32 one-cpu pods. Double counting
        # leaves pods pending; not counting the first instance's binds overcommits.
        for i in range(8):
            api.create("v1", "nodes", node(f"n{i}", cpu="4"))
        for i in range(32):
            api.create("v1", "pods", pod(f"p{i:02d}", cpu="1"))
        api.inject(Fault(method="POST", path="/binding$", status=0, delay=0.05, times=None))
        # 10 binds a second: at the 10th, about two seconds of binds are still to go, so
        # a loaded machine (CI) does not see them all done before the check below.
        first = fast_options("first", qps=10.0, burst=1)
        async with running(api, tmp_path, first, graceful=False) as (kube, task):
            await eventually(lambda: len(api.bindings) >= 10, what="some binds")
            # Killed with binds in flight and pods assumed but not bound (no clean-up,
            # no lease release).
            assert any(r.assumed for r in kube.scheduler.cluster.placed.values())
            task.cancel()
        killed_at = len(api.bindings)
        assert killed_at < 32
        async with running(api, tmp_path, fast_options("second")):
            await eventually(lambda: len(bound_pods(api)) == 32, timeout=20, what="all bound")
            assert len(api.bindings) == 32
            assert len({b.uid for b in api.bindings}) == 32
            per_node: dict[str, int] = {}
            for name in bound_pods(api).values():
                per_node[name] = per_node.get(name, 0) + 1
            assert per_node == {f"n{i}": 4 for i in range(8)}
            assert {b.user_agent.split("(")[1].rstrip(")") for b in api.bindings} == {
                "first",
                "second",
            }


# ---- bad objects ---------------------------------------------------------------------------


def _install_crds(api: FakeApiServer) -> None:
    import yaml

    from shoal.drivers.kube.crds import render

    for text in render().values():
        api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))


@async_test()
async def test_bad_objects_get_an_event_and_a_log_line_and_the_rest_is_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="shoal.kube")
    async with FakeApiServer() as api:
        _install_crds(api)
        api.create("v1", "nodes", node("good", cpu="8"))
        bad_node = node("bad-node")
        bad_node["status"]["allocatable"]["cpu"] = "lots"
        api.create("v1", "nodes", bad_node)
        api.create(
            "scheduling.x-k8s.io/v1alpha1",
            "podgroups",
            {"metadata": {"name": "bad-group"}, "spec": {"minMember": 0}},
        )
        api.create(
            "scheduling.x-k8s.io/v1alpha1",
            "podgroups",
            {
                "metadata": {"name": "bad-quantity"},
                "spec": {"minMember": 2, "minResources": {"cpu": "1x"}},
            },
        )
        bad_pod = pod("bad-pod")
        bad_pod["spec"]["containers"][0]["resources"]["requests"]["memory"] = "-1Gi"
        api.create("v1", "pods", bad_pod)
        for i in range(3):
            api.create("v1", "pods", pod(f"fine{i}"))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 3, what="the good pods bound")
            assert set(bound_pods(api).values()) == {"good"}
            for name, kind in [
                ("bad-node", "Node"),
                ("bad-group", "PodGroup"),
                ("bad-quantity", "PodGroup"),
                ("bad-pod", "Pod"),
            ]:
                await eventually(
                    lambda n=name: bool(events_for(api, n, "InvalidObject")), what=name
                )
                event = events_for(api, name, "InvalidObject")[0]
                assert event["type"] == "Warning" and event["regarding"]["kind"] == kind
                assert name in event["note"]
            notes = {
                e["regarding"]["name"]: e["note"]
                for e in api.list_objects("events.k8s.io", "events")
                if e["reason"] == "InvalidObject"
            }
            assert "minMember" in notes["bad-group"]
            assert "1x" in notes["bad-quantity"]
            assert "lots" in notes["bad-node"]
            logged = [r for r in caplog.records if "ignoring invalid" in r.getMessage()]
            assert {getattr(r, "object", "") for r in logged} >= {
                "bad-node",
                "default/bad-group",
                "default/bad-quantity",
                "default/bad-pod",
            }
            # Fixing an object makes it count.
            fixed = api.get("", "nodes", "", "bad-node")
            assert fixed is not None
            fixed["status"]["allocatable"]["cpu"] = "4"
            api.update("", "nodes", fixed)
            await eventually(lambda: "bad-node" in kube.scheduler.cluster.table.row_of)
            # Reported once per resourceVersion, not on every relist.
            assert (
                kube.metrics.invalid_objects.labels("podgroups.scheduling.x-k8s.io")._value.get()
                == 2
            )


@async_test()
async def test_gang_from_a_pod_group_object_is_bound_all_together(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        _install_crds(api)
        for i in range(2):
            api.create("v1", "nodes", node(f"n{i}", cpu="4"))
        api.create(
            "scheduling.x-k8s.io/v1alpha1",
            "podgroups",
            {"metadata": {"name": "train"}, "spec": {"minMember": 3}},
        )
        label = {"scheduling.x-k8s.io/pod-group": "train"}
        for i in range(2):
            api.create("v1", "pods", pod(f"w{i}", cpu="2", labels=label))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: kube.synced and kube.leading)
            await eventually(lambda: "train" in kube.scheduler.explain(_uid(api, "w0")))
            assert bound_pods(api) == {}  # 2 of 3 members: gated
            api.create("v1", "pods", pod("w2", cpu="2", labels=label))
            await eventually(lambda: len(bound_pods(api)) == 3, what="the whole gang")
            status = kube.scheduler.gangs.status()["default/train"]
            # Bound, not started (no kubelet here): Scheduled, in every report.
            assert (status["phase"], status["bound"], status["running"]) == ("Scheduled", 3, 0)
            # The series are sampled on the core's thread about once a second.
            for _ in range(50):
                text = await _scrape(kube)
                if 'shoal_gang_groups{phase="Scheduled"} 1.0' in text:
                    break
                await asyncio.sleep(0.1)
            assert 'shoal_gang_groups{phase="Scheduled"} 1.0' in text
            assert 'shoal_gang_pods{state="bound"} 3.0' in text


async def _scrape(kube: KubeBackend) -> str:
    from prometheus_client import generate_latest

    return generate_latest(kube.metrics.registry).decode()


# ---- preemption: nomination and eviction through the Eviction API ---------------------------


@async_test()
async def test_preemption_nominates_and_evicts_through_the_eviction_api(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1", cpu="2"))
        for name in ("protected", "free"):
            victim = pod(name, cpu="1", labels={"app": name}, node_name="n1", scheduler="x")
            api.create("v1", "pods", victim)
            api.set_pod_phase("default", name, "Running")
        selector = {"matchLabels": {"app": "protected"}}
        api.create(
            "policy/v1",
            "poddisruptionbudgets",
            {"metadata": {"name": "keep"}, "spec": {"minAvailable": 1, "selector": selector}},
        )
        urgent = pod("urgent", cpu="1")
        urgent["spec"]["priority"] = 100
        api.create("v1", "pods", urgent)
        async with running(api, tmp_path) as (kube, _):

            def nominated() -> bool:
                p = api.get("", "pods", "default", "urgent")
                return bool(p and p.get("status", {}).get("nominatedNodeName") == "n1")

            # The fake deletes an evicted pod at once, and the preemptor is tried as soon
            # as its victim is gone: it may be bound before its nominatedNodeName is
            # written (the writer skips a pod already bound), as in a cluster whose
            # victims terminate at once.
            await eventually(
                lambda: nominated() or bound_pods(api).get("default/urgent") == "n1",
                what="nominatedNodeName or the bind",
            )
            # DefaultPreemption knows the PDB: it picks the unprotected victim, which is
            # evicted through the Eviction API; the preemptor is then bound.
            await eventually(lambda: api.evictions == ["default/free"], what="eviction")
            await eventually(lambda: bound_pods(api).get("default/urgent") == "n1", timeout=15)
            assert api.get("", "pods", "default", "protected") is not None
            await eventually(lambda: bool(events_for(api, "free", "Preempted")))
            assert kube.metrics.evictions.labels("evicted")._value.get() == 1


@async_test()
async def test_evictions_respect_pod_disruption_budgets(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1"))
        for i in range(2):
            api.create("v1", "pods", pod(f"web{i}", labels={"app": "web"}, node_name="n1"))
            api.set_pod_phase("default", f"web{i}", "Running")
        api.create(
            "policy/v1",
            "poddisruptionbudgets",
            {
                "metadata": {"name": "web"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            },
        )
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: kube.leading)
            kube.evictor.retries = 1
            kube.evictor.retry_delay = 0.05
            infos = {p.name: p for p in kube.scheduler.cluster.pods_on("n1")}
            assert await kube.evictor.evict_now(infos["web0"], "test") == "evicted"
            # One down is all the budget allows: the second eviction is refused (429).
            assert await kube.evictor.evict_now(infos["web1"], "test") == "blocked"
            assert api.evictions == ["default/web0"]
            await eventually(lambda: bool(events_for(api, "web1", "EvictionFailed")))
            note = events_for(api, "web1", "EvictionFailed")[0]["note"]
            assert "disruption budget" in note
            # Gone already: nothing to do.
            assert await kube.evictor.evict_now(infos["web0"], "test") == "gone"


# ---- tenant queues -------------------------------------------------------------------------


@async_test()
async def test_queue_objects_are_applied_and_unknown_queues_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="shoal.kube")
    async with FakeApiServer() as api:
        _install_crds(api)
        api.create("v1", "nodes", node("n1", cpu="8"))
        api.create("v1", "namespaces", {"metadata": {"name": "team-a"}})
        api.create(
            "shoal.dev/v1alpha1",
            "queues",
            {"metadata": {"name": "research"}, "spec": {"max": {"cpu": "2"}}},
        )
        api.create(
            "shoal.dev/v1alpha1",
            "queuebindings",
            {
                "metadata": {"name": "team-a"},
                "spec": {"queue": "research", "namespaces": ["team-a"]},
            },
        )
        for i in range(3):
            api.create("v1", "pods", pod(f"a{i}", cpu="1", namespace="team-a"))
        api.create("v1", "pods", pod("lost", labels={"shoal.dev/queue": "nope"}))
        async with running(api, tmp_path) as (kube, _):
            # The queue's max (2 cpu) admits two of the three team-a pods.
            await eventually(lambda: len(bound_pods(api)) == 2, what="two admitted")
            assert set(bound_pods(api)) <= {f"team-a/a{i}" for i in range(3)}
            # A pod naming a queue that does not exist: event and log line, and it waits.
            await eventually(lambda: bool(events_for(api, "lost", "FailedScheduling")))
            note = events_for(api, "lost", "FailedScheduling")[0]["note"]
            assert "'nope' does not exist" in note
            assert any(
                "default/lost" in r.getMessage() and "nope" in r.getMessage()
                for r in caplog.records
            )
            # A binding naming an unknown queue is rejected as a whole (the tree in force
            # stays) and reported on the binding.
            api.create(
                "shoal.dev/v1alpha1",
                "queuebindings",
                {
                    "metadata": {"name": "typo"},
                    "spec": {"queue": "reserch", "namespaces": ["team-b"]},
                },
            )
            await eventually(lambda: bool(events_for(api, "typo", "InvalidObject")))
            assert "does not exist" in events_for(api, "typo", "InvalidObject")[0]["note"]
            assert any(
                "typo" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
            )
            assert kube.scheduler.tenant_queues.bindings.keys() == {"team-a"}
            # Fixing it applies everything; raising the max admits the third pod.
            typo = api.get("shoal.dev", "queuebindings", "", "typo")
            assert typo is not None
            typo["spec"]["queue"] = "research"
            api.update("shoal.dev", "queuebindings", typo)
            await eventually(
                lambda: kube.scheduler.tenant_queues.bindings.keys() == {"team-a", "typo"}
            )
            research = api.get("shoal.dev", "queues", "", "research")
            assert research is not None
            research["spec"]["max"] = {"cpu": "4"}
            api.update("shoal.dev", "queues", research)
            await eventually(lambda: len(bound_pods(api)) == 3, what="third admitted")
            text = await _scrape(kube)
            # A queue name no Queue has is folded into one label value (pods could
            # otherwise mint a series each).
            assert 'shoal_queue_pending_pods{queue="<unknown>"} 1.0' in text
            assert 'queue="nope"' not in text


# ---- binds that write annotations ------------------------------------------------------------


@async_test(timeout=60)
async def test_pods_bound_with_annotations_are_not_scheduled_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The device annotations and the binding are two writes, so the watch can deliver
    the annotated-but-unbound pod after our binding was accepted. Until the informer
    sees the pod bound it is assumed: an update must not send it back to the queue
    (kube-scheduler skips updates of assumed pods)."""
    from shoal.config import parse_config

    caplog.set_level(logging.ERROR, logger="shoal.kube")
    gpu_config = parse_config(
        {
            "profiles": [
                {
                    "schedulerName": "shoal",
                    "plugins": {"multiPoint": {"enabled": [{"name": "GpuShare"}]}},
                }
            ]
        }
    )
    async with FakeApiServer() as api:
        gpu = node("gpu", cpu="32")
        for part in ("capacity", "allocatable"):
            gpu["status"][part]["nvidia.com/gpu"] = "4"
        api.create("v1", "nodes", gpu)
        for i in range(4):  # two devices' worth: there is always room for one more
            share = {"alibabacloud.com/gpu-milli": "400", "alibabacloud.com/gpu-count": "1"}
            api.create("v1", "pods", pod(f"s{i}", cpu="1", annotations=share))
        # The pod watch lags: binds are accepted before their events arrive, and the
        # scheduler runs between the annotation's event and the binding's.
        api.delay_watch_events("", "pods", 0.1)
        async with running(api, tmp_path, scheduler_config=gpu_config) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 4, what="all bound")

            def seen_bound() -> bool:
                return all(
                    (kube.lookup_pod(f"default/s{i}") or {}).get("spec", {}).get("nodeName")
                    for i in range(4)
                )

            await eventually(seen_bound, what="every bind seen through the watch")
            await asyncio.sleep(0.3)
            assert [r.getMessage() for r in caplog.records] == []
            # One attempt per pod: none was tried again after its bind.
            attempts = kube.metrics.schedule_attempts
            assert attempts.labels("scheduled", "shoal")._value.get() == 4
            assert attempts.labels("unschedulable", "shoal")._value.get() == 0
            assert attempts.labels("error", "")._value.get() == 0
            for p in api.pods():
                assert len(api.binds_of(p["metadata"]["uid"])) == 1
            # The cache counts every pod once, on the devices it was given.
            indices = sorted(
                p["metadata"]["annotations"]["shoal.dev/gpu-index"] for p in api.pods()
            )
            assert indices == ["0", "0", "1", "1"]
            assert sorted(r.node for r in kube.scheduler.cluster.placed.values()) == ["gpu"] * 4


@async_test()
async def test_a_pod_waiting_for_its_gang_says_so_on_its_condition(tmp_path: Path) -> None:
    """Gated pods explain themselves in the cluster: PodScheduled=False with reason
    SchedulingGated and what they wait for, and a Normal event."""
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1", cpu="8"))
        labels = {
            "pod-group.scheduling.sigs.k8s.io/name": "train",
            "pod-group.scheduling.sigs.k8s.io/min-available": "3",
        }
        for i in range(2):
            api.create("v1", "pods", pod(f"w{i}", cpu="1", labels=labels))
        async with running(api, tmp_path):

            def gated(name: str) -> bool:
                cond = condition(api.get("", "pods", "default", name))
                return cond is not None and cond.get("reason") == "SchedulingGated"

            # Each member says so when it is gated (the count is the group's at that
            # moment: rewriting every member's condition on each arrival would cost
            # O(members^2) writes for a large gang).
            await eventually(lambda: gated("w0") and gated("w1"), what="SchedulingGated")
            cond = condition(api.get("", "pods", "default", "w0"))
            assert cond is not None and cond["status"] == "False"
            assert "gang default/train:" in cond["message"] and "waiting for" in cond["message"]
            members = {
                condition(api.get("", "pods", "default", n))["message"]  # type: ignore[index]
                for n in ("w0", "w1")
            }
            assert any("2/3 members exist, waiting for 1 more" in m for m in members)
            await eventually(lambda: bool(events_for(api, "w0", "SchedulingGated")))
            assert events_for(api, "w0", "SchedulingGated")[0]["type"] == "Normal"
            # The third member arrives: the gang is placed and the condition flips.
            api.create("v1", "pods", pod("w2", cpu="1", labels=labels))
            await eventually(lambda: len(bound_pods(api)) == 3, what="the gang bound")
