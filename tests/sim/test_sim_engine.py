"""The event loop: arrivals, finishing pods, node events, cycle cost, --until."""

from __future__ import annotations

import pytest
from simhelpers import by_name, docs, node_yaml, pod_yaml, run

from shoal.sim import PodState


def test_pod_that_did_not_fit_fits_after_another_finishes(scenario):
    sc = scenario(
        node_yaml("n1", cpu="4"),
        docs(
            pod_yaml("first", cpu="3", arrival=0, duration=100),
            pod_yaml("second", cpu="3", arrival=10, duration=50),
        ),
    )
    result = run(sc)
    first, second = by_name(result)["first"], by_name(result)["second"]
    assert (first.state, first.bound_at, first.finished_at) == (PodState.FINISHED, 0.0, 100.0)
    assert second.state is PodState.FINISHED
    assert second.node == "n1"
    assert second.bound_at == 100.0  # woken by the deletion, not by a timer
    assert second.time_to_schedule == 90.0
    assert second.finished_at == 150.0
    assert second.attempts == 2
    s = result.summary
    assert (s.scheduled, s.finished, s.pending) == (2, 2, 0)
    assert s.tts_max == 90.0
    assert s.end_time == 150.0
    # 3 of 4 cpu requested for the whole run, none at the end.
    assert s.utilisation_mean["cpu"] == pytest.approx(0.75)
    assert s.utilisation_end["cpu"] == 0.0


def test_utilisation_is_time_weighted_up_to_until(scenario):
    sc = scenario(node_yaml("n1", cpu="4"), pod_yaml("half", cpu="2", duration=100))
    s = run(sc, until=400).summary
    assert s.end_time == 400.0
    assert s.stop_reason == "no events left, idle until --until"
    assert s.utilisation_mean["cpu"] == pytest.approx(0.5 * 100 / 400)


