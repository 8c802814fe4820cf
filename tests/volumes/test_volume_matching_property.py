"""VolumeBinding's all-rows verdict for pods with several unbound claims (kube's greedy
run for every node at once from each claim's first usable volumes per row) equals the
greedy run node by node (`_Plan.choose`, what Reserve uses): the same claims are left
to provision on every row, over random clusters:
local volumes (some on a hostname two nodes share), zonal volumes, volumes usable
anywhere, taken and pre-bound volumes, classes that may or may not provision."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.api.volumes import NO_PROVISIONER
from shoal.framework.cycle_state import CycleState
from shoal.plugins.volume_binding import VolumeBinding
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.volumes import make_pv, make_pvc, make_storage_class

volume_st = st.tuples(
    st.sampled_from(["host", "zone", "anywhere"]),
    st.integers(0, 5),  # node (host) or zone index
    st.integers(1, 4),  # size (Gi)
    st.sampled_from(["", "taken", "prebound"]),
)
case_st = st.fixed_dictionaries(
    {
        "nodes": st.integers(1, 6),
        "volumes": st.lists(volume_st, max_size=12),
        "claims": st.lists(st.integers(1, 4), min_size=2, max_size=4),  # sizes (Gi)
        "provisions": st.booleans(),
    }
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case_st)
def test_the_all_rows_greedy_equals_the_per_row_greedy(case: dict[str, object]) -> None:
    n_nodes = int(case["nodes"])  # type: ignore[call-overload]
    h = SchedulerHarness()
    for i in range(n_nodes):
        # Nodes 0 and 1 share the hostname label "shared".
        host = "shared" if i < 2 else f"n{i}"
        node = make_node(f"n{i}").capacity(cpu="4").zone(f"z{i % 2}")
        h.add_nodes(node.label("kubernetes.io/hostname", host))
    provisioner = "csi.example.com" if case["provisions"] else NO_PROVISIONER
    h.add_storage(
        make_storage_class("c")
        .wait_for_first_consumer()
        .provisioner(provisioner)
        .allowed_topology("topology.kubernetes.io/zone", "z1")
    )
    claims = list(case["claims"])  # type: ignore[call-overload]
    for i, size in enumerate(claims):
        h.add_storage(make_pvc(f"claim{i}").storage_class("c").request(f"{size}Gi"))
    for v, (kind, where, size, state) in enumerate(case["volumes"]):  # type: ignore[attr-defined]
        pv = make_pv(f"v{v}").storage_class("c").capacity(f"{size}Gi")
        if kind == "host":
            pv = pv.on_nodes("shared" if where < 2 else f"n{where}")
        elif kind == "zone":
            pv = pv.node_affinity("topology.kubernetes.io/zone", [f"z{where % 3}"])
        if state == "taken":
            pv = pv.claimed_by("someone-else")
        elif state == "prebound":
            pv = pv.claimed_by(f"claim{where % len(claims)}").phase("Available")
        h.add_storage(pv)
    pod = make_pod("p")
    for i in range(len(claims)):
        pod = pod.pvc(f"claim{i}")
    plugin = next(
        p
        for p in h.scheduler.profiles["default-scheduler"].plugins.all()
        if isinstance(p, VolumeBinding)
    )
    state = CycleState()
    info = pod.info()
    _, status = plugin.pre_filter(state, info)
    assert status.ok, status
    plan = state.read("VolumeBinding")
    n = h.scheduler.cluster.table.n
    expected = np.zeros((len(claims), n), dtype=bool)
    for row in range(n):
        _, left = plan.choose(row)
        expected[left, row] = True
    assert (np.array(plugin._unmatched(plan, n)) == expected).all()
