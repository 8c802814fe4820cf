"""Multi-tenant scenarios: the seed's borrow-and-reclaim, limits, validation, pools."""

from __future__ import annotations

from collections import Counter

import pytest

from shoal.api.manifests import decode
from shoal.api.objects import ObjectMeta
from shoal.api.queue import NodePool, Queue, QueueBinding
from shoal.testing import SchedulerHarness, make_node, make_pod

from .helpers import harness

GPU = "nvidia.com/gpu"


def queue(
    name: str,
    parent: str = "",
    weight: int = 1,
    g: int | None = None,
    m: int | None = None,
    **spec: object,
) -> Queue:
    raw: dict[str, object] = {"parent": parent, "weight": weight, **spec}
    if g is not None:
        raw["guaranteed"] = {GPU: g}
    if m is not None:
        raw["max"] = {GPU: m}
    return decode({"metadata": {"name": name}, "spec": raw}, Queue)


def gpu_pod(name: str, q: str, gpus: int = 1, priority: int = 0):
    return (
        make_pod(name).labels({"shoal.dev/queue": q}).req({GPU: gpus}, cpu="1").priority(priority)
    )


def gpus_by_queue(h: SchedulerHarness) -> Counter[str]:
    out: Counter[str] = Counter()
    for rec in h.scheduler.cluster.placed.values():
        out[rec.pod.labels.get("shoal.dev/queue", "default")] += rec.pod.requests.get(GPU, 0)
    return out


def test_seed_scenario_borrow_then_reclaim() -> None:
    """User A (guaranteed 4 GPUs, max 6) and user B (guaranteed 6, max 8) on 10 GPUs."""
    h = harness(reclaim_delay=30)
    h.add_nodes(*(make_node(f"n{i}").capacity({GPU: 2}, cpu="16", memory="64Gi") for i in range(5)))
    # The seed talk's Queue shape: requests = guaranteed, limits = maximum.
    a = decode(
        {
            "metadata": {"name": "a"},
            "spec": {"resources": {"requests": {GPU: 4}, "limits": {GPU: 6}}},
        },
        Queue,
    )
    b = decode(
        {
            "metadata": {"name": "b"},
            "spec": {"resources": {"requests": {GPU: 6}, "limits": {GPU: 8}}},
        },
        Queue,
    )
    assert h.scheduler.apply_queues([a, b]) == []
    h.add_pods(*(gpu_pod(f"a-{i}", "a") for i in range(8)))
    h.run()
    assert gpus_by_queue(h)["a"] == 6  # A alone grows to its max by borrowing
    assert "queue a would exceed its max nvidia.com/gpu" in h.scheduler.explain("default/a-6")
    h.advance(60)
    h.add_pods(*(gpu_pod(f"b-{i}", "b") for i in range(6)))
    h.run()
    assert gpus_by_queue(h)["b"] == 4  # the free GPUs at once; reclaim waits for its delay
    h.advance(60)
    used = gpus_by_queue(h)
    assert used["a"] == 4 and used["b"] == 6
    evictions = h.effects.evictions
    assert len(evictions) == 2
    assert all("queue a is above its guarantee" in e.reason for e in evictions)
    # No loop: nothing more is evicted as time passes.
    h.advance(600)
    assert len(h.effects.evictions) == 2  # type: ignore[union-attr]
    assert gpus_by_queue(h) == used


def test_reclaim_never_takes_higher_priority_work_or_below_guarantee() -> None:
    h = harness(reclaim_delay=0)
    h.add_nodes(*(make_node(f"n{i}").capacity({GPU: 2}, cpu="16", memory="64Gi") for i in range(5)))
    h.scheduler.apply_queues([queue("a", g=4, m=10), queue("b", g=6, m=10)])
    h.add_pods(*(gpu_pod(f"a-{i}", "a", priority=100) for i in range(10)))
    h.run()
    assert gpus_by_queue(h)["a"] == 10
    h.add_pods(*(gpu_pod(f"b-{i}", "b", priority=0) for i in range(6)))
    h.advance(60)
    assert gpus_by_queue(h)["b"] == 0  # A's pods have higher priority: never reclaimed
    assert not h.effects.evictions


