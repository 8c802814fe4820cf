"""Quota reclaim with gangs: the seed's two queues, A (guarantee 4 GPUs, max 6) and B
(guarantee 6, max 8) on 10 GPUs (5 nodes x 2), A having borrowed up to 6.

* B's demand is one gang of 6: it reclaims for all its members together (the gang cycle
  runs reclaim inside the gang's transaction) and reaches 6/6. Before core v2 each
  member reclaimed on its own, and a gang whose members could not all be placed at
  once never started: B stayed at 0/6.
* A's borrowed work is a gang: with minMember 6 (all of it at the minimum) reclaim takes
  the whole gang, because A is above its guarantee just before the unit goes (Kueue's
  rule); with minMember 4 only the two members above the minimum go.
"""

from __future__ import annotations

from collections import Counter

from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import PodBuilder

GPU = "nvidia.com/gpu"
QUEUE_LABEL = "shoal.dev/queue"
LIGHT_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LIGHT_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"


def queue(name: str, guaranteed: int, maximum: int) -> Queue:
    spec = {"guaranteed": {GPU: guaranteed}, "max": {GPU: maximum}}
    return decode({"metadata": {"name": name}, "spec": spec}, Queue)


def pod(name: str, q: str, gang: str = "", min_member: int = 0) -> PodBuilder:
    builder = make_pod(name).labels({QUEUE_LABEL: q}).req({GPU: 1}, cpu="1")
    if gang:
        builder = builder.labels({LIGHT_NAME: gang, LIGHT_MIN: str(min_member)})
    return builder


def seed_cluster(reclaim_delay: float = 0) -> SchedulerHarness:
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "pluginConfig": [
                    {"name": "QueueCapacity", "args": {"reclaimDelaySeconds": reclaim_delay}}
                ],
            }
        ],
    }
    h = SchedulerHarness(config)
    h.add_nodes(*(make_node(f"n{i}").capacity({GPU: 2}, cpu="16", memory="64Gi") for i in range(5)))
    assert h.scheduler.apply_queues([queue("a", 4, 6), queue("b", 6, 8)]) == []
    return h


def gpus_by_queue(h: SchedulerHarness) -> Counter[str]:
    """GPUs of bound pods per queue (pods whose eviction is under way excluded)."""
    used: Counter[str] = Counter()
    for key, node in h.result().placements.items():
        if node is None:
            continue
        rec = next(r for r in h.scheduler.cluster.placed.values() if r.pod.key == key)
        used[rec.pod.labels[QUEUE_LABEL]] += rec.pod.requests.get(GPU, 0)
    return used


def settle(h: SchedulerHarness, seconds: float = 60, step: float = 5) -> None:
    for _ in range(int(seconds / step)):
        h.advance(step)


def test_gang_of_b_reclaims_for_all_its_members_and_reaches_its_guarantee() -> None:
    h = seed_cluster()
    h.add_pods(*(pod(f"a-{i}", "a") for i in range(6)))
    h.run()
    assert gpus_by_queue(h) == {"a": 6}
    h.advance(10)
    h.add_pods(*(pod(f"b-{i}", "b", gang="train", min_member=6) for i in range(6)))
    settle(h)

    assert gpus_by_queue(h) == {"a": 4, "b": 6}
    placements, messages = h.result()
    assert all(placements[f"default/b-{i}"] for i in range(6)), messages
    # Exactly A's borrowed two went, each for a member of B's gang, naming both queues.
    assert len(h.evicted) == 2
    assert all(key.startswith("default/a-") for key in h.evicted)
    assert all(
        reason.startswith("reclaimed: queue a is above its guarantee and queue b")
        and "for pod default/b-" in reason
        for reason in h.evicted.values()
    )
    # No loop: nothing more goes as time passes.
    settle(h, 300, 30)
    assert len(h.evicted) == 2
    assert gpus_by_queue(h) == {"a": 4, "b": 6}


def test_borrowing_gang_at_its_minimum_is_reclaimed_whole() -> None:
    h = seed_cluster()
    h.add_pods(*(pod(f"a-{i}", "a", gang="borrow", min_member=6) for i in range(6)))
    h.run()
    assert gpus_by_queue(h) == {"a": 6}
    h.advance(10)
    h.add_pods(*(pod(f"b-{i}", "b") for i in range(6)))
    settle(h)

    # Taking two members would leave a partial gang running; the gang is one unit and A
    # is above its guarantee before it goes, so the whole gang goes (Kueue's rule).
    assert set(h.evicted) == {f"default/a-{i}" for i in range(6)}
    assert all("queue a is above its guarantee" in r for r in h.evicted.values())
    assert gpus_by_queue(h) == {"b": 6}
    settle(h, 300, 30)
    assert len(h.evicted) == 6
    assert gpus_by_queue(h) == {"b": 6}


def test_borrowing_gang_above_its_minimum_loses_only_the_extra_members() -> None:
    h = seed_cluster()
    h.add_pods(*(pod(f"a-{i}", "a", gang="elastic", min_member=4) for i in range(6)))
    h.run()
    assert gpus_by_queue(h) == {"a": 6}
    h.advance(10)
    h.add_pods(*(pod(f"b-{i}", "b") for i in range(6)))
    settle(h)

    assert len(h.evicted) == 2
    assert all(key.startswith("default/a-") for key in h.evicted)
    assert gpus_by_queue(h) == {"a": 4, "b": 6}
    group = h.scheduler.gangs.groups["default/elastic"]
    assert len(group.bound) == 4 and group.phase == "Running"
    settle(h, 300, 30)
    assert len(h.evicted) == 2


def test_gang_waiting_for_the_reclaim_delay_says_so() -> None:
    h = seed_cluster(reclaim_delay=30)
    h.add_pods(*(pod(f"a-{i}", "a") for i in range(6)))
    h.advance(10)
    h.add_pods(*(pod(f"b-{i}", "b", gang="train", min_member=6) for i in range(6)))
    _, messages = h.advance(5)
    assert h.evicted == {}
    assert messages["default/b-0"].startswith("gang default/train: 4/6 members placeable")
    assert messages["default/b-0"].endswith("reclaim for queue b starts after 30s of waiting.")


def test_reclaim_delay_counts_from_the_gangs_first_attempt_for_every_member() -> None:
    """Members the first attempt never reached (the minimum was already out of reach)
    still started waiting then: the gang reclaims at its first retry after the delay,
    not one delay later again. (Retries come from the 5-minute unschedulable flush
    until the scheduler retries gangs waiting for the delay sooner; see below.)"""
    h = seed_cluster(reclaim_delay=30)
    h.add_pods(*(pod(f"a-{i}", "a") for i in range(6)))
    h.advance(10)
    h.add_pods(*(pod(f"b-{i}", "b", gang="train", min_member=6) for i in range(6)))
    settle(h, 320, 10)
    assert gpus_by_queue(h) == {"a": 4, "b": 6}
    assert len(h.evicted) == 2


def test_gang_reclaims_once_the_reclaim_delay_has_passed() -> None:
    h = seed_cluster(reclaim_delay=30)
    h.add_pods(*(pod(f"a-{i}", "a") for i in range(6)))
    h.advance(10)
    h.add_pods(*(pod(f"b-{i}", "b", gang="train", min_member=6) for i in range(6)))
    h.advance(20)
    assert h.evicted == {}  # the delay has not passed yet
    settle(h, 40)  # 30 s after the gang's first attempt, plus backoff
    assert gpus_by_queue(h) == {"a": 4, "b": 6}
    assert len(h.evicted) == 2
