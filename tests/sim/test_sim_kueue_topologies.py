"""The simulator reads Kueue Topology documents: a Kueue gang preferring a rack that no
rack holds lands in one block, and a malformed Topology is a warning of the run naming
it and the field (the others still apply).

Blocks b0 (racks r0, r1) and b1 (racks r2, r3), one 2-CPU node per rack; r1 has 1 CPU
free and r3 none. A gang of three 1-CPU pods fits in no rack; the fewest racks are r0
and r2 (two blocks); the only block holding it is b0."""

from __future__ import annotations

from simhelpers import by_name, docs, node_yaml, run

RACKS = {"r0": "b0", "r1": "b0", "r2": "b1", "r3": "b1"}


def topology_yaml(name: str, *labels: str, version: str = "v1beta2") -> str:
    levels = ", ".join(f"{{nodeLabel: {label}}}" for label in labels)
    return f"""\
        apiVersion: kueue.x-k8s.io/{version}
        kind: Topology
        metadata: {{name: {name}}}
        spec: {{levels: [{levels}]}}
        """


def busy(name: str, node: str, cpu: str) -> str:
    return f"""\
        apiVersion: v1
        kind: Pod
        metadata: {{name: {name}, annotations: {{sim.shoal.dev/arrival: "0"}}}}
        spec:
          nodeName: {node}
          containers:
          - name: main
            resources: {{requests: {{cpu: "{cpu}", memory: 1Gi}}}}
        """


NODES = [
    node_yaml(rack, cpu="2", **{"topo/block": block, "topo/rack": rack})
    for rack, block in RACKS.items()
]

WORKLOAD = docs(
    busy("busy-r1", "r1", "1"),
    busy("busy-r3", "r3", "2"),
    *(
        f"""\
        apiVersion: v1
        kind: Pod
        metadata:
          name: k{i}
          labels: {{kueue.x-k8s.io/pod-group-name: k}}
          annotations:
            kueue.x-k8s.io/pod-group-total-count: "3"
            kueue.x-k8s.io/podset-preferred-topology: topo/rack
            sim.shoal.dev/arrival: "1"
        spec:
          containers:
          - name: main
            resources: {{requests: {{cpu: "1", memory: 1Gi}}}}
        """
        for i in range(3)
    ),
)


def blocks(result) -> set[str]:  # type: ignore[no-untyped-def]
    records = by_name(result)
    nodes = [records[f"k{i}"].node for i in range(3)]
    assert all(nodes), nodes
    return {RACKS[n] for n in nodes}


def test_a_kueue_gang_climbs_the_topology_and_bad_topologies_are_warned(scenario) -> None:  # type: ignore[no-untyped-def]
    cluster = docs(
        *NODES,
        topology_yaml("fabric", "topo/block", "topo/rack", "kubernetes.io/hostname"),
        topology_yaml("a-twice", "topo/rack", "topo/rack", version="v1beta1"),
    )
    sc = scenario(cluster, WORKLOAD)
    assert not sc.errors, sc.errors
    assert [t.metadata.name for t in sc.kueue_topologies] == ["fabric", "a-twice"]
    result = run(sc)
    assert blocks(result) == {"b0"}
    (warning,) = result.warnings
    assert warning == (
        "Topology a-twice: field spec.levels[1].nodeLabel: 'topo/rack' is listed twice (also "
        "spec.levels[0].nodeLabel); each level is a different node label; the Topology is "
        "skipped"
    )


def test_without_a_topology_the_gang_takes_the_fewest_racks(scenario) -> None:  # type: ignore[no-untyped-def]
    result = run(scenario(docs(*NODES), WORKLOAD))
    assert blocks(result) == {"b0", "b1"}
