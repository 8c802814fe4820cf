"""Job-level preemption for a gang with roles (`shoal.dev/sub-groups`).

A high-priority job of one driver and four workers, the workers required inside one
rack, arrives on a cluster whose every GPU is held by a low-priority pod. No rack holds
the workers as things are; with lower-priority pods preempted every rack would, so the
gang preempts: victims for all members in one decision, the workers' victims all inside
the one rack they are placed in, exactly as many as the members need, and the job then
binds whole. When even preempting cannot give a role its minimum (a role larger than any
rack, or a role whose room is held by higher-priority pods), nothing is evicted and the
pending message says which role is short (issue 27)."""

from __future__ import annotations

import json
from collections import Counter

from shoal.api.objects import ObjectMeta
from shoal.api.podgroup import (
    SUB_GROUP_LABEL,
    SUB_GROUPS,
    TOPOLOGY_REQUIRED,
    PodGroup,
    PodGroupSpec,
)
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import PodBuilder

GPU = "nvidia.com/gpu"
RACK = "topo/rack"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def rack_of(node: str) -> str:
    return node.split("-")[0]


def full_cluster(racks: int = 3, per_rack: int = 2, gpus: int = 4) -> SchedulerHarness:
    """`racks` racks (r0, r1, ...) of `per_rack` nodes of `gpus` GPUs; every GPU held by a
    1-GPU pod of priority 0."""
    h = SchedulerHarness()
    for r in range(racks):
        for i in range(per_rack):
            h.add_nodes(
                make_node(f"r{r}-{i}")
                .capacity({GPU: gpus}, cpu="32", memory="128Gi")
                .labels({RACK: f"r{r}"})
            )
    h.add_pods(
        *(
            make_pod(f"low-{i}").req({GPU: 1}, cpu="1").priority(0)
            for i in range(racks * per_rack * gpus)
        )
    )
    placements, _ = h.run()
    assert all(placements.values())
    return h


def job(worker_min: int = 4) -> PodGroup:
    roles = {
        "driver": {"minMember": 1},
        "workers": {"minMember": worker_min, "topologyRequired": RACK},
    }
    return PodGroup(
        metadata=ObjectMeta(
            name="job", namespace="ml", annotations={SUB_GROUPS: json.dumps(roles)}
        ),
        spec=PodGroupSpec(min_member=1 + worker_min),
    )


def member(name: str, role: str, gpus: int, priority: int = 100) -> PodBuilder:
    return (
        make_pod(name)
        .namespace("ml")
        .labels({GROUP_LABEL: "job", SUB_GROUP_LABEL: role})
        .req({GPU: gpus}, cpu="1")
        .priority(priority)
    )


def members(workers: int = 4) -> list[PodBuilder]:
    """One 1-GPU driver and `workers` 2-GPU workers, of priority 100."""
    return [
        member("driver-0", "driver", 1),
        *(member(f"worker-{i}", "workers", 2) for i in range(workers)),
    ]


