"""Volumes with kube-scheduler semantics, as scenarios: a cluster with storage objects,
pods that use them, and where they land (or why they wait). Run through the whole
scheduler (SchedulerHarness: the default profile, the in-memory effects port)."""

from __future__ import annotations

import pytest

from shoal.api.errors import ManifestError
from shoal.api.objects import LabelSelector
from shoal.api.volumes import ANNOTATION_SELECTED_NODE, NO_PROVISIONER
from shoal.cache.volumes import VolumeCatalog
from shoal.framework.effects import BindVolumes
from shoal.testing.builders import make_node, make_pod
from shoal.testing.harness import SchedulerHarness
from shoal.testing.volumes import (
    make_csi_node,
    make_pv,
    make_pvc,
    make_storage_class,
)

ZONE = "topology.kubernetes.io/zone"


def cluster(*zones: str) -> SchedulerHarness:
    """One node per zone given, n0.., labelled with zone and hostname."""
    h = SchedulerHarness()
    h.add_nodes(
        *(
            make_node(f"n{i}").capacity(cpu="4", memory="8Gi").zone(z).hostname_label()
            for i, z in enumerate(zones)
        )
    )
    return h


def catalog(h: SchedulerHarness) -> VolumeCatalog:
    return VolumeCatalog.of(h.scheduler.handle)


# ---- VolumeBinding: bound claims --------------------------------------------------------


def test_a_bound_claim_follows_its_volumes_node_affinity() -> None:
    h = cluster("a", "a", "b")
    h.add_storage(
        make_pv("local-n2").on_nodes("n2").claimed_by("data"),
        make_pvc("data").bound_to("local-n2"),
    )
    h.add_pods(make_pod("db").pvc("data"))
    assert h.run().placements == {"default/db": "n2"}


def test_a_bound_claim_whose_volume_fits_no_node_waits_with_kube_reason() -> None:
    h = cluster("a", "b")
    h.add_storage(
        make_pv("elsewhere").on_nodes("gone").claimed_by("data"),
        make_pvc("data").bound_to("elsewhere"),
    )
    h.add_pods(make_pod("db").pvc("data"))
    placements, messages = h.run()
    assert placements["default/db"] is None
    assert messages["default/db"] == (
        "0/2 nodes are available: 2 node(s) had volume node affinity conflict."
        " preemption: 0/2 nodes are available: 2 Preemption is not helpful for "
        "scheduling."
    )


def test_a_claim_bound_to_a_missing_volume_waits() -> None:
    h = cluster("a")
    h.add_storage(make_pvc("data").bound_to("nowhere"))
    h.add_pods(make_pod("db").pvc("data"))
    # VolumeZone's PreFilter, like kube's, names the missing volume first.
    assert h.run().messages["default/db"] == (
        '0/1 nodes are available: persistentvolume "nowhere" not found.'
        " preemption: 0/1 nodes are available: 1 Preemption is not helpful for "
        "scheduling."
    )


# ---- VolumeBinding: unbound claims ----------------------------------------------------


def test_an_unbound_immediate_claim_keeps_the_pod_pending_until_bound() -> None:
    h = cluster("a", "b")
    h.add_storage(
        make_storage_class("standard").immediate(), make_pvc("data").storage_class("standard")
    )
    h.add_pods(make_pod("db").pvc("data"))
    placements, messages = h.run()
    assert placements["default/db"] is None
    assert messages["default/db"] == (
        "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims."
        " preemption: 0/2 nodes are available: 2 Preemption is not helpful for "
        "scheduling."
    )
    # The PV controller binds it: the claim update retries the pod at once.
    h.add_storage(make_pv("pv").storage_class("standard").claimed_by("data"))
    h.add_storage(make_pvc("data").storage_class("standard").bound_to("pv"))
    assert h.advance(10).placements["default/db"] is not None


