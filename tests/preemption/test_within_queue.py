"""Priority preemption inside a queue held at its max (Kueue's `withinClusterQueue:
LowerPriority`, Volcano's preempt action inside a queue).

A pod refused because its leaf queue, or a queue above it, is at its max may preempt
lower-priority pods of its own leaf queue: QueueCapacity's PreFilter marks that refusal
as one preemption may resolve, and the victim search re-runs it with the victims gone
(the minimal set, by kube's reprieve). Refusals by the borrowing rule (capacity owed to
other queues below their guarantee) or by a QueueBinding's limits are not: taking
capacity across queues is reclaim's job, and a borrowing pod preempting inside its queue
fought reclaim in a loop (tests/properties/test_core_invariants.py keeps that case). The
quota a nominated preemptor will use is held for it, so the room its victims free is not
taken by a lower-priority pod of the queue first.
"""

from __future__ import annotations

from typing import Any

from shoal.api.manifests import decode
from shoal.api.queue import Queue, QueueBinding
from shoal.framework.cycle_state import CycleState
from shoal.framework.status import Code, Status
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import PodBuilder

GPU = "nvidia.com/gpu"


def queue(name: str, **spec: Any) -> Queue:
    return decode({"metadata": {"name": name}, "spec": spec}, Queue)


def capped(name: str, gpus: int, **spec: Any) -> Queue:
    return queue(name, max={GPU: gpus}, **spec)


def pod(name: str, q: str, priority: int, gpus: int = 1) -> PodBuilder:
    return (
        make_pod(name).labels({"shoal.dev/queue": q}).req({GPU: gpus}, cpu="1").priority(priority)
    )


def harness(nodes: int = 2, gpus: int = 4, reclaim_delay: float = 30.0) -> SchedulerHarness:
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
    h = SchedulerHarness(config, seed=1)
    h.add_nodes(
        *(make_node(f"n{i}").capacity({GPU: gpus}, cpu="16", memory="64Gi") for i in range(nodes))
    )
    return h


def cluster() -> SchedulerHarness:
    h = harness()
    assert h.scheduler.apply_queues([capped("team", 2), capped("other", 4)]) == []
    return h


def placed(h: SchedulerHarness) -> set[str]:
    return {rec.pod.name for rec in h.scheduler.cluster.placed.values()}


def evicted(h: SchedulerHarness) -> list[str]:
    return [e.pod.removeprefix("default/") for e in h.events if e.kind == "evicted"]


def settle(h: SchedulerHarness, rounds: int = 20) -> None:
    for _ in range(rounds):
        h.run()
        h.advance(3)


def test_the_pre_filter_flags_only_a_max_refusal_as_resolvable_by_preemption() -> None:
    # One node of 3 GPUs: team (guarantee and max 1) runs one pod; lend (no guarantee)
    # borrows another while owed (guarantee 1) waits; namespace lab is bound with
    # maxPods 1.
    h = harness(nodes=1, gpus=3, reclaim_delay=3600)
    lab = decode(
        {"metadata": {"name": "lab"}, "spec": {"queue": "ns", "namespaces": ["lab"], "maxPods": 1}},
        QueueBinding,
    )
    queues = [
        capped("team", 1, guaranteed={GPU: 1}),
        queue("lend"),
        queue("owed", guaranteed={GPU: 1}),
        queue("ns"),
    ]
    assert h.scheduler.apply_queues(queues, bindings=[lab]) == []
    h.add_pods(pod("team-0", "team", 0), pod("lend-0", "lend", 0), pod("lend-1", "lend", 0))
    h.add_pods(make_pod("lab-0", "lab").req(cpu="1"))
    h.run()
    assert placed(h) == {"team-0", "lend-0", "lend-1", "lab-0"}
    h.add_pods(pod("owed-0", "owed", 0))
    fwk = h.scheduler.profiles["default-scheduler"]

    def pre_filter(p: PodBuilder) -> Status:
        (info,) = h.add_pods(p)
        return fwk.run_pre_filter(CycleState(), info)[1]

    at_max = pre_filter(pod("team-1", "team", 9))
    borrowing = pre_filter(pod("lend-2", "lend", 9))
    namespace = pre_filter(make_pod("lab-1", "lab").req(cpu="1").priority(9))
    assert at_max.code == Code.UNSCHEDULABLE and at_max.plugin == "QueueCapacity"
    assert at_max.resolvable_by_preemption
    assert "queue team would exceed its max" in at_max.message
    assert borrowing.code == Code.UNSCHEDULABLE and not borrowing.resolvable_by_preemption
    assert "queue lend may not borrow" in borrowing.message
    assert namespace.code == Code.UNSCHEDULABLE and not namespace.resolvable_by_preemption
    assert "QueueBinding lab" in namespace.message


