"""A live cluster's state as simulator input: dumps (`kubectl get -o yaml`), snapshot files
(`shoal snapshot`) and documents read in memory (`--from-cluster`), with a proposed
change replayed on top."""

from __future__ import annotations

from typing import Any

from simhelpers import run

from shoal.sim import PodState, load_scenario
from shoal.sim.report import fold_lines, input_lines, record_row
from shoal.sim.scenario import SNAPSHOT_KIND

HEADER = {
    "apiVersion": "sim.shoal.dev/v1alpha1",
    "kind": SNAPSHOT_KIND,
    "metadata": {"name": "snapshot"},
    "spec": {"context": "prod", "takenAt": "2025-01-01T00:00:00Z"},
}


def node(name: str, cpu: str = "4") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"kubernetes.io/hostname": name},
        },
        "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}},
    }


def pod(
    name: str,
    cpu: str,
    *,
    node_name: str = "",
    phase: str = "",
    namespace: str = "default",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]
    }
    if node_name:
        spec["nodeName"] = node_name
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels or {}}
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if phase:
        out["status"] = {"phase": phase}
    return out


def queue(name: str, max_cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"max": {"cpu": max_cpu}},
    }


def kubectl_dump() -> str:
    """What `kubectl get nodes,pods -A -o yaml` prints (a List), with its noise."""
    import yaml

    items = [
        {**node("n1"), "metadata": {**node("n1")["metadata"], "managedFields": [{"manager": "k"}]}},
        pod("web", "1", node_name="n1", phase="Running"),
        pod("job-done", "2", node_name="n1", phase="Succeeded"),
        pod("job-failed", "1", node_name="n1", phase="Failed"),
        pod("never-ran", "1", phase="Failed"),  # failed before it was scheduled
        pod("waiting", "3", phase="Pending"),
    ]
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})


def test_a_dump_reports_succeeded_and_failed_pods_finished_holding_nothing(scenario):
    result = run(scenario(kubectl_dump()))
    by_name = {r.name: r for r in result.records}
    for name in ("job-done", "job-failed", "never-ran"):
        assert by_name[name].state is PodState.FINISHED, name
        assert "before the simulation started: holds no resources" in by_name[name].message
    assert by_name["job-done"].node == "n1" and by_name["never-ran"].node == ""
    # 4 cpu: web (1) + waiting (3) fit only if the finished pods hold nothing.
    assert by_name["web"].state is PodState.RUNNING and by_name["web"].node == "n1"
    assert by_name["waiting"].state is PodState.RUNNING and by_name["waiting"].node == "n1"
    summary = result.summary
    assert (summary.running, summary.finished, summary.pending) == (2, 3, 0)
    assert summary.utilisation_end["cpu"] == 1.0
    assert summary.scheduled == 1  # only `waiting` was placed by the scheduler
    # A plain dump is not marked as a cluster's state: no origin, no "from cluster" line.
    assert {record_row(r)["origin"] for r in result.records} == {"workload"}


def test_a_snapshot_file_is_the_clusters_state_and_the_report_says_so(tmp_path):
    import yaml

    snap = tmp_path / "snap.yaml"
    snap.write_text(
        yaml.safe_dump_all(
            [
                HEADER,
                node("n1"),
                pod("web", "1", node_name="n1", phase="Running"),
                pod("done", "3", node_name="n1", phase="Succeeded"),
                pod("waiting", "1", phase="Pending"),
            ]
        )
    )
    proposed = tmp_path / "proposed.yaml"
    proposed.write_text(yaml.safe_dump_all([pod("new", "2")]))
    sc = load_scenario([snap, proposed])
    assert sc.errors == []
    assert [p.origin for p in sc.pods] == ["cluster", "cluster", "cluster", ""]
    assert sc.origin_counts() == {
        "nodes": 1,
        "pods": 3,
        "bound": 1,
        "pending": 1,
        "finished": 1,
        "proposedNodes": 0,
        "proposedPods": 1,
    }
    lines = input_lines(sc)
    assert lines[0] == (
        "from cluster: 1 node, 3 pods (1 bound, 1 pending, 1 finished), read from "
        f"{snap} (context prod, taken at 2025-01-01T00:00:00Z)"
    )
    assert lines[1] == "proposed: 1 pod, 0 nodes"
    result = run(sc)
    rows = {r.name: record_row(r) for r in result.records}
    assert rows["web"]["origin"] == "cluster" and rows["new"]["origin"] == "workload"
    assert rows["web"]["node"] == "n1" and rows["web"]["bound_at"] == 0.0
    # Proposed pods only get the room left: 4 - web 1 - waiting 1 = 2.
    assert rows["new"]["status"] == "running" and rows["new"]["node"] == "n1"
    assert rows["done"]["status"] == "finished"


