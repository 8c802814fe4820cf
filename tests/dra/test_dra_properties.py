"""Property: whatever pods, claims, deletions and preemptions come, no device is ever
allocated to two claims at once (counted allocations: written or assumed; and written
allocations of claims in use by a running pod), and every bound pod's claims are
allocated on its node."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.cache.dra import RECENT_DEPARTURES, DeviceCatalog
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import DRIVER, device_class, gpu_slice, resource_claim, with_claims

from .test_dra_preemption import play_claim_controller

_claims = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=3),  # count
        st.booleans(),  # allocationMode All
        st.booleans(),  # a memory selector
        st.booleans(),  # matchAttribute on the NVLink domain
    ),
    min_size=1,
    max_size=6,
)


def _check(h: SchedulerHarness) -> None:
    catalog = DeviceCatalog.of(h.scheduler.handle)
    owner: dict[tuple[str, str, str], str] = {}
    for key in sorted(set(catalog.claims) | set(catalog.assumed)):
        for device in catalog.allocated(key) or ():
            assert device not in owner, f"{device} allocated to {owner[device]} and {key}"
            owner[device] = key
    placements = h.result().placements
    for pod_key, node in placements.items():
        if node is None:
            continue
        info = h.scheduler.known_pod(h._uids[pod_key])
        assert info is not None
        for entry in info.pod.spec.resource_claims:
            claim_key = f"default/{entry.resource_claim_name}"
            devices = catalog.allocated(claim_key)
            assert devices, f"{pod_key} runs on {node} without an allocation of {claim_key}"
            assert all(pool in (node, "fabric") for _, pool, _ in devices)


@settings(max_examples=40, deadline=None)
@given(
    gpus=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=3),
    fabric=st.integers(min_value=0, max_value=2),
    claims=_claims,
    uses=st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=8),
    deletions=st.lists(st.integers(min_value=0, max_value=7), max_size=4),
)
def test_no_device_is_allocated_twice(
    gpus: list[int],
    fabric: int,
    claims: list[tuple[int, bool, bool, bool]],
    uses: list[int],
    deletions: list[int],
) -> None:
    h = SchedulerHarness()
    h.add_dra(device_class())
    for i, count in enumerate(gpus):
        node = f"n{i}"
        h.add_nodes(make_node(node).capacity(cpu="64", memory="256Gi"))
        domains = {"nvlinkDomain": [j % 2 for j in range(count)]}
        memory = "80Gi" if i % 2 == 0 else "24Gi"
        h.add_dra(gpu_slice(node, count=count, memory=memory, attributes=domains))
    if fabric:
        domains = {"nvlinkDomain": [0] * fabric}
        h.add_dra(gpu_slice("fabric", count=fabric, all_nodes=True, attributes=domains))
    for j, (count, all_mode, memory, match) in enumerate(claims):
        selectors = (
            [f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0']
            if memory
            else []
        )
        h.add_dra(
            resource_claim(
                f"c{j}",
                count=count,
                all_devices=all_mode,
                selectors=selectors,
                match_attribute=f"{DRIVER}/nvlinkDomain" if match else "",
            )
        )
    for p, use in enumerate(uses):
        h.add_pods(with_claims(make_pod(f"p{p}"), gpu=f"c{use % len(claims)}"))
    h.run()
    _check(h)
    for d in deletions:
        if d < len(uses):
            key = f"default/p{d}"
            if key in h._uids:
                h.delete_pod(key)
        h.advance(20)
        _check(h)


def _check_in_use(h: SchedulerHarness) -> None:
    """No device is in the written allocation of two claims a placed pod uses, and the
    departed pods remembered are bounded by what the claims name."""
    catalog = DeviceCatalog.of(h.scheduler.handle)
    placed = h.scheduler.cluster.placed
    owner: dict[tuple[str, str, str], str] = {}
    named = 0
    for key, claim in sorted(catalog.claims.items()):
        status = claim.status
        named += len(status.reserved_for)
        if status.allocation is None or not any(r.uid in placed for r in status.reserved_for):
            continue
        for r in status.allocation.devices.results:
            device = (r.driver, r.pool, r.device)
            assert device not in owner, f"{device} in use by {owner[device]} and {key}"
            owner[device] = key
    assert catalog.departed <= named + RECENT_DEPARTURES


@settings(max_examples=30, deadline=None)
@given(
    gpus=st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=2),
    waves=st.lists(
        st.lists(
            st.tuples(st.sampled_from([0, 100, 1000]), st.integers(min_value=1, max_value=2)),
            min_size=1,
            max_size=4,
        ),
        min_size=1,
        max_size=4,
    ),
    controller=st.booleans(),
)
def test_preemption_never_gives_a_device_to_two_claims(
    gpus: list[int], waves: list[list[tuple[int, int]]], controller: bool
) -> None:
    h = SchedulerHarness()
    h.add_dra(device_class())
    for i, count in enumerate(gpus):
        h.add_nodes(make_node(f"n{i}").capacity(cpu="64", memory="256Gi"))
        h.add_dra(gpu_slice(f"n{i}", count=count))
    made = 0
    for later, wave in enumerate(waves):
        for priority, count in wave:
            name = f"p{made}"
            made += 1
            h.add_dra(resource_claim(name, count=count))
            # Later waves tend to outrank the earlier ones: preemption is exercised.
            pod = make_pod(name).priority(priority + 100 * later)
            h.add_pods(with_claims(pod, gpu=name))
        h.advance(30)
        _check(h)
        _check_in_use(h)
        if controller:
            play_claim_controller(h)
            h.advance(30)
            _check(h)
            _check_in_use(h)
    # Every eviction was for a preemptor of higher priority.
    for key, reason in h.evicted.items():
        found = re.search(r"preempted by \S+ \(priority (-?\d+) > (-?\d+)\)", reason)
        assert found is not None and int(found[1]) > int(found[2]), (key, reason)
