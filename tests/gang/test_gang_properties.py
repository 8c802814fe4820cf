"""Property: over random clusters and random gangs, at every scheduling step every group
has either none or at least minMember members placed (succeeded ones count), and no node
is overcommitted."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.testing import SchedulerHarness, make_node, make_pod

LIGHT_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LIGHT_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"

node_st = st.tuples(st.integers(1, 8), st.integers(0, 4))  # cpu cores, gpus
gang_st = st.tuples(
    st.integers(1, 6),  # members
    st.integers(1, 6),  # minMember (capped at members below)
    st.integers(1, 4),  # cpu per member
    st.integers(0, 2),  # gpus per member
    st.integers(0, 5),  # arrival step
    st.booleans(),  # finishes (succeeds) two steps after placement
)


def check_invariants(h: SchedulerHarness, minimum: dict[str, int], done: Counter[str]) -> None:
    table = h.scheduler.cluster.table
    n = table.n
    assert np.all(table.requested[:n] <= table.allocatable[:n]), "node overcommitted"
    placed: Counter[str] = Counter()
    for rec in h.scheduler.cluster.placed.values():
        placed[rec.pod.labels[LIGHT_NAME]] += 1
    for group, need in minimum.items():
        count = placed[group] + done[group]
        assert count == 0 or count >= need, f"{group}: {count} placed < minMember {need}"


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.lists(node_st, min_size=1, max_size=6),
    st.lists(gang_st, min_size=1, max_size=6),
    st.integers(0, 3),
)
def test_gangs_are_all_or_nothing_at_every_step(nodes, gangs, seed) -> None:
    h = SchedulerHarness(seed=seed)
    h.add_nodes(
        *(
            make_node(f"n{i}").capacity({"nvidia.com/gpu": g}, cpu=str(c), memory="64Gi")
            for i, (c, g) in enumerate(nodes)
        )
    )
    minimum: dict[str, int] = {}
    done: Counter[str] = Counter()
    finishing: dict[str, bool] = {}
    sched = h.scheduler
    for step in range(8):
        for gi, (members, min_member, cpu, gpu, arrival, finishes) in enumerate(gangs):
            if arrival != step:
                continue
            name = f"g{gi}"
            min_member = min(min_member, members)
            minimum[name] = min_member
            finishing[name] = finishes
            for m in range(members):
                h.add_pods(
                    make_pod(f"{name}-{m}")
                    .labels({LIGHT_NAME: name, LIGHT_MIN: str(min_member)})
                    .req({"nvidia.com/gpu": gpu}, cpu=str(cpu))
                )
        # Drive the scheduler one cycle at a time and check after every cycle.
        sched.tick()
        while sched.has_work():
            sched.schedule_one()
            check_invariants(h, minimum, done)
            sched.start_bindings()  # the Binds go out; their outcomes are events
            check_invariants(h, minimum, done)
            h.effects.drain(sched)
            check_invariants(h, minimum, done)
        # Whole jobs finish together (a gang succeeds as one).
        if step % 2 == 1:
            for name, fin in finishing.items():
                uids = [
                    u for u, r in sched.cluster.placed.items() if r.pod.labels[LIGHT_NAME] == name
                ]
                if fin and uids:
                    # Only a gang with no member left pending finishes as a whole.
                    group = sched.gangs.groups.get(f"default/{name}")
                    if group is not None and all(u in group.bound for u in group.members):
                        for uid in uids:
                            sched.finish_pod(uid)
                            done[name] += 1
                        check_invariants(h, minimum, done)
        h.clock.advance_to(h.clock.now() + 11)