def test_missing_claims_and_classes_keep_the_pod_pending_with_their_names() -> None:
    h = cluster("a")
    h.add_pods(make_pod("no-claim").pvc("nope"))
    h.add_storage(make_pvc("classless").storage_class("gold"))
    h.add_pods(make_pod("no-class").pvc("classless"))
    messages = h.run().messages
    assert 'persistentvolumeclaim "nope" not found' in messages["default/no-claim"]
    assert 'storageclass.storage.k8s.io "gold" not found' in messages["default/no-class"]
    # Creating the missing objects retries the pods.
    h.add_storage(
        make_storage_class("gold").wait_for_first_consumer(),
        make_storage_class("std").wait_for_first_consumer(),
        make_pvc("nope").storage_class("std"),
    )
    assert h.advance(10).placements == {"default/no-claim": "n0", "default/no-class": "n0"}


def test_wait_for_first_consumer_picks_the_smallest_fitting_static_volume() -> None:
    h = cluster("a", "a", "a")
    h.add_storage(
        make_storage_class("local").wait_for_first_consumer().provisioner(NO_PROVISIONER),
        make_pv("big-n0").capacity("100Gi").storage_class("local").on_nodes("n0"),
        make_pv("small-n1").capacity("10Gi").storage_class("local").on_nodes("n1"),
        make_pv("tiny-n2").capacity("1Gi").storage_class("local").on_nodes("n2"),
        make_pv("rox-n2")
        .capacity("20Gi")
        .storage_class("local")
        .on_nodes("n2")
        .access_modes("ReadOnlyMany"),
        make_pvc("data").request("5Gi").storage_class("local"),
    )
    h.add_pods(make_pod("db").pvc("data"))
    placements, _ = h.run()
    # n2's volumes are too small or of the wrong access mode; n0 and n1 both fit, and
    # whichever node is chosen gets its own volume.
    node = placements["default/db"]
    assert node in ("n0", "n1")
    [bind] = h.effects.volume_bindings
    assert bind.static == (("default/data", "big-n0" if node == "n0" else "small-n1"),)
    # The in-memory PV controller bound both sides.
    assert catalog(h).claims["default/data"].spec.volume_name in ("big-n0", "small-n1")


def test_static_matching_honours_selectors_volume_modes_and_shared_hostnames() -> None:
    h = SchedulerHarness()
    # Two nodes share a hostname label value (kube allows it): a volume pinned to that
    # hostname may go to either.
    h.add_nodes(
        make_node("x1").capacity(cpu="1").label("kubernetes.io/hostname", "shared"),
        make_node("x2").capacity(cpu="1").label("kubernetes.io/hostname", "shared"),
        make_node("y").capacity(cpu="1").label("kubernetes.io/hostname", "y"),
    )
    h.add_storage(
        make_storage_class("local").wait_for_first_consumer().provisioner(NO_PROVISIONER),
        make_pv("fast-y").storage_class("local").on_nodes("y").labels(tier="fast"),
        make_pv("slow-shared").storage_class("local").on_nodes("shared").labels(tier="slow"),
        make_pv("block-y").storage_class("local").on_nodes("y").labels(tier="slow"),
    )
    block = make_pv("block-y").storage_class("local").on_nodes("y").labels(tier="slow").obj()
    block.spec.volume_mode = "Block"
    h.add_storage(block)
    slow = make_pvc("slow").storage_class("local").obj()
    slow.spec.selector = LabelSelector(match_labels={"tier": "slow"})
    h.add_storage(slow)
    h.add_pods(make_pod("a").req(cpu="1").pvc("slow"), make_pod("b").req(cpu="1").pvc("slow"))
    placements = h.run().placements
    # The filesystem claim cannot take the Block volume on y: the slow volume on a
    # "shared" node serves it (the second pod shares the claim and follows it).
    assert placements["default/a"] in ("x1", "x2")
    assert h.effects.volume_bindings[0].static == (("default/slow", "slow-shared"),)


