"""Sub-group gangs: a job made of roles (pipeline stages, launcher + workers), each with
its own minimum and topology, placed all or nothing together.

The issue's pipeline: 4 stages x 8 GPUs, each stage inside one leaf, all stages inside
one spine. Spine a holds 34 free GPUs (enough for the job) but only two leaves with 8
free; spine b has five empty leaves. The gang goes to spine b, one stage per leaf, and
never half-placed."""

from __future__ import annotations

import json

from shoal.api.objects import ObjectMeta
from shoal.api.podgroup import (
    SUB_GROUP_LABEL,
    SUB_GROUPS,
    TOPOLOGY_REQUIRED,
    PodGroup,
    PodGroupSpec,
)
from shoal.testing import SchedulerHarness, make_node, make_pod

GPU = "nvidia.com/gpu"
SPINE, LEAF = "topo/spine", "topo/leaf"


def fabric(h: SchedulerHarness) -> None:
    """Two spines of five leaves of two 4-GPU nodes; in spine a, leaves a0-a2 have one
    GPU taken on every node (6 free each)."""
    for spine in "ab":
        for leaf in range(5):
            for n in range(2):
                name = f"{spine}{leaf}-{n}"
                h.add_nodes(
                    make_node(name)
                    .capacity({GPU: 4}, cpu="32", memory="128Gi")
                    .labels({SPINE: spine, LEAF: f"{spine}{leaf}"})
                )
    for leaf in range(3):
        for n in range(2):
            h.add_pods(make_pod(f"busy-a{leaf}-{n}").req({GPU: 1}).node(f"a{leaf}-{n}"))


def pipeline(stages: int = 4, per_stage: int = 8, leaf: str = LEAF) -> PodGroup:
    roles = {
        f"stage-{i}": {"minMember": per_stage, "topologyRequired": leaf} for i in range(stages)
    }
    return PodGroup(
        metadata=ObjectMeta(
            name="pipe",
            namespace="ml",
            annotations={SUB_GROUPS: json.dumps(roles), TOPOLOGY_REQUIRED: SPINE},
        ),
        spec=PodGroupSpec(min_member=stages * per_stage),
    )


def members(stages: int = 4, per_stage: int = 8):  # type: ignore[no-untyped-def]
    return [
        make_pod(f"s{i}-{j}")
        .namespace("ml")
        .labels({"scheduling.x-k8s.io/pod-group": "pipe", SUB_GROUP_LABEL: f"stage-{i}"})
        .req({GPU: 1}, cpu="1")
        for i in range(stages)
        for j in range(per_stage)
    ]


def leaf_of(node: str) -> str:
    return node.split("-")[0]


def test_each_stage_in_one_leaf_all_stages_in_one_spine() -> None:
    h = SchedulerHarness()
    fabric(h)
    h.scheduler.add_pod_group(pipeline())
    h.add_pods(*members())
    h.advance(5)
    nodes = {f"s{i}-{j}": h.node_of(f"ml/s{i}-{j}") for i in range(4) for j in range(8)}
    assert all(nodes.values()), nodes
    assert {n[0] for n in nodes.values() if n} == {"b"}  # one spine: b (a lacks leaves)
    stage_leaves = [{leaf_of(nodes[f"s{i}-{j}"] or "") for j in range(8)} for i in range(4)]
    assert all(len(leaves) == 1 for leaves in stage_leaves), stage_leaves
    assert len(set().union(*stage_leaves)) == 4  # four different leaves


def test_a_role_that_cannot_fit_its_domain_holds_the_whole_gang() -> None:
    # Stages of 9: no leaf has 9 GPUs; nothing is placed, and the reason names the role.
    h = SchedulerHarness()
    fabric(h)
    h.scheduler.add_pod_group(pipeline(stages=2, per_stage=9))
    h.add_pods(*members(stages=2, per_stage=9))
    h.advance(5)
    assert not any(h.node_of(f"ml/s{i}-{j}") for i in range(2) for j in range(9))
    message = h.message("ml/s0-0")
    assert "sub-group stage-0" in message and "no single topo/leaf domain" in message


def test_a_malformed_sub_groups_annotation_is_reported_not_silently_applied() -> None:
    h = SchedulerHarness()
    fabric(h)
    bad = pipeline()
    bad.metadata.annotations[SUB_GROUPS] = '{"stage-0": {"minMember": "eight"}}'
    h.scheduler.add_pod_group(bad)
    group = h.scheduler.gangs.groups["ml/pipe"]
    assert group.sub_groups == {}
    assert "stage-0.minMember must be an integer" in group.reason
