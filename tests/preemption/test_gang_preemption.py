"""Job-level preemption: a high-priority gang that fits nowhere preempts lower-priority
pods across several nodes in one decision (Volcano's preempt action over a Statement),
or, when even preempting everything it may cannot make room, preempts nothing.

Before core v2 a gang's members never ran PostFilter, so a gang waited forever behind
lower-priority pods."""

from __future__ import annotations

from collections import Counter

from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import PodBuilder

GPU = "nvidia.com/gpu"
LIGHT_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LIGHT_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"


def member(group: str, i: int, size: int, gpus: int, priority: int) -> PodBuilder:
    return (
        make_pod(f"{group}-{i}")
        .namespace("ml")
        .labels({LIGHT_NAME: group, LIGHT_MIN: str(size)})
        .req({GPU: gpus}, cpu="1")
        .priority(priority)
    )


def filled_cluster(nodes: int = 4, gpus: int = 4, priority: int = 0) -> SchedulerHarness:
    """`nodes` nodes of `gpus` GPUs, every GPU held by a 1-GPU pod of `priority`."""
    h = SchedulerHarness()
    h.add_nodes(
        *(make_node(f"n{i}").capacity({GPU: gpus}, cpu="32", memory="64Gi") for i in range(nodes))
    )
    h.add_pods(
        *(
            make_pod(f"low-{i}").req({GPU: 1}, cpu="1").priority(priority)
            for i in range(nodes * gpus)
        )
    )
    placements, _ = h.run()
    assert all(placements.values())
    return h


def test_gang_preempts_exactly_enough_across_nodes_in_one_decision() -> None:
    h = filled_cluster()
    # Three members of 3 GPUs each: no node has room, each needs most of a node.
    h.add_pods(*(member("train", i, 3, gpus=3, priority=100) for i in range(3)))
    h.run()

    # One decision: 9 victims (3 per node on three nodes), all evicted at the same
    # instant, before any member binds, each naming a member of the gang.
    evictions = [e for e in h.events if e.kind == "evicted"]
    assert len(evictions) == 9 == len(h.evicted)
    assert len({e.time for e in evictions}) == 1
    per_node = Counter(e.node for e in evictions)
    assert sorted(per_node.values()) == [3, 3, 3]
    assert all(
        reason.startswith("preempted by ml/train-") and "(priority 100 > 0)" in reason
        for reason in h.evicted.values()
    )
    first_bind = min(
        (i for i, e in enumerate(h.events) if e.kind == "bound" and e.pod.startswith("ml/")),
        default=len(h.events),
    )
    assert first_bind > max(i for i, e in enumerate(h.events) if e.kind == "evicted")

    # Lower-priority pods arriving while the members wait do not take the room the
    # members are nominated to.
    h.add_pods(*(make_pod(f"late-{i}").req({GPU: 1}, cpu="1").priority(0) for i in range(9)))
    placements, messages = h.advance(30)
    members = {k: v for k, v in placements.items() if k.startswith("ml/")}
    assert all(members.values()), messages
    assert not any(v for k, v in placements.items() if k.startswith("default/late-"))
    # Every member landed on a node it emptied, one member per node.
    assert sorted(members.values()) == sorted(per_node)
    # Nothing else was touched: the fourth node keeps its four pods, and the one
    # low-priority pod left on each emptied node stays.
    assert len(h.evicted) == 9
    for node in per_node:
        assert len(h.pods_on(node)) == 2
    untouched = ({"n0", "n1", "n2", "n3"} - set(per_node)).pop()
    assert len(h.pods_on(untouched)) == 4


def test_gang_that_cannot_fit_even_by_preempting_everything_preempts_nothing() -> None:
    h = filled_cluster()
    # Five members of 4 GPUs on four 4-GPU nodes: no set of victims is enough.
    h.add_pods(*(member("huge", i, 5, gpus=4, priority=100) for i in range(5)))
    placements, messages = h.advance(120)
    assert h.evicted == {}
    assert not [e for e in h.events if e.kind == "evicted"]
    assert all(node is None for key, node in placements.items() if key.startswith("ml/"))
    assert all(node is not None for key, node in placements.items() if key.startswith("default/"))
    assert messages["ml/huge-0"].startswith("gang ml/huge: 4/5 members placeable")


def test_gang_blocked_by_higher_priority_pods_on_some_nodes_preempts_nothing() -> None:
    """Room for two members can be made by preemption, but the third member's room is
    held by pods of higher priority than the gang: the minimum cannot be reached, so
    nothing is evicted (the victims chosen for the first two are put back)."""
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity({GPU: 4}, cpu="32", memory="64Gi") for i in range(3)))
    h.add_pods(
        *(
            make_pod(f"low-{i}").req({GPU: 2}, cpu="1").priority(0).node(f"n{i // 2}")
            for i in range(4)
        ),
        *(make_pod(f"vip-{i}").req({GPU: 2}, cpu="1").priority(1000).node("n2") for i in range(2)),
    )
    h.add_pods(*(member("train", i, 3, gpus=4, priority=100) for i in range(3)))
    placements, messages = h.advance(120)
    assert h.evicted == {}
    assert all(node is None for key, node in placements.items() if key.startswith("ml/"))
    assert messages["ml/train-0"].startswith("gang ml/train: 2/3 members placeable")
