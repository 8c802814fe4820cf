"""The pods that left the cache, remembered so their claims' devices count as free,
are bounded: one is forgotten once no claim names it in status.reservedFor (the
resource-claim controller removed it, or the claim was deleted), and of those no claim
names only the newest RECENT_DEPARTURES are kept (a claim written for a pod may be seen
after the pod is gone)."""

from __future__ import annotations

import msgspec

from shoal.api.dra import ResourceClaim
from shoal.cache.dra import RECENT_DEPARTURES, DeviceCatalog
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import device_class, gpu_slice, resource_claim, with_claims

from .test_dra_preemption import play_claim_controller


def _harness(gpus: int = 2) -> tuple[SchedulerHarness, DeviceCatalog]:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="64", memory="256Gi"))
    h.add_dra(device_class(), gpu_slice("n1", count=gpus))
    return h, DeviceCatalog.of(h.scheduler.handle)


def _reserved_for(claim: ResourceClaim, *uids: str) -> ResourceClaim:
    kept = [r for r in claim.status.reserved_for if r.uid in uids]
    status = msgspec.structs.replace(claim.status, reserved_for=kept)
    return msgspec.structs.replace(claim, status=status)


def test_a_departed_pod_is_forgotten_when_the_controller_releases_its_claim() -> None:
    h, catalog = _harness()
    h.add_dra(resource_claim("c1"), resource_claim("c2"))
    h.add_pods(with_claims(make_pod("a"), gpu="c1"), with_claims(make_pod("b"), gpu="c2"))
    assert set(h.run().placements.values()) == {"n1"}
    h.delete_pod("a")
    h.delete_pod("b")
    h.run()
    assert catalog.departed == 2  # both claims still name their pod
    assert int(catalog.free().sum()) == 2  # and count as released meanwhile
    # The controller takes "a" out of c1's reservedFor (and deallocates c1) ...
    assert play_claim_controller(h) == ["default/c1", "default/c2"]
    assert catalog.departed == 0
    assert int(catalog.free().sum()) == 2


def test_a_departed_pod_is_forgotten_when_its_claim_is_deleted() -> None:
    h, catalog = _harness()
    h.add_dra(resource_claim("c1"))
    h.add_pods(with_claims(make_pod("a"), gpu="c1"))
    h.run()
    h.delete_pod("a")
    assert catalog.departed == 1
    h.delete_dra("ResourceClaim", "c1")
    assert catalog.departed == 0
    # A claim made again by that name is a new claim: allocated afresh.
    h.add_dra(resource_claim("c1"))
    h.add_pods(with_claims(make_pod("b"), gpu="c1"))
    assert h.run().placements["default/b"] == "n1"


def test_churn_keeps_no_more_than_the_claims_name() -> None:
    h, catalog = _harness(gpus=1)
    for i in range(300):
        h.add_dra(resource_claim(f"c{i}"))
        h.add_pods(with_claims(make_pod(f"p{i}"), gpu=f"c{i}"))
        assert h.run().placements[f"default/p{i}"] == "n1"
        h.delete_pod(f"p{i}")
        if i % 2:
            h.delete_dra("ResourceClaim", f"c{i}")
    # Every claim left names its departed pod (nobody plays the controller here).
    assert catalog.departed == 150
    play_claim_controller(h)
    assert catalog.departed == 0
    assert int(catalog.free().sum()) == 1


def test_departures_no_claim_names_are_capped() -> None:
    h, catalog = _harness()
    h.add_dra(resource_claim("c"))
    pods = h.add_pods(*(with_claims(make_pod(f"p{i}"), gpu="c") for i in range(3)))
    # Pods deleted with no claim naming them yet leave: only the newest are
    # remembered (a claim written for one may still be seen after it).
    for round_ in range(RECENT_DEPARTURES // 3 + 10):
        for info in pods:
            catalog.forget_pod(info.uid)
            if round_ % 2:
                catalog.pod_placed(0, info)  # placed again: not departed
                catalog.forget_pod(info.uid)
    assert catalog.departed == 3
    extra = [
        info
        for i in range(RECENT_DEPARTURES + 50)
        for info in h.add_pods(with_claims(make_pod(f"x{i}"), gpu="c"))
    ]
    for info in extra:
        catalog.forget_pod(info.uid)
    assert catalog.departed == RECENT_DEPARTURES


def test_a_claim_naming_a_pod_that_already_left_is_released() -> None:
    """The claim's watch brings the write naming the pod after the pod is gone: the
    claim is known to be unused at once (not held until a controller cleans it up)."""
    h, catalog = _harness(gpus=1)
    h.add_dra(resource_claim("c"), resource_claim("later"))
    (info,) = h.add_pods(with_claims(make_pod("a"), gpu="c"))
    h.run()
    written = catalog.claims["default/c"]
    assert [r.uid for r in written.status.reserved_for] == [info.uid]
    h.add_dra(_reserved_for(written))  # as if the write had not been seen yet
    h.delete_pod("a")
    h.run()
    assert catalog.departed == 1  # remembered although no claim names it
    h.add_dra(written)  # the late echo
    assert catalog.departed == 1
    assert catalog.allocated("default/c") is None
    h.add_pods(with_claims(make_pod("b"), gpu="later"))
    assert h.run().placements["default/b"] == "n1"
