"""Reading workloads: annotations, Workload generators, and bad input reported and skipped."""

from __future__ import annotations

import numpy as np
import pytest
from simhelpers import by_name, docs, node_yaml, pod_yaml, run

from shoal.sim.workload import PodGroup, arrival_times, durations, group_rng

GENERATED = """\
    apiVersion: sim.shoal.dev/v1alpha1
    kind: Workload
    metadata: {name: gen}
    spec:
      pods:
      - name: poisson
        count: 50
        arrival: 10
        rate: 0.5
        duration: {distribution: exponential, mean: 20}
        template:
          spec:
            containers: [{name: c, resources: {requests: {cpu: 100m}}}]
      - name: steady
        count: 4
        interval: 2.5
        duration: 7
        template:
          metadata: {namespace: jobs, labels: {app: steady}}
          spec:
            containers: [{name: c}]
    """


def test_fixed_interval_group(scenario):
    sc = scenario(GENERATED)
    steady = [p for p in sc.pods if p.name.startswith("steady")]
    assert [p.name for p in steady] == ["steady-0", "steady-1", "steady-2", "steady-3"]
    assert [p.time for p in steady] == [0.0, 2.5, 5.0, 7.5]
    assert {p.duration for p in steady} == {7.0}
    assert {p.namespace for p in steady} == {"jobs"}
    pod = steady[1].build()
    assert pod.metadata.name == "steady-1"
    assert pod.metadata.labels == {"app": "steady"}
    assert steady[1].build() is not pod  # each replica is its own object


def test_poisson_generator_is_reproducible(scenario):
    def times(seed: int) -> list[tuple[float, float | None]]:
        sc = scenario(GENERATED, seed=seed)
        return [(p.time, p.duration) for p in sc.pods if p.name.startswith("poisson")]

    first = times(7)
    assert first == times(7)
    assert first != times(8)
    arrivals = [t for t, _ in first]
    assert arrivals == sorted(arrivals) and arrivals[0] > 10
    # Mean gap 1/rate = 2 s, mean duration 20 s (loosely: 50 samples).
    assert np.mean(np.diff(arrivals)) == pytest.approx(2.0, rel=0.5)
    assert np.mean([d for _, d in first]) == pytest.approx(20.0, rel=0.5)


def test_group_draws_do_not_depend_on_other_groups():
    group = PodGroup(template={}, count=5, rate=1.0, name="g")
    alone = arrival_times(group, group_rng(3, "w", "g"))
    again = arrival_times(group, group_rng(3, "w", "g"))
    other = arrival_times(group, group_rng(3, "w", "h"))
    assert alone == again != other
    assert durations(group, group_rng(3, "w", "g")) == [None] * 5


def test_arrival_and_duration_annotations(scenario):
    sc = scenario(pod_yaml("p", arrival=12.5, duration=30))
    (pod,) = sc.pods
    assert (pod.time, pod.duration) == (12.5, 30.0)
    unquoted = """\
        apiVersion: v1
        kind: Pod
        metadata: {name: q, annotations: {sim.shoal.dev/arrival: 3, sim.shoal.dev/duration: 4}}
        spec: {containers: [{name: c}]}
        """
    (pod,) = scenario(unquoted).pods
    assert (pod.time, pod.duration) == (3.0, 4.0)


def test_json_and_directory_inputs(tmp_path):
    from shoal.sim import load_scenario

    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "a.json").write_text(
        '{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "j1"}}]}'
    )
    (tmp_path / "cluster" / "b.yaml").write_text(node_yaml("y1"))
    (tmp_path / "cluster" / "notes.txt").write_text("ignored")
    sc = load_scenario([tmp_path / "cluster"])
    assert [n.metadata.name for n in sc.nodes] == ["j1", "y1"]
    assert sc.errors == []


BAD_WORKLOAD = """\
    apiVersion: sim.shoal.dev/v1alpha1
    kind: Workload
    metadata: {name: mixed}
    spec:
      pods:
      - name: typo
        count: 2
        intervall: 5
        template: {spec: {containers: [{name: c}]}}
      - name: both
        count: 2
        interval: 1
        rate: 2
        template: {spec: {containers: [{name: c}]}}
      - name: bad-template
        template:
          spec:
            containers: [{name: c, resources: {requests: {memory: 1Gx}}}]
      - name: good
        count: 3
        interval: 1
        template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}
      nodeEvents:
      - {at: 5}
      - {at: -1, remove: n1}
    """

BAD_POD = """\
    apiVersion: v1
    kind: Pod
    metadata: {name: negative}
    spec:
      containers: [{name: c, resources: {requests: {cpu: "-1"}}}]
    """

BAD_ANNOTATION = """\
    apiVersion: v1
    kind: Pod
    metadata: {name: when, annotations: {sim.shoal.dev/arrival: soon}}
    """