def test_a_proposed_queue_replaces_the_live_one_of_the_same_name():
    live = [HEADER, node("n1", cpu="8"), queue("team", "1")]
    live.append(pod("running", "1", node_name="n1", phase="Running", labels=team()))
    proposed = [queue("team", "4"), pod("more", "2", labels=team())]
    sc = load_scenario([], documents=[("cluster", live), ("proposed", proposed)])
    assert sc.errors == []
    assert len(sc.queues) == 1
    assert sc.queues[0].spec.max == {"cpu": "4"}
    assert sc.cluster.replaced == ["Queue team (by proposed#0)"]
    assert "replaced by a proposed object: Queue team (by proposed#0)" in input_lines(sc)
    result = run(sc)
    more = next(r for r in result.records if r.name == "more")
    assert more.state is PodState.RUNNING  # under the live max (1 cpu) it would wait

    # Without the proposed queue, the live one holds `more` back.
    sc = load_scenario([], documents=[("cluster", live), ("proposed", proposed[1:])])
    more = next(r for r in run(sc).records if r.name == "more")
    assert more.state is PodState.PENDING


def team() -> dict[str, str]:
    return {"shoal.dev/queue": "team"}


def test_only_a_clusters_state_is_replaced_and_pods_never_are():
    # Two ordinary inputs naming one queue: refused as before.
    sc = load_scenario([], documents=[("a", [queue("team", "1")]), ("b", [queue("team", "2")])])
    assert len(sc.queues) == 1
    assert [e.problem for e in sc.errors] == ["duplicate of a#0; rename one (skipped)"]
    # A proposed pod named as a live one is refused, the live one stays.
    live = [HEADER, node("n1"), pod("web", "1", node_name="n1", phase="Running")]
    sc = load_scenario([], documents=[("cluster", live), ("proposed", [pod("web", "2")])])
    assert [p.origin for p in sc.pods] == ["cluster"]
    assert "duplicate name 'default/web'" in sc.errors[0].problem
    # A proposed node replaces the live one (a bigger machine, say).
    sc = load_scenario([], documents=[("cluster", live), ("proposed", [node("n1", cpu="64")])])
    assert [n.status.allocatable["cpu"] for n in sc.nodes] == ["64"]
    assert sc.cluster.replaced == ["Node n1 (by proposed#0)"]


def test_namespaces_and_the_system_priority_classes_of_a_dump_are_known():
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml", "labels": {"a": "b"}}}
    critical = pod("dns", "100m", node_name="n1", phase="Running", namespace="kube-system")
    critical["spec"]["priorityClassName"] = "system-cluster-critical"
    sc = load_scenario([], documents=[("dump", [ns, node("n1"), critical])])
    assert sc.errors == []
    assert sc.namespaces == {"ml": {"a": "b"}}
    assert [(pc.metadata.name, pc.value) for pc in sc.priority_classes] == [
        ("system-cluster-critical", 2000000000)
    ]


def test_fold_lines_keeps_a_few_of_each_shape_and_counts_the_rest():
    lines = [f"Queue q{i}: spec.parent 'missing{i}' does not exist" for i in range(510)]
    lines += [f"Queue q{i}: spec.guaranteed.cpu ({i}m) exceeds spec.max.cpu" for i in range(5)]
    lines.append("something else")
    assert fold_lines(lines) == [
        *lines[:3],
        "... and 507 more like this",
        *lines[510:513],
        "... and 2 more like this",
        "something else",
    ]
    # One more than kept is shown whole (no "... and 1 more").
    assert fold_lines(lines[:4]) == lines[:4]


def test_a_priority_in_the_spec_must_be_what_the_priority_class_gives():
    """As the Priority admission plugin: a dump's pods carry the priority it computed
    (accepted); a hand-written priority that differs from the class's is refused."""
    high = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high"},
        "value": 100,
    }
    critical = pod("dns", "100m", node_name="n1", phase="Running", namespace="kube-system")
    critical["spec"].update(priorityClassName="system-cluster-critical", priority=2000000000)
    agreeing = pod("agree", "100m")
    agreeing["spec"].update(priorityClassName="high", priority=100)
    differing = pod("differ", "100m")
    differing["spec"].update(priorityClassName="high", priority=50)
    sc = load_scenario([], documents=[("dump", [high, node("n1"), critical, agreeing, differing])])
    assert sorted(p.name for p in sc.pods) == ["agree", "dns"]
    assert len(sc.errors) == 1 and sc.errors[0].field == "spec.priority"
    assert "priority admission controller computed 100 from PriorityClass high" in str(sc.errors[0])