def test_max_is_a_hard_cap_through_the_tree() -> None:
    h = harness()
    h.add_nodes(
        *(make_node(f"n{i}").capacity({GPU: 8}, cpu="64", memory="256Gi") for i in range(4))
    )
    problems = h.scheduler.apply_queues(
        [queue("org", g=8, m=10), queue("t1", parent="org", g=4), queue("t2", parent="org", g=4)]
    )
    assert problems == []
    h.add_pods(
        *(gpu_pod(f"x-{i}", "t1") for i in range(8)), *(gpu_pod(f"y-{i}", "t2") for i in range(8))
    )
    h.run()
    used = gpus_by_queue(h)
    assert used["t1"] + used["t2"] == 10
    assert "queue org would exceed its max" in h.scheduler.explain(
        next(uid for uid in h.scheduler._pods if uid not in h.scheduler.cluster.placed)
    )


@pytest.mark.parametrize(
    ("queues", "fragment"),
    [
        (
            [queue("p", g=4), queue("c1", parent="p", g=3), queue("c2", parent="p", g=3)],
            "children's spec.guaranteed.nvidia.com/gpu add up to 6, more than its own guarantee 4",
        ),
        (
            [queue("q", g=8, m=4)],
            "spec.guaranteed.nvidia.com/gpu (8) exceeds spec.max.nvidia.com/gpu (4)",
        ),
        ([queue("x", parent="y"), queue("y", parent="x")], "spec.parent forms a cycle"),
        ([queue("orphan", parent="nowhere")], "spec.parent 'nowhere' does not exist"),
    ],
)
def test_invalid_trees_are_rejected_whole(queues: list[Queue], fragment: str) -> None:
    h = harness()
    assert h.scheduler.apply_queues([queue("keep", g=1)]) == []
    problems = h.scheduler.apply_queues(queues)
    assert any(fragment in p for p in problems), problems
    # Nothing of the bad change was applied; the earlier tree is intact.
    assert "keep" in h.scheduler.tenant_queues.tree.index
    assert all(q.metadata.name not in h.scheduler.tenant_queues.tree.index for q in queues)


def test_bindings_route_namespaces_and_unknown_queue_is_explained() -> None:
    h = harness()
    h.add_nodes(make_node("n0").capacity({GPU: 4}, cpu="16", memory="64Gi"))
    assert h.scheduler.apply_queues([queue("research", g=2, m=2)]) == []
    binding = QueueBinding(
        metadata=ObjectMeta(name="r"),
        spec=decode(
            {"queue": "research", "namespaces": ["lab"]},
            QueueBinding.__annotations__
            and __import__("shoal.api.queue", fromlist=["QueueBindingSpec"]).QueueBindingSpec,
        ),
    )
    assert h.scheduler.apply_queues(bindings=[binding]) == []
    h.add_pods(*(make_pod(f"p{i}").namespace("lab").req({GPU: 1}) for i in range(3)))
    h.add_pods(make_pod("lost").labels({"shoal.dev/queue": "nope"}).req({GPU: 1}))
    h.run()
    assert gpus_by_queue(h)["default"] == 2  # the lab pods count as research (label absent)
    assert "queue 'nope' does not exist" in h.scheduler.explain("default/lost")
    assert "queue research would exceed its max" in h.scheduler.explain(
        next(
            uid
            for uid in h.scheduler._pods
            if uid.startswith("lab/") and uid not in h.scheduler.cluster.placed
        )
    )
    bad = QueueBinding(
        metadata=ObjectMeta(name="bad"),
        spec=decode(
            {"queue": "ghost"},
            __import__("shoal.api.queue", fromlist=["QueueBindingSpec"]).QueueBindingSpec,
        ),
    )
    assert any("'ghost' does not exist" in p for p in h.scheduler.apply_queues(bindings=[bad]))