def test_malformed_entries_are_reported_and_the_rest_runs(scenario):
    sc = scenario(
        docs(node_yaml("n1"), "kind: Node\nmetadata: {name: n2}\nspec: {taints: oops}\n"),
        docs(pod_yaml("fine"), BAD_POD, BAD_ANNOTATION, BAD_WORKLOAD, pod_yaml("fine")),
    )
    messages = [str(e) for e in sc.errors]
    expected = [
        ("Node n2", "field spec.taints"),
        ("Pod negative", "field spec.containers[0].resources", "must not be negative"),
        ("Pod when", "metadata.annotations[sim.shoal.dev/arrival]", "'soon'"),
        ("Workload mixed", "spec.pods[0]", "intervall", "did you mean 'interval'?"),
        ("Workload mixed", "spec.pods[1].rate", "not both"),
        ("Workload mixed", "spec.pods[2].template.spec.containers[0].resources", "1Gx"),
        ("Workload mixed", "spec.nodeEvents[0]", "exactly one of"),
        ("Workload mixed", "spec.nodeEvents[1].at", ">= 0"),
        ("Pod default/fine", "duplicate name"),
    ]
    assert len(messages) == len(expected), messages
    for message, parts in zip(messages, expected, strict=True):
        for part in parts:
            assert part in message, (part, message)

    result = run(sc)
    records = by_name(result)
    assert sorted(records) == ["fine", "good-0", "good-1", "good-2"]
    assert all(r.node == "n1" for r in records.values())
    assert result.summary.rejected == len(expected)


def test_unsupported_kinds_and_versions_are_reported(scenario):
    sc = scenario(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
        "apiVersion: sim.shoal.dev/v2\nkind: Workload\nmetadata: {name: future}\n",
        "- just a list item\n",
    )
    messages = [str(e) for e in sc.errors]
    assert "Deployment web: field kind: not simulated" in messages[0]
    assert "Workload future: field apiVersion" in messages[1]
    assert "expected a mapping" in messages[2]


def test_duplicates_two_global_defaults_and_unknown_priority_classes_are_refused(scenario):
    """What the API server would refuse to create is refused here too, naming both
    documents, instead of the last one silently winning."""
    queue = "apiVersion: shoal.dev/v1alpha1\nkind: Queue\nmetadata: {name: team}\nspec: {}\n"
    high = "kind: PriorityClass\napiVersion: scheduling.k8s.io/v1\nmetadata: {name: high}\n"
    sc = scenario(
        docs(
            node_yaml("n1"),
            queue,
            queue,
            high + "value: 100\nglobalDefault: true\n",
            "kind: PriorityClass\napiVersion: scheduling.k8s.io/v1\nmetadata: {name: low}\n"
            "value: 1\nglobalDefault: true\n",
        ),
        docs(
            pod_yaml("fine"),
            "apiVersion: v1\nkind: Pod\nmetadata: {name: vip}\n"
            "spec: {priorityClassName: platinum, containers: [{name: c}]}\n",
        ),
    )
    messages = [str(e) for e in sc.errors]
    assert len(messages) == 3, messages
    assert "Queue team: field metadata.name: duplicate of" in messages[0]
    assert "#1; rename one (skipped)" in messages[0]
    assert "PriorityClass low: field globalDefault: a second global default" in messages[1]
    assert (
        "Pod default/vip: field spec.priorityClassName: no PriorityClass 'platinum'" in messages[2]
    )
    assert [q.metadata.name for q in sc.queues] == ["team"]
    assert [p.name for p in sc.pods] == ["fine"]


def test_names_the_api_server_would_refuse_are_refused_at_the_edge(scenario):
    """Unicode, zero-width and right-to-left characters in names, and a schedulerName
    that is not a DNS name, are refused naming the field (they were accepted silently)."""
    sc = scenario(
        docs(node_yaml("n1"), 'apiVersion: v1\nkind: Node\nmetadata: {name: "n\\u200b2"}\n'),
        docs(
            pod_yaml("fine"),
            "apiVersion: v1\nkind: Pod\nmetadata: {name: caf\u00e9}\n"
            "spec: {containers: [{name: c}]}\n",
            'apiVersion: v1\nkind: Pod\nmetadata: {name: "rtl-\\u202e"}\n'
            "spec: {containers: [{name: c}]}\n",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: ok-name}\n"
            "spec: {schedulerName: sch\u00e9duler, containers: [{name: c}]}\n",
        ),
    )
    messages = [str(e) for e in sc.errors]
    assert len(messages) == 4, messages
    assert "Node n\u200b2: field metadata.name" in messages[0]
    assert "Pod default/caf\u00e9: field metadata.name" in messages[1]
    assert "Pod default/rtl-\u202e: field metadata.name" in messages[2]
    assert "Pod default/ok-name: field spec.schedulerName" in messages[3]
    assert all("the API server refuses it" in m for m in messages)
    assert [p.name for p in sc.pods] == ["fine"]
    assert [n.metadata.name for n in sc.nodes] == ["n1"]


def test_a_workload_count_beyond_a_million_is_an_error_not_a_memory_blowup(scenario):
    big = (
        "apiVersion: sim.shoal.dev/v1alpha1\nkind: Workload\nmetadata: {name: big}\n"
        "spec:\n  pods:\n  - name: p\n    count: 100000000\n"
        "    template: {spec: {containers: [{name: c}]}}\n"
    )
    sc = scenario(docs(node_yaml("n1")), docs(big, pod_yaml("fine")))
    [message] = [str(e) for e in sc.errors]
    assert "Workload big: field spec.pods[0].count: Expected `int` <= 1000000" in message
    assert [p.name for p in sc.pods] == ["fine"]
