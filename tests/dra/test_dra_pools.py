"""Incomplete and invalid resource pools (kube's GatherPools): nothing is allocated from
a pool whose ResourceSlices are not all seen for a node, or that names a device twice,
and a request for all devices fails on a node such a pool reaches."""

from __future__ import annotations

import msgspec

from shoal.api.dra import ResourceSlice
from shoal.cache.dra_pools import unsettled_pools
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import DRIVER, device_class, gpu_slice, resource_claim, with_claims


def _nodes(h: SchedulerHarness, *names: str) -> None:
    h.add_nodes(*(make_node(n).capacity(cpu="16", memory="64Gi") for n in names))


def _of_pool(
    s: ResourceSlice, pool: str, slices: int, *, generation: int = 1, rename: str = ""
) -> ResourceSlice:
    """The slice as part of pool `pool` published in `slices` ResourceSlices."""
    spec = s.spec
    new_pool = msgspec.structs.replace(
        spec.pool, name=pool, resource_slice_count=slices, generation=generation
    )
    devices = spec.devices
    if rename:
        devices = [msgspec.structs.replace(d, name=f"{rename}{d.name}") for d in devices]
    return msgspec.structs.replace(
        s, spec=msgspec.structs.replace(spec, pool=new_pool, devices=devices)
    )


def test_a_pool_whose_second_slice_has_not_arrived_is_not_allocated_from() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    first = _of_pool(gpu_slice("n1", count=2, name="n1-a"), "n1", 2)
    h.add_dra(device_class(), first, resource_claim("one"))
    h.add_pods(with_claims(make_pod("a").req(cpu="1"), gpu="one"))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert messages["default/a"] == (
        f"0/1 nodes are available: 1 no device of class {DRIVER} for request one/gpu; "
        f"resource pool {DRIVER}/n1 is being updated (1 of its 2 ResourceSlices seen for "
        "node n1)."
        " preemption: 0/1 nodes are available: 1 Preemption is not helpful for "
        "scheduling."
    )
    # The second slice completes the pool: its devices (both slices') are used.
    second = _of_pool(gpu_slice("n1", count=2, name="n1-b"), "n1", 2, rename="b-")
    h.add_dra(second)
    assert h.advance(10).placements == {"default/a": "n1"}


def test_a_new_generation_being_published_hides_the_old_one_until_complete() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    old = _of_pool(gpu_slice("n1", count=1, name="n1-a"), "n1", 1)
    h.add_dra(device_class(), old, resource_claim("one"))
    # The driver starts generation 2 in two slices; only the first is seen so far.
    h.add_dra(_of_pool(gpu_slice("n1", count=1, name="n1-b"), "n1", 2, generation=2))
    h.add_pods(with_claims(make_pod("a").req(cpu="1"), gpu="one"))
    assert h.run().placements == {"default/a": None}


def test_a_pool_naming_a_device_twice_is_not_used_and_other_nodes_are() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1", "n2")
    twice = [_of_pool(gpu_slice("n1", count=1, name=f"n1-{k}"), "n1", 2) for k in "ab"]
    h.add_dra(device_class(), *twice, resource_claim("one"))
    h.add_pods(with_claims(make_pod("a").req(cpu="1"), gpu="one"))
    assert h.run().placements == {"default/a": None}
    h.add_dra(gpu_slice("n2", count=1))
    assert h.advance(10).placements == {"default/a": "n2"}


def test_all_devices_fails_where_an_unsettled_pool_reaches_and_says_which() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1", "n2")
    # n1: its GPUs are complete, but a second pool of another driver on n1 is not.
    other = _of_pool(gpu_slice("n1", count=1, name="n1-nic", driver="nic.example.com"), "nics", 3)
    h.add_dra(
        device_class(),
        gpu_slice("n1", count=2),
        other,
        resource_claim("every", all_devices=True),
    )
    h.add_pods(with_claims(make_pod("a").req(cpu="1"), gpu="every"))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert (
        "1 request every/gpu asks for all devices (allocationMode All), but resource pool "
        "nic.example.com/nics is being updated (1 of its 3 ResourceSlices seen for node n1)"
    ) in messages["default/a"]
    h.delete_dra("ResourceSlice", "n1-nic")
    assert h.advance(10).placements == {"default/a": "n1"}


def test_unsettled_pools_per_node_and_for_all_nodes() -> None:
    local_ok = _of_pool(gpu_slice("n1", count=1, name="a"), "p", 1)
    local_short = _of_pool(gpu_slice("n2", count=1, name="b"), "q", 2)
    everywhere = _of_pool(gpu_slice("x", count=1, name="c", all_nodes=True), "r", 2)
    found = unsettled_pools([local_ok, local_short, everywhere])
    assert found.usable((DRIVER, "p"), "n1")
    assert not found.usable((DRIVER, "q"), "n2")
    assert found.usable((DRIVER, "q"), "n1")  # n1 has no slice of q: nothing to hide
    assert not found.usable((DRIVER, "r"), "")
    assert found.reasons() == [
        ("", f"resource pool {DRIVER}/r is being updated (1 of its 2 ResourceSlices seen)"),
        (
            "n2",
            f"resource pool {DRIVER}/q is being updated (1 of its 2 ResourceSlices seen "
            "for node n2)",
        ),
    ]
    assert not unsettled_pools([local_ok])
