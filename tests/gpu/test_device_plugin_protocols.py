"""HAMi's and Volcano's device plugins start a pod's containers from annotations the
scheduler writes (issue 24, item 1): Shoal reads the devices each node's plugin
registered (UUIDs, memory, in their order) and writes, with the Binding, the UUIDs of
the devices it chose and the memory and compute each container asked."""

from __future__ import annotations

import json

import pytest

from shoal.api.gpu import node_gpu_memory, node_gpus, pod_gpu_request
from shoal.api.manifests import ManifestError, decode
from shoal.api.objects import Node
from shoal.api.vgpu_protocol import (
    ANNOTATION_HAMI_HANDSHAKE,
    ANNOTATION_HAMI_REGISTER,
    ANNOTATION_VOLCANO_REGISTER,
    HAMI,
    VOLCANO,
    node_registration,
)
from shoal.cache.gpu_devices import GpuDevices
from shoal.framework.effects import Bind
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import NodeBuilder, PodBuilder

GPU = "nvidia.com/gpu"
MIB = 16384
HAMI_UUIDS = (
    "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec",
    "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",
)
VOLCANO_UUIDS = (
    "GPU-7a1f0c2e-1111-2222-3333-444455556666",
    "GPU-9b2e1d3f-7777-8888-9999-000011112222",
)


def hami_node(name: str, memory: int = MIB, text_form: bool = False) -> NodeBuilder:
    """A node whose HAMi device plugin registered two devices (nvidia.com/gpu counts
    vGPUs: 10 per device)."""
    model = "NVIDIA-Tesla T4"
    if text_form:  # HAMi's older colon-separated form, 9 fields
        value = "".join(
            f"{u},10,{memory},100,{model},0,true,{i},hami-core:" for i, u in enumerate(HAMI_UUIDS)
        )
    else:  # HAMi's JSON form (UnMarshalNodeDevices)
        value = json.dumps(
            [
                {
                    "id": u,
                    "index": i,
                    "count": 10,
                    "devmem": memory,
                    "devcore": 100,
                    "type": model,
                    "mode": "hami-core",
                    "health": True,
                }
                for i, u in enumerate(HAMI_UUIDS)
            ]
        )
    return (
        make_node(name)
        .capacity({"cpu": "32", "memory": "128Gi", GPU: 20})
        .annotation(ANNOTATION_HAMI_REGISTER, value)
        .annotation(ANNOTATION_HAMI_HANDSHAKE, "Reported 2026-11-28 12:00:00")
    )


def volcano_node(name: str) -> NodeBuilder:
    value = "".join(f"{u},10,{MIB},NVIDIA-Tesla T4,true,hami-core:" for u in VOLCANO_UUIDS)
    return (
        make_node(name)
        .capacity({"cpu": "32", "memory": "128Gi", "volcano.sh/vgpu-number": 20})
        .annotation(ANNOTATION_VOLCANO_REGISTER, value)
        .annotation("volcano.sh/node-vgpu-handshake", "Reported 2026-11-28 12:00:00")
    )


def hami_pod(name: str, **limits: int) -> PodBuilder:
    asked = {GPU: 1, **{f"nvidia.com/{k.replace('_', '-')}": v for k, v in limits.items()}}
    return one_container(name, asked)


def one_container(name: str, limits: dict[str, int]) -> PodBuilder:
    return make_pod(name).uid(name).container(requests={"cpu": "1"}, limits=limits)


def run_and_binds(h: SchedulerHarness) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    binds: list[Bind] = []
    h.effects.listeners.append(lambda e: binds.append(e) if isinstance(e, Bind) else None)
    placements, _ = h.run()
    return placements, {b.pod.key: dict(b.annotations) for b in binds}


def uuid_of(annotations: dict[str, str], uuids: tuple[str, ...]) -> str:
    return uuids[int(annotations["shoal.dev/gpu-index"])]


