"""Fair-share reclaim: three equal-weight queues without guarantees on 30 GPUs. The first
to arrive takes all 30; the other two arrive later with demand.

* `reclaimTo: FairShare` (Volcano's reclaim under proportion/hdrf): each queue is
  entitled to its HDRF fair share (10 GPUs here), so the late queues reclaim from the
  first until every queue is within the tolerance of 10 (default 10%: the first keeps
  at most ceil(10 x 1.1) = 11), in bounded virtual time, each pod evicted at most once,
  and then evictions stop.
* The default, `reclaimTo: Guarantee` (scheduler-plugins' CapacityScheduling, YuniKorn):
  a queue reclaims only up to its guarantee. With zero guarantees there is nothing to
  reclaim, so the first queue keeps all 30 GPUs and the others wait for it to finish.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.testing import SchedulerHarness, make_node, make_pod

GPU = "nvidia.com/gpu"
QUEUE_LABEL = "shoal.dev/queue"


def harness(**reclaim_args: Any) -> SchedulerHarness:
    args = {"reclaimDelaySeconds": 0, **reclaim_args}
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "pluginConfig": [{"name": "QueueCapacity", "args": args}],
            }
        ],
    }
    h = SchedulerHarness(config)
    h.add_nodes(
        *(make_node(f"n{i}").capacity({GPU: 2}, cpu="32", memory="64Gi") for i in range(15))
    )
    queues = [decode({"metadata": {"name": name}, "spec": {"weight": 1}}, Queue) for name in "abc"]
    assert h.scheduler.apply_queues(queues) == []
    return h


def demand(h: SchedulerHarness, q: str, count: int) -> None:
    h.add_pods(
        *(
            make_pod(f"{q}-{i}").labels({QUEUE_LABEL: q}).req({GPU: 1}, cpu="1")
            for i in range(count)
        )
    )


def gpus_by_queue(h: SchedulerHarness) -> dict[str, int]:
    used: Counter[str] = Counter()
    bound = {k for k, node in h.result().placements.items() if node}
    for rec in h.scheduler.cluster.placed.values():
        if rec.pod.key in bound:
            used[rec.pod.labels[QUEUE_LABEL]] += rec.pod.requests.get(GPU, 0)
    return dict(used)


def first_takes_all_then_others_arrive(h: SchedulerHarness) -> None:
    demand(h, "a", 40)
    h.run()
    assert gpus_by_queue(h) == {"a": 30}
    h.advance(60)
    demand(h, "b", 20)
    demand(h, "c", 20)


def test_fair_share_reclaim_converges_to_equal_shares_without_loops() -> None:
    h = harness(reclaimTo="FairShare")
    first_takes_all_then_others_arrive(h)
    converged_at = None
    for step in range(1, 25):  # 2 minutes of virtual time in 5 s steps
        h.advance(5)
        used = gpus_by_queue(h)
        if all(9 <= used.get(q, 0) <= 11 for q in "abc") and sum(used.values()) == 30:
            converged_at = converged_at or step * 5
    assert converged_at is not None and converged_at <= 30, gpus_by_queue(h)
    used = gpus_by_queue(h)
    assert sum(used.values()) == 30
    assert all(9 <= used[q] <= 11 for q in "abc"), used

    # Only the first queue lost pods, each evicted once, for the queues below their share.
    evictions = [e for e in h.events if e.kind == "evicted"]
    assert len(evictions) == len({e.pod for e in evictions}) == used["b"] + used["c"]
    assert all(e.pod.startswith("default/a-") for e in evictions)
    assert all(
        e.message.startswith("reclaimed: queue a is above its fair share and queue ")
        for e in evictions
    )
    # Converged means settled: ten more minutes bring no eviction and no change.
    before = len(evictions)
    for _ in range(20):
        h.advance(30)
    assert len([e for e in h.events if e.kind == "evicted"]) == before
    assert gpus_by_queue(h) == used


def test_guarantee_reclaim_with_zero_guarantees_reclaims_nothing() -> None:
    h = harness()  # reclaimTo: Guarantee (the default)
    first_takes_all_then_others_arrive(h)
    for _ in range(24):
        h.advance(5)
    assert h.evicted == {}
    assert gpus_by_queue(h) == {"a": 30}
    # The late queues run as soon as the first queue's work finishes.
    for i in range(40):
        h.delete_pod(f"a-{i}")
    h.advance(30)
    used = gpus_by_queue(h)
    assert used["b"] + used["c"] == 30
