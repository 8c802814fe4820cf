"""The storage capacity index (columns followed through the catalog's change log, one
`isin` per label key for `key In [value]` selectors, cached masks for the rest) answers
as kube's hasEnoughCapacity does node by node, over random capacities that are added,
changed and deleted between queries: several classes, `maximumVolumeSize` and
`capacity`, per-node and zonal selectors, expressions, no topology, no limit."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.api.selectors import label_selector_matches
from shoal.cache.volumes import VolumeCatalog
from shoal.plugins.volume_binding import VolumeBinding
from shoal.testing import SchedulerHarness, make_node
from shoal.testing.volumes import make_capacity, make_csi_driver, make_pvc, make_storage_class

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
NODES = 7

topology_st = st.one_of(
    st.none(),
    st.integers(0, NODES + 1).map(lambda i: ("host", f"n{i}")),  # n7, n8: no such node
    st.integers(0, 3).map(lambda z: ("zone", f"z{z}")),
    st.lists(st.integers(0, 3), min_size=1, max_size=3).map(lambda zs: ("in", zs)),
    st.integers(0, 3).map(lambda z: ("notin", z)),
    st.just(("everything", None)),
)
capacity_st = st.fixed_dictionaries(
    {
        "name": st.integers(0, 9),
        "class": st.sampled_from(["a", "b"]),
        "capacity": st.one_of(st.none(), st.integers(0, 40)),
        "maximum": st.one_of(st.none(), st.integers(0, 40)),
        "topology": topology_st,
        "delete": st.booleans(),
    }
)
steps_st = st.lists(
    st.tuples(st.lists(capacity_st, max_size=6), st.sampled_from(["a", "b"]), st.integers(0, 40)),
    min_size=1,
    max_size=6,
)


def _capacity(spec: dict[str, Any]) -> Any:
    built = make_capacity(f"cap-{spec['name']}").storage_class(spec["class"])
    if spec["capacity"] is not None:
        built = built.capacity(f"{spec['capacity']}Gi")
    if spec["maximum"] is not None:
        built = built.maximum_volume_size(f"{spec['maximum']}Gi")
    topology = spec["topology"]
    if topology is None:
        return built
    kind, value = topology
    if kind == "host":
        return built.on_label(HOST, value)
    if kind == "zone":
        return built.on_label(ZONE, value)
    if kind == "in":
        return built.on_expression(ZONE, "In", *(f"z{z}" for z in value))
    if kind == "notin":
        return built.on_expression(ZONE, "NotIn", f"z{value}")
    built._m["nodeTopology"] = {}  # an empty selector: every node
    return built


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps_st)
def test_the_index_answers_as_kube_does_node_by_node(steps: list[Any]) -> None:
    h = SchedulerHarness()
    labels = [{HOST: f"n{i}", ZONE: f"z{i % 3}"} for i in range(NODES)]
    for i, node_labels in enumerate(labels):
        node = make_node(f"n{i}").capacity(cpu="4")
        for key, value in node_labels.items():
            node = node.label(key, value)
        h.add_nodes(node)
    h.add_storage(make_csi_driver("csi.example.com"))
    for name in ("a", "b"):
        h.add_storage(make_storage_class(name).wait_for_first_consumer())
    plugin = next(
        p
        for p in h.scheduler.profiles["default-scheduler"].plugins.all()
        if isinstance(p, VolumeBinding)
    )
    catalog = VolumeCatalog.of(h.scheduler.handle)
    names = h.scheduler.cluster.table.names
    for changes, class_name, size in steps:
        for spec in changes:
            if spec["delete"]:
                h.delete_storage("CSIStorageCapacity", f"cap-{spec['name']}", "kube-system")
            else:
                h.add_storage(_capacity(spec))
        claim = make_pvc("c").storage_class(class_name).request(f"{size}Gi").obj()
        rows = plugin.capacity.rows(claim, catalog.classes[class_name])
        expected = np.zeros(len(rows), dtype=bool)
        for row in range(len(rows)):
            node_labels = labels[int(str(names[row])[1:])]
            expected[row] = any(
                capacity.storage_class_name == class_name
                and capacity.limit is not None
                and capacity.limit >= claim.request
                and label_selector_matches(capacity.node_topology, node_labels)
                for capacity in catalog.capacities.values()
            )
        assert (rows == expected).all(), (rows, expected)