def test_two_claims_never_take_the_same_volume() -> None:
    h = cluster("a", "a")
    h.add_storage(
        make_storage_class("local").wait_for_first_consumer().provisioner(NO_PROVISIONER),
        make_pv("only-n0").capacity("10Gi").storage_class("local").on_nodes("n0"),
        make_pv("one-n1").capacity("10Gi").storage_class("local").on_nodes("n1"),
        make_pv("two-n1").capacity("10Gi").storage_class("local").on_nodes("n1"),
        make_pvc("a").storage_class("local"),
        make_pvc("b").storage_class("local"),
    )
    h.add_pods(make_pod("db").pvc("a").pvc("b"))
    assert h.run().placements == {"default/db": "n1"}
    [bind] = h.effects.volume_bindings
    assert sorted(v for _, v in bind.static) == ["one-n1", "two-n1"]


def test_a_volume_taken_by_one_pod_is_not_offered_to_the_next() -> None:
    h = cluster("a", "a")
    h.add_storage(
        make_storage_class("local").wait_for_first_consumer().provisioner(NO_PROVISIONER),
        make_pv("only").storage_class("local").on_nodes("n0"),
        make_pvc("first").storage_class("local"),
        make_pvc("second").storage_class("local"),
    )
    h.add_pods(make_pod("a").pvc("first"), make_pod("b").pvc("second"))
    placements, messages = h.run()
    assert placements == {"default/a": "n0", "default/b": None}
    assert "2 node(s) didn't find available persistent volumes to bind" in messages["default/b"]


def test_dynamic_provisioning_honours_allowed_topologies_and_marks_the_claim() -> None:
    h = cluster("a", "b", "b")
    h.add_storage(
        make_storage_class("zonal").wait_for_first_consumer().allowed_topology(ZONE, "b"),
        make_pvc("data").storage_class("zonal"),
    )
    h.add_pods(make_pod("db").pvc("data"))
    node = h.run().placements["default/db"]
    assert node in ("n1", "n2")
    assert h.effects.volume_bindings == [
        BindVolumes(h.effects.volume_bindings[0].pod, node, (), ("default/data",))
    ]
    claim = catalog(h).claims["default/data"]
    assert claim.metadata.annotations[ANNOTATION_SELECTED_NODE] == node
    # A second pod sharing the claim follows it to that node.
    h.add_pods(make_pod("reader").pvc("data"))
    assert h.run().placements["default/reader"] == node


def test_a_claim_already_marked_for_a_node_pins_the_pod_there() -> None:
    h = cluster("a", "a", "a")
    h.add_storage(
        make_storage_class("std").wait_for_first_consumer(),
        make_pvc("data").storage_class("std").selected_node("n2"),
    )
    h.add_pods(make_pod("db").pvc("data"))
    assert h.run().placements == {"default/db": "n2"}
    # Nothing left to write; the binding still waits for the claim to be provisioned.
    [effect] = h.effects.volume_bindings
    assert (effect.static, effect.provision, effect.provisioning) == ((), (), ("default/data",))


def test_no_provisioner_and_no_volume_keeps_the_pod_pending() -> None:
    h = cluster("a")
    h.add_storage(
        make_storage_class("local").wait_for_first_consumer().provisioner(NO_PROVISIONER),
        make_pvc("data").storage_class("local"),
    )
    h.add_pods(make_pod("db").pvc("data"))
    assert (
        "1 node(s) didn't find available persistent volumes to bind"
        in h.run().messages["default/db"]
    )
    # A matching volume appears: the pod is retried and placed.
    h.add_storage(make_pv("late").storage_class("local").on_nodes("n0"))
    assert h.advance(10).placements == {"default/db": "n0"}


def test_a_rejected_bind_releases_the_assumed_volume() -> None:
    h = cluster("a")
    h.add_storage(
        make_storage_class("local").wait_for_first_consumer().provisioner(NO_PROVISIONER),
        make_pv("only").storage_class("local").on_nodes("n0"),
        make_pvc("data").storage_class("local"),
    )
    [info] = h.add_pods(make_pod("db").pvc("data"))
    h.effects.fail.add(info.uid)
    h.effects.echo_binds = False
    h.run()
    assert catalog(h).assumed_volume == {}


# ---- generic ephemeral volumes and volumes Shoal does not model -------------------------


