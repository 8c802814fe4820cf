"""Storage capacity tracking (CSIDriver `storageCapacity: true` + CSIStorageCapacity), as
kube-scheduler's VolumeBinding applies it to claims it provisions: scenarios through the
whole scheduler (SchedulerHarness, default profile, in-memory effects port)."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.api.errors import ManifestError
from shoal.api.volumes import ANNOTATION_SELECTED_NODE, NO_PROVISIONER
from shoal.cache.volumes import VolumeCatalog
from shoal.testing.builders import make_node, make_pod
from shoal.testing.harness import SchedulerHarness
from shoal.testing.volumes import (
    make_capacity,
    make_csi_driver,
    make_pv,
    make_pvc,
    make_storage_class,
)

ZONE = "topology.kubernetes.io/zone"
NODE_KEY = "topology.lvm.example.com/node"  # a local-storage driver's per-node label
DRIVER = "lvm.example.com"
NOT_ENOUGH = "node(s) did not have enough free storage"
NO_VOLUMES = "node(s) didn't find available persistent volumes to bind"


def local_storage(*free: str | None, driver_tracks: bool | None = True) -> SchedulerHarness:
    """Nodes n0.. in zone a, each with its driver label; a WaitForFirstConsumer class
    `lvm` provisioned by the driver, and per node a CSIStorageCapacity of `free` bytes
    (None: the driver published none for that node)."""
    h = SchedulerHarness()
    h.add_nodes(
        *(
            make_node(f"n{i}")
            .capacity(cpu="4", memory="8Gi")
            .zone("a")
            .hostname_label()
            .label(NODE_KEY, f"n{i}")
            for i in range(len(free))
        )
    )
    h.add_storage(
        make_storage_class("lvm").provisioner(DRIVER).wait_for_first_consumer(),
        make_csi_driver(DRIVER).storage_capacity(driver_tracks),
    )
    for i, amount in enumerate(free):
        if amount is not None:
            h.add_storage(
                make_capacity(f"cap-n{i}")
                .storage_class("lvm")
                .capacity(amount)
                .on_label(NODE_KEY, f"n{i}")
            )
    return h


def test_a_claim_is_provisioned_only_where_the_driver_reports_room_for_it() -> None:
    h = local_storage("5Gi", "20Gi", None)
    h.add_storage(make_pvc("data").storage_class("lvm").request("10Gi"))
    h.add_pods(make_pod("db").pvc("data"))
    assert h.run().placements == {"default/db": "n1"}
    claim = VolumeCatalog.of(h.scheduler.handle).claims["default/data"]
    assert claim.metadata.annotations[ANNOTATION_SELECTED_NODE] == "n1"


def test_a_claim_larger_than_any_capacity_waits_with_kubes_reason() -> None:
    h = local_storage("5Gi", "20Gi", None)
    h.add_storage(make_pvc("data").storage_class("lvm").request("50Gi"))
    h.add_pods(make_pod("db").pvc("data"))
    placements, messages = h.run()
    assert placements == {"default/db": None}
    assert messages["default/db"] == (
        f"0/3 nodes are available: 3 {NOT_ENOUGH}."
        " preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
        "scheduling."
    )


def test_new_or_larger_capacity_retries_the_waiting_pod() -> None:
    h = local_storage("5Gi", None)
    h.add_storage(make_pvc("data").storage_class("lvm").request("10Gi"))
    h.add_pods(make_pod("db").pvc("data"))
    assert h.run().placements == {"default/db": None}
    # The driver publishes the second node's capacity: the pod is retried there.
    h.add_storage(
        make_capacity("cap-n1").storage_class("lvm").capacity("30Gi").on_label(NODE_KEY, "n1")
    )
    assert h.advance(10).placements == {"default/db": "n1"}


def test_an_updated_capacity_is_read_again() -> None:
    h = local_storage("5Gi")
    h.add_storage(make_pvc("data").storage_class("lvm").request("10Gi"))
    h.add_pods(make_pod("db").pvc("data"))
    assert h.run().placements == {"default/db": None}
    h.add_storage(
        make_capacity("cap-n0").storage_class("lvm").capacity("10Gi").on_label(NODE_KEY, "n0")
    )
    assert h.advance(10).placements == {"default/db": "n0"}


def test_maximum_volume_size_wins_over_capacity() -> None:
    h = local_storage(None, None)
    h.add_storage(
        make_capacity("big-pool-small-volumes")
        .storage_class("lvm")
        .capacity("100Gi")
        .maximum_volume_size("8Gi")
        .on_label(NODE_KEY, "n0"),
        make_capacity("small").storage_class("lvm").capacity("12Gi").on_label(NODE_KEY, "n1"),
        make_pvc("data").storage_class("lvm").request("10Gi"),
    )
    h.add_pods(make_pod("db").pvc("data"))
    assert h.run().placements == {"default/db": "n1"}


def test_capacity_is_not_checked_without_a_tracking_driver_or_a_storage_request() -> None:
    for tracks in (False, None):
        h = local_storage("1Gi", driver_tracks=tracks)
        h.add_storage(make_pvc("data").storage_class("lvm").request("10Gi"))
        h.add_pods(make_pod("db").pvc("data"))
        assert h.run().placements == {"default/db": "n0"}, tracks
    # No CSIDriver object at all: not a CSI driver that opted in.
    h = local_storage("1Gi")
    h.delete_storage("CSIDriver", DRIVER)
    h.add_storage(make_pvc("data").storage_class("lvm").request("10Gi"))
    h.add_pods(make_pod("db").pvc("data"))
    assert h.run().placements == {"default/db": "n0"}
    # A claim without a storage request has nothing to check.
    h = local_storage(None)
    h.add_storage(make_pvc("data").storage_class("lvm").request(None))
    h.add_pods(make_pod("db").pvc("data"))
    assert h.run().placements == {"default/db": "n0"}


def test_capacities_of_other_classes_and_without_topology_do_not_count() -> None:
    h = local_storage(None, None)
    h.add_storage(
        make_storage_class("other").provisioner(DRIVER).wait_for_first_consumer(),
        make_capacity("other-class")
        .storage_class("other")
        .capacity("1Ti")
        .on_label(NODE_KEY, "n0"),
        make_capacity("no-topology").storage_class("lvm").capacity("1Ti"),
        make_pvc("data").storage_class("lvm").request("1Gi"),
    )
    h.add_pods(make_pod("db").pvc("data"))
    assert h.run().messages["default/db"] == (
        f"0/2 nodes are available: 2 {NOT_ENOUGH}."
        " preemption: 0/2 nodes are available: 2 Preemption is not helpful for "
        "scheduling."
    )


def test_zonal_capacity_by_label_expressions() -> None:
    h = SchedulerHarness()
    h.add_nodes(
        *(
            make_node(f"n{i}").capacity(cpu="4", memory="8Gi").zone(zone)
            for i, zone in enumerate(["a", "b", "c"])
        )
    )
    h.add_storage(
        make_storage_class("net").provisioner("net.example.com").wait_for_first_consumer(),
        make_csi_driver("net.example.com"),
        make_capacity("zones-b-c")
        .storage_class("net")
        .capacity("1Ti")
        .on_expression(ZONE, "In", "b", "c"),
        make_capacity("zone-c-small")
        .storage_class("net")
        .capacity("1Gi")
        .on_expression(ZONE, "In", "c"),
        make_capacity("not-a")
        .storage_class("net")
        .capacity("1Ti")
        .on_expression(ZONE, "NotIn", "a", "b", "c"),
        make_pvc("data").storage_class("net").request("100Gi"),
    )
    h.add_pods(make_pod("db").pvc("data").node_selector({ZONE: "c"}))
    h.add_pods(make_pod("other").pvc("data").node_selector({ZONE: "a"}))
    placements = h.run().placements
    assert placements["default/db"] == "n2"
    assert placements["default/other"] is None


def test_a_class_that_cannot_provision_there_is_reported_before_capacity() -> None:
    # kube checks provisioning (allowedTopologies) before capacity, claim by claim.
    h = SchedulerHarness()
    h.add_nodes(
        *(
            make_node(f"n{i}").capacity(cpu="4", memory="8Gi").zone(zone).label(NODE_KEY, f"n{i}")
            for i, zone in enumerate(["a", "a", "b"])
        )
    )
    h.add_storage(
        make_storage_class("lvm")
        .provisioner(DRIVER)
        .wait_for_first_consumer()
        .allowed_topology(ZONE, "a"),
        make_csi_driver(DRIVER),
        make_capacity("cap-n0").storage_class("lvm").capacity("1Gi").on_label(NODE_KEY, "n0"),
        make_capacity("cap-n2").storage_class("lvm").capacity("1Ti").on_label(NODE_KEY, "n2"),
        make_pvc("data").storage_class("lvm").request("10Gi"),
    )
    h.add_pods(make_pod("db").pvc("data"))
    assert h.run().messages["default/db"] == (
        f"0/3 nodes are available: 1 {NO_VOLUMES}, 2 {NOT_ENOUGH}."
        " preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
        "scheduling."
    )


def test_a_static_volume_needs_no_capacity_and_a_selected_node_still_does() -> None:
    h = local_storage(None, None, None)
    h.add_storage(
        make_storage_class("static").provisioner(NO_PROVISIONER).wait_for_first_consumer(),
        make_pv("disk-n2").storage_class("static").capacity("50Gi").on_nodes("n2"),
        make_pvc("static-data").storage_class("static").request("10Gi"),
    )
    h.add_pods(make_pod("db").pvc("static-data"))
    assert h.run().placements == {"default/db": "n2"}
    # A claim already marked for n1 (its provisioning asked for earlier) is checked
    # against n1's capacity there.
    h.add_storage(make_pvc("pinned").storage_class("lvm").request("10Gi").selected_node("n1"))
    h.add_pods(make_pod("pinned-user").pvc("pinned"))
    assert h.run().messages["default/pinned-user"] == (
        f"0/3 nodes are available: 1 {NOT_ENOUGH}, 2 {NO_VOLUMES}."
        " preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
        "scheduling."
    )


def test_many_per_node_capacities_answer_in_one_pass() -> None:
    # 2000 nodes, one CSIStorageCapacity each (a local-storage driver): the index's
    # answer equals the capacities node by node.
    free = [f"{(i * 7) % 31}Gi" if i % 5 else None for i in range(2000)]
    h = local_storage(*free)
    plugin = next(
        p
        for p in h.scheduler.profiles["default-scheduler"].plugins.all()
        if p.name == "VolumeBinding"
    )
    claim = make_pvc("data").storage_class("lvm").request("20Gi").obj()
    catalog = VolumeCatalog.of(h.scheduler.handle)
    rows = plugin.capacity.rows(claim, catalog.classes["lvm"])  # type: ignore[attr-defined]
    names = h.scheduler.cluster.table.names
    expected = np.array(
        [
            free[int(str(names[r])[1:])] is not None
            and int(free[int(str(names[r])[1:])][:-2]) >= 20
            for r in range(len(free))
        ]  # type: ignore[index]
    )
    assert (rows == expected).all()
    assert expected.sum() > 100


def test_malformed_capacities_name_the_object_and_the_field() -> None:
    with pytest.raises(ManifestError) as caught:
        make_capacity("bad").storage_class("lvm").capacity("-1Gi").obj()
    assert "CSIStorageCapacity kube-system/bad" in str(caught.value)
    assert "capacity" in str(caught.value) and "must not be negative" in str(caught.value)
    with pytest.raises(ManifestError) as caught:
        make_capacity("nameless-class").capacity("1Gi").obj()
    assert "storageClassName is required" in str(caught.value)
    with pytest.raises(ManifestError) as caught:
        make_capacity("bad-op").storage_class("lvm").on_expression(ZONE, "Near", "a").obj()
    assert "CSIStorageCapacity kube-system/bad-op" in str(caught.value)


def test_the_index_follows_many_changes_across_log_compactions() -> None:
    h = local_storage(None, None, None)
    plugin = next(
        p
        for p in h.scheduler.profiles["default-scheduler"].plugins.all()
        if p.name == "VolumeBinding"
    )
    catalog = VolumeCatalog.of(h.scheduler.handle)
    claim = make_pvc("data").storage_class("lvm").request("5Gi").obj()
    epoch = catalog.capacity_changes.epoch
    for round_ in range(400):
        for i in range(3):
            free = f"{1 + (round_ + i) % 9}Gi"
            h.add_storage(
                make_capacity(f"cap-n{i}")
                .storage_class("lvm")
                .capacity(free)
                .on_label(NODE_KEY, f"n{i}")
            )
        if round_ % 50 == 0:
            plugin.capacity.rows(claim, catalog.classes["lvm"])  # type: ignore[attr-defined]
    h.delete_storage("CSIStorageCapacity", "cap-n2", "kube-system")
    assert catalog.capacity_changes.epoch > epoch
    rows = plugin.capacity.rows(claim, catalog.classes["lvm"])  # type: ignore[attr-defined]
    # Round 399: n0 has 1 + 399 % 9 = 4Gi, n1 5Gi; n2's capacity is gone.
    names = h.scheduler.cluster.table.names
    assert {str(names[r]) for r in range(len(rows)) if rows[r]} == {"n1"}
