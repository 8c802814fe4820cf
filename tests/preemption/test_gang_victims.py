"""Gangs as victims: preemption and reclaim never leave a gang running below its
minMember. A member goes alone only while its gang can spare it; when the minimal
victim set would take more members than the gang can spare, the whole gang goes.

The spare count is taken against the cache as it is during the search. Before this was
so, each member was judged against the gang's bound count alone, so one search could
take two "spare" members of a gang that had one to spare (both on the node it
emptied), and job-level preemption or a second eviction before the first victim was
gone could do the same across nodes: the gang kept running partially.
"""

from __future__ import annotations

from collections import Counter

from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import PodBuilder

GPU = "nvidia.com/gpu"
LIGHT_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LIGHT_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"


def member(group: str, i: int, min_member: int, cpu: int, priority: int = 0) -> PodBuilder:
    return (
        make_pod(f"{group}-{i}")
        .labels({LIGHT_NAME: group, LIGHT_MIN: str(min_member)})
        .req(cpu=str(cpu))
        .priority(priority)
    )


def running(h: SchedulerHarness, prefix: str) -> int:
    return sum(1 for key, node in h.result().placements.items() if node and key.startswith(prefix))


def test_two_members_on_the_emptied_node_take_the_whole_gang() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n0").capacity(cpu="4", memory="8Gi"))
    h.add_nodes(make_node("n1").capacity(cpu="6", memory="8Gi"))
    # Five members of 2 cpu, minMember 4: two on n0, three on n1; one to spare.
    h.add_pods(*(member("etl", i, 4, cpu=2) for i in range(5)))
    h.run()
    assert running(h, "default/etl-") == 5
    # 4 cpu on one node means two members of the gang: it cannot spare two.
    h.add_pods(make_pod("big").req(cpu="4").priority(100))
    placements, _ = h.advance(30)
    assert set(h.evicted) == {f"default/etl-{i}" for i in range(5)}
    assert all(
        r == f"preempted by default/big (priority 100 > 0) on node {placements['default/big']}"
        for r in h.evicted.values()
    )
    assert placements["default/big"] is not None
    assert running(h, "default/etl-") == 0


def test_one_spare_member_goes_alone() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="2", memory="8Gi") for i in range(5)))
    h.add_pods(*(member("etl", i, 4, cpu=2) for i in range(5)))
    h.run()
    h.add_pods(make_pod("small").req(cpu="2").priority(100))
    placements, _ = h.advance(30)
    assert len(h.evicted) == 1 and next(iter(h.evicted)).startswith("default/etl-")
    assert placements["default/small"] is not None
    assert running(h, "default/etl-") == 4
    assert h.scheduler.gangs.groups["default/etl"].phase == "Running"


def test_a_second_preemptor_does_not_take_a_member_the_gang_cannot_spare() -> None:
    """The first victim's eviction has been sent but the pod is not gone yet (the
    API server has not deleted it): the gang has nothing more to spare, so the next
    preemptor takes the rest of the gang, not one more member."""
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="2", memory="8Gi") for i in range(5)))
    h.add_pods(*(member("etl", i, 4, cpu=2) for i in range(5)))
    h.run()
    h.driver.inbox = None  # evictions go out, deletions do not come back yet
    h.add_pods(make_pod("first").req(cpu="2").priority(100))
    h.run()
    assert len(h.evicted) == 1
    h.add_pods(make_pod("second").req(cpu="2").priority(100))
    h.run()
    # Four members still run and one is on its way out: a member more would leave
    # three running. The four go together.
    assert len(h.evicted) == 5
    assert set(h.evicted) == {f"default/etl-{i}" for i in range(5)}


def test_job_level_preemption_takes_the_whole_lower_priority_gang() -> None:
    """Two members of a high-priority gang each need a node held by a member of a
    low-priority gang that can spare one: together they take two, so the whole
    low-priority gang goes, in the same decision."""
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="2", memory="8Gi") for i in range(5)))
    h.add_pods(*(member("etl", i, 4, cpu=2) for i in range(5)))
    h.run()
    h.add_pods(*(member("train", i, 2, cpu=2, priority=100) for i in range(2)))
    h.run()
    evictions = [e for e in h.events if e.kind == "evicted"]
    assert {e.pod for e in evictions} == {f"default/etl-{i}" for i in range(5)}
    assert len({e.time for e in evictions}) == 1
    placements, _ = h.advance(30)
    assert running(h, "default/train-") == 2
    assert running(h, "default/etl-") == 0
    assert placements["default/train-0"] != placements["default/train-1"]


def test_reclaim_of_two_gpus_on_one_node_takes_the_whole_borrowing_gang() -> None:
    """Queue A (guarantee 4, max 6) borrowed 2 GPUs with a gang of 6 (minMember 5);
    queue B (guarantee 6) asks for three 2-GPU pods. Two fit the free nodes; the third
    needs a whole node, i.e. two members of A's gang, which can spare one: the gang goes
    whole (A is above its guarantee before it goes), never leaving four running."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "pluginConfig": [{"name": "QueueCapacity", "args": {"reclaimDelaySeconds": 0}}],
            }
        ],
    }
    h = SchedulerHarness(config)
    h.add_nodes(*(make_node(f"n{i}").capacity({GPU: 2}, cpu="16", memory="64Gi") for i in range(5)))

    def queue(name: str, g: int, m: int) -> Queue:
        spec = {"guaranteed": {GPU: g}, "max": {GPU: m}}
        return decode({"metadata": {"name": name}, "spec": spec}, Queue)

    assert h.scheduler.apply_queues([queue("a", 4, 6), queue("b", 6, 8)]) == []
    # A's gang runs two members per node on n0..n2; n3 and n4 are free.
    h.add_pods(
        *(
            make_pod(f"a-{i}")
            .labels({"shoal.dev/queue": "a", LIGHT_NAME: "borrow", LIGHT_MIN: "5"})
            .req({GPU: 1}, cpu="1")
            .node(f"n{i // 2}")
            for i in range(6)
        )
    )
    h.run()
    assert running(h, "default/a-") == 6
    assert h.scheduler.gangs.groups["default/borrow"].phase == "Running"
    h.advance(10)
    h.add_pods(
        *(
            make_pod(f"b-{i}").labels({"shoal.dev/queue": "b"}).req({GPU: 2}, cpu="1")
            for i in range(3)
        )
    )
    for _ in range(12):
        h.advance(5)
        left = running(h, "default/a-")
        assert left == 0 or left >= 5, f"gang borrow runs {left} < minMember 5"
    assert set(h.evicted) == {f"default/a-{i}" for i in range(6)}
    assert Counter(r.split(" and ")[0] for r in h.evicted.values()) == {
        "reclaimed: queue a is above its guarantee": 6
    }
    assert running(h, "default/b-") == 3
