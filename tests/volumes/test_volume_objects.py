"""Storage objects and the volume index on their own: kube's helpers (zone labels, the
beta class annotation, CSI migration names) and the index following many updates."""

from __future__ import annotations

import numpy as np

from shoal.api.manifests import decode
from shoal.api.volumes import (
    PersistentVolume,
    PersistentVolumeClaim,
    claim_class,
    label_zones,
    unsupported_volumes,
)
from shoal.cache.volume_index import VolumeIndex
from shoal.cache.volumes import VolumeCatalog
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.volumes import make_pv, make_pvc, make_storage_class


def test_zone_labels_may_list_several_zones() -> None:
    assert label_zones("us-east-1a__us-east-1b") == {"us-east-1a", "us-east-1b"}
    assert label_zones("") == set()


def test_the_beta_class_annotation_wins_over_the_field() -> None:
    claim = decode(
        {
            "metadata": {
                "name": "c",
                "annotations": {"volume.beta.kubernetes.io/storage-class": "old"},
            },
            "spec": {"storageClassName": "new"},
        },
        PersistentVolumeClaim,
    )
    assert claim_class(claim) == "old"


def test_in_tree_volumes_count_for_the_csi_driver_they_migrated_to() -> None:
    ebs = decode(
        {"metadata": {"name": "v"}, "spec": {"awsElasticBlockStore": {"volumeID": "vol-1"}}},
        PersistentVolume,
    )
    assert ebs.csi_driver() == ("ebs.csi.aws.com", "vol-1")
    local = decode({"metadata": {"name": "l"}, "spec": {"local": {"path": "/d"}}}, PersistentVolume)
    assert local.csi_driver() == ("", "")


def test_unsupported_volumes_name_the_volume_and_the_missing_model() -> None:
    pod = (
        make_pod("p")
        .volume({"name": "ok", "emptyDir": {}})
        .volume({"name": "disk", "iscsi": {"iqn": "x"}})  # VolumeRestrictions': modelled
        .volume({"name": "odd", "someFutureSource": {}})
        .obj()
    )
    [problem] = unsupported_volumes(pod)
    assert problem.startswith("volume 'odd' uses a volume source Shoal does not know")


def test_the_index_follows_many_updates_across_log_compactions() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="1").hostname_label() for i in range(3)))
    h.add_storage(make_storage_class("local").wait_for_first_consumer())
    catalog = VolumeCatalog.of(h.scheduler.handle)
    index = VolumeIndex(catalog, h.scheduler.snapshot)
    claim = make_pvc("c").storage_class("local").request("5Gi").obj()
    epoch = catalog.volume_changes.epoch
    # Far more updates than the log keeps: the index must end up exactly right.
    for round_ in range(400):
        for i in range(3):
            size = f"{1 + (round_ + i) % 9}Gi"
            h.add_storage(make_pv(f"v{i}").storage_class("local").capacity(size).on_nodes(f"n{i}"))
        if round_ % 50 == 0:
            index.candidates(claim)  # follow part of the way
    h.delete_storage("PersistentVolume", "v2")
    assert catalog.volume_changes.epoch > epoch
    found = [index.volume(int(s)).metadata.name for s in index.candidates(claim)]
    expected = sorted(
        (v for v in catalog.volumes.values() if v.capacity >= claim.request),
        key=lambda v: v.capacity,
    )
    assert found == [v.metadata.name for v in expected]
    mask = index.any_mask(index.candidates(claim), h.scheduler.cluster.table.n)
    rows = {h.scheduler.cluster.table.row_of[f"n{i}"] for i in range(2)}
    assert set(np.flatnonzero(mask)) <= rows