def test_an_ephemeral_volume_waits_for_its_claim_and_its_owner() -> None:
    h = cluster("a")
    h.add_storage(make_storage_class("std").wait_for_first_consumer())
    h.add_pods(make_pod("job").uid("job-uid").ephemeral_volume("scratch", "std"))
    assert (
        "waiting for ephemeral volume controller to create the persistentvolumeclaim "
        in (h.run().messages["default/job"])
    )
    h.add_storage(make_pvc("job-scratch").storage_class("std").owned_by_pod("other"))
    assert "(pod is not owner)" in h.advance(10).messages["default/job"]
    h.add_storage(make_pvc("job-scratch").storage_class("std").owned_by_pod("job", "job-uid"))
    assert h.advance(10).placements == {"default/job": "n0"}


def test_volumes_shoal_does_not_model_keep_the_pod_pending() -> None:
    h = cluster("a")
    h.add_pods(make_pod("p").volume({"name": "odd", "someFutureSource": {}}))
    placements, messages = h.run()
    assert placements["default/p"] is None
    assert "uses a volume source Shoal does not know" in messages["default/p"]


def test_pods_with_only_node_local_volumes_schedule_as_before() -> None:
    h = cluster("a")
    h.add_pods(
        make_pod("p")
        .volume({"name": "tmp", "emptyDir": {}})
        .volume({"name": "cfg", "configMap": {"name": "c"}})
        .volume({"name": "tok", "projected": {"sources": []}})
    )
    assert h.run().placements == {"default/p": "n0"}


def test_a_read_write_once_pod_claim_serves_one_pod_at_a_time() -> None:
    h = cluster("a", "a")
    h.add_storage(
        make_storage_class("std").wait_for_first_consumer(),
        make_pvc("solo").storage_class("std").access_modes("ReadWriteOncePod"),
    )
    h.add_pods(make_pod("first").pvc("solo"), make_pod("second").pvc("solo"))
    placements, messages = h.run()
    assert placements["default/first"] is not None and placements["default/second"] is None
    assert messages["default/second"] == (
        "0/2 nodes are available: 2 node(s) unavailable due to PersistentVolumeClaim with "
        "ReadWriteOncePod access mode already in-use by another pod."
        " preemption: 0/2 nodes are available: 2 No preemption victims found for "
        "incoming pod."
    )
    h.delete_pod("first")
    assert h.advance(10).placements["default/second"] is not None


# ---- VolumeZone --------------------------------------------------------------------


def test_a_volume_in_zone_a_keeps_its_pods_in_zone_a() -> None:
    h = cluster("a", "b", "b")
    h.add_storage(make_pv("zonal").zone("a").claimed_by("data"), make_pvc("data").bound_to("zonal"))
    h.add_pods(*(make_pod(f"p{i}").pvc("data") for i in range(3)))
    assert set(h.run().placements.values()) == {"n0"}


def test_a_volume_in_a_zone_without_nodes_keeps_the_pod_pending_with_the_reason() -> None:
    h = cluster("b", "b")
    h.add_storage(make_pv("zonal").zone("a").claimed_by("data"), make_pvc("data").bound_to("zonal"))
    h.add_pods(make_pod("db").pvc("data"))
    placements, messages = h.run()
    assert placements["default/db"] is None
    assert "2 node(s) had no available volume zone" in messages["default/db"]
    # A node in zone a joins: the pod is retried and lands there.
    h.add_nodes(make_node("late").capacity(cpu="4", memory="8Gi").zone("a"))
    assert h.advance(10).placements["default/db"] == "late"


def test_a_multi_zone_label_allows_each_listed_zone_and_unzoned_nodes_pass() -> None:
    h = SchedulerHarness()
    h.add_nodes(
        make_node("in-c").capacity(cpu="1").zone("c"),
        make_node("in-d").capacity(cpu="1").zone("d"),
        make_node("plain").capacity(cpu="1"),
    )
    h.add_storage(
        make_pv("wide").zone("a__c").claimed_by("data"), make_pvc("data").bound_to("wide")
    )
    h.add_pods(*(make_pod(f"p{i}").req(cpu="1").pvc("data") for i in range(3)))
    placements = h.run().placements
    assert sorted(n for n in placements.values() if n) == ["in-c", "plain"]