def test_a_gang_with_a_short_role_preempts_inside_the_rack_its_workers_need() -> None:
    h = full_cluster()
    h.scheduler.add_pod_group(job())
    h.add_pods(*members())
    h.run()

    # One decision: exactly the victims the members need (1 GPU for the driver, 8 for the
    # four 2-GPU workers), all evicted at the same instant, before any member binds.
    evictions = [e for e in h.events if e.kind == "evicted"]
    assert len(evictions) == 9 == len(h.evicted)
    assert len({e.time for e in evictions}) == 1
    assert all(
        reason.startswith("preempted by ml/") and "(priority 100 > 0)" in reason
        for reason in h.evicted.values()
    )
    events = h.events
    first_bound = next(
        (i for i, e in enumerate(events) if e.kind == "bound" and e.pod.startswith("ml/")),
        len(events),
    )
    assert max(i for i, e in enumerate(events) if e.kind == "evicted") < first_bound

    placements, messages = h.advance(30)
    gang = {k: v for k, v in placements.items() if k.startswith("ml/")}
    assert all(gang.values()), messages  # the job binds whole
    workers = [gang[f"ml/worker-{i}"] or "" for i in range(4)]
    racks = {rack_of(node) for node in workers}
    assert len(racks) == 1, workers  # the workers' required rack
    rack = racks.pop()
    # The workers' victims were all inside that rack: there, the 8 GPUs the workers
    # took; anywhere else, only the driver's one.
    per_rack = Counter(rack_of(e.node) for e in evictions)
    driver_rack = rack_of(gang["ml/driver-0"] or "")
    assert per_rack[rack] == 8 + (driver_rack == rack)
    assert sum(per_rack.values()) - per_rack[rack] == (driver_rack != rack)
    # Nothing more was evicted once the members were placed; the rack neither the
    # workers nor the driver use keeps all its pods; no node is overcommitted.
    assert len(h.evicted) == 9
    for other in {"r0", "r1", "r2"} - {rack, driver_rack}:
        assert all(len(h.pods_on(f"{other}-{i}")) == 4 for i in range(2)), other
    for node in (f"r{r}-{i}" for r in range(3) for i in range(2)):
        gpus = sum(p.requests.get(GPU, 0) for p in h.scheduler.cluster.pods_on(node))
        assert gpus <= 4, node


def test_the_status_says_which_role_is_short_and_then_counts_each_role() -> None:
    h = full_cluster()
    h.scheduler.add_pod_group(job())
    h.add_pods(*members())
    h.advance(30)
    status = h.effects.group_status["ml/job"]
    assert status.phase == "Running"
    roles = {r.name: r for r in status.sub_groups}
    assert (roles["driver"].min_member, roles["driver"].scheduled) == (1, 1)
    assert (roles["workers"].min_member, roles["workers"].members) == (4, 4)
    assert roles["workers"].scheduled == roles["workers"].running == 4


def test_a_role_larger_than_any_rack_even_by_preempting_evicts_nothing() -> None:
    # Five 2-GPU workers need 10 GPUs in one rack; a rack has 8 even if emptied.
    h = full_cluster()
    h.scheduler.add_pod_group(job(worker_min=5))
    h.add_pods(*members(workers=5))
    placements, messages = h.advance(120)
    assert h.evicted == {}
    assert not [e for e in h.events if e.kind == "evicted"]
    assert all(node is None for key, node in placements.items() if key.startswith("ml/"))
    assert all(node is not None for key, node in placements.items() if key.startswith("default/"))
    message = messages["ml/worker-0"]
    assert message.startswith("gang ml/job: sub-group workers: 0/5 members placeable"), message
    assert "preempting lower-priority pods would not make room either" in message


def test_a_role_whose_room_is_held_by_higher_priority_pods_evicts_nothing() -> None:
    """The workers could have a rack by preemption, but the driver (4 GPUs, one whole
    node) cannot: every node holds a pod of higher priority than the job. The victims
    chosen for the workers are put back; nothing is evicted."""
    h = SchedulerHarness()
    for r in range(2):
        for i in range(2):
            h.add_nodes(
                make_node(f"r{r}-{i}")
                .capacity({GPU: 4}, cpu="32", memory="128Gi")
                .labels({RACK: f"r{r}"})
            )
    # On every node: one 1-GPU pod of priority 1000 and three of priority 0.
    for r in range(2):
        for i in range(2):
            node = f"r{r}-{i}"
            h.add_pods(make_pod(f"vip-{node}").req({GPU: 1}, cpu="1").priority(1000).node(node))
            h.add_pods(
                *(
                    make_pod(f"low-{node}-{k}").req({GPU: 1}, cpu="1").priority(0).node(node)
                    for k in range(3)
                )
            )
    h.run()
    roles = {"workers": {"minMember": 2, "topologyRequired": RACK}, "driver": {"minMember": 1}}
    h.scheduler.add_pod_group(
        PodGroup(
            metadata=ObjectMeta(
                name="job", namespace="ml", annotations={SUB_GROUPS: json.dumps(roles)}
            ),
            spec=PodGroupSpec(min_member=3),
        )
    )
    h.add_pods(
        member("worker-0", "workers", 3),
        member("worker-1", "workers", 3),
        member("driver-0", "driver", 4),
    )
    placements, messages = h.advance(120)
    assert h.evicted == {}
    assert all(node is None for key, node in placements.items() if key.startswith("ml/"))
    message = messages["ml/driver-0"]
    assert message.startswith("gang ml/job: sub-group driver: 0/1 members placeable"), message


