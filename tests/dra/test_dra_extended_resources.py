"""Extended resources backed by DRA (KEP-5004, beta and on by default in Kubernetes
1.36): a pod asking for `example.com/gpu` (a DeviceClass's `extendedResourceName`) or
`deviceclass.resource.kubernetes.io/<class>` in its containers, on nodes that do not
list that resource in their allocatable, gets devices of the class through a
ResourceClaim the scheduler makes for it (one request per container and resource,
`container-<i>-request-<j>`, as kube names them); on nodes whose device plugin lists
the resource, NodeResourcesFit counts it as before and no claim is made."""

from __future__ import annotations

from typing import Any

from shoal.api.dra import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    DeviceClass,
    extended_claim_name,
)
from shoal.api.manifests import decode
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import DRIVER, gpu_slice

GPU = "example.com/gpu"


def _class(name: str = "gpu", extended: str | None = GPU) -> DeviceClass:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return decode({"metadata": {"name": name}, "spec": spec}, DeviceClass)


def _harness(*slices: Any, plugin_gpus: dict[str, int] | None = None) -> SchedulerHarness:
    h = SchedulerHarness()
    for name in ("n1", "n2"):
        node = make_node(name).capacity(cpu="16", memory="64Gi")
        if plugin_gpus and name in plugin_gpus:
            node = node.capacity(**{GPU: str(plugin_gpus[name])})
        h.add_nodes(node)
    h.add_dra(_class(), *slices)
    return h


def _claims(h: SchedulerHarness) -> dict[str, Any]:
    catalog: Any = h.scheduler.handle.services["dra"]
    return dict(catalog.claims)


def test_a_pod_asking_for_the_class_resource_gets_devices_through_a_claim() -> None:
    h = _harness(gpu_slice("n2", count=2))
    pod = make_pod("a").req({GPU: "2", "cpu": "1"})
    (info,) = h.add_pods(pod)
    placements, _ = h.run()
    assert placements == {"default/a": "n2"}  # n1 publishes no device
    claims = _claims(h)
    name = extended_claim_name("a", info.uid)
    claim = claims[f"default/{name}"]
    assert claim.metadata.annotations == {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    (owner,) = claim.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("Pod", "a", info.uid, True)
    # cpu is the container's request 0, example.com/gpu request 1 (sorted by name).
    (request,) = claim.spec.devices.requests
    assert request.name == "container-0-request-1"
    assert (request.exactly.device_class_name, request.exactly.count) == ("gpu", 2)
    results = claim.status.allocation.devices.results
    assert sorted(r.device for r in results) == ["gpu-0", "gpu-1"]
    assert [r.uid for r in claim.status.reserved_for] == [info.uid]


def test_the_implicit_class_resource_name_works_too_and_devices_are_not_given_twice() -> None:
    h = _harness(gpu_slice("n2", count=2))
    h.add_pods(
        make_pod("a").req({GPU: "1"}),
        make_pod("b").req({"deviceclass.resource.kubernetes.io/gpu": "1"}),
        make_pod("c").req({GPU: "1"}),
    )
    placements, messages = h.run()
    assert sorted(placements.values(), key=str) == [None, "n2", "n2"]
    waiting = next(k for k, v in placements.items() if v is None)
    assert (
        "no device of class gpu" in messages[waiting]
        or "requested devices free" in messages[waiting]
    )
    taken = [
        (r.pool, r.device) for c in _claims(h).values() for r in c.status.allocation.devices.results
    ]
    assert sorted(taken) == [("n2", "gpu-0"), ("n2", "gpu-1")]


def test_one_request_per_container_and_resource_named_as_kube_names_them() -> None:
    h = _harness(gpu_slice("n2", count=4))
    pod = make_pod("a").req({GPU: "1"}).obj()
    first = pod.spec.containers[0]
    import msgspec

    from shoal.api.objects import Container, ResourceRequirements

    init = Container(name="init", resources=ResourceRequirements(requests={GPU: "1"}))
    second = Container(
        name="second", resources=ResourceRequirements(requests={GPU: "2", "cpu": "100m"})
    )
    spec = msgspec.structs.replace(pod.spec, init_containers=[init], containers=[first, second])
    (info,) = h.add_pods(msgspec.structs.replace(pod, spec=spec))
    placements, _ = h.run()
    assert placements == {"default/a": "n2"}
    claim = _claims(h)[f"default/{extended_claim_name('a', info.uid)}"]
    assert [(r.name, r.exactly.count) for r in claim.spec.devices.requests] == [
        ("container-0-request-0", 1),  # the init container (kube counts it on its own)
        ("container-1-request-0", 1),
        ("container-2-request-1", 2),
    ]


def test_where_the_device_plugin_lists_the_resource_no_claim_is_made() -> None:
    # n1's device plugin lists 2 example.com/gpu; n2 has DRA devices only.
    h = _harness(gpu_slice("n2", count=1), plugin_gpus={"n1": 2})
    h.add_pods(make_pod("a").req({GPU: "2"}), make_pod("b").req({GPU: "1"}))
    placements, _ = h.run()
    assert placements == {"default/a": "n1", "default/b": "n2"}
    claims = _claims(h)
    assert len(claims) == 1  # b's, on n2; a is counted in n1's column
    (claim,) = claims.values()
    assert claim.metadata.owner_references[0].name == "b"


def test_a_resource_no_class_stands_for_is_insufficient_as_before() -> None:
    h = _harness(gpu_slice("n2", count=1))
    h.add_pods(make_pod("a").req({"example.com/fpga": "1"}))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert "Insufficient example.com/fpga" in messages["default/a"]
    assert not _claims(h)


def test_a_deleted_pod_frees_the_devices_of_its_claim() -> None:
    h = _harness(gpu_slice("n2", count=1))
    (a,) = h.add_pods(make_pod("a").req({GPU: "1"}))
    assert h.run()[0] == {"default/a": "n2"}
    h.add_pods(make_pod("b").req({GPU: "1"}))
    assert h.run()[0]["default/b"] is None
    h.delete_pod(a.uid)
    assert h.advance(2.0)[0]["default/b"] == "n2"


def test_nvidia_gpus_through_dra_pass_gpu_share_on_nodes_listing_none() -> None:
    """`nvidia.com/gpu`, the resource GpuShare places on devices, backed by DRA: on a
    node whose allocatable lists no GPU, DynamicResources allocates the devices and
    GpuShare leaves the node to it; on a node listing GPUs, GpuShare places as before
    (and no claim is made)."""
    h = SchedulerHarness()
    h.add_nodes(
        make_node("dra").capacity(cpu="16", memory="64Gi"),
        make_node("plugin").capacity(cpu="16", memory="64Gi", **{"nvidia.com/gpu": "1"}),
    )
    h.add_dra(_class(extended="nvidia.com/gpu"), gpu_slice("dra", count=2))
    h.add_pods(
        make_pod("a").req({"nvidia.com/gpu": "1"}),
        make_pod("b").req({"nvidia.com/gpu": "1"}),
        make_pod("c").req({"nvidia.com/gpu": "1"}),
        make_pod("d").req({"nvidia.com/gpu": "1"}),
    )
    placements, messages = h.run()
    placed = sorted(str(v) for v in placements.values())
    assert placed == ["None", "dra", "dra", "plugin"], (placements, messages)
    claims = _claims(h)
    assert len(claims) == 2
    devices = sorted(r.device for c in claims.values() for r in c.status.allocation.devices.results)
    assert devices == ["gpu-0", "gpu-1"]