def test_a_pod_at_its_queue_max_preempts_one_lower_priority_pod_of_its_own_queue() -> None:
    h = cluster()
    h.add_pods(pod("low-0", "team", 0), pod("low-1", "team", 0))
    # Lower priority still, but in another queue: taking it frees nothing of team's max.
    h.add_pods(pod("other-0", "other", -10), pod("other-1", "other", -10))
    h.run()
    h.advance(5)
    h.add_pods(pod("high", "team", 100))
    settle(h)
    assert len(evicted(h)) == 1 and evicted(h)[0] in {"low-0", "low-1"}
    (reason,) = h.evicted.values()
    assert reason.startswith("preempted by default/high (priority 100 > 0)")
    assert {"high", "other-0", "other-1"} <= placed(h)


def test_the_victims_are_the_fewest_and_least_important_that_make_room() -> None:
    # One node, so every victim set is on it: the preemptor asks 2 GPUs of a max of 3
    # held by three 1-GPU pods of priorities 0, 1 and 5. Reprieve keeps the most
    # important: the two lowest go, the priority-5 pod stays.
    h = harness(nodes=1, gpus=8)
    assert h.scheduler.apply_queues([capped("team", 3)]) == []
    h.add_pods(pod("p0", "team", 0), pod("p1", "team", 1), pod("p5", "team", 5))
    h.run()
    h.add_pods(pod("big", "team", 10, gpus=2))
    settle(h)
    assert sorted(evicted(h)) == ["p0", "p1"]
    assert placed(h) == {"big", "p5"}


def test_pods_of_other_queues_are_never_victims_of_this_path() -> None:
    # team's max is held by a pod of equal priority; other's pods are of lower priority
    # and the nodes are full, but they are not team's to take.
    h = harness(nodes=1, gpus=4)
    assert h.scheduler.apply_queues([capped("team", 2), capped("other", 2)]) == []
    h.add_pods(pod("t-0", "team", 50), pod("t-1", "team", 50))
    h.add_pods(pod("o-0", "other", 0), pod("o-1", "other", 0))
    h.run()
    h.add_pods(pod("high", "team", 50))
    settle(h)
    assert evicted(h) == []
    assert placed(h) == {"t-0", "t-1", "o-0", "o-1"}
    assert "queue team would exceed its max nvidia.com/gpu" in h.message("high")


def test_a_parent_max_is_made_room_under_with_the_pods_own_queue_only() -> None:
    # org's max (3) is held by team-a (1 GPU, priority 0) and team-b (2 GPUs, priority
    # 0); a team-a pod of priority 100 takes team-a's pod, never team-b's.
    h = harness()
    tree = [
        capped("org", 3),
        queue("team-a", parent="org"),
        queue("team-b", parent="org"),
    ]
    assert h.scheduler.apply_queues(tree) == []
    h.add_pods(pod("a-low", "team-a", 0), pod("b-0", "team-b", 0), pod("b-1", "team-b", 0))
    h.run()
    h.add_pods(pod("a-high", "team-a", 100))
    settle(h)
    assert evicted(h) == ["a-low"]
    assert placed(h) == {"a-high", "b-0", "b-1"}
    # With nothing of lower priority left in team-a, a second one waits: team-b's pods
    # are not its to take (reclaim, with guarantees, is how queues take from each other).
    h.add_pods(pod("a-high-2", "team-a", 100))
    settle(h)
    assert evicted(h) == ["a-low"]
    assert "queue org would exceed its max nvidia.com/gpu" in h.message("a-high-2")