def test_node_pools_exclusive_and_restricted() -> None:
    h = harness()
    h.add_nodes(
        *(
            make_node(f"own{i}").labels(pool="tenant-a").capacity({GPU: 1}, cpu="8", memory="32Gi")
            for i in range(2)
        ),
        *(
            make_node(f"shared{i}").labels(pool="shared").capacity({GPU: 1}, cpu="8", memory="32Gi")
            for i in range(2)
        ),
    )
    pools = [
        NodePool(
            metadata=ObjectMeta(name="a-hw"),
            spec=decode(
                {"nodeSelector": {"pool": "tenant-a"}, "exclusiveTo": ["a"]},
                __import__("shoal.api.queue", fromlist=["NodePoolSpec"]).NodePoolSpec,
            ),
        ),
        NodePool(
            metadata=ObjectMeta(name="shared"),
            spec=decode(
                {"nodeSelector": {"pool": "shared"}},
                __import__("shoal.api.queue", fromlist=["NodePoolSpec"]).NodePoolSpec,
            ),
        ),
    ]
    assert h.scheduler.apply_queues([queue("a"), queue("b", pools=["shared"])]) == []
    assert h.scheduler.apply_queues(pools=pools) == []
    h.add_pods(*(gpu_pod(f"b-{i}", "b") for i in range(3)))
    h.run()
    nodes = {rec.node for rec in h.scheduler.cluster.placed.values()}
    assert nodes == {"shared0", "shared1"}
    message = h.scheduler.explain("default/b-2")
    assert "reserved for other queues" in message or "outside queue b's node pools" in message
    h.add_pods(*(gpu_pod(f"a-{i}", "a") for i in range(2)))
    h.run()
    assert {
        rec.node for rec in h.scheduler.cluster.placed.values() if rec.pod.name.startswith("a-")
    } == {"own0", "own1"}


def test_a_queue_naming_a_pool_that_does_not_exist_yet_waits_for_it() -> None:
    """No NodePool exists at all: the pods of a queue that names one wait (before, the
    plugin skipped when there were no pools and placed them anywhere), and run on the
    pool's nodes once it is created."""
    from shoal.api.queue import NodePoolSpec

    h = harness()
    h.add_nodes(make_node("plain").capacity({GPU: 1}, cpu="8", memory="32Gi"))
    assert h.scheduler.apply_queues([queue("q", pools=["later"])]) == []
    h.add_pods(gpu_pod("p", "q"))
    h.run()
    assert h.node_of("default/p") is None
    assert "outside queue q's node pools ['later']" in h.scheduler.explain("default/p")
    h.add_nodes(make_node("pooled").labels(pool="later").capacity({GPU: 1}, cpu="8"))
    pool = NodePool(
        metadata=ObjectMeta(name="later"),
        spec=decode({"nodeSelector": {"pool": "later"}}, NodePoolSpec),
    )
    assert h.scheduler.apply_queues(pools=[pool]) == []
    h.advance(30)
    assert h.node_of("default/p") == "pooled"


def test_binding_limits_running_jobs_per_namespace() -> None:
    from shoal.api.queue import QueueBindingSpec

    h = harness()
    h.add_nodes(make_node("n0").capacity({GPU: 8}, cpu="64", memory="256Gi"))
    assert h.scheduler.apply_queues([queue("lab-q")]) == []
    spec = decode({"queue": "lab-q", "namespaces": ["lab"], "maxRunningJobs": 2}, QueueBindingSpec)
    assert (
        h.scheduler.apply_queues(
            bindings=[QueueBinding(metadata=ObjectMeta(name="lab"), spec=spec)]
        )
        == []
    )
    light = "pod-group.scheduling.sigs.k8s.io/"
    gang = [
        make_pod(f"g-{i}")
        .namespace("lab")
        .labels({light + "name": "g", light + "min-available": "2"})
        .req(cpu="1")
        for i in range(2)
    ]
    h.add_pods(
        *gang,
        make_pod("solo").namespace("lab").req(cpu="1"),
        make_pod("third").namespace("lab").req(cpu="1"),
    )
    h.run()
    placed = {k for k, n in h.result().placements.items() if n}
    # The gang counts as one job: the gang plus one solo pod run; the next job waits.
    assert {"lab/g-0", "lab/g-1"} <= placed and len(placed) == 3
    waiting = ({"lab/solo", "lab/third"} - placed).pop()
    assert "already runs 2 jobs (maxRunningJobs 2)" in h.scheduler.explain(waiting)


