"""Robustness in the cluster: informers that survive anything, and say so in /readyz."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubehelpers import async_test, bound_pods, eventually, node, pod, pod_story
from kubehelpers import backend as running

import shoal.testing.fake_apiserver as fake_module
from shoal.drivers.kube.backend import KubeBackend
from shoal.drivers.kube.crds import render
from shoal.testing.fake_apiserver import FakeApiServer

PODGROUPS = "podgroups.scheduling.x-k8s.io"


def _install_crds(api: FakeApiServer) -> None:
    for text in render().values():
        api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))


@contextlib.contextmanager
def _deep_recursion() -> Iterator[None]:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 50_000))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


class _DeepJson:
    """The fake's json module, able to write what kube's API server accepts (JSON nested
    up to 10000 levels); Shoal's client still reads with Python's default limit."""

    loads = staticmethod(json.loads)

    @staticmethod
    def dumps(obj: Any, **kwargs: Any) -> str:
        with _deep_recursion():
            return json.dumps(obj, **kwargs)


class _DeepCopy:
    @staticmethod
    def deepcopy(obj: Any) -> Any:
        with _deep_recursion():
            return copy.deepcopy(obj)


def _nested(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    cur = root
    for _ in range(depth):
        cur["x"] = {}
        cur = cur["x"]
    return root


def _failed_checks(kube: KubeBackend) -> dict[str, str]:
    return {c.name: c.message for c in kube.readyz() if not c.ok}


def _readyz_detail(kube: KubeBackend, name: str) -> str:
    return next(c.detail for c in kube.readyz() if c.name == name)


def _group(name: str, min_member: int, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"minMember": min_member, **spec}}


@async_test()
async def test_a_podgroup_nested_1500_levels_is_skipped_and_reported_and_its_kind_flows_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubehelpers import events_for, fast_options

    monkeypatch.setattr(fake_module, "json", _DeepJson)
    monkeypatch.setattr(fake_module, "copy", _DeepCopy)
    version = "scheduling.x-k8s.io/v1alpha1"
    options = fast_options()
    # Two groups a page: the deep one shares its page with a good one.
    options = replace(options, informer=replace(options.informer, page_size=2))
    async with FakeApiServer() as api:
        _install_crds(api)
        api.create("v1", "nodes", node("n1", cpu="8"))
        for name in ("a", "deep", "b"):
            extra = {"x": _nested(1500)} if name == "deep" else {}
            api.create(version, "podgroups", _group(name, 1, **extra))
        async with running(api, tmp_path, options) as (kube, _):
            await eventually(lambda: kube.synced and kube.leading, what="synced")
            informer = kube.informers[PODGROUPS]
            # The list delivered the good ones and named the bad one.
            assert set(informer.store) == {"default/a", "default/b"}
            assert set(informer.undecodable) == {"default/deep"}
            assert {"default/a", "default/b"} <= set(kube.scheduler.gangs.status())
            assert not _failed_checks(kube)
            detail = _readyz_detail(kube, "invalidObjects")
            assert f"{PODGROUPS} default/deep: nested too deeply" in detail
            metric = kube.metrics.invalid_objects.labels(PODGROUPS)
            assert metric._value.get() == 1
            await eventually(
                lambda: bool(events_for(api, "deep", "InvalidObject")), what="an event on it"
            )
            event = events_for(api, "deep", "InvalidObject")[0]
            assert "nested too deeply" in event["note"]
            assert event["regarding"]["kind"] == "PodGroup"

            # Through the watch: another deep one, then a good one and its gang.
            api.create(version, "podgroups", _group("deeper", 2, x=_nested(1500)))
            api.create(version, "podgroups", _group("train", 2))
            label = {"scheduling.x-k8s.io/pod-group": "train"}
            for i in range(2):
                api.create("v1", "pods", pod(f"w{i}", cpu="1", labels=label))
            await eventually(lambda: len(bound_pods(api)) == 2, what="the later gang bound")
            assert "default/train" in kube.scheduler.gangs.status()
            await eventually(lambda: "default/deeper" in informer.undecodable, what="deeper")
            await eventually(
                lambda: "default/deeper" in _readyz_detail(kube, "invalidObjects"),
                what="deeper named on /readyz",
            )
            assert metric._value.get() == 2
            assert not _failed_checks(kube)
            # The watch went on past it: no relist, no error, nothing marked down.
            assert informer.lists == 1 and not informer.down and informer.crashes == 0

            # Fixed, and deleted: no longer named.
            fixed = api.get("scheduling.x-k8s.io", "podgroups", "default", "deep")
            assert fixed is not None
            fixed["spec"] = {"minMember": 1}
            api.update("scheduling.x-k8s.io", "podgroups", fixed)
            api.delete("scheduling.x-k8s.io", "podgroups", "default", "deeper")
            await eventually(lambda: not informer.undecodable, what="nothing undecodable")
            await eventually(lambda: "default/deep" in informer.store, what="deep decoded")
            # /readyz learns it from the core, after the informer posted the update there.
            await eventually(
                lambda: _readyz_detail(kube, "invalidObjects") == "", what="no longer named"
            )


@async_test()
async def test_an_unexpected_exception_in_the_informer_relists_after_a_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shoal.drivers.kube.informer import Informer

    original = Informer._replace
    failures = {"left": 3}

    def flaky(self: Informer, items: list[dict[str, Any]], *rest: Any) -> None:
        if self.kind.name == "nodes" and failures["left"]:
            failures["left"] -= 1
            raise KeyError("a bug while listing")
        original(self, items, *rest)

    monkeypatch.setattr(Informer, "_replace", flaky)
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1", cpu="2"))
        api.create("v1", "pods", pod("p", cpu="1"))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: bound_pods(api) == {"default/p": "n1"}, what="bound")
            nodes = kube.informers["nodes"]
            assert nodes.crashes == 3 and not nodes.down
            assert not _failed_checks(kube)


def test_backoff_is_exponential_bounded_and_jittered_from_the_injected_rng() -> None:
    import random

    from shoal.drivers.kube.informer import Backoff

    backoff = Backoff(0.5, 30.0, random.Random(7))
    delays = [backoff.next() for _ in range(10)]
    again = Backoff(0.5, 30.0, random.Random(7))
    assert [again.next() for _ in range(10)] == delays  # reproducible
    for i, delay in enumerate(delays):
        base = min(30.0, 0.5 * 2**i)
        assert base <= delay <= base * 1.2
    backoff.reset()
    assert backoff.next() <= 0.6


# ---- two active schedulers for one schedulerName ------------------------------------------


@async_test(timeout=60)
async def test_two_active_schedulers_for_one_scheduler_name_share_the_nodes_without_overcommit(
    tmp_path: Path,
) -> None:
    """No leader election on either: both schedule, each on the node shards it holds
    (shards.py), so the room for exactly 40 pods takes exactly 40 and nobody reports
    the other's binds as foreign."""
    from kubehelpers import fast_options

    async with FakeApiServer() as api:
        for i in range(4):
            api.create("v1", "nodes", node(f"n{i}", cpu="1"))
        async with (
            running(api, tmp_path, fast_options("alpha", leader_elect=False)) as (alpha, _),
            running(api, tmp_path, fast_options("beta", leader_elect=False)) as (beta, _),
        ):
            await eventually(
                lambda: (
                    alpha.shards is not None
                    and beta.shards is not None
                    and len(alpha.shards.state.usable) == len(beta.shards.state.usable) == 8
                ),
                what="both hold 8 of 16 shards",
            )
            for i in range(44):
                api.create("v1", "pods", pod(f"p{i:02d}", cpu="100m"))
            await eventually(lambda: len(bound_pods(api)) == 40, what="40 bound")
            await asyncio.sleep(1.0)  # time for a 41st, which must not come
            per_node: dict[str, int] = {}
            for node_name in bound_pods(api).values():
                per_node[node_name] = per_node.get(node_name, 0) + 1
            assert len(bound_pods(api)) == 40
            assert max(per_node.values()) <= 10  # 1 cpu / 100m
            binders = {
                p["metadata"]["annotations"].get("shoal.dev/scheduled-by")
                for p in api.pods()
                if p["spec"].get("nodeName")
            }
            assert binders == {"alpha", "beta"}  # both did work
            assert alpha.foreign_binds == beta.foreign_binds == 0
            assert "exclusiveScheduler" not in _failed_checks(alpha)
            assert "8 of 16 node shards usable here" in _readyz_detail(alpha, "nodeShards")