@pytest.mark.parametrize("text_form", [False, True])
def test_hami_pods_carry_the_uuid_and_sizes_its_device_plugin_reads(text_form: bool) -> None:
    h = SchedulerHarness()
    h.add_nodes(hami_node("hami", text_form=text_form))
    h.add_pods(hami_pod("a", gpumem=6000), hami_pod("b", gpumem=12000, gpucores=40))
    placements, written = run_and_binds(h)
    assert placements == {"default/a": "hami", "default/b": "hami"}
    a, b = written["default/a"], written["default/b"]
    # 6000 + 12000 MiB do not fit one 16384 MiB device: two devices, named by UUID.
    assert {uuid_of(a, HAMI_UUIDS), uuid_of(b, HAMI_UUIDS)} == set(HAMI_UUIDS)
    assert a["hami.io/vgpu-devices-to-allocate"] == f"{uuid_of(a, HAMI_UUIDS)},NVIDIA,6000,0:;"
    assert b["hami.io/vgpu-devices-to-allocate"] == f"{uuid_of(b, HAMI_UUIDS)},NVIDIA,12000,40:;"
    for written in (a, b):
        assert (
            written["hami.io/vgpu-devices-allocated"]
            == (written["hami.io/vgpu-devices-to-allocate"])
        )
        assert written["hami.io/vgpu-node"] == "hami"
        assert written["hami.io/bind-phase"] == "allocating"
        assert written["hami.io/vgpu-time"].isdigit()
        assert written["hami.io/bind-time"] == written["hami.io/vgpu-time"]
    assert not any(k.startswith("volcano.sh/") for k in a)
    assert all(e.message == "" for e in h.events if e.kind == "bound")


def test_hami_writes_per_container_in_spec_order_and_whole_gpus_take_the_device() -> None:
    h = SchedulerHarness()
    h.add_nodes(hami_node("hami"))
    sidecar_first = (
        make_pod("multi")
        .uid("multi")
        .req(cpu="1")  # a container without GPUs
        .lim({GPU: 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30})
    )
    h.add_pods(sidecar_first, one_container("whole", {GPU: 1}))
    placements, written = run_and_binds(h)
    assert placements == {"default/multi": "hami", "default/whole": "hami"}
    multi, whole = written["default/multi"], written["default/whole"]
    assert multi["hami.io/vgpu-devices-to-allocate"] == (
        f";{uuid_of(multi, HAMI_UUIDS)},NVIDIA,3000,30:;"
    )
    # A whole GPU on a HAMi node: all of its memory and compute (HAMi's exclusive card).
    assert whole["hami.io/vgpu-devices-to-allocate"] == (
        f"{uuid_of(whole, HAMI_UUIDS)},NVIDIA,{MIB},100:;"
    )
    assert uuid_of(multi, HAMI_UUIDS) != uuid_of(whole, HAMI_UUIDS)


def test_volcano_pods_carry_the_uuid_and_sizes_its_device_plugin_reads() -> None:
    h = SchedulerHarness()
    h.add_nodes(volcano_node("volcano"))
    vgpu = {
        "volcano.sh/vgpu-number": 1,
        "volcano.sh/vgpu-memory": 4000,
        "volcano.sh/vgpu-cores": 25,
    }
    two_containers = (
        make_pod("pair")
        .uid("pair")
        .lim({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 2000})
        .lim({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 2000})
    )
    h.add_pods(one_container("one", vgpu), two_containers)
    placements, written = run_and_binds(h)
    assert placements == {"default/one": "volcano", "default/pair": "volcano"}
    one, pair = written["default/one"], written["default/pair"]
    assert one["volcano.sh/devices-to-allocate"] == f"{uuid_of(one, VOLCANO_UUIDS)},NVIDIA,4000,25:"
    assert one["volcano.sh/vgpu-ids-new"] == one["volcano.sh/devices-to-allocate"]
    assert one["volcano.sh/vgpu-node"] == "volcano"
    assert one["volcano.sh/bind-phase"] == "allocating"
    assert one["volcano.sh/vgpu-time"].isdigit() and one["volcano.sh/bind-time"].isdigit()
    # Two containers, one vGPU each: one device each, in container order, joined by ';'.
    first, second = (VOLCANO_UUIDS[int(i)] for i in pair["shoal.dev/gpu-index"].split(","))
    assert first != second
    assert pair["volcano.sh/devices-to-allocate"] == (
        f"{first},NVIDIA,2000,0:;{second},NVIDIA,2000,0:"
    )
    assert not any(k.startswith("hami.io/") for k in one)


