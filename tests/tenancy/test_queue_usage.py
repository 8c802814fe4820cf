"""Queue usage is charged to pods, not node rows: a node that drops out of the cache for
a while does not make its pods' usage disappear."""

from __future__ import annotations

from shoal.testing import make_node, make_pod

from .helpers import harness, queue


def test_max_holds_while_a_node_is_missing_from_the_cache() -> None:
    h = harness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="4", memory="16Gi") for i in (1, 2)))
    assert h.scheduler.apply_queues([queue("q", max={"cpu": 1})]) == []
    pod = lambda name: make_pod(name).labels({"shoal.dev/queue": "q"}).req(cpu="1")  # noqa: E731
    h.add_pods(pod("p1").node("n1"))
    queues = h.scheduler.tenant_queues
    q, cpu = queues.tree.index["q"], queues.tree.resource_index["cpu"]
    assert queues.usage[q, cpu] == 1000
    n1 = h.scheduler.cluster.node("n1")
    assert n1 is not None
    h.delete_node("n1")
    assert queues.usage[q, cpu] == 1000
    h.add_pods(pod("p2"))
    h.run()
    assert h.node_of("p2") is None
    assert "queue q would exceed its max cpu: uses 1, pod asks 1, max 1" in h.message("p2")
    h.add_nodes(n1)
    h.run()
    assert queues.usage[q, cpu] == 1000
    assert h.node_of("p2") is None
    h.delete_pod("p1")
    assert queues.usage[q, cpu] == 0
    h.advance(10)  # past p2's backoff
    assert h.node_of("p2") is not None
    assert queues.usage[q, cpu] == 1000