@async_test()
async def test_a_scheduler_alone_reports_no_foreign_binds(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        for i in range(2):
            api.create("v1", "nodes", node(f"n{i}", cpu="4"))
        for i in range(20):
            api.create("v1", "pods", pod(f"p{i:02d}", cpu="100m"))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 20, what="all bound")
            api.create("v1", "pods", pod("late", cpu="100m"))
            await eventually(lambda: len(bound_pods(api)) == 21, what="late bound")
            assert kube.foreign_binds == 0
            assert not _failed_checks(kube)
            # A pod of ours bound by hand (another binder) is noticed.
            api.create("v1", "pods", pod("manual", cpu="100m", node_selector={"none": "x"}))
            await eventually(
                lambda: kube.scheduler.scheduling_queue.get(_uid(api, "manual")) is not None
            )
            api.bind("default", "manual", "n0", user_agent="kubectl")
            await eventually(lambda: kube.foreign_binds == 1, what="the manual bind noticed")
            assert "an unknown binder" in _failed_checks(kube)["exclusiveScheduler"]


def _uid(api: FakeApiServer, name: str) -> str:
    obj = api.get("", "pods", "default", name)
    assert obj is not None
    return str(obj["metadata"]["uid"])


# ---- half-open and idle watches: the progress deadline --------------------------------------