def test_binding_limits_apply_to_namespaces_it_selects_by_label() -> None:
    from shoal.api.queue import QueueBindingSpec

    h = harness()
    h.add_nodes(make_node("n0").capacity(cpu="64", memory="256Gi"))
    assert h.scheduler.apply_queues([queue("lab-q")]) == []
    h.scheduler.set_namespace_labels("lab-a", {"team": "lab"})
    spec = decode(
        {"queue": "lab-q", "namespaceSelector": {"matchLabels": {"team": "lab"}}, "maxPods": 2},
        QueueBindingSpec,
    )
    assert (
        h.scheduler.apply_queues(
            bindings=[QueueBinding(metadata=ObjectMeta(name="lab"), spec=spec)]
        )
        == []
    )
    h.add_pods(*(make_pod(f"p{i}").namespace("lab-a").req(cpu="1") for i in range(3)))
    h.run()
    placed = {k for k, n in h.result().placements.items() if n}
    # maxPods holds for a namespace the binding selects, as for one it lists.
    assert len(placed) == 2
    waiting = ({"lab-a/p0", "lab-a/p1", "lab-a/p2"} - placed).pop()
    assert "namespace lab-a already runs 2 pods (maxPods 2)" in h.scheduler.explain(waiting)


def test_reclaim_does_not_count_pods_already_being_evicted() -> None:
    """A queue one GPU above its guarantee, with one of its pods already being evicted
    (an earlier reclaim whose victim is still terminating), is at its guarantee once that
    pod is gone: a second reclaim must not take another of its pods."""
    h = harness(reclaim_delay=0)
    h.add_nodes(*(make_node(f"n{i}").capacity({GPU: 2}, cpu="16", memory="64Gi") for i in range(5)))
    h.scheduler.apply_queues([queue("a", g=5, m=10), queue("b", g=4, m=10), queue("c", g=1)])
    h.add_pods(*(gpu_pod(f"a-{i}", "a") for i in range(5)))
    h.add_pods(*(gpu_pod(f"b-{i}", "b") for i in range(5)))
    h.run()
    assert gpus_by_queue(h) == {"a": 5, "b": 5}
    cluster = h.scheduler.cluster
    terminating = next(
        uid for uid, r in cluster.placed.items() if r.pod.labels["shoal.dev/queue"] == "b"
    )
    cluster.evicting.add(terminating)  # its eviction was sent; the pod has not gone yet
    h.add_pods(gpu_pod("c-0", "c"))
    h.advance(60)
    assert not h.effects.evictions
    assert gpus_by_queue(h)["b"] == 5  # still counted until it is gone


def test_reclaim_starts_when_its_delay_ends_and_its_pods_run_once_the_victims_are_gone() -> None:
    """Queue b is below its guarantee; a borrowed everything. Reclaim waits
    reclaimDelaySeconds (10 s) from b's pods' first attempt, then evicts, and the
    preemptors run as soon as their victims are gone. Before: the waiting attempts
    doubled the pods' backoff, so the reclaim came at the first retry after the delay
    (20 s, not 15 s) and the preemptors sat out a 10 s backoff after their victims were
    gone (bound at 30 s)."""
    h = harness(reclaim_delay=10)
    h.add_nodes(*(make_node(f"n{i}").capacity({GPU: 2}, cpu="16", memory="64Gi") for i in range(5)))
    h.scheduler.apply_queues([queue("a", g=4, m=10), queue("b", g=6, m=10)])
    h.add_pods(*(gpu_pod(f"a-{i}", "a") for i in range(10)))
    h.advance(5)
    h.add_pods(*(gpu_pod(f"b-{i}", "b") for i in range(6)))
    for _ in range(60):
        h.advance(0.5)
    evicted = sorted({e.time for e in h.events if e.kind == "evicted"})
    bound = sorted(
        {e.time for e in h.events if e.kind == "bound" and e.pod.startswith("default/b")}
    )
    assert evicted == [15.0]
    assert bound == [15.0]
    assert gpus_by_queue(h) == {"a": 4, "b": 6}
