"""A pending pod's `status.nominatedNodeName` is a nomination, as kube-scheduler's
nominator reads it: a scheduler that starts (a restart, a failover, a new leader) with
a preemptor still waiting for its victims to go keeps its room held, instead of giving
it to a lower-priority pod and preempting again; a node another component suggests is
tried first; a nomination taken away in the API goes."""

from __future__ import annotations

from typing import Any

from shoal.api.manifests import decode
from shoal.api.objects import Pod
from shoal.testing import SchedulerHarness, make_node, make_pod


def pending(name: str, cpu: str, priority: int, nominated: str = "") -> Pod:
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {
            "priority": priority,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        },
    }
    if nominated:
        raw["status"] = {"nominatedNodeName": nominated}
    return decode(raw, Pod)


def terminating(name: str, cpu: str, node: str) -> Pod:
    """A victim the previous leader evicted, still going (its grace period)."""
    raw = {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": name,
            "deletionTimestamp": "2026-11-29T04:00:00Z",
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": "Running"},
    }
    return decode(raw, Pod)


def test_a_new_leader_keeps_holding_the_room_a_preemption_freed() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="4"))
    # What a new leader reads: the victim still terminating on n1, the preemptor waiting
    # for n1 (nominated there by the previous leader), and a low-priority pod.
    h.add_pods(terminating("victim", "3", "n1"))
    h.add_pods(pending("preemptor", "3", 100, nominated="n1"), pending("low", "1", 0))
    placements = h.run().placements
    # 1 cpu is free on n1, but the preemptor's 3 are held for it: the low pod waits.
    assert placements["default/preemptor"] is None
    assert placements["default/low"] is None
    assert h.effects.evictions == []  # nobody preempted again
    h.delete_pod("victim")
    placements = h.advance(30).placements
    assert placements["default/preemptor"] == "n1"
    assert placements["default/low"] == "n1"


def test_without_the_nomination_the_low_pod_takes_the_room() -> None:
    # The same cluster where the preemptor names no node: nothing holds the free cpu.
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="4"))
    h.add_pods(terminating("victim", "3", "n1"))
    h.add_pods(pending("preemptor", "3", 100), pending("low", "1", 0))
    assert h.run().placements["default/low"] == "n1"


def test_a_suggested_node_is_tried_first_and_a_removed_nomination_goes() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="4") for i in range(3)))
    # Another component suggests n2 for this pod (kube's NominatedNodeName for
    # expectation): it is placed there although the nodes are equal.
    h.add_pods(pending("suggested", "1", 0, nominated="n2"))
    assert h.run().placements["default/suggested"] == "n2"
    # A nomination read from the API, then taken away there, no longer holds room.
    h.add_pods(pending("holder", "8", 100, nominated="n1"))
    assert h.scheduler.cluster.nominations["holder"][0] == "n1"
    h.update_pod(pending("holder", "8", 100))
    assert "holder" not in h.scheduler.cluster.nominations
    # Once bound, a pod holds real room and no nomination.
    h.add_pods(pending("going", "1", 0, nominated="n0"))
    h.update_pod(make_pod("going").uid("going").node("n1").req(cpu="1").obj())
    assert "going" not in h.scheduler.cluster.nominations