def _quick_deadline(read_timeout: float, **more: Any) -> Any:
    from kubehelpers import fast_options

    options = fast_options()
    informer = replace(options.informer, read_timeout=read_timeout, down_after=1.0, **more)
    return replace(options, informer=informer)


def _lists(kube: KubeBackend) -> set[int]:
    """How many lists each informer made (of the kinds the fake serves)."""
    return {i.lists for i in kube.informers.values() if not i.absent}


def _informer_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "shoal.kube.informer" and r.levelno >= logging.WARNING
    ]


@async_test(timeout=60)
async def test_a_half_open_watch_is_dropped_at_the_progress_deadline_and_resumed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="shoal.kube.informer")
    async with FakeApiServer(bookmark_interval=0.3) as api:
        api.create("v1", "nodes", node("n1", cpu="4"))
        async with running(api, tmp_path, _quick_deadline(1.5)) as (kube, _):
            await eventually(lambda: kube.synced and kube.leading, what="synced")
            pods = kube.informers["pods"]
            # The informer counts a watch when it asks for it: wait until the server has
            # it open, or a watch still on its way would miss the stall below.
            await eventually(lambda: api.open_watches("pods") >= 1, what="pods watched")
            watches = pods.watches
            api.stall_watches()  # every watch open now goes silent, its connection open
            started = time.monotonic()
            api.create("v1", "pods", pod("late", cpu="1"))
            try:
                await eventually(lambda: "default/late" in bound_pods(api), timeout=20)
            except AssertionError as err:
                raise AssertionError(f"{err}: {pod_story(kube, api, 'default/late')}") from None
            assert time.monotonic() - started < 1.5 + 5.0  # the deadline, and some slack
            assert pods.watches > watches  # a new watch, from the resourceVersion:
            assert _lists(kube) == {1}  # no relist
            assert not _failed_checks(kube)
            assert not _informer_warnings(caplog)
            silent = kube.metrics.informer_operations.labels("pods", "watch_silent")
            assert silent._value.get() >= 1


@async_test()
async def test_an_idle_watch_without_bookmarks_is_renewed_quietly_and_stays_ready(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="shoal.kube.informer")
    # No bookmarks at all (the real API server sends one about once a minute).
    async with FakeApiServer(bookmark_interval=3600) as api:
        api.create("v1", "nodes", node("n1", cpu="4"))
        async with running(api, tmp_path, _quick_deadline(0.4)) as (kube, _):
            await eventually(lambda: kube.synced and kube.leading, what="synced")
            nodes = kube.informers["nodes"]
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:  # longer than down_after (1 s)
                assert not _failed_checks(kube)
                await asyncio.sleep(0.1)
            assert nodes.watches >= 4  # renewed every 0.4 s
            assert _lists(kube) == {1}  # never relisted
            assert not nodes.down and not nodes.last_error
            assert not _informer_warnings(caplog)
            api.create("v1", "pods", pod("p", cpu="1"))
            await eventually(lambda: "default/p" in bound_pods(api), what="p bound")


def test_the_default_progress_deadline_is_about_fifteen_seconds() -> None:
    from shoal.drivers.kube.backend import KubeOptions
    from shoal.drivers.kube.informer import InformerSettings

    assert InformerSettings().read_timeout == 15.0
    assert KubeOptions().informer.read_timeout == 15.0
