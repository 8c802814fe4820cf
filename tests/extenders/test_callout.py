"""Shoal calling HTTP extenders (KubeSchedulerConfiguration `extenders:`), against a real
extender process over loopback HTTP: filter, prioritize with weight, bind, preempt,
managedResources interest (with ignoredByScheduler), ignorable and non-ignorable
extenders that are down, and httpTimeout."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal.testing import SchedulerHarness, make_node, make_pod

SERVER = Path(__file__).with_name("fake_extender.py")


class FakeExtender:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER)], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("PORT "), line
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}/ext"

    def _post(self, path: str, body: Any) -> None:
        req = urllib.request.Request(
            f"{self.url}/{path}", data=json.dumps(body).encode(), method="POST"
        )
        urllib.request.urlopen(req, timeout=5).read()

    def rules(self, **rules: Any) -> None:
        self._post("control", rules)

    def reset(self) -> None:
        self._post("reset", {})

    def log(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.url}/log", timeout=5) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]

    def verbs(self) -> list[str]:
        return [entry["verb"] for entry in self.log()]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=5)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeExtender]:
    ext = FakeExtender()
    yield ext
    ext.stop()


@pytest.fixture
def ext(server: FakeExtender) -> FakeExtender:
    server.reset()
    return server


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def harness(*extenders: dict[str, Any]) -> SchedulerHarness:
    return SchedulerHarness(
        {"profiles": [{"schedulerName": "default-scheduler"}], "extenders": list(extenders)}
    )


def three_nodes(h: SchedulerHarness) -> None:
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="4", memory="8Gi") for i in (1, 2, 3)))


def test_filter_narrows_the_feasible_nodes(ext: FakeExtender) -> None:
    ext.rules(reject={"n1": "fake: no room"}, unresolvable={"n2": "fake: wrong rack"})
    h = harness({"urlPrefix": ext.url, "filterVerb": "filter"})
    three_nodes(h)
    h.add_pods(make_pod("a").req(cpu="1"))
    placements, _ = h.run()
    assert placements == {"default/a": "n3"}
    calls = ext.log()
    assert [c["verb"] for c in calls] == ["filter"]
    sent = calls[0]["body"]
    # Not nodeCacheCapable: whole Node objects in Nodes, no NodeNames; the pod as v1.Pod.
    assert sent["NodeNames"] is None
    assert sorted(i["metadata"]["name"] for i in sent["Nodes"]["items"]) == ["n1", "n2", "n3"]
    assert sent["Pod"]["metadata"]["name"] == "a"


def test_filter_reasons_explain_the_pod_and_unresolvable_nodes_are_not_preempted(
    ext: FakeExtender,
) -> None:
    ext.rules(
        reject={"n1": "fake: no room", "n2": "fake: no room"},
        unresolvable={"n3": "fake: wrong rack"},
    )
    h = harness({"urlPrefix": ext.url, "filterVerb": "filter", "nodeCacheCapable": True})
    three_nodes(h)
    h.add_pods(make_pod("a").req(cpu="1"))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert messages["default/a"] == (
        "0/3 nodes are available: 1 fake: wrong rack, 2 fake: no room."
        " preemption: 0/3 nodes are available: 1 Preemption is not helpful for "
        "scheduling, 2 No preemption victims found for incoming pod."
    )
    body = ext.log()[0]["body"]
    assert sorted(body["NodeNames"]) == ["n1", "n2", "n3"] and body["Nodes"] is None


@pytest.mark.parametrize(("field", "unresolvable"), [("reject", False), ("unresolvable", True)])
def test_failed_and_unresolvable_nodes_are_kept_from_preemption(
    ext: FakeExtender, field: str, unresolvable: bool
) -> None:
    ext.rules(**{field: {"n1": "fake: wrong rack"}})
    h = harness({"urlPrefix": ext.url, "filterVerb": "filter"})
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(make_pod("low").req(cpu="2").priority(1).node("n1"))
    h.add_pods(make_pod("high").req(cpu="2").priority(100))
    placements, messages = h.run()
    assert placements == {"default/low": "n1", "default/high": None}
    assert messages["default/high"].startswith("0/1 nodes are available: 1 fake: wrong rack.")
    assert h.evicted == {}
    diagnosis = next(c.diagnosis for c in h.cycles if c.pod.name == "high")
    assert diagnosis is not None and diagnosis.unresolvable is not None
    assert bool(diagnosis.unresolvable[0]) is unresolvable
    assert diagnosis.rejected_by == ["Extender"]


def test_preempt_verb_trims_the_victims(ext: FakeExtender) -> None:
    # Two low-priority pods on n1 and n2; the extender accepts preemption on n2 only.
    ext.rules(preempt_nodes=["n2"], keep_victims=1)
    h = harness({"urlPrefix": ext.url, "preemptVerb": "preempt"})
    h.add_nodes(
        make_node("n1").capacity(cpu="2", memory="8Gi"),
        make_node("n2").capacity(cpu="2", memory="8Gi"),
    )
    h.add_pods(
        make_pod("low1").req(cpu="2").priority(1).node("n1"),
        make_pod("low2").req(cpu="2").priority(5).node("n2"),
    )
    h.add_pods(make_pod("high").req(cpu="2").priority(100))
    placements, _ = h.advance(2.0)  # the victim goes, the preemptor's backoff ends
    # Without the extender kube's order would pick n1 (lower victim priority).
    assert list(h.evicted) == ["default/low2"]
    assert placements["default/high"] == "n2"
    preempt = next(c for c in ext.log() if c["verb"] == "preempt")["body"]
    assert set(preempt["NodeNameToVictims"]) == {"n1", "n2"}


def test_prioritize_scores_times_weight_times_ten_decide(ext: FakeExtender) -> None:
    # The plugins prefer the emptier n1 (LeastAllocated, BalancedAllocation); the
    # extender's 10 on n2, x weight 5 x 10, outweighs them.
    ext.rules(scores={"n2": 10})
    h = harness({"urlPrefix": ext.url, "prioritizeVerb": "prioritize", "weight": 5})
    h.add_nodes(
        make_node("n1").capacity(cpu="8", memory="16Gi"),
        make_node("n2").capacity(cpu="8", memory="16Gi"),
    )
    h.add_pods(make_pod("busy").req(cpu="6", memory="12Gi").node("n2"))
    h.add_pods(make_pod("a").req(cpu="1"))
    placements, _ = h.run()
    assert placements["default/a"] == "n2"
    assert ext.verbs() == ["prioritize"]


def test_prioritize_with_a_small_weight_leaves_the_plugins_in_charge(ext: FakeExtender) -> None:
    ext.rules(scores={"n2": 1})
    h = harness({"urlPrefix": ext.url, "prioritizeVerb": "prioritize", "weight": 1})
    h.add_nodes(
        make_node("n1").capacity(cpu="8", memory="16Gi"),
        make_node("n2").capacity(cpu="8", memory="16Gi"),
    )
    h.add_pods(make_pod("busy").req(cpu="6", memory="12Gi").node("n2"))
    h.add_pods(make_pod("a").req(cpu="1"))
    placements, _ = h.run()
    assert placements["default/a"] == "n1"


def test_bind_verb_binds_instead_of_the_default_binder(ext: FakeExtender) -> None:
    h = harness({"urlPrefix": ext.url, "bindVerb": "bind"})
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(make_pod("a").uid("uid-a").req(cpu="1"))
    placements, _ = h.run()
    assert placements == {"default/a": "n1"}
    bind = next(c for c in ext.log() if c["verb"] == "bind")["body"]
    assert bind == {"PodName": "a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "n1"}
    assert h.effects.bound == {}  # the default binder was not used
    # As a watch would in a cluster, the simulated pod comes back bound to its node.
    known = h.scheduler.known_pod("uid-a")
    assert known is not None and known.pod.spec.node_name == "n1"


def test_bind_error_fails_the_binding_and_the_pod_is_retried(ext: FakeExtender) -> None:
    ext.rules(bind_error="no capacity in the device plugin")
    h = harness({"urlPrefix": ext.url, "bindVerb": "bind"})
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(make_pod("a").req(cpu="1"))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert "no capacity in the device plugin" in messages["default/a"]
    assert ext.url in messages["default/a"]


def test_an_ignorable_binder_that_fails_hands_the_bind_to_the_default_binder(
    ext: FakeExtender,
) -> None:
    """kube's extendersBinding: an ignorable extender's bind error is skipped and the
    pod is bound by the next binder (here the Bind plugins), in the same cycle."""
    ext.rules(bind_error="device plugin is restarting")
    h = harness({"urlPrefix": ext.url, "bindVerb": "bind", "ignorable": True})
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(make_pod("a").uid("uid-a").req(cpu="1"))
    placements, _ = h.run()
    assert placements == {"default/a": "n1"}
    assert [c["verb"] for c in ext.log()].count("bind") == 1
    assert h.effects.bound == {"uid-a": "n1"}  # DefaultBinder, after the extender


def test_only_pods_requesting_a_managed_resource_are_sent(ext: FakeExtender) -> None:
    ext.rules(reject={"n1": "fake: no foo", "n2": "fake: no foo"})
    h = harness(
        {
            "urlPrefix": ext.url,
            "filterVerb": "filter",
            "nodeCacheCapable": True,
            "managedResources": [{"name": "example.com/foo", "ignoredByScheduler": True}],
        }
    )
    three_nodes(h)
    # The nodes have no example.com/foo: ignoredByScheduler leaves it to the extender.
    h.add_pods(
        make_pod("plain").req(cpu="1"), make_pod("foo").req(cpu="1").lim({"example.com/foo": "1"})
    )
    placements, _ = h.run()
    assert placements == {"default/plain": placements["default/plain"], "default/foo": "n3"}
    assert placements["default/plain"] is not None
    calls = ext.log()
    assert [c["body"]["Pod"]["metadata"]["name"] for c in calls] == ["foo"]


def test_ignorable_extender_that_is_down_is_skipped() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/ext"
    h = harness(
        {
            "urlPrefix": url,
            "filterVerb": "filter",
            "prioritizeVerb": "p",
            "weight": 1,
            "ignorable": True,
        }
    )
    three_nodes(h)
    h.add_pods(make_pod("a").req(cpu="1"))
    placements, _ = h.run()
    assert placements["default/a"] is not None


def test_non_ignorable_extender_that_is_down_keeps_the_pod_pending_naming_it() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/ext"
    h = harness({"urlPrefix": url, "filterVerb": "filter"})
    three_nodes(h)
    h.add_pods(make_pod("a").req(cpu="1"))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert messages["default/a"].startswith(f"extender {url} failed to filter pod: filter")
    assert "ignorable" in messages["default/a"]
    assert h.scheduler.explain("default/a") == messages["default/a"]


def test_http_timeout_is_respected(ext: FakeExtender) -> None:
    ext.rules(delay=2.0)
    h = harness({"urlPrefix": ext.url, "filterVerb": "filter", "httpTimeout": "200ms"})
    three_nodes(h)
    h.add_pods(make_pod("a").req(cpu="1"))
    start = time.monotonic()
    placements, messages = h.run()
    elapsed = time.monotonic() - start
    assert placements == {"default/a": None}
    assert "no answer within the httpTimeout of 0.2s" in messages["default/a"]
    assert elapsed < 1.5


def test_a_slow_ignorable_extender_is_skipped_after_its_timeout(ext: FakeExtender) -> None:
    ext.rules(delay=2.0, reject={"n1": "x", "n2": "x", "n3": "x"})
    h = harness(
        {"urlPrefix": ext.url, "filterVerb": "filter", "httpTimeout": "200ms", "ignorable": True}
    )
    three_nodes(h)
    h.add_pods(make_pod("a").req(cpu="1"))
    placements, _ = h.run()
    assert placements["default/a"] is not None


def test_non_200_answer_is_an_error_naming_the_code(ext: FakeExtender) -> None:
    ext.rules(status=500)
    h = harness({"urlPrefix": ext.url, "filterVerb": "filter"})
    three_nodes(h)
    h.add_pods(make_pod("a").req(cpu="1"))
    _, messages = h.run()
    assert f"failed filter with extender at URL {ext.url}/filter, code 500" in messages["default/a"]


def test_reclaim_names_the_preempt_extender_that_failed(ext: FakeExtender) -> None:
    from shoal.api.manifests import decode
    from shoal.api.queue import Queue

    ext.rules(status=500)
    h = harness({"urlPrefix": ext.url, "preemptVerb": "preempt"})
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    queues = [
        decode({"metadata": {"name": q}, "spec": {"guaranteed": {"cpu": "2"}}}, Queue)
        for q in ("a", "b")
    ]
    assert h.scheduler.apply_queues(queues) == []
    # Queue b borrows a's guarantee; a's pod needs it back, which takes a reclaim.
    h.add_pods(
        *(
            make_pod(f"b{i}").labels({"shoal.dev/queue": "b"}).req(cpu="2").node("n1")
            for i in (0, 1)
        )
    )
    h.add_pods(make_pod("a0").labels({"shoal.dev/queue": "a"}).req(cpu="2"))
    placements, messages = h.advance(40.0)  # past the reclaim delay (30 s)
    assert placements["default/a0"] is None and not h.evicted
    assert (
        f"failed preempt with extender at URL {ext.url}/preempt, code 500"
        in (messages["default/a0"])
    )
