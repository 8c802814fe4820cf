"""Queue usage is what is bound in the cluster, whatever order objects arrive in: a
running pod that reaches the scheduler before its Queue is charged the moment the Queue
exists, and again after the Queue is deleted and re-created (issue "Core v3", defect 1)."""

from __future__ import annotations

from shoal.testing import make_node, make_pod

from .helpers import harness, queue


def test_running_pod_added_before_its_queue_is_charged_when_the_queue_arrives() -> None:
    h = harness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="16Gi"))
    h.add_pods(make_pod("running").labels({"shoal.dev/queue": "team"}).req(cpu="500m").node("n1"))
    assert h.scheduler.apply_queues([queue("team", max={"cpu": 1})]) == []
    queues = h.scheduler.tenant_queues
    q, cpu = queues.tree.index["team"], queues.tree.resource_index["cpu"]
    assert queues.usage[q, cpu] == 500
    h.add_pods(make_pod("big").labels({"shoal.dev/queue": "team"}).req(cpu="1"))
    h.run()
    assert h.node_of("big") is None
    assert "queue team would exceed its max cpu" in h.message("big")


def test_queue_deleted_and_recreated_charges_its_running_pods_again() -> None:
    h = harness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="16Gi"))
    assert h.scheduler.apply_queues([queue("team", max={"cpu": 1})]) == []
    h.add_pods(make_pod("running").labels({"shoal.dev/queue": "team"}).req(cpu="500m").node("n1"))
    queues = h.scheduler.tenant_queues
    assert h.scheduler.apply_queues(deleted_queues=["team"]) == []
    assert "team" not in queues.tree.index
    assert h.scheduler.apply_queues([queue("team", max={"cpu": 1})]) == []
    q, cpu = queues.tree.index["team"], queues.tree.resource_index["cpu"]
    assert queues.usage[q, cpu] == 500
    h.add_pods(make_pod("big").labels({"shoal.dev/queue": "team"}).req(cpu="1"))
    h.run()
    assert h.node_of("big") is None
