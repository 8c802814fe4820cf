"""Tenant queues count the devices pods ask for through DRA claims: under the class's
`extendedResourceName` (one quota with whole GPUs and shares) or kube's implicit
`deviceclass.resource.kubernetes.io/<class>` name."""

from __future__ import annotations

import msgspec

from shoal.api.dra import DeviceClass
from shoal.testing import PodBuilder, make_node, make_pod
from shoal.testing.dra import (
    DRIVER,
    claim_template,
    device_class,
    gpu_slice,
    resource_claim,
    with_claims,
)

from .helpers import GPU, harness, queue

IMPLICIT = f"deviceclass.resource.kubernetes.io/{DRIVER}"


def _team(name: str) -> PodBuilder:
    return make_pod(name).labels({"shoal.dev/queue": "team"}).req(cpu="100m")


def _as_gpus(cls: DeviceClass) -> DeviceClass:
    spec = msgspec.structs.replace(cls.spec, extended_resource_name=GPU)
    return msgspec.structs.replace(cls, spec=spec)


def test_a_queue_max_on_the_implicit_class_name_caps_claimed_devices() -> None:
    h = harness()
    h.add_nodes(make_node("n1").capacity(cpu="16", memory="64Gi"))
    assert h.scheduler.apply_queues([queue("team", max={IMPLICIT: 2})]) == []
    h.add_dra(device_class(), gpu_slice("n1", count=8))
    h.add_dra(*(resource_claim(f"c{i}") for i in range(3)))
    h.add_pods(*(with_claims(_team(f"p{i}"), gpu=f"c{i}") for i in range(3)))
    placements, messages = h.run()
    assert sorted(v or "-" for v in placements.values()) == ["-", "n1", "n1"]
    [waiting] = [k for k, v in placements.items() if v is None]
    assert (
        f"queue team would exceed its max {IMPLICIT}: uses 2, pod asks 1, max 2"
        in (messages[waiting])
    )
    queues = h.scheduler.tenant_queues
    q, k = queues.tree.index["team"], queues.tree.resource_index[IMPLICIT]
    assert queues.usage[q, k] == 2
    h.delete_pod(next(k for k, v in placements.items() if v).partition("/")[2])
    assert queues.usage[q, k] == 1
    assert h.advance(10).placements[waiting] == "n1"


def test_a_class_naming_nvidia_gpu_shares_one_quota_with_whole_gpus() -> None:
    h = harness()
    h.add_nodes(make_node("n1").capacity(cpu="16", memory="64Gi", **{GPU: "4"}))
    assert h.scheduler.apply_queues([queue("team", max={GPU: 2})]) == []
    h.add_dra(_as_gpus(device_class()), gpu_slice("n1", count=4), resource_claim("one"))
    h.add_dra(resource_claim("other"))
    h.add_pods(_team("whole").req(**{GPU: "1"}))
    h.add_pods(with_claims(_team("claimed"), gpu="one"))
    h.add_pods(with_claims(_team("third"), gpu="other"))
    placements, messages = h.run()
    assert sorted(v or "-" for v in placements.values()) == ["-", "n1", "n1"]
    [waiting] = [k for k, v in placements.items() if v is None]
    assert (
        f"queue team would exceed its max {GPU}: uses 2, pod asks 1, max 2" in (messages[waiting])
    )
    queues = h.scheduler.tenant_queues
    q, k = queues.tree.index["team"], queues.tree.resource_index[GPU]
    assert queues.usage[q, k] == 2000  # milli-GPU, as whole GPUs and shares


def test_template_claims_count_their_devices_before_the_claim_exists() -> None:
    h = harness()
    h.add_nodes(make_node("n1").capacity(cpu="16", memory="64Gi"))
    assert h.scheduler.apply_queues([queue("team", max={IMPLICIT: 3})]) == []
    h.add_dra(device_class(), gpu_slice("n1", count=8), claim_template("pair", count=2))
    h.add_pods(*(with_claims(_team(f"p{i}"), templates={"gpus": "pair"}) for i in range(2)))
    placements, messages = h.run()
    assert sorted(v or "-" for v in placements.values()) == ["-", "n1"]
    [waiting] = [k for k, v in placements.items() if v is None]
    assert f"{IMPLICIT}: uses 2, pod asks 2, max 3" in messages[waiting]


def test_admin_access_requests_charge_nothing() -> None:
    from shoal.api.dra import ResourceClaim
    from shoal.api.manifests import decode

    h = harness()
    h.add_nodes(make_node("n1").capacity(cpu="16", memory="64Gi"))
    assert h.scheduler.apply_queues([queue("team", max={IMPLICIT: 1})]) == []
    exactly = {"deviceClassName": DRIVER, "count": 1, "adminAccess": True}
    admin = decode(
        {
            "metadata": {"name": "monitor", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        },
        ResourceClaim,
    )
    h.add_dra(device_class(), gpu_slice("n1", count=2), admin, resource_claim("job"))
    h.add_pods(with_claims(_team("monitor"), gpu="monitor"), with_claims(_team("job"), gpu="job"))
    assert h.run().placements == {"default/monitor": "n1", "default/job": "n1"}