def test_gpumem_percentage_takes_that_share_of_the_devices_memory() -> None:
    h = SchedulerHarness()
    h.add_nodes(hami_node("hami"))
    h.add_pods(
        hami_pod("half", gpumem_percentage=50),
        hami_pod("half-slow", gpumem_percentage=50, gpucores=20),
    )
    placements, written = run_and_binds(h)
    assert placements == {"default/half": "hami", "default/half-slow": "hami"}
    devices = GpuDevices.of(h.scheduler.handle)
    row = h.scheduler.cluster.table.row_of["hami"]
    # Tightest fit: both halves on one device, 8 GiB each of its 16 GiB.
    assert sorted(int(devices.mem_free[row, d]) for d in range(2)) == [0, MIB]
    half, slow = written["default/half"], written["default/half-slow"]
    assert (
        half["hami.io/vgpu-devices-to-allocate"] == f"{uuid_of(half, HAMI_UUIDS)},NVIDIA,8192,0:;"
    )
    assert slow["hami.io/vgpu-devices-to-allocate"] == (
        f"{uuid_of(slow, HAMI_UUIDS)},NVIDIA,8192,20:;"
    )
    # Alone it is compute in proportion (500 milli); with gpucores compute is apart.
    assert sorted(int(devices.free[row, d]) for d in range(2)) == [1000 - 500 - 200, 1000]


