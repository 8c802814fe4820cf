"""Devices registered by HAMi's device plugin with a split count and a health flag, over
random registrations, re-registrations (health and split counts change while pods run)
and random vGPU pods arriving and leaving. After every step:

1. no device holds more pods placed by the scheduler than its split count allows at the
   time they were placed: a device's pods, counted from the placed pods' devices, never
   exceed its current split count unless the count went down under them (then no pod is
   added until they drop below it);
2. no pod is placed on a device while it is registered unhealthy;
3. the device table agrees with the pods: `used` per device is the count of pods holding
   it, `room` is 1000 minus their milli, and `free` is `room` except on blocked devices
   (unhealthy or at the split count), where it is 0.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.api.gpu import GPU_MILLI
from shoal.api.vgpu_protocol import ANNOTATION_HAMI_REGISTER
from shoal.cache.gpu_devices import GpuDevices
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import NodeBuilder

GPU = "nvidia.com/gpu"
MIB = 16384
NODES = ("n0", "n1")
DEVICES = 3

device_st = st.tuples(st.integers(1, 4), st.booleans())  # (split count, healthy)
registration_st = st.lists(device_st, min_size=DEVICES, max_size=DEVICES)
step_st = st.one_of(
    st.tuples(st.just("add"), st.sampled_from([1000, 2000, 4000, 9000]), st.integers(1, 2)),
    st.tuples(st.just("delete"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("register"), st.integers(0, len(NODES) - 1), st.just(0)),
)


def hami_node(name: str, devices: list[tuple[int, bool]]) -> NodeBuilder:
    value = json.dumps(
        [
            {"id": f"GPU-{name}-{i}", "index": i, "count": split, "devmem": MIB, "devcore": 100}
            | {"type": "NVIDIA-Tesla T4", "health": healthy}
            for i, (split, healthy) in enumerate(devices)
        ]
    )
    return (
        make_node(name)
        .capacity({"cpu": "64", "memory": "256Gi", GPU: 64})  # the devices limit, not this
        .annotation(ANNOTATION_HAMI_REGISTER, value)
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=st.lists(registration_st, min_size=len(NODES), max_size=len(NODES)),
    later=st.lists(registration_st, min_size=1, max_size=4),
    steps=st.lists(step_st, min_size=1, max_size=24),
)
def test_split_counts_and_health_hold_for_every_pod_placed(
    first: list[list[tuple[int, bool]]],
    later: list[list[tuple[int, bool]]],
    steps: list[tuple[str, int, int]],
) -> None:
    h = SchedulerHarness()
    registered = {name: list(devices) for name, devices in zip(NODES, first, strict=True)}
    h.add_nodes(*(hami_node(name, devices) for name, devices in registered.items()))
    devices = GpuDevices.of(h.scheduler.handle)
    table = h.scheduler.cluster.table
    where: dict[str, tuple[str, tuple[int, ...]]] = {}  # pod uid -> (node, devices)
    live: list[str] = []
    # Per node and device: pods over the split count when it was lowered under them.
    allowance: dict[tuple[str, int], int] = {}
    made = 0
    for kind, a, b in steps:
        if kind == "add":
            uid = f"p{made}"
            made += 1
            limits = {GPU: b, "nvidia.com/gpumem": a}
            h.add_pods(make_pod(uid).uid(uid).container(requests={"cpu": "100m"}, limits=limits))
            live.append(uid)
        elif kind == "delete" and live:
            uid = live.pop(a % len(live))
            h.delete_pod(f"default/{uid}")
            where.pop(uid, None)
        elif kind == "register":
            name = NODES[a]
            registered[name] = later[made % len(later)]
            h.update_node(hami_node(name, registered[name]))
            for d, (split, _) in enumerate(registered[name]):
                holding = sum(1 for n, held in where.values() if n == name and d in held)
                allowance[(name, d)] = max(0, holding - split)
        h.advance(11.0)
        holders: dict[tuple[str, int], int] = {}
        for uid in live:
            node = h.node_of(f"default/{uid}")
            held = devices.devices_of(uid)
            if node is None:
                assert held is None, f"{uid} holds devices {held} but is not placed"
                continue
            assert held, f"{uid} placed on {node} without devices"
            if uid not in where:  # placed during this step: devices healthy, slots left
                for d in held:
                    healthy = registered[node][d][1]
                    assert healthy, f"{uid} placed on {node}'s unhealthy device {d}"
            where[uid] = (node, held)
            for d in held:
                holders[(node, d)] = holders.get((node, d), 0) + 1
        assert devices.blocked_devices == int(devices.blocked[: table.n].sum())
        for name in NODES:
            row = table.row_of[name]
            for d, (split, healthy) in enumerate(registered[name]):
                count = holders.get((name, d), 0)
                allowed = split + allowance.get((name, d), 0)
                assert count <= allowed, f"{name} device {d}: {count} pods, split {split}"
                # Pods leaving a device over its count shrink the allowance for good.
                allowance[(name, d)] = max(0, min(allowance.get((name, d), 0), count - split))
                assert int(devices.used[row, d]) == count
                milli = sum(
                    devices.assigned[uid].milli
                    for uid, (n, held) in where.items()
                    if n == name and d in held and uid in devices.assigned
                )
                assert int(devices.room[row, d]) == GPU_MILLI - milli
                blocked = not healthy or count >= split
                expect = 0 if blocked else GPU_MILLI - milli
                assert int(devices.free[row, d]) == expect, (name, d, blocked)
