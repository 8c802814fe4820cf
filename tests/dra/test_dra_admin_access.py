"""Admin access (KEP-5018: `exactly.adminAccess: true`, for monitoring and debugging
tools): the request may take a device that other claims hold, its allocation says
`adminAccess: true`, and it takes the device from nobody. (The API server admits such
claims only in namespaces labelled `resource.kubernetes.io/admin-access: "true"`.)"""

from __future__ import annotations

from typing import Any

from shoal.api.dra import ResourceClaim
from shoal.api.manifests import decode
from shoal.cache.dra import DeviceCatalog
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import DRIVER, device_class, gpu_slice, resource_claim, with_claims


def _admin_claim(name: str, count: int = 1) -> ResourceClaim:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER, "count": count, "adminAccess": True}
    return decode(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        },
        ResourceClaim,
    )


def _results(h: SchedulerHarness, name: str) -> list[tuple[str, bool | None]]:
    claim = DeviceCatalog.of(h.scheduler.handle).claims[f"default/{name}"]
    allocation = claim.status.allocation
    assert allocation is not None, name
    return [(r.device, r.admin_access) for r in allocation.devices.results]


def test_an_admin_claim_takes_a_device_in_use_and_leaves_it_to_others() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="32Gi"))
    h.add_dra(device_class(), gpu_slice("n1", count=1), resource_claim("job"))
    h.add_pods(with_claims(make_pod("job").req(cpu="1"), gpu="job"))
    assert h.run().placements == {"default/job": "n1"}
    # The only GPU is the job's: a monitor with admin access still gets it.
    h.add_dra(_admin_claim("monitor"))
    h.add_pods(with_claims(make_pod("monitor").req(cpu="1"), gpu="monitor"))
    assert h.run().placements["default/monitor"] == "n1"
    assert _results(h, "monitor") == [("gpu-0", True)]
    # And it took the device from nobody: once the job is gone, a new claim gets it.
    h.delete_pod("job")
    h.add_dra(resource_claim("next"))
    h.add_pods(with_claims(make_pod("next").req(cpu="1"), gpu="next"))
    assert h.advance(10).placements["default/next"] == "n1"
    assert _results(h, "next") == [("gpu-0", None)]


def test_an_admin_claim_first_leaves_the_device_free_for_a_plain_one() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="32Gi"))
    h.add_dra(device_class(), gpu_slice("n1", count=2), _admin_claim("monitor", count=2))
    h.add_dra(resource_claim("job", count=2))
    h.add_pods(with_claims(make_pod("monitor").req(cpu="1"), gpu="monitor"))
    assert h.run().placements == {"default/monitor": "n1"}
    h.add_pods(with_claims(make_pod("job").req(cpu="1"), gpu="job"))
    assert h.run().placements["default/job"] == "n1"
    assert sorted(_results(h, "job")) == [("gpu-0", None), ("gpu-1", None)]
