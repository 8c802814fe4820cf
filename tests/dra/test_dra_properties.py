"""Property: whatever pods, claims and deletions come, no device is ever allocated to
two claims at once (counted allocations: written or assumed), and every bound pod's
claims are allocated on its node."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.cache.dra import DeviceCatalog
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import DRIVER, device_class, gpu_slice, resource_claim, with_claims

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
