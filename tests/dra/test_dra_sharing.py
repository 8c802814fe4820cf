"""Shared claims, releasing devices, gangs, allNodes slices, and profiles without the
plugin."""

from __future__ import annotations

from typing import Any

from shoal.api.manifests import decode
from shoal.api.objects import Pod
from shoal.cache.dra import DeviceCatalog
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import device_class, gpu_slice, resource_claim, with_claims


def _catalog(h: SchedulerHarness) -> DeviceCatalog:
    return DeviceCatalog.of(h.scheduler.handle)


def _devices(h: SchedulerHarness, claim: str) -> list[tuple[str, str]]:
    status = _catalog(h).claims[f"default/{claim}"].status
    assert status.allocation is not None
    return [(r.pool, r.device) for r in status.allocation.devices.results]


def _nodes(h: SchedulerHarness, *names: str) -> None:
    h.add_nodes(*(make_node(n).capacity(cpu="64", memory="256Gi") for n in names))


def test_a_shared_claim_brings_its_second_user_to_the_same_node() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1", "n2", "n3")
    h.add_dra(device_class(), *(gpu_slice(n, count=2) for n in ("n1", "n2", "n3")))
    h.add_dra(resource_claim("shared"))
    h.add_pods(with_claims(make_pod("a"), gpu="shared"))
    first = h.run().placements["default/a"]
    h.add_pods(with_claims(make_pod("b"), gpu="shared"))
    assert h.run().placements["default/b"] == first
    status = _catalog(h).claims["default/shared"].status
    assert sorted(r.name for r in status.reserved_for) == ["a", "b"]
    assert len(_devices(h, "shared")) == 1


def test_two_pending_pods_sharing_a_claim_in_one_run() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1", "n2")
    h.add_dra(device_class(), gpu_slice("n1", count=1), gpu_slice("n2", count=1))
    h.add_dra(resource_claim("shared"))
    h.add_pods(
        with_claims(make_pod("a"), gpu="shared"),
        with_claims(make_pod("b"), gpu="shared"),
    )
    placements = h.run().placements
    assert placements["default/a"] is not None
    assert placements["default/a"] == placements["default/b"]


def test_devices_are_free_again_when_the_claims_users_are_gone() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(), gpu_slice("n1", count=1), resource_claim("c1"), resource_claim("c2"))
    h.add_pods(with_claims(make_pod("a"), gpu="c1"), with_claims(make_pod("b"), gpu="c2"))
    assert h.run().placements == {"default/a": "n1", "default/b": None}
    h.delete_pod("a")
    h.advance(30)
    assert h.node_of("b") == "n1"
    assert _devices(h, "c2") == [("n1", "gpu-0")]


def _gang_pod(i: int) -> Any:
    labels = {
        "pod-group.scheduling.sigs.k8s.io/name": "train",
        "pod-group.scheduling.sigs.k8s.io/min-available": "4",
    }
    return with_claims(make_pod(f"w{i}").labels(labels), gpu=f"w{i}-gpus")


def test_a_gang_of_four_two_gpu_claims_is_all_or_nothing() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(), gpu_slice("n1", count=8))
    h.add_dra(*(resource_claim(f"w{i}-gpus", count=2) for i in range(4)))
    # Another pod holds 2 of the 8 GPUs: 3 members fit, the gang needs 4.
    h.add_dra(resource_claim("other", count=2))
    h.add_pods(with_claims(make_pod("other"), gpu="other"))
    h.run()
    h.add_pods(*(_gang_pod(i) for i in range(4)))
    result = h.advance(5)
    assert [result.placements[f"default/w{i}"] for i in range(4)] == [None] * 4
    catalog = _catalog(h)
    assert all(catalog.allocated(f"default/w{i}-gpus") is None for i in range(4))
    assert int(catalog.free().sum()) == 6
    # The other pod goes: all four members start together, on distinct devices.
    h.delete_pod("other")
    result = h.advance(30)
    assert [result.placements[f"default/w{i}"] for i in range(4)] == ["n1"] * 4
    used = [d for i in range(4) for d in _devices(h, f"w{i}-gpus")]
    assert len(used) == 8 and len(set(used)) == 8


def test_devices_of_all_nodes_slices_serve_any_node() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1", "n2")
    h.add_dra(device_class(), gpu_slice("fabric", count=1, all_nodes=True), resource_claim("c"))
    h.add_pods(with_claims(make_pod("a"), gpu="c"))
    assert h.run().placements["default/a"] in ("n1", "n2")
    status = _catalog(h).claims["default/c"].status
    assert status.allocation is not None and status.allocation.node_selector is None


def test_profiles_without_the_plugin_still_refuse_claims() -> None:
    config = {
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "plugins": {"multiPoint": {"disabled": [{"name": "DynamicResources"}]}},
            }
        ]
    }
    h = SchedulerHarness(config)
    _nodes(h, "n1")
    raw = {
        "metadata": {"name": "dra", "namespace": "default", "uid": "u-dra"},
        "spec": {
            "containers": [{"name": "c"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }
    h.add_pods(decode(raw, Pod))
    placements, messages = h.run()
    assert placements == {"default/dra": None}
    assert "does not enable DynamicResources" in messages["default/dra"]


def test_a_template_pod_waits_for_the_controller() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(), gpu_slice("n1", count=1))
    h.add_pods(with_claims(make_pod("a"), templates={"gpu": "missing-template"}))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert "waiting for the resource claim controller" in messages["default/a"]


def test_a_node_leaving_the_cache_does_not_free_its_pods_devices() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1", "n2")
    h.add_dra(device_class(), gpu_slice("fabric", count=1, all_nodes=True))
    h.add_dra(resource_claim("c1"), resource_claim("c2"))
    h.add_pods(with_claims(make_pod("a"), gpu="c1"))
    node = h.run().placements["default/a"]
    assert node is not None
    h.delete_node(node)  # the pod still exists, and holds the fabric device
    h.add_pods(with_claims(make_pod("b"), gpu="c2"))
    placements, messages = h.advance(10)
    assert placements["default/b"] is None
    assert "only 0 of 1 requested devices free for c2/gpu" in messages["default/b"]