def test_a_gang_at_its_queue_max_preempts_for_all_its_members_in_its_own_queue() -> None:
    h = harness()
    assert h.scheduler.apply_queues([capped("team", 4), capped("other", 4)]) == []
    h.add_pods(*(pod(f"low-{i}", "team", 0) for i in range(4)))
    h.add_pods(*(pod(f"o-{i}", "other", -5) for i in range(4)))
    h.run()
    gang = {
        "pod-group.scheduling.sigs.k8s.io/name": "g",
        "pod-group.scheduling.sigs.k8s.io/min-available": "3",
    }
    h.add_pods(*(pod(f"g-{i}", "team", 100).labels(gang) for i in range(3)))
    settle(h)
    # One victim per member, all in team: the gang starts whole, other is untouched.
    assert len(evicted(h)) == 3 and all(v.startswith("low-") for v in evicted(h))
    assert {"g-0", "g-1", "g-2", "o-0", "o-1", "o-2", "o-3"} <= placed(h)


def test_pods_of_equal_or_higher_priority_are_never_victims() -> None:
    h = cluster()
    h.add_pods(pod("a", "team", 5), pod("b", "team", 7))
    h.run()
    h.advance(5)
    h.add_pods(pod("c", "team", 5))
    settle(h)
    assert evicted(h) == []
    assert placed(h) == {"a", "b"}
    assert "queue team would exceed its max nvidia.com/gpu" in h.message("c")
    # A pod of priority 6 may take only the priority-5 pod.
    h.add_pods(pod("d", "team", 6))
    settle(h)
    assert evicted(h) == ["a"]
    assert placed(h) == {"b", "d"}


def test_a_pod_held_by_the_borrowing_rule_does_not_preempt_inside_its_queue() -> None:
    # lend (guarantee 0, no max) borrows all 4 GPUs with priority-0 pods; owed (guarantee
    # 2) then waits below its guarantee. lend's priority-100 pod is refused by the
    # borrowing rule, not by a max: it must not take lend's own pods (it would only hand
    # the capacity to another borrower while reclaim takes it back for owed).
    h = harness(nodes=1, gpus=4, reclaim_delay=3600)  # reclaim stays out of this test
    assert h.scheduler.apply_queues([queue("lend"), queue("owed", guaranteed={GPU: 2})]) == []
    h.add_pods(*(pod(f"lend-{i}", "lend", 0) for i in range(4)))
    h.run()
    h.add_pods(pod("owed-0", "owed", 0))
    h.add_pods(pod("urgent", "lend", 100))
    settle(h)
    assert evicted(h) == []
    assert "queue lend may not borrow nvidia.com/gpu beyond its guarantee" in h.message("urgent")


def test_a_max_refusal_that_the_borrowing_rule_would_still_refuse_evicts_nothing() -> None:
    # lend (guarantee 0, max 2) is at its max and borrowing; owed (guarantee 2) waits
    # below its guarantee on a full cluster. Taking a lend pod would clear lend's max,
    # but the borrowing rule would still refuse the preemptor: no victim set lets it in.
    h = harness(nodes=1, gpus=4, reclaim_delay=3600)
    queues = [capped("lend", 2), capped("fill", 2), queue("owed", guaranteed={GPU: 2})]
    assert h.scheduler.apply_queues(queues) == []
    h.add_pods(pod("lend-0", "lend", 0), pod("lend-1", "lend", 0))
    h.add_pods(pod("fill-0", "fill", 0), pod("fill-1", "fill", 0))
    h.run()
    h.add_pods(pod("owed-0", "owed", 0))
    h.add_pods(pod("urgent", "lend", 100))
    settle(h)
    assert evicted(h) == []
    assert "queue lend would exceed its max nvidia.com/gpu" in h.message("urgent")


def test_a_queue_at_its_guarantee_and_max_preempts_inside_while_another_queue_waits() -> None:
    # team's guarantee is its max (2) and it is there; owed (guarantee 2) waits on a full
    # cluster. Taking one of team's pods leaves team within its guarantee: the borrowing
    # rule has nothing to say, and the max alone held the pod.
    h = harness(nodes=1, gpus=4, reclaim_delay=3600)
    queues = [
        capped("team", 2, guaranteed={GPU: 2}),
        queue("lend"),
        queue("owed", guaranteed={GPU: 2}),
    ]
    assert h.scheduler.apply_queues(queues) == []
    h.add_pods(pod("team-0", "team", 0), pod("team-1", "team", 0))
    h.add_pods(pod("lend-0", "lend", 0), pod("lend-1", "lend", 0))
    h.run()
    h.add_pods(pod("owed-0", "owed", 0))
    h.add_pods(pod("urgent", "team", 100))
    settle(h)
    assert len(evicted(h)) == 1 and evicted(h)[0] in {"team-0", "team-1"}
    assert "urgent" in placed(h)
    assert "owed-0" not in placed(h)  # lend's pods are reclaim's to take, after its delay


