"""Requeueing after cluster events (kube's QueueingHint-free EnqueueExtensions path):
an unschedulable pod is moved back by an event its rejecting plugin registered for, and
left alone by unrelated ones."""

from __future__ import annotations

from shoal.framework.status import Code, Status
from shoal.framework.types import ActionType, ClusterEvent, EventResource
from shoal.scheduling_queue.queue import SchedulingQueue
from shoal.testing import SchedulerHarness, make_node, make_pod


def _counts(h: SchedulerHarness) -> dict[str, int]:
    return h.scheduler.scheduling_queue.counts()


def test_node_add_moves_an_insufficient_pod_back() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("small").capacity(cpu="1"))
    h.add_pods(make_pod("big").req(cpu="2"))
    assert h.run().messages == {
        "default/big": "0/1 nodes are available: 1 Insufficient cpu."
        " preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    }
    assert _counts(h)["unschedulable"] == 1
    entry = h.scheduler.scheduling_queue.get("default/big")
    assert entry is not None and entry.rejected_by == frozenset({"NodeResourcesFit"})

    # Unrelated for NodeResourcesFit: a pod getting bound somewhere (AssignedPod/Add).
    h.add_pods(make_pod("other").node("small"))
    assert _counts(h)["unschedulable"] == 1

    # Matching: a node is added. The pod's 1 s backoff has not expired: backoffQ first.
    h.add_nodes(make_node("large").capacity(cpu="4"))
    assert _counts(h) == {"active": 0, "backoff": 1, "unschedulable": 0, "gated": 0}
    assert h.run().placements["default/big"] is None
    assert h.advance(1.0).placements["default/big"] == "large"


def test_assigned_pod_delete_moves_the_pod_back() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n").capacity(cpu="2"))
    h.add_pods(make_pod("hog").node("n").req(cpu="2"), make_pod("p").req(cpu="1"))
    h.run()
    assert _counts(h)["unschedulable"] == 1
    h.clock.advance_to(5.0)  # past the backoff
    h.delete_pod("hog")
    assert _counts(h)["active"] == 1
    assert h.run().placements == {"default/p": "n"}


def test_taint_rejection_ignores_pod_events_but_not_node_updates() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n").capacity(cpu="2").taint("dedicated", "x"))
    h.add_pods(make_pod("p").req(cpu="1"), make_pod("bound").node("n").req(cpu="1"))
    h.run()
    assert h.message("p") == (
        "0/1 nodes are available: 1 node(s) had untolerated taint(s)."
        " preemption: 0/1 nodes are available: 1 Preemption is not helpful for "
        "scheduling."
    )
    h.clock.advance_to(5.0)
    h.delete_pod("bound")  # AssignedPod/Delete: TaintToleration did not register it
    assert _counts(h)["unschedulable"] == 1
    h.update_node(make_node("n").capacity(cpu="2"))  # the taint is removed
    assert _counts(h)["active"] == 1
    assert h.run().placements["default/p"] == "n"


def test_long_unschedulable_pods_are_retried_anyway() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n").capacity(cpu="1"))
    h.add_pods(make_pod("p").req(cpu="2"))
    h.run()
    attempts = lambda: sum(1 for c in h.cycles if c.pod.name == "p")  # noqa: E731
    assert attempts() == 1
    h.advance(299.0)
    assert attempts() == 1
    h.advance(1.0)  # 300 s: kube's podMaxInUnschedulablePodsDuration
    assert attempts() == 2


def test_event_during_the_attempt_sends_the_pod_to_backoff() -> None:
    """kube's moveRequestCycle: an event while the pod was being scheduled may have made it
    schedulable, so it is not parked as unschedulable."""
    queue = SchedulingQueue(sort_key=lambda p: (p.timestamp,))
    pod = make_pod("p").info()
    queue.add(pod, now=0.0)
    entry = queue.pop()
    assert entry is not None
    queue.on_event(ClusterEvent(EventResource.NODE, ActionType.ADD), now=0.0)
    queue.requeue_unschedulable(entry, 0.0, frozenset({"X"}), Status(Code.UNSCHEDULABLE, "no"))
    assert queue.counts() == {"active": 0, "backoff": 1, "unschedulable": 0, "gated": 0}
    queue.flush(1.0)
    assert queue.counts()["active"] == 1


def test_plugin_without_registered_events_is_woken_by_any_event() -> None:
    queue = SchedulingQueue(sort_key=lambda p: (p.timestamp,), plugin_events={"Known": []})
    for name, rejector in (("a", "Known"), ("b", "Unknown")):
        queue.add(make_pod(name).info(), now=0.0)
        entry = queue.pop()
        assert entry is not None
        queue.requeue_unschedulable(
            entry, 0.0, frozenset({rejector}), Status(Code.UNSCHEDULABLE, "no")
        )
    assert queue.on_event(ClusterEvent(EventResource.NODE, ActionType.ADD), now=10.0) == 1
    assert [e.pod.name for e in queue.pending() if e.pod.uid in queue._unschedulable] == ["a"]


def test_deleted_pending_pod_leaves_the_queue() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n").capacity(cpu="1"))
    h.add_pods(make_pod("p").req(cpu="2"))
    h.run()
    h.delete_pod("p")
    assert _counts(h) == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
    assert h.run() == ({}, {})


def test_pods_of_other_schedulers_are_not_queued() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n").capacity(cpu="1"))
    h.add_pods(make_pod("theirs").scheduler_name("volcano"))
    assert _counts(h)["active"] == 0
    assert h.run().placements == {"default/theirs": None}
    assert not h.cycles
