"""The Kubernetes-backend half of the malformed-input corpus (kube_cases.py), through the
in-process fake API server: every bad object is skipped and reported (an InvalidObject
event, a log line, the metric, the /readyz detail) or explained on the pod it concerns,
objects that arrive after what references them are waited for, the good objects beside
them are scheduled, and nothing crashes (no traceback in the log), hangs (one time limit
for the batch) or is accepted silently.

The cases run as one batch on one backend (a backend per case would take minutes); each
case's objects have names of their own, and each assertion looks at what was said about
that case's objects only. Cases with a known gap (a fix outside the driver) run each on
a backend of its own, expected to fail until that fix is made."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "kube"))

from kube_cases import GOOD_PODS, PLURALS, KubeCase, cases, good_objects, ref
from kubehelpers import backend, fast_options

import shoal.testing.fake_apiserver as fake_module
from shoal.drivers.kube.backend import KubeBackend
from shoal.drivers.kube.crds import render
from shoal.testing.fake_apiserver import FakeApiServer

CASES = cases()
BY_ID = {c.id: c for c in CASES}
BATCH = [c for c in CASES if not c.known_gap]
GAPS = [c for c in CASES if c.known_gap]
LIMIT_SECONDS = 90.0  # the whole batch; it takes a few seconds
SETTLE_SECONDS = 20.0  # for everything expected to be said or bound
GAP_SETTLE_SECONDS = 1.0  # known gaps never settle: what was said by then is judged

Ref = tuple[str, str, str, str]  # apiVersion, kind, namespace, name


# ---- the run -------------------------------------------------------------------------------


@contextlib.contextmanager
def _deep_recursion() -> Iterator[None]:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 50_000))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


class _DeepJson:
    """The fake's json module, able to write what kube's API server accepts (10000
    levels); Shoal's client still reads with Python's default limit."""

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


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Outcome:
    said: dict[Ref, list[str]]  # "Reason: note" of events, "invalid: why" of /readyz's list
    said_before: dict[Ref, list[str]]  # the same, before the `later` objects came
    bound_before: set[str]
    bound: set[str]
    nodes: set[str]  # in the scheduler's node table
    logged_invalid: set[str]  # object keys of "ignoring invalid" log lines
    crashes: list[str]  # log records with a traceback
    failed_checks: dict[str, str]  # /readyz checks not ok
    invalid_detail: str  # /readyz's invalidObjects detail
    metric: dict[str, float]  # shoal_invalid_objects_total per resource
    informer_crashes: dict[str, int] = field(default_factory=dict)


def _plural(doc: dict[str, Any]) -> str:
    return PLURALS[(doc["apiVersion"], doc["kind"])]


def _install(api: FakeApiServer) -> None:
    for text in render().values():
        api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
    api.register("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True)
    api.register("scheduling.sigs.k8s.io", "v1alpha1", "podgroups", "PodGroup", True)
    api.register("scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas", "ElasticQuota", True)
    api.register("topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode", False)
    api.register("kueue.x-k8s.io", "v1beta2", "topologies", "Topology", False, status=False)
    for plural, kind, namespaced in (
        ("deviceclasses", "DeviceClass", False),
        ("resourceslices", "ResourceSlice", False),
        ("resourceclaims", "ResourceClaim", True),
        ("resourceclaimtemplates", "ResourceClaimTemplate", True),
    ):
        api.register("resource.k8s.io", "v1", plural, kind, namespaced)
    api.register("resource.k8s.io", "v1beta2", "devicetaintrules", "DeviceTaintRule", False)


def _bound(api: FakeApiServer) -> set[str]:
    out = set()
    for p in api.pods():
        spec, meta = p.get("spec"), p.get("metadata") or {}
        if isinstance(spec, dict) and spec.get("nodeName"):
            out.add(f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
    return out


def _said(api: FakeApiServer, kube: KubeBackend) -> dict[Ref, list[str]]:
    out: dict[Ref, list[str]] = defaultdict(list)
    for event in api.list_objects("events.k8s.io", "events"):
        r = event.get("regarding") or {}
        key = (r.get("apiVersion", ""), r.get("kind", ""), r.get("namespace", ""), r["name"])
        out[key].append(f"{event.get('reason')}: {event.get('note')}")
    for kind, raw, message in list(kube.intake.invalid.values()):
        meta = raw.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default") if kind.namespaced else ""
        key = (kind.api_version, kind.kind, namespace, str(meta.get("name", "")))
        out[key].append(f"invalid: {message}")
    return out


def _settled(case: KubeCase, said: dict[Ref, list[str]], bound: set[str], later: bool) -> bool:
    """Has everything the case expects been said (and, after `later`, bound)?"""
    if later and not set(case.bound) <= bound:
        return False
    if case.channel == "fine" or (later and case.channel == "order"):
        return True
    return any(case.expect.lower() in m.lower() for m in said.get(case.about, ()))


async def _run(batch: list[KubeCase], folder: Path, settle_seconds: float) -> Outcome:
    handler = _Records()
    logging.getLogger("shoal").addHandler(handler)
    try:
        async with FakeApiServer() as api:
            _install(api)
            for doc in good_objects():
                api.create(doc["apiVersion"], _plural(doc), doc)
            for case in batch:
                for doc in case.objects:
                    api.create(doc["apiVersion"], _plural(doc), doc)
            async with backend(api, folder, fast_options("corpus")) as (kube, _):

                async def settle(later: bool) -> None:
                    loop = asyncio.get_running_loop()
                    deadline = loop.time() + settle_seconds
                    while loop.time() < deadline:
                        said, bound = _said(api, kube), _bound(api)
                        if set(GOOD_PODS) <= bound and all(
                            _settled(c, said, bound, later) for c in batch
                        ):
                            return
                        await asyncio.sleep(0.1)

                await settle(later=False)
                said_before, bound_before = _said(api, kube), _bound(api)
                for case in batch:
                    for doc in case.later:
                        api.create(doc["apiVersion"], _plural(doc), doc)
                await settle(later=True)
                await asyncio.sleep(0.5)  # anything said late about the fine ones
                invalid_detail = next(c.detail for c in kube.readyz() if c.name == "invalidObjects")
                metric = kube.metrics.invalid_objects
                return Outcome(
                    said=_said(api, kube),
                    said_before=said_before,
                    bound_before=bound_before,
                    bound=_bound(api),
                    nodes=set(kube.scheduler.cluster.table.row_of),
                    logged_invalid={
                        str(getattr(r, "object", ""))
                        for r in handler.records
                        if r.getMessage().startswith("ignoring invalid")
                    },
                    crashes=[f"{r.name}: {r.getMessage()}" for r in handler.records if r.exc_info],
                    failed_checks={c.name: c.message for c in kube.readyz() if not c.ok},
                    invalid_detail=invalid_detail,
                    metric={name: metric.labels(name)._value.get() for name in kube.informers},
                    informer_crashes={n: i.crashes for n, i in kube.informers.items()},
                )
    finally:
        logging.getLogger("shoal").removeHandler(handler)


def run_batch(
    batch: list[KubeCase], folder: Path, settle_seconds: float = SETTLE_SECONDS
) -> Outcome:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fake_module, "json", _DeepJson)
        patch.setattr(fake_module, "copy", _DeepCopy)

        async def limited() -> Outcome:
            return await asyncio.wait_for(_run(batch, folder, settle_seconds), LIMIT_SECONDS)

        try:
            return asyncio.run(limited())
        except TimeoutError:
            pytest.fail(f"the batch of {len(batch)} cases hung (no end in {LIMIT_SECONDS} s)")


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    return run_batch(BATCH, tmp_path_factory.mktemp("kube-corpus"))


# ---- what must hold --------------------------------------------------------------------------


def check(case: KubeCase, out: Outcome) -> None:
    said = out.said.get(case.about, [])
    what = f"{case.id}: said about {case.about}: {said}"
    for key in case.bound:
        assert key in out.bound, f"{case.id}: {key} was not placed; {what}"
    if case.channel == "fine":
        for doc in case.objects:
            about = ref(doc)
            reported = [
                m for m in out.said.get(about, []) if not m.startswith(("Scheduled", "Fail"))
            ]
            assert not [m for m in reported if "invalid" in m.lower()], (
                f"{case.id}: {about} reported: {reported}"
            )
        return
    if case.channel == "order":
        before = out.said_before.get(case.about, [])
        assert any(case.expect.lower() in m.lower() for m in before), (
            f"{case.id}: nothing said {case.expect!r} while waiting: {before}"
        )
        for key in case.bound:
            assert key not in out.bound_before, f"{case.id}: {key} placed before it could be"
        assert not [m for m in said if m.startswith("invalid: ")], (
            f"{case.id}: still reported once what it waited for came: {said}"
        )
        return
    matching = [m for m in said if case.expect.lower() in m.lower()]
    assert matching, f"{case.id}: nothing says {case.expect!r}; {what}"
    _, kind, namespace, name = case.about
    if case.channel == "pending":
        assert any(m.startswith(("FailedScheduling", "SchedulingGated")) for m in matching), what
        assert f"{namespace}/{name}" not in out.bound, f"{case.id}: placed anyway"
        return
    # invalid: skipped, and reported on all four channels.
    assert any(m.startswith("InvalidObject: ") for m in matching), f"{case.id}: no event; {what}"
    assert any(m.startswith("invalid: ") for m in matching), f"{case.id}: not in /readyz; {what}"
    key = f"{namespace}/{name}" if namespace else name
    assert key in out.logged_invalid, f"{case.id}: no log line names {key}"
    if kind == "Pod":
        assert key not in out.bound, f"{case.id}: the invalid pod was placed"
    if kind == "Node":
        assert name not in out.nodes, f"{case.id}: the invalid node is in the cache"


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 150
    assert {c.channel for c in CASES} == {"invalid", "pending", "fine", "order"}


def test_the_good_objects_are_scheduled_beside_the_bad_ones(outcome: Outcome) -> None:
    assert set(GOOD_PODS) <= outcome.bound, sorted(set(GOOD_PODS) - outcome.bound)


def test_nothing_crashed_and_the_scheduler_stays_ready(outcome: Outcome) -> None:
    assert not outcome.crashes, outcome.crashes
    assert not outcome.failed_checks, outcome.failed_checks  # named, never failing
    assert not any(outcome.informer_crashes.values()), outcome.informer_crashes


def test_every_skipped_object_is_counted_and_named_on_readyz(outcome: Outcome) -> None:
    invalid = [c for c in BATCH if c.channel == "invalid"]
    assert sum(outcome.metric.values()) >= len(invalid), outcome.metric
    skipped = int(outcome.invalid_detail.split(" skipped", 1)[0])
    assert skipped >= len(invalid), outcome.invalid_detail
    assert "see events InvalidObject" in outcome.invalid_detail


@pytest.mark.parametrize("case_id", [c.id for c in BATCH])
def test_a_malformed_object_is_reported_and_the_rest_runs(case_id: str, outcome: Outcome) -> None:
    check(BY_ID[case_id], outcome)


@pytest.fixture(scope="module")
def gaps(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """The known gaps, in a batch of their own (no NodePool object at all, crashes not
    blamed on the main batch)."""
    return run_batch(GAPS, tmp_path_factory.mktemp("kube-gaps"), GAP_SETTLE_SECONDS)


@pytest.mark.parametrize(
    "case_id",
    [pytest.param(c.id, marks=pytest.mark.xfail(strict=True, reason=c.known_gap)) for c in GAPS],
)
def test_a_known_gap_is_still_open(case_id: str, gaps: Outcome) -> None:
    assert set(GOOD_PODS) <= gaps.bound
    check(BY_ID[case_id], gaps)


# ---- what happens next: the objects change ---------------------------------------------------


def test_a_gang_in_two_apis_and_a_bad_namespace_follow_their_objects(tmp_path: Path) -> None:
    """The PodGroup skipped for disagreeing applies once the one in force is deleted, and
    nothing is reported once they agree; a Namespace with bad labels is cleared once fixed."""
    from kube_cases import obj, pod, pod_group

    plugins, volcano = "scheduling.x-k8s.io", "scheduling.volcano.sh"
    key = (f"podgroups.{volcano}", "default/g")

    async def main() -> None:
        async with FakeApiServer() as api:
            _install(api)
            for doc in good_objects()[:1]:
                api.create(doc["apiVersion"], _plural(doc), doc)
            api.create(f"{plugins}/v1alpha1", "podgroups", pod_group("g", 2))
            api.create(f"{volcano}/v1beta1", "podgroups", pod_group("g", 3, f"{volcano}/v1beta1"))
            for i in range(2):
                api.create(
                    "v1", "pods", pod(f"g-{i}", labels={"scheduling.x-k8s.io/pod-group": "g"})
                )
            bad = obj("v1", "Namespace", "labelled")
            bad["metadata"]["labels"] = "a=b"
            api.create("v1", "namespaces", bad)
            async with backend(api, tmp_path, fast_options("follow")) as (kube, _):
                invalid = kube.intake.invalid

                async def until(check: Any, what: str) -> None:
                    loop = asyncio.get_running_loop()
                    deadline = loop.time() + 10
                    while not check():
                        assert loop.time() < deadline, f"timed out waiting for {what}"
                        await asyncio.sleep(0.05)

                await until(lambda: {"default/g-0", "default/g-1"} <= _bound(api), "the gang")
                await until(lambda: key in invalid, "the Volcano PodGroup skipped")
                assert "says minMember 3" in invalid[key][2]
                assert ("namespaces", "labelled") in invalid
                # The one in force goes: the other defines the gang now (3 members).
                api.delete(plugins, "podgroups", "default", "g")
                await until(lambda: key not in invalid, "the Volcano PodGroup applied")
                group = kube.scheduler.gangs.groups["default/g"]
                await until(lambda: group.min_member == 3, "minMember 3 in force")
                # Back, agreeing: nothing to report.
                api.create(f"{plugins}/v1alpha1", "podgroups", pod_group("g", 3))
                await asyncio.sleep(0.5)
                assert key not in invalid and (f"podgroups.{plugins}", "default/g") not in invalid
                # And back, disagreeing again: the scheduler-plugins one wins again.
                again = api.get(plugins, "podgroups", "default", "g")
                assert again is not None
                again["spec"]["minMember"] = 2
                api.update(plugins, "podgroups", again)
                await until(lambda: key in invalid, "the Volcano PodGroup skipped again")
                await until(lambda: group.min_member == 2, "minMember 2 in force")
                # The namespace fixed: no longer named.
                fixed = api.get("", "namespaces", "", "labelled")
                assert fixed is not None
                fixed["metadata"]["labels"] = {"a": "b"}
                api.update("", "namespaces", fixed)
                await until(lambda: ("namespaces", "labelled") not in invalid, "namespace fixed")

    asyncio.run(asyncio.wait_for(main(), 30))
