"""Small parts of the Kubernetes backend: rate limiter, options, logs, status patches,
informer edge cases."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from kubehelpers import async_test, config, pod

from shoal.api.objects import Pod
from shoal.api.podinfo import PodInfo
from shoal.config import parse_config
from shoal.drivers.kube.backend import KubeOptions, parse_duration
from shoal.drivers.kube.client import ClientSettings, RateLimiter, connect
from shoal.drivers.kube.informer import Informer, InformerSettings
from shoal.drivers.kube.logs import JsonFormatter
from shoal.drivers.kube.resources import PODGROUPS, PODS, ResourceKind
from shoal.drivers.kube.status import PodStatusWriter, _StatusUpdate
from shoal.testing.fake_apiserver import FakeApiServer


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_rate_limiter_allows_a_burst_then_qps() -> None:
    clock = FakeClock()
    limiter = RateLimiter(qps=10, burst=5, clock=clock)
    waits = [limiter.reserve() for _ in range(8)]
    assert waits[:5] == [0.0] * 5
    assert waits[5:] == pytest.approx([0.1, 0.2, 0.3])
    clock.t = 10.0  # a long pause refills to the burst, not beyond
    assert [limiter.reserve() for _ in range(6)][-1] > 0
    assert RateLimiter(qps=0, burst=1).reserve() == 0.0  # disabled


@async_test()
async def test_rate_limiter_holds_the_rate_in_real_time() -> None:
    limiter = RateLimiter(qps=100, burst=1)
    started = time.monotonic()
    await asyncio.gather(*(limiter.wait() for _ in range(21)))
    assert time.monotonic() - started == pytest.approx(0.2, abs=0.06)


def test_go_durations() -> None:
    assert parse_duration("15s") == 15
    assert parse_duration("1m30s") == 90
    assert parse_duration("200ms") == pytest.approx(0.2)
    assert parse_duration(2) == 2
    assert parse_duration("-1.5s") == -1.5  # Go's ParseDuration takes a sign
    assert parse_duration("+1m") == 60
    for bad in ("15", "s", "1x", "-", "--1s"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_options_come_from_the_scheduler_configuration() -> None:
    cfg = parse_config(
        {
            "clientConnection": {"qps": 20, "burst": 40},
            "leaderElection": {
                "leaderElect": False,
                "resourceName": "s",
                "resourceNamespace": "ns",
                "leaseDuration": "30s",
                "renewDeadline": "20s",
                "retryPeriod": "5s",
            },
        }
    )
    options = KubeOptions.from_config(cfg, qps=None, burst=7)
    assert (options.qps, options.burst, options.leader_elect) == (20.0, 7, False)
    assert (options.leader.name, options.leader.namespace) == ("s", "ns")
    assert (options.leader.lease_duration, options.leader.retry_period) == (30, 5)


def test_json_logs_carry_structured_fields() -> None:
    record = logging.LogRecord(
        "shoal.kube", logging.INFO, "f.py", 1, "bound pod %s", ("a/b",), None
    )
    record.pod = "a/b"
    record.node = "n1"
    entry = json.loads(JsonFormatter().format(record))
    assert entry["msg"] == "bound pod a/b" and entry["level"] == "info"
    assert entry["pod"] == "a/b" and entry["node"] == "n1" and entry["ts"].endswith("Z")


def _pending(conditions: list[dict[str, Any]] | None = None, node_name: str = "") -> dict[str, Any]:
    obj = pod("p", node_name=node_name)
    obj["metadata"].update(uid="u1", resourceVersion="7")
    obj["status"] = {"phase": "Pending", "conditions": conditions or []}
    return obj


def test_status_patches_are_guarded_and_not_repeated() -> None:
    writer = PodStatusWriter.__new__(PodStatusWriter)
    update = _StatusUpdate("default/p", "u1", "Unschedulable", "0/1 nodes are available", "")
    patch = writer.patch_for(update, _pending())
    assert patch is not None
    assert patch["metadata"] == {"resourceVersion": "7"}  # precondition
    condition = patch["status"]["conditions"][0]
    assert condition["type"] == "PodScheduled" and condition["status"] == "False"
    assert condition["message"] == "0/1 nodes are available"
    # Already says so: nothing to write. Bound, gone or replaced: never written.
    same = [{k: v for k, v in condition.items() if v is not None}]
    assert writer.patch_for(update, _pending(same)) is None
    assert writer.patch_for(update, _pending(node_name="n1")) is None
    assert writer.patch_for(update, None) is None
    other = _pending()
    other["metadata"]["uid"] = "u2"
    assert writer.patch_for(update, other) is None
    # A nomination is written with the condition.
    nominated = _StatusUpdate("default/p", "u1", "Unschedulable", "m", "n3")
    patch = writer.patch_for(nominated, _pending())
    assert patch is not None and patch["status"]["nominatedNodeName"] == "n3"


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def on_upsert(
        self, kind: ResourceKind, old: dict[str, Any] | None, new: dict[str, Any]
    ) -> None:
        self.seen.append(("upsert", new["metadata"]["name"]))

    def on_delete(self, kind: ResourceKind, old: dict[str, Any]) -> None:
        self.seen.append(("delete", old["metadata"]["name"]))

    def on_undecodable(self, kind: ResourceKind, stub: dict[str, Any], error: str) -> None:
        self.seen.append(("undecodable", stub["metadata"].get("name", "")))


@async_test()
async def test_an_absent_crd_does_not_block_sync_and_is_found_later(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        connection = await connect(str(api.kubeconfig(tmp_path / "kc")))
        client = connection.client("t", ClientSettings(qps=0))
        handler = Recorder()
        settings = InformerSettings(absent_retry=0.1, backoff_initial=0.05)
        informer = Informer(client, PODGROUPS, handler, settings)
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(informer.synced.wait(), 2)
        assert informer.absent
        api.register("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True)
        api.create("scheduling.x-k8s.io/v1alpha1", "podgroups", {"metadata": {"name": "g"}})
        while ("upsert", "g") not in handler.seen:
            await asyncio.sleep(0.02)
        assert not informer.absent
        task.cancel()
        await connection.close()


@async_test()
async def test_a_crd_uninstalled_while_watched_is_absent_and_its_objects_deleted(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        api.register("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True)
        api.create("scheduling.x-k8s.io/v1alpha1", "podgroups", {"metadata": {"name": "g"}})
        connection = await connect(str(api.kubeconfig(tmp_path / "kc")))
        client = connection.client("t", ClientSettings(qps=0))
        handler = Recorder()
        settings = InformerSettings(absent_retry=0.1, backoff_initial=0.05)
        informer = Informer(client, PODGROUPS, handler, settings)
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(informer.synced.wait(), 2)
        assert ("upsert", "g") in handler.seen and not informer.absent
        del api.resources[("scheduling.x-k8s.io", "podgroups")]  # the CRD deleted
        api.drop_watches()
        while ("delete", "g") not in handler.seen:
            await asyncio.sleep(0.02)
        assert informer.absent and informer.store == {} and not informer.down
        task.cancel()
        await connection.close()


@async_test()
async def test_relist_reports_what_vanished_and_recreated_objects(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        connection = await connect(str(api.kubeconfig(tmp_path / "kc")))
        client = connection.client("t", ClientSettings(qps=0))
        handler = Recorder()
        informer = Informer(client, PODS, handler, InformerSettings(page_size=2))
        for name in ("a", "b", "c"):
            api.create("v1", "pods", pod(name))
        await informer._list()
        assert sorted(handler.seen) == [("upsert", "a"), ("upsert", "b"), ("upsert", "c")]
        handler.seen.clear()
        api.delete("", "pods", "default", "a")
        api.create("v1", "pods", pod("d"))
        await informer._list()
        assert sorted(handler.seen) == [("delete", "a"), ("upsert", "d")]
        await connection.close()


def test_config_helper_makes_shoal_profiles() -> None:
    assert [p.scheduler_name for p in config().profiles] == ["shoal"]
    assert PodInfo(Pod()).scheduler_name == "default-scheduler"


def _nested(depth: int) -> str:
    return '{"x":' * depth + "{}" + "}" * depth


def test_a_list_page_with_an_object_too_deep_to_decode_yields_the_others_and_its_name() -> None:
    from shoal.drivers.kube.client import decode_page

    good = '{"metadata":{"name":"a","annotations":{"q":"\\"}]{[,:"}},"spec":{"l":[1,{"b":null}]}}'
    # metadata after the deep spec; managedFields as deep as the spec (as the server writes)
    deep = (
        f'{{"spec":{_nested(1500)},"metadata":{{"managedFields":[{{"f":{_nested(1500)}}}],'
        '"name":"deep","namespace":"ns","uid":"u1","resourceVersion":"7","generation":2}}'
    )
    other = good.replace('"name":"a"', '"name":"b"')
    page = decode_page(
        f'{{"metadata":{{"resourceVersion":"9","continue":"c"}},"items":[{good} , {deep},'
        f"{other}]}}".encode()
    )
    assert page.metadata == {"resourceVersion": "9", "continue": "c"}
    assert [i["metadata"]["name"] for i in page.items] == ["a", "b"]
    assert page.items[0]["metadata"]["annotations"] == {"q": '"}]{[,:'}
    [bad] = page.undecodable
    assert bad.metadata == {"name": "deep", "namespace": "ns", "uid": "u1", "resourceVersion": "7"}
    assert "nested too deeply" in bad.error
    # Invalid JSON in one item: the same.
    page = decode_page(b'{"metadata":{},"items":[{"metadata":{"name":"x"},"s":tru},{"a":1}]}')
    assert page.items == [{"a": 1}] and page.undecodable[0].metadata == {"name": "x"}
    assert "invalid JSON" in page.undecodable[0].error
    # A page that is not JSON at all is still an error.
    with pytest.raises(ValueError):
        decode_page(b'{"metadata":{},"items":[{"a":')


def test_a_watch_event_too_deep_to_decode_comes_as_undecodable_with_type_and_name() -> None:
    from shoal.drivers.kube.client import Undecodable, decode_event

    meta = '"metadata":{"name":"d","resourceVersion":"5"}'
    line = f'{{"type":"MODIFIED","object":{{{meta},"spec":{_nested(1500)}}}}}'
    event = decode_event(line.encode())
    assert isinstance(event, Undecodable)
    assert event.event == "MODIFIED"
    assert event.metadata == {"name": "d", "resourceVersion": "5"}
    assert decode_event(b'{"type":"ADDED","object":{"a":1}}') == {
        "type": "ADDED",
        "object": {"a": 1},
    }
    with pytest.raises(ValueError):
        decode_event(b'{"type":"ADDED","object":{')
