"""VolumeRestrictions, kube-scheduler's semantics: inline disks two pods on one node may
not share, and ReadWriteOncePod claims one pod in the cluster may use, with preemption
freeing either."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.api.volumes import InlineDisk
from shoal.plugins.volume_restrictions import REASON_DISK_CONFLICT, REASON_READ_WRITE_ONCE_POD
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import PodBuilder
from shoal.testing.volumes import make_pvc, make_storage_class


def nodes(count: int, cpu: str = "4") -> SchedulerHarness:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu=cpu, memory="8Gi") for i in range(count)))
    return h


def with_disk(name: str, source: str, spec: dict[str, Any]) -> PodBuilder:
    return make_pod(name).req(cpu="100m").volume({"name": "disk", source: spec})


GCE_RW = ("gcePersistentDisk", {"pdName": "pd-1"})
GCE_RO = ("gcePersistentDisk", {"pdName": "pd-1", "readOnly": True})
EBS = ("awsElasticBlockStore", {"volumeID": "vol-1"})
EBS_RO = ("awsElasticBlockStore", {"volumeID": "vol-1", "readOnly": True})
ISCSI_RW = ("iscsi", {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.2026-11.io:t", "lun": 0})
ISCSI_RO = ("iscsi", {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.2026-11.io:t", "lun": 0,
                      "readOnly": True})  # fmt: skip
RBD_A = ("rbd", {"monitors": ["m1:6789", "m2:6789"], "image": "img", "pool": "p"})
RBD_B = ("rbd", {"monitors": ["m2:6789"], "image": "img", "pool": "p"})  # shares m2
RBD_OTHER_MON = ("rbd", {"monitors": ["m9:6789"], "image": "img", "pool": "p"})
RBD_OTHER_POOL = ("rbd", {"monitors": ["m1:6789"], "image": "img"})  # pool "rbd"


@pytest.mark.parametrize(
    ("first", "second", "conflict"),
    [
        (GCE_RW, GCE_RW, True),
        (GCE_RW, GCE_RO, True),
        (GCE_RO, GCE_RO, False),  # read-only mounts share a GCE disk
        (GCE_RW, ("gcePersistentDisk", {"pdName": "pd-2"}), False),
        (EBS, EBS, True),
        (EBS_RO, EBS_RO, True),  # an EBS volume is never shared, read-only or not
        (ISCSI_RW, ISCSI_RO, True),
        (ISCSI_RO, ISCSI_RO, False),
        (RBD_A, RBD_B, True),
        (RBD_A, RBD_OTHER_MON, False),  # no monitor in common: another cluster's image
        (RBD_A, RBD_OTHER_POOL, False),
        (GCE_RW, EBS, False),
    ],
)
def test_a_second_pod_with_the_same_inline_disk_goes_to_another_node_when_they_conflict(
    first: tuple[str, dict[str, Any]], second: tuple[str, dict[str, Any]], conflict: bool
) -> None:
    h = nodes(1)
    h.add_pods(with_disk("a", *first))
    assert h.run().placements == {"default/a": "n0"}
    h.add_pods(with_disk("b", *second))
    placements, messages = h.run()
    if conflict:
        assert placements["default/b"] is None
        expected = f"0/1 nodes are available: 1 {REASON_DISK_CONFLICT}"
        assert messages["default/b"].startswith(expected)
    else:
        assert placements["default/b"] == "n0"


def test_conflicting_disks_spread_over_nodes_and_the_last_one_waits_until_a_holder_leaves() -> None:
    h = nodes(2)
    h.add_pods(*(with_disk(f"p{i}", *EBS) for i in range(3)))
    placements, messages = h.run()
    assert sorted(n for n in placements.values() if n) == ["n0", "n1"]
    (waiting,) = [k for k, n in placements.items() if n is None]
    assert REASON_DISK_CONFLICT in messages[waiting]
    holder = next(k for k, n in placements.items() if n == "n1")
    h.delete_pod(holder.split("/")[1])
    assert h.advance(30).placements[waiting] == "n1"


def test_a_higher_priority_pod_preempts_the_holder_of_its_disk() -> None:
    """kube: the disk conflict is Unschedulable, so preemption may free the node; the
    holder (priority 0) is the victim, the unrelated pod on the node stays."""
    h = nodes(1)
    h.add_pods(with_disk("low", *GCE_RW).priority(0), make_pod("other").req(cpu="1").priority(0))
    h.run()
    h.add_pods(with_disk("high", *GCE_RW).priority(100))
    result = h.advance(30)
    assert result.placements["default/high"] == "n0"
    assert "default/low" in h.evicted
    assert "default/other" not in h.evicted


def rwop(h: SchedulerHarness, name: str = "solo") -> None:
    h.add_storage(
        make_storage_class("std").wait_for_first_consumer(),
        make_pvc(name).storage_class("std").access_modes("ReadWriteOncePod"),
    )


def test_a_read_write_once_pod_claim_in_use_is_reported_on_every_node() -> None:
    h = nodes(3)
    rwop(h)
    h.add_pods(make_pod("first").pvc("solo").req(cpu="100m"))
    h.run()
    h.add_pods(make_pod("second").pvc("solo").req(cpu="100m"))
    placements, messages = h.run()
    assert placements["default/second"] is None
    assert messages["default/second"].startswith(
        f"0/3 nodes are available: 3 {REASON_READ_WRITE_ONCE_POD}."
    )


def test_a_higher_priority_pod_preempts_the_user_of_its_read_write_once_pod_claim() -> None:
    """kube's VolumeRestrictions with preemption (its PreFilterExtensions): the claim's
    user is evicted, on the node it runs on, and the preemptor takes the claim there. Pods
    on the other nodes are not touched."""
    h = nodes(3)
    rwop(h)
    h.add_pods(make_pod("user").pvc("solo").req(cpu="100m").priority(0))
    h.add_pods(*(make_pod(f"bystander{i}").req(cpu="100m").priority(0) for i in range(3)))
    h.run()
    where = h.node_of("default/user")
    h.add_pods(make_pod("urgent").pvc("solo").req(cpu="100m").priority(100))
    result = h.advance(30)
    assert result.placements["default/urgent"] == where
    assert set(h.evicted) == {"default/user"}


def test_a_claim_user_of_higher_priority_is_not_preempted() -> None:
    h = nodes(2)
    rwop(h)
    h.add_pods(make_pod("user").pvc("solo").req(cpu="100m").priority(100))
    h.run()
    h.add_pods(make_pod("low").pvc("solo").req(cpu="100m").priority(0))
    placements, messages = h.advance(30)
    assert placements["default/low"] is None and not h.evicted
    assert REASON_READ_WRITE_ONCE_POD in messages["default/low"]


def test_a_missing_claim_keeps_the_pod_pending_with_kubes_message() -> None:
    h = nodes(1)
    h.add_pods(make_pod("p").pvc("nowhere"))
    placements, messages = h.run()
    assert placements["default/p"] is None
    assert 'persistentvolumeclaim "nowhere" not found' in messages["default/p"]


def test_disk_identity_follows_kubes_is_volume_conflict() -> None:
    rw = InlineDisk("gcePersistentDisk", "pd", read_only=False)
    ro = InlineDisk("gcePersistentDisk", "pd", read_only=True)
    assert rw.conflicts(ro) and ro.conflicts(rw) and not ro.conflicts(ro)
    ebs = InlineDisk("awsElasticBlockStore", "vol", read_only=True)
    assert ebs.conflicts(ebs)
    a = InlineDisk("rbd", "p/img", False, frozenset({"m1"}))
    b = InlineDisk("rbd", "p/img", False, frozenset({"m2"}))
    assert not a.conflicts(b)


def test_a_node_is_reported_for_its_first_reason_only() -> None:
    """kube reports a node for the disk conflict before the claim in use: with both on
    the one node of two that holds the disk, one node names each reason."""
    h = nodes(2)
    rwop(h)
    h.add_pods(with_disk("holder", *EBS).pvc("solo").node("n0"))
    h.run()
    h.add_pods(with_disk("second", *EBS).pvc("solo"))
    placements, messages = h.run()
    assert placements["default/second"] is None
    message = messages["default/second"]
    assert f"1 {REASON_DISK_CONFLICT}" in message
    assert f"1 {REASON_READ_WRITE_ONCE_POD}" in message


def test_with_only_disk_conflicts_no_claim_reason_is_given() -> None:
    h = nodes(1)
    rwop(h)
    h.add_pods(with_disk("holder", *EBS).pvc("solo").node("n0"))
    h.run()
    h.add_pods(with_disk("second", *EBS).pvc("solo"))
    message = h.run().messages["default/second"]
    assert message.startswith(f"0/1 nodes are available: 1 {REASON_DISK_CONFLICT}.")
    assert "ReadWriteOncePod" not in message.split("preemption:")[0]
