"""SchedulingGates: a gated pod stays out of the active queue until an update removes
every gate (schedulinggates/scheduling_gates_test.go + queue behaviour)."""

from __future__ import annotations

from shoal.framework.status import Code
from shoal.plugins.scheduling_gates import SchedulingGates
from shoal.testing import SchedulerHarness, make_node, make_pod


def test_pre_enqueue() -> None:
    plugin = SchedulingGates()
    assert plugin.pre_enqueue(make_pod("p").info()).ok
    status = plugin.pre_enqueue(make_pod("p").scheduling_gates("foo", "bar").info())
    assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message == "waiting for scheduling gates: [foo bar]"


def test_gated_pod_waits_for_its_gates_to_be_removed() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n").capacity(cpu="4"))
    h.add_pods(make_pod("gated").req(cpu="1").scheduling_gates("example.com/quota"))
    placements, messages = h.run()
    assert placements == {"default/gated": None}
    assert messages == {
        "default/gated": "pod is gated by SchedulingGates: waiting for scheduling gates: "
        "[example.com/quota]"
    }
    assert h.scheduler.scheduling_queue.counts()["gated"] == 1
    assert not h.cycles  # never attempted

    # Unrelated cluster events do not wake a gated pod.
    h.add_nodes(make_node("n2").capacity(cpu="4"))
    assert h.run().placements == {"default/gated": None}

    # Removing one of two gates is not enough; removing all of them is.
    h.update_pod(make_pod("gated").req(cpu="1").scheduling_gates("a", "b"))
    assert h.run().placements == {"default/gated": None}
    h.update_pod(make_pod("gated").req(cpu="1").scheduling_gates("b"))
    assert h.run().placements == {"default/gated": None}
    h.update_pod(make_pod("gated").req(cpu="1"))
    placements, messages = h.run()
    assert placements["default/gated"] in ("n", "n2") and messages == {}
    assert h.scheduler.scheduling_queue.counts() == {
        "active": 0,
        "backoff": 0,
        "unschedulable": 0,
        "gated": 0,
    }
