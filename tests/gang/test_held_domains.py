"""A gang that already runs somewhere keeps its later members there.

Members placed after the gang's minimum (elastic growth, a scale-up), members beyond a
role's minimum, and replacements (a member re-created by its controller while the rest
of the gang keeps running) are held to the domain the gang (or the role) already sits
in: strictly at the required level (they wait, or preempt inside that domain only, and
say which domain holds them), as a preference that never blocks at a preferred level
(the domains its placed members already span, lowest level first, else anywhere).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.api.objects import ObjectMeta
from shoal.api.podgroup import (
    SUB_GROUP_LABEL,
    SUB_GROUPS,
    TOPOLOGY_PREFERRED,
    TOPOLOGY_REQUIRED,
    PodGroup,
    PodGroupSpec,
)
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import PodBuilder

GPU = "nvidia.com/gpu"
RACK = "topo/rack"
LEAF = "topo/leaf"
SPINE = "topo/spine"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def racks(h: SchedulerHarness, layout: Mapping[str, int], gpus: int = 4) -> None:
    """Racks of `layout[rack]` nodes (`{rack}-{i}`) of `gpus` GPUs each."""
    for rack, count in layout.items():
        for i in range(count):
            h.add_nodes(
                make_node(f"{rack}-{i}")
                .capacity({GPU: gpus}, cpu="32", memory="128Gi")
                .labels({RACK: rack, LEAF: rack, SPINE: rack[:2]})
            )


def busy(
    h: SchedulerHarness, node: str, count: int, priority: int = 0, prefix: str = "busy"
) -> None:
    """`count` 1-GPU pods of `priority` bound to `node`."""
    h.add_pods(
        *(
            make_pod(f"{prefix}-{node}-{k}").req({GPU: 1}, cpu="1").priority(priority).node(node)
            for k in range(count)
        )
    )


def podgroup(min_member: int, **annotations: str) -> PodGroup:
    return PodGroup(
        metadata=ObjectMeta(name="train", namespace="ml", annotations=dict(annotations)),
        spec=PodGroupSpec(min_member=min_member),
    )


def member(name: str, priority: int = 0, role: str = "") -> PodBuilder:
    labels = {GROUP_LABEL: "train"}
    if role:
        labels[SUB_GROUP_LABEL] = role
    return make_pod(name).namespace("ml").labels(labels).req({GPU: 1}, cpu="1").priority(priority)


def where(h: SchedulerHarness, *names: str) -> dict[str, str | None]:
    return {name: h.node_of(f"ml/{name}") for name in names}


def domain(node: str | None) -> str:
    return (node or "").split("-")[0]


# ---- required level, plain gang ------------------------------------------------------


def test_elastic_members_beyond_the_minimum_stay_in_the_gang_rack() -> None:
    # r0 has 4 free GPUs, r1 8: the minimum of 4 goes to r0 (best fit). The two members
    # beyond it find no room in r0; r1 has plenty, but the gang is required in one rack:
    # they wait, saying which rack holds them, and grow in when r0 has room.
    h = SchedulerHarness()
    racks(h, {"r0": 2, "r1": 2})
    busy(h, "r0-1", 4)
    h.run()
    h.scheduler.add_pod_group(podgroup(4, **{TOPOLOGY_REQUIRED: RACK}))
    h.add_pods(*(member(f"m{i}") for i in range(6)))
    h.advance(5)
    nodes = where(h, *(f"m{i}" for i in range(6)))
    placed = [n for n in nodes.values() if n]
    assert len(placed) == 4 and {domain(n) for n in placed} == {"r0"}, nodes
    pending = [name for name, n in nodes.items() if n is None]
    assert len(pending) == 2
    message = h.message(f"ml/{pending[0]}")
    assert "topo/rack r0" in message, message
    assert not h.pods_on("r1-0") and not h.pods_on("r1-1")

    h.delete_pod("default/busy-r0-1-0")
    h.advance(30)
    nodes = where(h, *(f"m{i}" for i in range(6)))
    assert sum(1 for n in nodes.values() if n) == 5
    assert {domain(n) for n in nodes.values() if n} == {"r0"}, nodes


def test_members_added_after_the_gang_runs_join_its_rack() -> None:
    # The gang of 4 runs in r0; a scale-up adds two members. r0 has room for one, r1
    # (emptier, where spreading would put them) for eight: one joins r0, one waits.
    h = SchedulerHarness()
    racks(h, {"r0": 2, "r1": 2})
    busy(h, "r0-1", 3)
    h.run()
    h.scheduler.add_pod_group(podgroup(4, **{TOPOLOGY_REQUIRED: RACK}))
    h.add_pods(*(member(f"m{i}") for i in range(4)))
    h.advance(5)
    assert {domain(n) for n in where(h, "m0", "m1", "m2", "m3").values()} == {"r0"}
    h.add_pods(member("m4"), member("m5"))
    h.advance(5)
    grown = where(h, "m4", "m5")
    assert sorted(domain(n) if n else "-" for n in grown.values()) == ["-", "r0"], grown
    waiting = next(name for name, n in grown.items() if n is None)
    assert "topo/rack r0" in h.message(f"ml/{waiting}")


def test_a_replacement_member_goes_back_to_the_gang_rack() -> None:
    # The gang runs on r0-0; r0-1 has 2 more GPUs free, r1 one. m0 dies and its
    # controller re-creates it: one member is missing, and r1 alone is the smallest
    # domain holding one member; the replacement must still go to r0.
    h = SchedulerHarness()
    racks(h, {"r0": 2, "r1": 2})
    busy(h, "r0-1", 2)
    busy(h, "r1-0", 3)
    busy(h, "r1-1", 4)
    h.run()
    h.scheduler.add_pod_group(podgroup(4, **{TOPOLOGY_REQUIRED: RACK}))
    h.add_pods(*(member(f"m{i}") for i in range(4)))
    h.advance(5)
    assert {domain(n) for n in where(h, "m0", "m1", "m2", "m3").values()} == {"r0"}
    h.delete_pod("ml/m0")
    h.add_pods(member("m0-new"))
    h.advance(5)
    assert domain(h.node_of("ml/m0-new")) == "r0"


def test_a_replacement_waits_for_room_in_the_gang_rack_naming_it() -> None:
    # The gang's rack is full once m0's room is taken by a pod of the same priority;
    # r1 is empty. The replacement waits (nothing preempted, nothing placed in r1),
    # saying which rack holds it, and binds there when the room comes back.
    h = SchedulerHarness()
    racks(h, {"r0": 2, "r1": 2})
    busy(h, "r0-1", 4, priority=100)
    h.run()
    h.scheduler.add_pod_group(podgroup(4, **{TOPOLOGY_REQUIRED: RACK}))
    h.add_pods(*(member(f"m{i}", priority=100) for i in range(4)))
    h.advance(5)
    assert {domain(n) for n in where(h, "m0", "m1", "m2", "m3").values()} == {"r0"}
    node = h.node_of("ml/m0")
    h.delete_pod("ml/m0")
    busy(h, node or "", 1, priority=100, prefix="squatter")
    h.add_pods(member("m0-new", priority=100))
    h.advance(30)
    assert h.node_of("ml/m0-new") is None
    assert not h.evicted
    assert not h.pods_on("r1-0") and not h.pods_on("r1-1")
    message = h.message("ml/m0-new")
    assert message.startswith("gang ml/train: "), message
    assert "topo/rack r0" in message, message

    h.delete_pod(f"default/squatter-{node}-0")
    h.advance(30)
    assert h.node_of("ml/m0-new") == node


def test_a_partly_running_gang_preempts_only_inside_its_rack() -> None:
    # Every GPU holds a priority-0 pod once m0 is gone (its room taken by one). r1 is a
    # single node, the smallest rack a lone member could preempt in; the replacement
    # (priority 100) must preempt inside r0, where the rest of its gang runs.
    h = SchedulerHarness()
    racks(h, {"r0": 2, "r1": 1})
    busy(h, "r0-1", 4)
    busy(h, "r1-0", 4)
    h.run()
    h.scheduler.add_pod_group(podgroup(4, **{TOPOLOGY_REQUIRED: RACK}))
    h.add_pods(*(member(f"m{i}", priority=100) for i in range(4)))
    h.advance(5)
    assert {domain(n) for n in where(h, "m0", "m1", "m2", "m3").values()} == {"r0"}
    node = h.node_of("ml/m0")
    h.delete_pod("ml/m0")
    busy(h, node or "", 1, prefix="squatter")
    h.add_pods(member("m0-new", priority=100))
    h.advance(30)
    evictions = [e for e in h.events if e.kind == "evicted"]
    assert len(evictions) == 1, evictions
    assert domain(evictions[0].node) == "r0"
    assert domain(h.node_of("ml/m0-new")) == "r0"
    assert len(h.pods_on("r1-0")) == 4


def test_a_replacement_evicts_nothing_when_only_another_rack_has_lower_priority_pods() -> None:
    # r0 (the gang's) is held by pods of the gang's own priority once m0 is gone; r1 by
    # priority-0 pods. Preempting in r1 would place the replacement away from its gang:
    # nothing is evicted, and the message says what r0 would hold.
    h = SchedulerHarness()
    racks(h, {"r0": 2, "r1": 1})
    busy(h, "r0-1", 4, priority=100)
    busy(h, "r1-0", 4)
    h.run()
    h.scheduler.add_pod_group(podgroup(4, **{TOPOLOGY_REQUIRED: RACK}))
    h.add_pods(*(member(f"m{i}", priority=100) for i in range(4)))
    h.advance(5)
    node = h.node_of("ml/m0")
    assert domain(node) == "r0"
    h.delete_pod("ml/m0")
    busy(h, node or "", 1, priority=100, prefix="squatter")
    h.add_pods(member("m0-new", priority=100))
    h.advance(30)
    assert h.node_of("ml/m0-new") is None
    assert not h.evicted
    message = h.message("ml/m0-new")
    assert message == (
        "gang ml/train: held to topo/rack r0, where its placed members are: room there for 0 "
        "of the 1 member(s) still to place; preempting lower-priority pods would not make "
        "room either: topo/rack r0 would hold 0 members"
    ), message


# ---- preferred levels: a preference, never a block -------------------------------------


def test_elastic_members_prefer_the_leaf_the_gang_is_in_and_are_never_blocked() -> None:
    # The minimum of 2 goes to l0 (best fit: 3 GPUs free there); l1 is empty, where
    # spreading would put a later member. The third member joins l0; the fourth finds
    # l0 full and goes to l1 (a preference never blocks).
    h = SchedulerHarness()
    racks(h, {"l0": 1, "l1": 2})
    busy(h, "l0-0", 1)
    h.run()
    h.scheduler.add_pod_group(podgroup(2, **{TOPOLOGY_PREFERRED: LEAF}))
    h.add_pods(member("m0"), member("m1"))
    h.advance(5)
    assert {domain(n) for n in where(h, "m0", "m1").values()} == {"l0"}
    h.add_pods(member("m2"))
    h.advance(5)
    assert domain(h.node_of("ml/m2")) == "l0"
    h.add_pods(member("m3"))
    h.advance(5)
    assert domain(h.node_of("ml/m3")) == "l1"


def test_a_gang_spanning_several_leaves_grows_inside_them() -> None:
    # Placed before a preference was set, the gang spans l0 and l1. Once the PodGroup
    # prefers leaves, a new member goes to one of those (where 2 GPUs are free), not
    # to the empty l2 that spreading would pick.
    h = SchedulerHarness()
    racks(h, {"l0": 1, "l1": 1, "l2": 1})
    h.scheduler.add_pod_group(podgroup(6))
    h.add_pods(*(member(f"m{i}").node_selector({LEAF: f"l{i % 2}"}) for i in range(6)))
    h.advance(5)
    assert {domain(n) for n in where(h, *(f"m{i}" for i in range(6))).values()} == {
        "l0",
        "l1",
    }
    h.scheduler.add_pod_group(podgroup(6, **{TOPOLOGY_PREFERRED: LEAF}))
    h.add_pods(member("m6"))
    h.advance(5)
    assert domain(h.node_of("ml/m6")) in {"l0", "l1"}


def test_a_full_leaf_sends_a_new_member_to_the_gang_spine_before_another() -> None:
    # Preferred leaf then spine: the gang's leaf sa0 is full, its spine sa has room in
    # sa1, and spine sb is emptier. The new member goes to sa1.
    h = SchedulerHarness()
    racks(h, {"sa0": 1, "sa1": 1, "sb0": 2})
    busy(h, "sa1-0", 2)
    h.run()
    h.scheduler.add_pod_group(podgroup(4, **{TOPOLOGY_PREFERRED: f"{LEAF},{SPINE}"}))
    h.add_pods(*(member(f"m{i}") for i in range(4)))
    h.advance(5)
    assert {domain(n) for n in where(h, "m0", "m1", "m2", "m3").values()} == {"sa0"}
    h.add_pods(member("m4"))
    h.advance(5)
    assert domain(h.node_of("ml/m4")) == "sa1"


# ---- roles ---------------------------------------------------------------------------


def roles(workers: int = 2, **gang: str) -> PodGroup:
    spec = {"workers": {"minMember": workers, "topologyRequired": LEAF}}
    return podgroup(workers, **{SUB_GROUPS: json.dumps(spec)}, **gang)


def test_workers_beyond_the_role_minimum_stay_in_its_leaf() -> None:
    # The role's minimum of 2 goes to l0 (2 free GPUs, best fit); the third worker finds
    # l0 full. l1 has room, but the role is required in one leaf: it waits, naming l0,
    # and joins l0 once room comes back.
    h = SchedulerHarness()
    racks(h, {"l0": 1, "l1": 1})
    busy(h, "l0-0", 2)
    h.run()
    h.scheduler.add_pod_group(roles())
    h.add_pods(*(member(f"w{i}", role="workers") for i in range(3)))
    h.advance(5)
    nodes = where(h, "w0", "w1", "w2")
    assert sorted(domain(n) if n else "-" for n in nodes.values()) == ["-", "l0", "l0"], nodes
    waiting = next(name for name, n in nodes.items() if n is None)
    message = h.message(f"ml/{waiting}")
    assert "topo/leaf l0" in message, message
    assert not h.pods_on("l1-0")

    h.delete_pod("default/busy-l0-0-0")
    h.advance(30)
    assert h.node_of(f"ml/{waiting}") == "l0-0"


def test_a_replacement_worker_goes_back_to_its_role_leaf() -> None:
    # The workers run in l0 (3 free GPUs, best fit for 2... after one dies, 2 free),
    # l1 has exactly one GPU free: the smallest leaf for one worker, not the role's.
    h = SchedulerHarness()
    racks(h, {"l0": 1, "l1": 1})
    busy(h, "l0-0", 1)
    busy(h, "l1-0", 3)
    h.run()
    h.scheduler.add_pod_group(roles())
    h.add_pods(member("w0", role="workers"), member("w1", role="workers"))
    h.advance(5)
    assert {domain(n) for n in where(h, "w0", "w1").values()} == {"l0"}
    h.delete_pod("ml/w0")
    h.add_pods(member("w0-new", role="workers"))
    h.advance(5)
    assert h.node_of("ml/w0-new") == "l0-0"


def test_a_replacement_goes_back_to_the_gang_leaf_it_prefers() -> None:
    # Preferred leaf: the gang runs in l0 (2 GPUs left there once m0 is gone); l1 has
    # exactly one GPU free, the smallest leaf a lone member fits. The replacement goes
    # back to l0.
    h = SchedulerHarness()
    racks(h, {"l0": 1, "l1": 1})
    busy(h, "l1-0", 3)
    h.run()
    h.scheduler.add_pod_group(podgroup(3, **{TOPOLOGY_PREFERRED: LEAF}))
    h.add_pods(*(member(f"m{i}") for i in range(3)))
    h.advance(5)
    assert {domain(n) for n in where(h, "m0", "m1", "m2").values()} == {"l0"}
    h.delete_pod("ml/m0")
    h.add_pods(member("m0-new"))
    h.advance(5)
    assert h.node_of("ml/m0-new") == "l0-0"


def test_a_preferred_leaf_full_of_lower_priority_pods_is_not_preempted_for() -> None:
    # The gang's preferred leaf l0 is full of priority-0 pods once m0 is gone; l1 has
    # room. The replacement (priority 100) goes to l1 and evicts nothing: a preference
    # neither blocks nor preempts.
    h = SchedulerHarness()
    racks(h, {"l0": 1, "l1": 1})
    busy(h, "l0-0", 1)
    h.run()
    h.scheduler.add_pod_group(podgroup(3, **{TOPOLOGY_PREFERRED: LEAF}))
    h.add_pods(*(member(f"m{i}", priority=100) for i in range(3)))
    h.advance(5)
    assert {domain(n) for n in where(h, "m0", "m1", "m2").values()} == {"l0"}
    h.delete_pod("ml/m0")
    busy(h, "l0-0", 1, prefix="squatter")
    h.add_pods(member("m0-new", priority=100))
    h.advance(30)
    assert h.node_of("ml/m0-new") == "l1-0"
    assert not h.evicted


# ---- property: a required gang never spans two domains -------------------------------

LIGHT_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LIGHT_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"

rack_st = st.lists(st.integers(1, 6), min_size=1, max_size=3)  # cpu of each node
gang_st = st.tuples(
    st.integers(1, 4),  # minMember
    st.integers(0, 3),  # members beyond it
    st.integers(1, 2),  # cpu per member
    st.integers(0, 3),  # arrival step
)
churn_st = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 2), st.integers(0, 99), st.booleans()),
    max_size=8,
)  # (step, gang, which member, replace it (else add one more))


def check_one_rack(h: SchedulerHarness, gangs: int) -> None:
    table = h.scheduler.cluster.table
    n = table.n
    assert np.all(table.requested[:n] <= table.allocatable[:n]), "node overcommitted"
    seen: dict[str, set[str]] = {}
    for record in h.scheduler.cluster.placed.values():
        group = record.pod.labels.get(LIGHT_NAME)
        if group is not None:
            seen.setdefault(group, set()).add(domain(record.node))
    for group, where in seen.items():
        assert len(where) == 1, f"gang {group} spans racks {sorted(where)}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(rack_st, min_size=1, max_size=4),
    st.lists(gang_st, min_size=1, max_size=3),
    churn_st,
    st.integers(0, 3),
)
def test_a_required_gang_never_spans_two_racks_through_growth_and_replacements(
    layout: list[list[int]],
    gangs: list[tuple[int, int, int, int]],
    churn: list[tuple[int, int, int, bool]],
    seed: int,
) -> None:
    h = SchedulerHarness(seed=seed)
    for r, cpus in enumerate(layout):
        for i, cpu in enumerate(cpus):
            h.add_nodes(
                make_node(f"r{r}-{i}").capacity(cpu=str(cpu), memory="64Gi").labels({RACK: f"r{r}"})
            )
    sched = h.scheduler
    made: dict[int, int] = {}  # gang -> pods created so far

    def add(g: int, minimum: int, cpu: int) -> None:
        h.add_pods(
            make_pod(f"g{g}-{made.get(g, 0)}")
            .labels({LIGHT_NAME: f"g{g}", LIGHT_MIN: str(minimum)})
            .annotations({TOPOLOGY_REQUIRED: RACK})
            .req(cpu=str(cpu))
        )
        made[g] = made.get(g, 0) + 1

    for step in range(6):
        for g, (minimum, extra, cpu, arrival) in enumerate(gangs):
            if arrival == step:
                for _ in range(minimum + extra):
                    add(g, minimum, cpu)
        for when, g, which, replace in churn:
            if when != step or g >= len(gangs) or g not in made:
                continue
            minimum, _, cpu, _ = gangs[g]
            if replace:
                placed = sorted(
                    r.pod.key
                    for r in sched.cluster.placed.values()
                    if r.pod.labels.get(LIGHT_NAME) == f"g{g}" and not r.assumed
                )
                if not placed:
                    continue
                h.delete_pod(placed[which % len(placed)])
            add(g, minimum, cpu)
        sched.tick()
        while sched.has_work():
            sched.schedule_one()
            check_one_rack(h, len(gangs))
            sched.start_bindings()
            check_one_rack(h, len(gangs))
            h.effects.drain(sched)
            check_one_rack(h, len(gangs))
        h.clock.advance_to(h.clock.now() + 11)
