"""PrioritySort: higher priority first, then earlier arrival (queuesort/priority_sort_test.go),
and the queue honours it."""

from __future__ import annotations

import pytest

from shoal.plugins.priority_sort import PrioritySort
from shoal.testing import SchedulerHarness, make_node, make_pod


@pytest.mark.parametrize(
    ("p1", "p2", "expected"),
    [
        ((1, 0.0), (2, 0.0), False),  # p1.priority less than p2.priority
        ((2, 0.0), (1, 0.0), True),  # p1.priority greater than p2.priority
        ((1, 1.0), (1, 2.0), True),  # equal priority, p1 added earlier
        ((1, 2.0), (1, 1.0), False),  # equal priority, p2 added earlier
        ((-5, 0.0), (0, 9.0), False),  # negative priorities sort last
    ],
)
def test_less(p1: tuple[int, float], p2: tuple[int, float], expected: bool) -> None:
    sort = PrioritySort()
    a = make_pod("a").priority(p1[0]).info(timestamp=p1[1])
    b = make_pod("b").priority(p2[0]).info(timestamp=p2[1])
    assert sort.less(a, b) is expected
    assert (sort.sort_key(a) < sort.sort_key(b)) is expected  # the key agrees with less


def test_queue_pops_by_priority_then_arrival() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n").capacity(cpu="100"))
    h.add_pods(make_pod("low").priority(1))
    h.clock.advance_to(1.0)
    h.add_pods(make_pod("high-late").priority(10))
    h.add_pods(make_pod("mid").priority(5))
    h.clock.advance_to(2.0)
    h.add_pods(make_pod("high-later").priority(10), make_pod("none"))
    h.run()
    order = [c.pod.name for c in h.cycles]
    assert order == ["high-late", "high-later", "mid", "low", "none"]


def test_priority_class_sets_priority_at_admission() -> None:
    from shoal.api.objects import ObjectMeta, PriorityClass

    h = SchedulerHarness()
    h.scheduler.add_priority_class(PriorityClass(metadata=ObjectMeta(name="high"), value=1000))
    h.scheduler.add_priority_class(
        PriorityClass(metadata=ObjectMeta(name="default"), value=7, global_default=True)
    )
    a, b, c = h.add_pods(
        make_pod("a").priority_class("high"),
        make_pod("b"),
        make_pod("c").priority_class("missing"),
    )
    assert (a.priority, b.priority, c.priority) == (1000, 7, 0)
