"""`shoal extender`'s answers (ExtenderService) from Shoal's own cache: GPU shares fit
where a device has room, a pod whose queue is at its maximum is refused everywhere, a gang
member is refused while its gang cannot start, scores favour Shoal's choice. The cache
is a harness's core (what the informers would have filled)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgspec
import numpy as np
import pytest

from shoal.api.extender import ExtenderArgs, NodeList
from shoal.api.gpu import ANNOTATION_GPU_INDEX, ANNOTATION_GPU_MILLI
from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.servers.extender import ExtenderService, scale_scores
from shoal.testing import SchedulerHarness, make_node, make_pod

GPU = "nvidia.com/gpu"
PLUGINS = {"multiPoint": {"enabled": [{"name": "GpuShare"}, {"name": "GpuFragmentation"}]}}


def service(h: SchedulerHarness) -> ExtenderService:
    backend: Any = SimpleNamespace(scheduler=h.scheduler, synced=True)
    return ExtenderService(backend)


def harness(**profile: Any) -> SchedulerHarness:
    return SchedulerHarness(
        {"profiles": [{"schedulerName": "default-scheduler", "plugins": PLUGINS, **profile}]}
    )


def args(pod: Any, *nodes: str, cache_capable: bool = True) -> ExtenderArgs:
    raw = msgspec.to_builtins(pod.obj())
    if cache_capable:
        return ExtenderArgs(pod=raw, node_names=list(nodes))
    items = [{"metadata": {"name": n}} for n in nodes]
    return ExtenderArgs(pod=raw, nodes=NodeList(items=items))


def gpu_nodes(h: SchedulerHarness, *names: str, gpus: int = 2) -> None:
    h.add_nodes(*(make_node(n).capacity({GPU: gpus}, cpu="16", memory="64Gi") for n in names))


def share(name: str, milli: int) -> Any:
    return make_pod(name).req(cpu="1").annotations({ANNOTATION_GPU_MILLI: str(milli)})


def test_a_gpu_share_passes_only_where_a_device_has_room() -> None:
    h = harness()
    gpu_nodes(h, "n1", "n2", gpus=1)
    h.add_nodes(make_node("cpu").capacity(cpu="16", memory="64Gi"))
    h.add_pods(
        share("busy", 800)
        .annotations({ANNOTATION_GPU_MILLI: "800", ANNOTATION_GPU_INDEX: "0"})
        .node("n1")
    )
    h.run()
    result = service(h).filter(args(share("p", 500), "n1", "n2", "cpu", "gone"))
    assert result.node_names == ["n2"]
    assert result.failed_nodes == {
        "n1": "Insufficient GPU milli on any single device",
        "gone": "node is not in Shoal's cache (yet)",
    }
    assert result.failed_and_unresolvable_nodes == {"cpu": "node(s) didn't have any GPU"}
    assert result.error == ""


def test_filter_answers_in_the_form_it_was_asked() -> None:
    h = harness()
    gpu_nodes(h, "n1", "n2")
    result = service(h).filter(args(share("p", 500), "n1", "n2", cache_capable=False))
    assert result.node_names is None
    assert result.nodes is not None
    assert [i["metadata"]["name"] for i in result.nodes.items or []] == ["n1", "n2"]


def test_a_pod_whose_queue_is_at_its_maximum_is_refused_on_every_node() -> None:
    h = harness()
    gpu_nodes(h, "n1", "n2")
    q = decode({"metadata": {"name": "team"}, "spec": {"max": {GPU: 1}}}, Queue)
    assert h.scheduler.apply_queues([q]) == []
    h.add_pods(make_pod("running").labels({"shoal.dev/queue": "team"}).req({GPU: 1}).node("n1"))
    h.run()
    pod = make_pod("more").labels({"shoal.dev/queue": "team"}).req({GPU: 1}, cpu="1")
    result = service(h).filter(args(pod, "n1", "n2"))
    assert result.node_names == []
    reasons = {**(result.failed_nodes or {}), **(result.failed_and_unresolvable_nodes or {})}
    assert set(reasons) == {"n1", "n2"}
    assert all("team" in why for why in reasons.values()), reasons


def test_a_gang_member_is_refused_while_its_gang_cannot_start() -> None:
    h = harness()
    gpu_nodes(h, "n1", "n2")
    labels = {
        "pod-group.scheduling.sigs.k8s.io/name": "job",
        "pod-group.scheduling.sigs.k8s.io/min-available": "3",
    }
    # Only two of the three members exist: the gang cannot start.
    member = make_pod("m0").labels(labels).req(cpu="1")
    h.add_pods(member, make_pod("m1").labels(labels).req(cpu="1"))
    result = service(h).filter(args(member, "n1", "n2"))
    assert result.node_names == []
    reasons = result.failed_and_unresolvable_nodes or {}
    assert set(reasons) == {"n1", "n2"}
    assert reasons["n1"].startswith("pod is gated by Coscheduling:"), reasons
    # The third member arrives: the gang may start, its members pass.
    h.add_pods(make_pod("m2").labels(labels).req(cpu="1"))
    assert service(h).filter(args(member, "n1", "n2")).node_names == ["n1", "n2"]


def test_prioritize_gives_shoals_choice_the_top_score() -> None:
    h = harness()
    gpu_nodes(h, "n1", "n2", gpus=4)
    h.add_pods(
        share("busy", 300)
        .annotations({ANNOTATION_GPU_MILLI: "300", ANNOTATION_GPU_INDEX: "0"})
        .node("n1")
    )
    h.run()
    scores = {p.host: p.score for p in service(h).prioritize(args(share("p", 700), "n1", "n2"))}
    assert scores["n1"] == 10 and scores["n2"] < 10


@pytest.mark.parametrize(
    ("totals", "expected"),
    [([], []), ([5, 5], [10, 10]), ([0, 50, 100], [0, 5, 10]), ([99, 100], [0, 10])],
)
def test_scores_are_spread_onto_the_extender_range(totals: list[int], expected: list[int]) -> None:
    assert scale_scores(np.array(totals, dtype=np.int64)) == expected


def test_bind_refuses_a_pod_of_another_scheduler() -> None:
    """The bind verb binds with Shoal's credentials: a pod whose schedulerName is not one
    of the extender's profiles is refused, naming both, and nothing is sent."""
    import asyncio

    from shoal.api.extender import ExtenderBindingArgs

    h = harness()
    gpu_nodes(h, "n1")
    stranger = make_pod("stranger").req(cpu="1").obj()
    stranger.spec.scheduler_name = "someone-else"
    stranger.metadata.uid = "uid-stranger"
    raw = msgspec.to_builtins(stranger)
    sent: list[Any] = []

    async def bind(*a: Any) -> None:
        sent.append(a)

    backend: Any = SimpleNamespace(
        scheduler=h.scheduler,
        synced=True,
        lookup_pod=lambda key: raw,
        effects=SimpleNamespace(bind=bind),
    )
    answer = asyncio.run(
        ExtenderService(backend).bind(
            ExtenderBindingArgs(
                pod_name="stranger", pod_namespace="default", pod_uid="uid-stranger", node="n1"
            )
        )
    )
    assert "schedulerName 'someone-else'" in answer.error
    assert "default-scheduler" in answer.error and not sent
