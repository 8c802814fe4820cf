"""The simulator reads Volcano HyperNode documents: a Volcano gang with a hard
networkTopology stays in one HyperNode, and a malformed HyperNode is a warning of the
run naming it and the field (the rest of the fabric still holds)."""

from __future__ import annotations

from simhelpers import by_name, docs, node_yaml, run


def hypernode_yaml(name: str, tier: int, kind: str, **selector: str) -> str:
    key, value = next(iter(selector.items()))
    field = {"exact": "exactMatch: {name: %s}", "regex": "regexMatch: {pattern: '%s'}"}[key]
    return f"""\
        apiVersion: topology.volcano.sh/v1alpha1
        kind: HyperNode
        metadata: {{name: {name}}}
        spec:
          tier: {tier}
          members:
          - type: {kind}
            selector: {{{field % value}}}
        """


CLUSTER = docs(
    *(node_yaml(f"{leaf}{i}", cpu="1") for leaf in "ab" for i in range(3)),
    hypernode_yaml("leaf-a", 1, "Node", regex="^a"),
    hypernode_yaml("leaf-b", 1, "Node", regex="^b"),
    hypernode_yaml("spine", 2, "HyperNode", regex="^leaf-"),
    hypernode_yaml("bad", 1, "Node", regex="(["),
)

WORKLOAD = docs(
    """\
    apiVersion: scheduling.volcano.sh/v1beta1
    kind: PodGroup
    metadata: {name: train}
    spec:
      minMember: 3
      networkTopology: {mode: hard, highestTierAllowed: 1}
    """,
    *(
        f"""\
        apiVersion: v1
        kind: Pod
        metadata:
          name: t{i}
          annotations: {{scheduling.k8s.io/group-name: train, sim.shoal.dev/arrival: "{i}"}}
        spec:
          containers:
          - name: main
            resources: {{requests: {{cpu: "1", memory: 1Gi}}}}
        """
        for i in range(3)
    ),
    """\
    apiVersion: v1
    kind: Pod
    metadata: {name: early, annotations: {sim.shoal.dev/arrival: "0"}}
    spec:
      nodeName: b0
      containers:
      - name: main
        resources: {requests: {cpu: "1", memory: 1Gi}}
    """,
)


def test_a_volcano_gang_stays_in_one_hypernode_and_bad_hypernodes_are_warned(scenario) -> None:  # type: ignore[no-untyped-def]
    sc = scenario(CLUSTER, WORKLOAD)
    assert not sc.errors, sc.errors
    assert [h.metadata.name for h in sc.hypernodes] == ["leaf-a", "leaf-b", "spine", "bad"]
    result = run(sc)
    records = by_name(result)
    assert {records[f"t{i}"].node for i in range(3)} == {"a0", "a1", "a2"}
    (warning,) = result.warnings
    assert warning.startswith(
        "HyperNode bad: field spec.members[0].selector.regexMatch.pattern: '([' is not a "
        "valid regex"
    )


def test_a_hypernode_with_a_field_of_the_wrong_type_is_an_input_error(scenario) -> None:  # type: ignore[no-untyped-def]
    sc = scenario(
        """\
        apiVersion: topology.volcano.sh/v1alpha1
        kind: HyperNode
        metadata: {name: odd}
        spec: {tier: 1, members: {type: Node}}
        """
    )
    (error,) = sc.errors
    assert "HyperNode odd: field spec.members" in str(error)
    assert sc.hypernodes == []
