"""Elastic gangs (minMember below the number of members: PyTorch elastic, Ray, Spark
dynamic allocation): the minimum starts atomically, the rest grow in as room appears,
and preemption takes the members above the minimum first, never leaving the gang
running below it."""

from __future__ import annotations

from shoal.testing import SchedulerHarness, make_node, make_pod

GANG = {
    "pod-group.scheduling.sigs.k8s.io/name": "el",
    "pod-group.scheduling.sigs.k8s.io/min-available": "2",
}


def running(h: SchedulerHarness) -> list[str]:
    """The gang's members the cache counts on a node (bound, not evicted)."""
    return [k for node in ("n0", "n1") for k in h.pods_on(node) if k.startswith("default/m")]


def test_the_minimum_starts_atomically_and_the_rest_grow_in() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n0").capacity(cpu="2", memory="8Gi"))
    h.add_pods(*(make_pod(f"m{i}").labels(GANG).req(cpu="1") for i in range(4)))
    h.advance(5)
    assert len(running(h)) == 2  # the minimum, on the room there is
    h.add_nodes(make_node("n1").capacity(cpu="2", memory="8Gi"))
    h.advance(30)
    assert len(running(h)) == 4  # grown into the new room


def test_a_preemptor_takes_members_above_the_minimum_first() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n0").capacity(cpu="4", memory="8Gi"))
    h.add_pods(*(make_pod(f"m{i}").labels(GANG).req(cpu="1") for i in range(4)))
    h.advance(5)
    assert len(running(h)) == 4
    h.add_pods(make_pod("one").req(cpu="1").priority(100))
    h.advance(10)
    assert h.node_of("one") == "n0"
    assert len(h.evicted) == 1  # one member above the minimum
    h.add_pods(make_pod("two").req(cpu="2").priority(100))
    h.advance(10)
    # Two more cpu: one member above the minimum is left, then the minimum itself
    # would be cut, so the whole rest of the gang goes (never below minMember).
    assert h.node_of("two") == "n0"
    assert sorted(h.evicted) == ["default/m0", "default/m1", "default/m2", "default/m3"]
