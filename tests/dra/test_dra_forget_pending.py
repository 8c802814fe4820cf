"""What DynamicResources keeps per pending pod (`DeviceCatalog.plans`: its requests from
PreFilter; `DeviceCatalog.failed`: why its claims did not fit when it was assumed) is
dropped when the pod is deleted before it is ever placed. Before, only a placement or
the claim's reservedFor released it, so every pending claim pod that was deleted left
its entries behind for good: a controller that keeps re-creating pods that cannot fit
grew the catalog without bound."""

from __future__ import annotations

from shoal.cache.dra import DeviceCatalog
from shoal.cache.transaction import Transaction
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import (
    claim_template,
    device_class,
    gpu_slice,
    resource_claim,
    with_claims,
)

LIGHT_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LIGHT_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"


def _full_node() -> tuple[SchedulerHarness, DeviceCatalog]:
    """One node whose only GPU is held, through a claim, by a running pod."""
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="64", memory="256Gi"))
    h.add_dra(device_class(), gpu_slice("n1", count=1), resource_claim("held"))
    h.add_pods(with_claims(make_pod("holder"), gpu="held"))
    assert h.run().placements == {"default/holder": "n1"}
    return h, DeviceCatalog.of(h.scheduler.handle)


def test_pending_claim_pods_created_and_deleted_leave_nothing_behind() -> None:
    h, catalog = _full_node()
    h.add_dra(claim_template("gpu-template"))
    baseline = (len(catalog.plans), len(catalog.failed))
    for cycle in range(100):
        names = [f"p{cycle}-{k}" for k in range(3)]
        h.add_dra(resource_claim(f"c{cycle}"))
        h.add_pods(
            with_claims(make_pod(names[0]), gpu=f"c{cycle}"),  # a claim by name
            with_claims(make_pod(names[1]), gpu=f"c{cycle}"),  # the same claim, shared
            # one from a template (the harness plays the resource-claim controller)
            with_claims(make_pod(names[2]), {"gpu": "gpu-template"}),
        )
        result = h.run()
        for name in names:
            assert result.placements[f"default/{name}"] is None
            assert "requested devices free" in result.messages[f"default/{name}"]
        # Tried and pending: each has its plan meanwhile.
        assert len(catalog.plans) == baseline[0] + 3
        for name in names:
            h.delete_pod(name)
        h.delete_dra("ResourceClaim", f"c{cycle}")
        h.delete_dra("ResourceClaim", f"{names[2]}-gpu")
        assert (len(catalog.plans), len(catalog.failed)) == baseline, cycle
    assert h.result().placements == {"default/holder": "n1"}


def test_pending_gang_members_with_claims_leave_nothing_behind() -> None:
    h, catalog = _full_node()
    for cycle in range(50):
        group = {LIGHT_NAME: f"g{cycle}", LIGHT_MIN: "2"}
        h.add_dra(resource_claim(f"a{cycle}"), resource_claim(f"b{cycle}"))
        h.add_pods(
            with_claims(make_pod(f"a{cycle}").labels(group), gpu=f"a{cycle}"),
            with_claims(make_pod(f"b{cycle}").labels(group), gpu=f"b{cycle}"),
        )
        result = h.run()
        assert result.placements[f"default/a{cycle}"] is None
        h.delete_pod(f"a{cycle}")
        h.delete_pod(f"b{cycle}")
        h.delete_dra("ResourceClaim", f"a{cycle}")
        h.delete_dra("ResourceClaim", f"b{cycle}")
        assert (len(catalog.plans), len(catalog.failed)) == (0, 0), cycle


def test_a_deleted_pending_pod_whose_claims_failed_at_assume_is_forgotten() -> None:
    """A what-if that assumes a pending pod without running Reserve (as a migration
    plan's does) records why its claims did not fit; deleting the pod drops that too."""
    h, catalog = _full_node()
    h.add_dra(resource_claim("c"))
    (pending,) = h.add_pods(with_claims(make_pod("p"), gpu="c"))
    assert h.run().placements["default/p"] is None
    assert pending.uid in catalog.plans
    with Transaction(h.scheduler.cluster) as tx:
        tx.assume(pending, "n1")  # the one GPU is held: the allocation fails
        assert pending.uid in catalog.failed
    h.delete_pod("p")
    assert pending.uid not in catalog.plans
    assert pending.uid not in catalog.failed
    # The holder is untouched and the claim can be used by a new pod once it is free.
    h.delete_pod("holder")
    h.add_pods(with_claims(make_pod("q"), gpu="c"))
    assert h.run().placements["default/q"] == "n1"
