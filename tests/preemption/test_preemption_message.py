"""When preemption cannot help, the pod's message says why node by node, in the words
kube-scheduler v1.36 uses (its preemption FitError, appended after "preemption:"):

* "Preemption is not helpful for scheduling": the pod failed there in a way removing
  pods cannot fix (UnschedulableAndUnresolvable: taints, node affinity, a request above
  what the node has at all, ...);
* "No preemption victims found for incoming pod": nothing of lower priority runs there;
* otherwise the Filter reasons the pod still fails with once every pod it may take is
  gone from the node (kube's SelectVictimsOnNode re-runs the filters without them).

Before, a pod with no lower-priority pod anywhere said nothing about preemption, and a
failed search said only "removing lower-priority pods would not make room".
"""

from __future__ import annotations

from shoal.testing import SchedulerHarness, make_node, make_pod

HOSTNAME = "kubernetes.io/hostname"


def test_each_node_says_why_preemption_cannot_help() -> None:
    h = SchedulerHarness()
    h.add_nodes(
        make_node("busy").hostname_label().capacity(cpu="4", memory="8Gi"),
        make_node("small").hostname_label().capacity(cpu="2", memory="8Gi"),
        make_node("tainted").hostname_label().capacity(cpu="8", memory="8Gi").taint("k", "v"),
        make_node("full").hostname_label().capacity(cpu="4", memory="8Gi"),
    )
    h.add_pods(
        make_pod("low").req(cpu="1").priority(0).node("busy"),
        make_pod("high").req(cpu="3").priority(100).node("busy"),
        make_pod("peer").req(cpu="2").priority(100).node("full"),
    )
    h.add_pods(make_pod("p").req(cpu="3").priority(10))
    placements, messages = h.advance(30)
    assert placements["default/p"] is None and h.evicted == {}
    # busy: without "low" still too little cpu; full: nothing of lower priority; small:
    # 3 cpu is more than it has at all, and tainted: the taint, both beyond eviction.
    assert messages["default/p"] == (
        "0/4 nodes are available: 1 node(s) had untolerated taint(s), 3 Insufficient cpu."
        " preemption: 0/4 nodes are available: 1 Insufficient cpu, 1 No preemption victims "
        "found for incoming pod, 2 Preemption is not helpful for scheduling."
    )


def test_the_reason_is_the_filter_that_still_fails_with_the_victims_gone() -> None:
    """Evicting "batch" would free the cpu, but web's anti-affinity to "db" (which it may
    not preempt) still fails: kube names that filter, not the cpu it failed on first."""
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").hostname_label().capacity(cpu="4", memory="8Gi"))
    h.add_pods(
        make_pod("db").labels(app="db").req(cpu="1").priority(1000).node("n1"),
        make_pod("batch").req(cpu="3").priority(0).node("n1"),
    )
    h.add_pods(
        make_pod("web").req(cpu="2").priority(500).pod_anti_affinity_in("app", ["db"], HOSTNAME)
    )
    placements, messages = h.advance(30)
    assert placements["default/web"] is None and h.evicted == {}
    assert messages["default/web"] == (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
        "1 node(s) didn't match pod anti-affinity rules."
    )


def test_a_pod_whose_priority_is_no_higher_than_anyones_says_so_everywhere() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="1", memory="1Gi") for i in range(3)))
    h.add_pods(*(make_pod(f"run{i}").req(cpu="1").node(f"n{i}") for i in range(3)))
    h.add_pods(make_pod("p").req(cpu="1"))
    placements, messages = h.advance(10)
    assert placements["default/p"] is None
    assert messages["default/p"] == (
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: "
        "3 No preemption victims found for incoming pod."
    )


def test_preemption_policy_never_is_named_instead() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n").capacity(cpu="1", memory="1Gi"))
    h.add_pods(make_pod("low").req(cpu="1").priority(0).node("n"))
    h.add_pods(make_pod("p").req(cpu="1").priority(10).preemption_policy("Never"))
    placements, messages = h.advance(10)
    assert placements["default/p"] is None and h.evicted == {}
    assert messages["default/p"] == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "preemption: not eligible due to preemptionPolicy=Never."
    )