def test_unschedulable_pod_is_reported_with_the_schedulers_explanation(scenario):
    sc = scenario(node_yaml("n1", cpu="4"), docs(pod_yaml("huge", cpu="64"), pod_yaml("ok")))
    result = run(sc)  # must end by itself: nothing can change any more
    huge = by_name(result)["huge"]
    assert huge.state is PodState.PENDING
    assert huge.message == (
        "0/1 nodes are available: 1 Insufficient cpu."
        " preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
    assert huge.bound_at is None and huge.node == ""
    assert result.summary.pending == 1
    assert result.summary.stop_reason == "no events left"


def test_pending_pods_are_retried_while_the_cluster_still_changes(scenario):
    # "huge" never fits; it stays pending with attempts from the queue's periodic flush
    # (every 300 s) while later arrivals keep the run going.
    sc = scenario(
        node_yaml("n1", cpu="4"),
        docs(pod_yaml("huge", cpu="64"), pod_yaml("late", arrival=1000)),
    )
    result = run(sc)
    assert by_name(result)["huge"].attempts > 2
    assert result.summary.end_time == 1000.0


def test_node_added_later_takes_waiting_pods(scenario):
    workload = """\
        apiVersion: sim.shoal.dev/v1alpha1
        kind: Workload
        metadata: {name: scale-up}
        spec:
          nodeEvents:
          - at: 50
            add:
              metadata: {name: n2}
              status: {allocatable: {cpu: "8", memory: 16Gi, pods: "110"}}
        """
    sc = scenario(node_yaml("n1", cpu="1"), workload, pod_yaml("big", cpu="4"))
    big = by_name(run(sc))["big"]
    assert (big.node, big.bound_at, big.time_to_schedule) == ("n2", 50.0, 50.0)


def test_node_removed_evicts_its_running_pods(scenario):
    workload = """\
        apiVersion: sim.shoal.dev/v1alpha1
        kind: Workload
        metadata: {name: scale-down}
        spec:
          nodeEvents:
          - {at: 100, remove: n1}
          - {at: 120, remove: no-such-node}
        """
    sc = scenario(node_yaml("n1"), workload, pod_yaml("victim", duration=500))
    result = run(sc)
    victim = by_name(result)["victim"]
    assert victim.state is PodState.EVICTED
    assert victim.finished_at == 100.0  # its finish event at 500 is ignored
    assert "node n1 was removed" in victim.message
    assert result.summary.evicted == 1
    assert result.summary.end_time == 120.0
    assert any("no-such-node" in w for w in result.warnings)


def test_cycle_seconds_charges_each_scheduling_cycle(scenario):
    sc = scenario(node_yaml("n1"), docs(*(pod_yaml(f"p{i}") for i in range(3))))
    bound = [r.bound_at for r in run(sc, cycle_seconds=0.5).records]
    assert bound == [0.5, 1.0, 1.5]
    assert [r.bound_at for r in run(sc).records] == [0.0, 0.0, 0.0]


def test_until_stops_before_later_arrivals(scenario):
    sc = scenario(node_yaml("n1"), docs(pod_yaml("now"), pod_yaml("later", arrival=500)))
    result = run(sc, until=100)
    assert [r.name for r in result.records] == ["now"]
    assert result.summary.not_arrived == 1
    assert result.records[0].state is PodState.RUNNING


def test_pod_with_node_name_is_already_bound_and_uses_resources(scenario):
    prebound = """\
        apiVersion: v1
        kind: Pod
        metadata: {name: static}
        spec:
          nodeName: n1
          containers: [{name: c, resources: {requests: {cpu: "3"}}}]
        """
    sc = scenario(node_yaml("n1", cpu="4"), prebound, pod_yaml("other", cpu="2"))
    result = run(sc)
    static, other = by_name(result)["static"], by_name(result)["other"]
    assert static.state is PodState.RUNNING and static.node == "n1"
    assert static.attempts == 0
    assert other.state is PodState.PENDING
    assert result.summary.scheduled == 0  # nothing was placed by the scheduler


def test_pod_for_another_scheduler_stays_pending_with_a_reason(scenario):
    pod = """\
        apiVersion: v1
        kind: Pod
        metadata: {name: foreign}
        spec: {schedulerName: volcano, containers: [{name: c}]}
        """
    record = by_name(run(scenario(node_yaml("n1"), pod)))["foreign"]
    assert record.state is PodState.PENDING
    assert "volcano" in record.message


GANG = """\
    apiVersion: scheduling.x-k8s.io/v1alpha1
    kind: PodGroup
    metadata: {name: trainer}
    spec: {minMember: 3}
    ---
    apiVersion: sim.shoal.dev/v1alpha1
    kind: Workload
    metadata: {name: gangs}
    spec:
      pods:
      - name: trainer
        count: 3
        interval: 10
        duration: 100
        template:
          metadata:
            labels: {scheduling.x-k8s.io/pod-group: trainer}
          spec:
            containers: [{name: c, resources: {requests: {cpu: "3"}}}]
      - name: too-big
        count: 4
        arrival: 200
        template:
          metadata:
            labels:
              pod-group.scheduling.sigs.k8s.io/name: big
              pod-group.scheduling.sigs.k8s.io/min-available: "4"
          spec:
            containers: [{name: c, resources: {requests: {cpu: "3"}}}]
    """


def test_gangs_start_together_or_not_at_all(scenario):
    sc = scenario(docs(*(node_yaml(f"n{i}", cpu="4") for i in range(3))), GANG)
    assert len(sc.pod_groups) == 1
    records = by_name(run(sc))
    trainers = [records[f"trainer-{i}"] for i in range(3)]
    assert {r.bound_at for r in trainers} == {20.0}  # when the last member arrived
    assert [r.time_to_schedule for r in trainers] == [20.0, 10.0, 0.0]
    assert all(r.attempts >= 1 for r in trainers)
    big = [records[f"too-big-{i}"] for i in range(4)]
    assert {r.state for r in big} == {PodState.PENDING}
    assert all(r.message.startswith("gang default/big:") for r in big)
    assert "Insufficient cpu" in big[0].message


def test_a_pod_bound_by_node_name_beyond_the_nodes_room_is_refused_by_its_kubelet(scenario):
    """kubelet admission: a pod whose spec.nodeName names a node without room for it
    fails (OutOfcpu) and one naming no node never runs. Before, the simulator ran them:
    a 64-cpu pod on a 4-cpu node "ran" (cpu use 1600 %) and kept every other pod off
    the node."""
    bound_big = pod_yaml("big", cpu="64", arrival=0).replace(
        "spec:\n", "spec:\n  nodeName: n1\n", 1
    )
    bound_nowhere = pod_yaml("lost", cpu="1", arrival=0).replace(
        "spec:\n", "spec:\n  nodeName: no-such-node\n", 1
    )
    sc = scenario(
        node_yaml("n1", cpu="4"),
        docs(bound_big, bound_nowhere, pod_yaml("good", cpu="1", arrival=1)),
    )
    result = run(sc)
    pods = by_name(result)
    assert pods["big"].state is PodState.REFUSED
    assert pods["big"].message == (
        "OutOfcpu: refused by node n1's kubelet: Node didn't have enough resource: cpu, "
        "requested: 64000, used: 0, capacity: 4000"
    )
    assert pods["lost"].state is PodState.REFUSED
    assert "names no node" in pods["lost"].message
    assert pods["good"].state is PodState.RUNNING and pods["good"].node == "n1"
    assert result.summary.refused == 2
    assert result.summary.utilisation_end["cpu"] == 0.25