def test_a_namespace_limit_is_not_made_room_under_by_preemption() -> None:
    h = harness()
    binding = decode(
        {
            "metadata": {"name": "lab"},
            "spec": {"queue": "team", "namespaces": ["lab"], "maxPods": 2},
        },
        QueueBinding,
    )
    assert h.scheduler.apply_queues([capped("team", 4)], bindings=[binding]) == []
    h.add_pods(*(make_pod(f"low-{i}", "lab").req({GPU: 1}, cpu="1") for i in range(2)))
    h.run()
    h.add_pods(make_pod("high", "lab").req({GPU: 1}, cpu="1").priority(100))
    settle(h)
    assert evicted(h) == []
    assert "QueueBinding lab: namespace lab already runs 2 pods" in h.message("lab/high")


def test_the_quota_freed_for_a_preemptor_is_held_against_lower_priority_pods() -> None:
    h = cluster()
    h.effects.hold_evictions = True  # the test plays the kubelet
    h.add_pods(pod("low-0", "team", 0), pod("low-1", "team", 0))
    h.run()
    h.advance(5)
    h.add_pods(*(pod(f"wait-{i}", "team", 0) for i in range(3)))
    h.run()
    h.advance(5)  # past their backoff: they retry as soon as quota seems free
    h.add_pods(pod("high", "team", 100))
    h.run()
    (victim,) = [e.pod for e in h.effects.evictions]
    h.delete_pod(victim)  # gone: the preemptor is woken, not yet tried
    # A waiting pod of the queue tried before the preemptor's retry is told the room
    # is held, and does not take it.
    (wait_0,) = [
        p.pod.uid for p in h.scheduler.scheduling_queue.pending() if p.pod.name == "wait-0"
    ]
    result = h.scheduler.attempt(wait_0)
    assert result is not None and result.node is None
    assert "(+1 held for nominated pods of higher or equal priority)" in result.message
    settle(h)
    # One eviction: the waiting pods did not take the victim's quota (each would have
    # been preempted in turn, a livelock with a controller re-creating them).
    assert len(h.effects.evictions) == 1
    assert "high" in placed(h)
    assert not {"wait-0", "wait-1", "wait-2"} & placed(h)


def test_no_eviction_loop_when_a_controller_re_creates_the_victims() -> None:
    # Three queues at their max; high-priority pods arrive over time in two of them,
    # every evicted pod is re-created under a new name at once (as a Deployment's
    # ReplicaSet does), and lower-priority pods keep waiting in each queue. Evictions
    # are exactly the room the high-priority pods need, and then stop for good.
    h = harness(nodes=3, gpus=4)
    queues = [capped("a", 3), capped("b", 3), capped("c", 2, guaranteed={GPU: 2})]
    assert h.scheduler.apply_queues(queues) == []
    h.add_pods(*(pod(f"a-{i}", "a", 0) for i in range(3)))
    h.add_pods(*(pod(f"b-{i}", "b", 1) for i in range(3)))
    h.add_pods(*(pod(f"c-{i}", "c", 0) for i in range(2)))
    h.add_pods(pod("a-wait", "a", 0), pod("b-wait", "b", 1))
    h.run()
    seen: set[str] = set()
    generation = 0

    def recreate() -> None:
        nonlocal generation
        for key in list(h.evicted):
            if key in seen:
                continue
            seen.add(key)
            generation += 1
            name = key.split("/", 1)[1]
            q, prio = name[0], 1 if name.startswith("b") else 0
            h.add_pods(pod(f"{q}-again-{generation}", q, prio))

    for minute in range(30):
        if minute in (2, 5, 9):
            h.add_pods(pod(f"a-high-{minute}", "a", 100), pod(f"b-high-{minute}", "b", 50))
        for _ in range(6):
            recreate()
            h.advance(10)
    # Three high-priority pods per queue, one victim each.
    assert len(h.evicted) == 6
    assert all(e.removeprefix("default/")[0] in "ab" for e in h.evicted)
    assert all(reason.startswith("preempted by") for reason in h.evicted.values())
    highs = {f"{q}-high-{m}" for q in "ab" for m in (2, 5, 9)}
    assert highs <= placed(h)
    quiet_since = max(e.time for e in h.events if e.kind == "evicted")
    assert h.clock.now() - quiet_since > 20 * 60