# ---- NodeVolumeLimits ---------------------------------------------------------------


def csi_cluster(limit: int) -> SchedulerHarness:
    h = cluster("a", "a")
    h.add_storage(
        make_storage_class("ebs").wait_for_first_consumer().provisioner("ebs.csi.aws.com"),
        make_csi_node("n0").driver("ebs.csi.aws.com", count=limit),
        make_csi_node("n1").driver("ebs.csi.aws.com", count=limit),
    )
    return h


def test_the_attach_limit_spreads_pods_then_keeps_them_pending() -> None:
    h = csi_cluster(2)
    for i in range(5):
        h.add_storage(make_pvc(f"d{i}").storage_class("ebs"))
    h.add_pods(*(make_pod(f"p{i}").pvc(f"d{i}") for i in range(5)))
    placements, messages = h.run()
    on = [n for n in placements.values() if n]
    assert sorted(on) == ["n0", "n0", "n1", "n1"]
    [pending] = [k for k, n in placements.items() if n is None]
    assert messages[pending] == (
        "0/2 nodes are available: 2 node(s) exceed max volume count."
        " preemption: 0/2 nodes are available: 2 No preemption victims found for "
        "incoming pod."
    )
    # A pod on n0 goes: its volume detaches and the pending pod fits there.
    gone = next(k for k, n in placements.items() if n == "n0")
    h.delete_pod(gone)
    assert h.advance(10).placements[pending] == "n0"


def test_a_volume_shared_by_pods_on_a_node_counts_once() -> None:
    h = csi_cluster(1)
    h.add_storage(make_pvc("shared").storage_class("ebs").access_modes("ReadWriteMany"))
    h.add_pods(*(make_pod(f"p{i}").pvc("shared") for i in range(4)))
    placements = h.run().placements
    assert len(set(placements.values())) == 1 and None not in placements.values()


def test_bound_volumes_count_for_their_csi_driver_and_nodes_without_csinode_are_unlimited() -> None:
    h = csi_cluster(1)
    h.add_nodes(make_node("free").capacity(cpu="4", memory="8Gi").zone("a"))
    for i in range(4):
        h.add_storage(
            make_pv(f"v{i}").csi("ebs.csi.aws.com").claimed_by(f"c{i}"),
            make_pvc(f"c{i}").bound_to(f"v{i}"),
        )
    h.add_pods(*(make_pod(f"p{i}").pvc(f"c{i}") for i in range(4)))
    placements = h.run().placements
    assert sorted(placements.values(), key=str) == ["free", "free", "n0", "n1"]


def test_pods_read_before_their_claims_count_once_the_claims_arrive() -> None:
    # After a restart the pod informer may deliver bound pods before the claim informer.
    h = cluster("a")
    h.add_pods(make_pod("old").node("n0").pvc("d0"))
    h.add_storage(
        make_storage_class("ebs").wait_for_first_consumer().provisioner("ebs.csi.aws.com"),
        make_csi_node("n0").driver("ebs.csi.aws.com", count=1),
        make_pvc("d0").storage_class("ebs"),
        make_pvc("d1").storage_class("ebs"),
    )
    h.add_pods(make_pod("new").pvc("d1"))
    placements, messages = h.run()
    assert placements == {"default/old": "n0", "default/new": None}
    assert "1 node(s) exceed max volume count" in messages["default/new"]
    # The claim goes away: kube counts only claims it can look up.
    h.delete_storage("PersistentVolumeClaim", "d0")
    assert h.advance(10).placements["default/new"] == "n0"


# ---- bad objects --------------------------------------------------------------------


def test_malformed_storage_objects_name_the_object_and_the_field() -> None:
    with pytest.raises(ManifestError) as caught:
        make_pvc("data").request("lots").obj()
    assert "PersistentVolumeClaim default/data" in str(caught.value)
    assert "spec.resources" in str(caught.value)
    with pytest.raises(ManifestError) as caught:
        make_csi_node("n0").driver("d", count=-1).obj()
    assert "CSINode n0" in str(caught.value) and "count -1 must not be negative" in str(
        caught.value
    )