def test_percentage_is_read_as_hami_reads_it() -> None:
    half = make_pod("p").lim({GPU: 1, "nvidia.com/gpumem-percentage": 50}).info()
    assert pod_gpu_request(half).milli == 500 and pod_gpu_request(half).memory == 0
    both = make_pod("p").lim(
        {GPU: 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpumem-percentage": 50}
    )
    assert pod_gpu_request(both.info()).memory == 3000  # gpumem wins, as in HAMi
    over = make_pod("p").lim({GPU: 1, "nvidia.com/gpumem-percentage": 150}).info()
    with pytest.raises(ValueError, match="gpumem-percentage 150 must be from 1 to 100"):
        pod_gpu_request(over)


def test_the_registration_defines_the_devices_over_resources_and_labels() -> None:
    node = hami_node("hami", memory=15360).label("nvidia.com/gpu.memory", "32768").obj()
    assert node_gpus(node) == (2, "NVIDIA-Tesla T4")  # not the 20 vGPUs
    assert node_gpu_memory(node, 2) == 15360
    labelled = hami_node("hami").label("nvidia.com/gpu.product", "Tesla-T4").obj()
    assert node_gpus(labelled)[1] == "Tesla-T4"  # the label names the model pods ask for
    registration = node_registration(volcano_node("v").obj())
    assert registration is not None and registration.stack == VOLCANO
    assert [d.uuid for d in registration.devices] == list(VOLCANO_UUIDS)
    retired = hami_node("gone").annotation(ANNOTATION_HAMI_HANDSHAKE, "Deleted_2026.11.28 12:00:00")
    assert node_registration(retired.obj()) is None
    assert node_registration(hami_node("h").obj()).stack == HAMI  # type: ignore[union-attr]


def test_without_a_registration_only_the_index_is_written_and_the_event_says_so() -> None:
    h = SchedulerHarness()
    labels_only = make_node("plain").capacity({"cpu": "32", "memory": "128Gi", GPU: 2})
    h.add_nodes(labels_only.label("nvidia.com/gpu.memory", str(MIB)))
    h.add_pods(hami_pod("a", gpumem=6000), one_container("whole", {GPU: 1}))
    placements, written = run_and_binds(h)
    assert placements == {"default/a": "plain", "default/whole": "plain"}
    assert set(written["default/a"]) == {"shoal.dev/gpu-index"}
    notes = {e.pod: e.message for e in h.events if e.kind == "bound"}
    assert "node plain has no HAMi device registration" in notes["default/a"]
    assert ANNOTATION_HAMI_REGISTER in notes["default/a"]
    # A whole-GPU pod there is the NVIDIA device plugin's: nothing missing, no note.
    assert notes["default/whole"] == ""


def test_a_volcano_pod_on_a_hami_node_is_told_its_plugin_is_missing() -> None:
    h = SchedulerHarness()
    h.add_nodes(
        hami_node("hami").capacity(
            {"cpu": "32", "memory": "128Gi", GPU: 20, "volcano.sh/vgpu-number": 20}
        )
    )
    h.add_pods(make_pod("v").uid("v").req(cpu="1").lim({"volcano.sh/vgpu-number": 1}))
    placements, written = run_and_binds(h)
    assert placements == {"default/v": "hami"}
    assert not any(k.startswith(("hami.io/", "volcano.sh/")) for k in written["default/v"])
    (note,) = [e.message for e in h.events if e.kind == "bound"]
    assert "no Volcano vGPU device registration" in note


@pytest.mark.parametrize(
    ("value", "expect"),
    [
        ("GPU-a,10,-5,100,T4,0,true:", "memory (MiB) '-5' must be a whole number from 1"),
        ("GPU-a,10,16384,T4:", "4 fields"),
        ("not a list", "1 fields"),
        ("[1, 2]", "device 0: not a JSON object"),
    ],
)
def test_a_malformed_registration_refuses_the_node_naming_annotation_and_fix(
    value: str, expect: str
) -> None:
    raw = {
        "metadata": {"name": "n1", "annotations": {ANNOTATION_HAMI_REGISTER: value}},
        "status": {"allocatable": {GPU: "2"}},
    }
    with pytest.raises(ManifestError) as caught:
        decode(raw, Node)
    message = str(caught.value)
    assert message.startswith("Node n1: field metadata.annotations.hami.io/node-nvidia-register")
    assert expect in message
    assert "fix or restart the node's device plugin" in message


def test_pods_bound_by_hamis_or_volcanos_scheduler_keep_the_devices_they_name() -> None:
    h = SchedulerHarness()
    h.add_nodes(hami_node("hami"), volcano_node("volcano"))
    second = f"{HAMI_UUIDS[1]},NVIDIA,6000,0:;"
    by_hami = hami_pod("old", gpumem=6000).node("hami")
    by_volcano = one_container(
        "vold", {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 9000}
    )
    h.add_pods(
        by_hami.annotations({"hami.io/vgpu-devices-allocated": second}),
        by_volcano.node("volcano").annotations(
            {"volcano.sh/vgpu-ids-new": f"{VOLCANO_UUIDS[1]}[0-1],NVIDIA,9000,0:"}
        ),
    )
    h.run()
    devices = GpuDevices.of(h.scheduler.handle)
    # Not the default choice (device 0): the devices their annotations name by UUID.
    assert devices.devices_of("old") == (1,)
    assert devices.devices_of("vold") == (1,)
    # A UUID the node did not register: the default choice, as for any unreadable index
    # (the tightest fit: device 1, beside "old").
    h.add_pods(
        hami_pod("stray", gpumem=1000)
        .node("hami")
        .annotations({"hami.io/vgpu-devices-allocated": "GPU-unknown,NVIDIA,1000,0:;"})
    )
    h.run()
    assert devices.devices_of("stray") == (1,)


def hami_node_with(name: str, devices: list[tuple[int, bool]]) -> NodeBuilder:
    """A HAMi node whose devices register these (split count, healthy)."""
    value = json.dumps(
        [
            {"id": HAMI_UUIDS[i], "index": i, "count": split, "devmem": MIB, "devcore": 100}
            | {"type": "NVIDIA-Tesla T4", "health": healthy}
            for i, (split, healthy) in enumerate(devices)
        ]
    )
    return (
        make_node(name)
        .capacity({"cpu": "32", "memory": "128Gi", GPU: sum(s for s, _ in devices)})
        .annotation(ANNOTATION_HAMI_REGISTER, value)
    )


def test_a_device_takes_no_more_pods_than_its_split_count() -> None:
    """HAMi's scheduler skips a device running `count` pods (CardTimeSlicingExhausted).
    Devices split in 1 and 3: four small vGPUs, which the tightest fit would all put on
    one device, go one and three."""
    h = SchedulerHarness()
    h.add_nodes(hami_node_with("hami", [(1, True), (3, True)]))
    h.add_pods(*(hami_pod(f"p{i}", gpumem=1000) for i in range(4)))
    placements, written = run_and_binds(h)
    assert set(placements.values()) == {"hami"}
    per_device = sorted(uuid_of(written[key], HAMI_UUIDS) for key in written)
    assert per_device == [HAMI_UUIDS[0], *[HAMI_UUIDS[1]] * 3]


def test_a_pod_kept_off_a_device_at_its_split_count_is_told_why_and_placed_when_one_leaves() -> (
    None
):
    """Three small vGPUs fill device 0's split count (3); a 12000 MiB one takes device
    1; a 9000 MiB one fits device 0's memory but not its count, and waits, with the
    reason, though the node's nvidia.com/gpu (6 vGPUs) has room. A small one leaving
    frees the slot."""
    h = SchedulerHarness()
    h.add_nodes(hami_node_with("hami", [(3, True), (3, True)]))
    devices = GpuDevices.of(h.scheduler.handle)
    h.add_pods(*(hami_pod(f"s{i}", gpumem=1000) for i in range(3)))
    h.run()
    assert [devices.devices_of(f"s{i}") for i in range(3)] == [(0,)] * 3
    h.add_pods(hami_pod("big", gpumem=12000))
    h.run()
    assert devices.devices_of("big") == (1,)
    h.add_pods(hami_pod("late", gpumem=9000))
    h.run()
    assert h.node_of("default/late") is None
    assert "at their vGPU split count" in h.message("default/late")
    h.delete_pod("default/s1")
    h.advance(30)  # past the pod's backoff
    assert h.node_of("default/late") == "hami"
    assert devices.devices_of("late") == (0,)


def test_volcano_split_counts_bound_vgpus_per_device_too() -> None:
    h = SchedulerHarness()
    value = "".join(f"{u},3,{MIB},NVIDIA-Tesla T4,true:" for u in VOLCANO_UUIDS)
    node = make_node("v").capacity({"cpu": "32", "memory": "128Gi", "volcano.sh/vgpu-number": 6})
    h.add_nodes(node.annotation(ANNOTATION_VOLCANO_REGISTER, value))
    vgpu = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory-percentage": 5}
    h.add_pods(*(one_container(f"v{i}", vgpu) for i in range(6)))
    placements, _ = run_and_binds(h)
    assert set(placements.values()) == {"v"}
    devices = GpuDevices.of(h.scheduler.handle)
    # 3 per device, though 5 % each would let the tightest fit put all six on one.
    assert sorted(devices.devices_of(f"v{i}") for i in range(6)) == [(0,)] * 3 + [(1,)] * 3


def test_an_unhealthy_device_is_not_used_until_it_is_healthy_again() -> None:
    """HAMi's scheduler skips a device registered unhealthy (CardNotHealth). A pod on it
    before keeps it; when the plugin reports it healthy again it takes pods."""
    h = SchedulerHarness()
    h.add_nodes(hami_node_with("hami", [(10, False), (10, True)]))
    h.add_pods(*(hami_pod(f"s{i}", gpumem=6000) for i in range(3)))
    h.add_pods(one_container("whole", {GPU: 1}))
    placements, written = run_and_binds(h)
    assert sorted(k for k, node in placements.items() if node) == ["default/s0", "default/s1"]
    assert {uuid_of(written[k], HAMI_UUIDS) for k in written} == {HAMI_UUIDS[1]}
    assert "registered unhealthy" in h.message("default/s2")
    # The only device with nothing on it is the unhealthy one: no whole GPU is free.
    assert "Insufficient nvidia.com/gpu" in h.message("default/whole")
    devices = GpuDevices.of(h.scheduler.handle)
    row = h.scheduler.cluster.table.row_of["hami"]
    assert list(devices.free[row, :2]) == [0, 1000 - 2 * 367]  # 6000 of 16384 MiB each
    assert list(devices.room[row, :2]) == [1000, 1000 - 2 * 367]
    h.delete_pod("default/whole")  # it would compete with s2 for device 0
    h.update_node(hami_node_with("hami", [(10, True), (10, True)]))
    h.advance(30)
    assert h.node_of("default/s2") == "hami"
    assert devices.devices_of("s2") == (0,)  # the device that was unhealthy


def test_blocked_devices_are_counted_apart_in_the_gpu_series() -> None:
    from prometheus_client import CollectorRegistry

    from shoal.web.gpu_census import GpuCensus
    from shoal.web.metrics import register_gpu_collector

    h = SchedulerHarness()
    h.add_nodes(hami_node_with("hami", [(1, True), (10, False)]))
    h.add_pods(hami_pod("s", gpumem=1000))
    h.run()
    census = GpuCensus(h.scheduler)
    census.maybe_sample(0.0)
    registry = CollectorRegistry()
    register_gpu_collector(registry, lambda: census)
    got = {s.name: s.value for f in registry.collect() for s in f.samples}
    assert got["shoal_gpu_blocked_devices"] == 2  # one at its split count, one unhealthy
    # Unallocated counts what no pod holds, blocked or not: 2 devices less the share
    # (1000 of 16384 MiB: 62 milli-GPU, compute in proportion, rounded up).
    assert got["shoal_gpu_unallocated"] == pytest.approx(2 - 0.062)
