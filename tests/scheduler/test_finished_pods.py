"""Pods that have run to completion (phase Succeeded or Failed) hold nothing.

A cluster snapshot (or an informer's first list) contains finished pods still bound to
their nodes; kube-scheduler ignores them. They must not count on the node, towards a
queue, or as a running gang member, while a finished gang member still counts for its
group's dependencies.
"""

from __future__ import annotations

from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.testing.builders import make_node, make_pod
from shoal.testing.harness import SchedulerHarness


def test_finished_pods_in_a_snapshot_hold_no_resources() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(
        make_pod("done").req(cpu="3").node("n1").phase("Succeeded"),
        make_pod("crashed").req(cpu="3").node("n1").phase("Failed"),
        make_pod("new").req(cpu="3"),
    )
    placements, messages = h.run()
    assert placements["default/new"] == "n1", messages
    assert h.pods_on("n1") == ["default/new"]


def test_a_pod_that_finishes_frees_its_node() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(make_pod("job").req(cpu="3").node("n1"), make_pod("next").req(cpu="3"))
    placements, _ = h.run()
    assert placements["default/next"] is None
    h.update_pod(make_pod("job").req(cpu="3").node("n1").phase("Succeeded"))
    placements, messages = h.advance(20)
    assert placements["default/next"] == "n1", messages
    assert h.pods_on("n1") == ["default/next"]


def test_finished_pods_do_not_count_towards_their_queue() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="8Gi"))
    queue = decode({"metadata": {"name": "team"}, "spec": {"max": {"cpu": "2"}}}, Queue)
    assert h.scheduler.apply_queues([queue]) == []
    labels = {"shoal.dev/queue": "team"}
    h.add_pods(
        make_pod("old").labels(labels).req(cpu="2").node("n1").phase("Succeeded"),
        make_pod("fresh").labels(labels).req(cpu="2"),
    )
    placements, messages = h.run()
    assert placements["default/fresh"] == "n1", messages