def test_a_gang_required_in_one_rack_with_roles_preempts_inside_one_rack() -> None:
    """The same with the rack required of the whole gang (roles without a topology of
    their own): the driver and the workers all in one rack, every victim in it."""
    h = full_cluster()
    roles = {"driver": {"minMember": 1}, "workers": {"minMember": 3}}
    h.scheduler.add_pod_group(
        PodGroup(
            metadata=ObjectMeta(
                name="job",
                namespace="ml",
                annotations={SUB_GROUPS: json.dumps(roles), TOPOLOGY_REQUIRED: RACK},
            ),
            spec=PodGroupSpec(min_member=4),
        )
    )
    h.add_pods(*members(workers=3))
    h.run()
    evictions = [e for e in h.events if e.kind == "evicted"]
    assert len(evictions) == 7  # 1 + 3 x 2 GPUs
    assert len({rack_of(e.node) for e in evictions}) == 1
    placements, messages = h.advance(30)
    gang = [node for key, node in placements.items() if key.startswith("ml/")]
    assert all(gang), messages
    assert {rack_of(node or "") for node in gang} == {rack_of(evictions[0].node)}
    assert len(h.evicted) == 7


def test_pipeline_stages_preempt_one_leaf_each_inside_one_spine() -> None:
    """Two levels: two stages of 8 one-GPU members, each stage inside one leaf, the gang
    inside one spine, on a fabric (2 spines x 3 leaves x 2 nodes x 4 GPUs) full of
    low-priority pods: 16 victims, all in one spine, one leaf per stage."""
    spine_key, leaf_key = "topo/spine", "topo/leaf"
    h = SchedulerHarness()
    for spine in "ab":
        for leaf in range(3):
            for i in range(2):
                h.add_nodes(
                    make_node(f"{spine}{leaf}-{i}")
                    .capacity({GPU: 4}, cpu="32", memory="128Gi")
                    .labels({spine_key: spine, leaf_key: f"{spine}{leaf}"})
                )
    h.add_pods(*(make_pod(f"low-{i}").req({GPU: 1}, cpu="1").priority(0) for i in range(48)))
    h.run()
    stages = {f"stage-{s}": {"minMember": 8, "topologyRequired": leaf_key} for s in range(2)}
    h.scheduler.add_pod_group(
        PodGroup(
            metadata=ObjectMeta(
                name="job",
                namespace="ml",
                annotations={SUB_GROUPS: json.dumps(stages), TOPOLOGY_REQUIRED: spine_key},
            ),
            spec=PodGroupSpec(min_member=16),
        )
    )
    h.add_pods(*(member(f"s{s}-{j}", f"stage-{s}", 1) for s in range(2) for j in range(8)))
    h.run()
    evictions = [e for e in h.events if e.kind == "evicted"]
    assert len(evictions) == 16
    placements, messages = h.advance(30)
    nodes = {key: node for key, node in placements.items() if key.startswith("ml/")}
    assert all(nodes.values()), messages
    assert len(h.evicted) == 16
    assert len({(node or "")[0] for node in nodes.values()}) == 1  # one spine
    assert {e.node[0] for e in evictions} == {(nodes["ml/s0-0"] or "")[0]}
    leaves = [{rack_of(nodes[f"ml/s{s}-{j}"] or "") for j in range(8)} for s in range(2)]
    assert [len(stage) for stage in leaves] == [1, 1] and leaves[0] != leaves[1]
