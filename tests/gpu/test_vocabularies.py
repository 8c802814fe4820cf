"""GPU sharing in the vocabularies users come with (issue "GPU shares", item 6): Volcano's
vGPU resources, HAMi's, and Alibaba gpushare's memory, mapped onto one device model with
compute (milli-GPU) and memory (MiB) per device."""

from __future__ import annotations

import pytest

from shoal.api.gpu import GpuRequest, GpuRequestError, pod_gpu_request
from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.cache.gpu_devices import GpuDevices
from shoal.framework.effects import Bind
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import NodeBuilder, PodBuilder

GPU = "nvidia.com/gpu"


def node(name: str, gpus: int, memory_mib: int | None = None) -> NodeBuilder:
    builder = make_node(name).capacity({"cpu": "32", "memory": "128Gi", GPU: gpus})
    if memory_mib is not None:
        builder = builder.label("nvidia.com/gpu.memory", str(memory_mib))
    return builder


def gpushare_node(name: str, gpus: int, gib_each: int, whole: bool = False) -> NodeBuilder:
    """A node of Alibaba's gpushare device plugin: it reports the GiB of all devices
    (and, with `whole`, the NVIDIA device plugin's nvidia.com/gpu too)."""
    resources: dict[str, str | int] = {
        "cpu": "32",
        "memory": "128Gi",
        "aliyun.com/gpu-mem": gpus * gib_each,
        "aliyun.com/gpu-count": gpus,
    }
    if whole:
        resources[GPU] = gpus
    return make_node(name).capacity(resources)


def gpushare(name: str, gib: int) -> PodBuilder:
    return make_pod(name).uid(name).req(cpu="1").lim({"aliyun.com/gpu-mem": gib})


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        # Volcano: vGPUs, each with its memory (MiB) and compute (percent).
        (
            {
                "volcano.sh/vgpu-number": 2,
                "volcano.sh/vgpu-memory": 4000,
                "volcano.sh/vgpu-cores": 30,
            },
            GpuRequest(2, 300, None, 4000),
        ),
        # Neither memory nor a percentage: all of the device's memory, as Volcano's
        # resourcereqs gives it (percentage 100), so nothing else fits beside it.
        ({"volcano.sh/vgpu-number": 1}, GpuRequest(1, 1000, None, 0)),
        # vgpu-memory-percentage: that share of the device's memory (and compute with it).
        (
            {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory-percentage": 25},
            GpuRequest(1, 250, None, 0),
        ),
        # Cores alone: the compute asked, with all of the memory (Volcano's default).
        (
            {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-cores": 30},
            GpuRequest(1, 300, None, 0, 100),
        ),
        # A size in MiB wins over the percentage, as in Volcano.
        (
            {
                "volcano.sh/vgpu-number": 1,
                "volcano.sh/vgpu-memory": 4000,
                "volcano.sh/vgpu-memory-percentage": 50,
            },
            GpuRequest(1, 0, None, 4000),
        ),
        # Volcano: vgpu-memory without vgpu-number is one vGPU (its `singledevice`).
        ({"volcano.sh/vgpu-memory": 4000}, GpuRequest(1, 0, None, 4000)),
        # HAMi: nvidia.com/gpu counts vGPUs, gpumem MiB and gpucores percent per vGPU.
        ({GPU: 1, "nvidia.com/gpumem": 3000}, GpuRequest(1, 0, None, 3000)),
        ({GPU: 2, "nvidia.com/gpucores": 50}, GpuRequest(2, 500, None, 0)),
        # Alibaba gpushare: GiB of one device.
        ({"aliyun.com/gpu-mem": 4}, GpuRequest(1, 0, None, 4096)),
    ],
)
def test_each_vocabulary_maps_onto_the_device_model(
    limits: dict[str, int], expected: GpuRequest
) -> None:
    info = make_pod("p").req(cpu="1").lim(limits).info()
    assert pod_gpu_request(info) == expected


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({GPU: 1, "nvidia.com/gpucores": 150}, "nvidia.com/gpucores 150 must be from 1 to 100"),
        ({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-cores": 101}, "must be from 1 to 100"),
        ({"volcano.sh/vgpu-number": 300}, "more than 256"),
        (
            {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory-percentage": 120},
            "volcano.sh/vgpu-memory-percentage 120 must be from 1 to 100",
        ),
    ],
)
def test_out_of_range_vgpu_values_are_refused(limits: dict[str, int], message: str) -> None:
    info = make_pod("p").req(cpu="1").lim(limits).info()
    with pytest.raises(GpuRequestError, match=message):
        pod_gpu_request(info)


def test_memory_shares_fill_a_device_by_memory() -> None:
    h = SchedulerHarness()
    h.add_nodes(gpushare_node("mem", 1, 16), node("plain", 1))  # 16 GiB per device
    binds: list[Bind] = []
    h.effects.listeners.append(lambda e: binds.append(e) if isinstance(e, Bind) else None)
    h.add_pods(gpushare("a", 6), gpushare("b", 6), gpushare("c", 6))
    placements, messages = h.run()
    running = sorted(k for k, n in placements.items() if n)
    assert len(running) == 2 and {placements[k] for k in running} == {"mem"}
    waiting = next(k for k, n in placements.items() if not n)
    # The node's aliyun.com/gpu-mem column (16 GiB, 12 taken) says no first, as in kube.
    assert messages[waiting] == (
        "0/2 nodes are available: 2 Insufficient aliyun.com/gpu-mem."
        # "plain" reports no GPU memory at all: no eviction helps there.
        " preemption: 0/2 nodes are available: 1 No preemption victims found for "
        "incoming pod, 1 Preemption is not helpful for scheduling."
    )
    devices = GpuDevices.of(h.scheduler.handle)
    row = h.scheduler.cluster.table.row_of["mem"]
    assert devices.mem_free[row, 0] == 16384 - 2 * 6144
    # Memory-sized shares take compute in proportion: a whole GPU cannot have the device.
    assert devices.free[row, 0] == 1000 - 2 * 375
    # gpushare's device plugin reads the device and sizes from the pod at bind time.
    annotations = dict(next(b for b in binds if b.pod.key == running[0]).annotations)
    assert annotations["ALIYUN_COM_GPU_MEM_IDX"] == "0"
    assert annotations["ALIYUN_COM_GPU_MEM_POD"] == "6"
    assert annotations["ALIYUN_COM_GPU_MEM_DEV"] == "16"
    assert annotations["ALIYUN_COM_GPU_MEM_ASSIGNED"] == "false"
    assert annotations["shoal.dev/gpu-index"] == "0"


def test_a_memory_request_says_which_nodes_report_no_device_memory() -> None:
    h = SchedulerHarness()
    h.add_nodes(node("labelled", 1, 16384), node("unlabelled", 1))
    hami = {GPU: 1, "nvidia.com/gpumem": 20000}  # more than any device has
    h.add_pods(make_pod("big").uid("big").req(cpu="1").lim(hami))
    _, messages = h.run()
    assert messages["default/big"] == (
        "0/2 nodes are available: 1 Insufficient GPU memory on any single device, "
        "1 node(s) didn't report GPU memory per device."
        " preemption: 0/2 nodes are available: 1 No preemption victims found for "
        "incoming pod, 1 Preemption is not helpful for scheduling."
    )


def test_a_whole_gpu_waits_for_a_device_no_memory_share_holds() -> None:
    h = SchedulerHarness()
    h.add_nodes(gpushare_node("n", 2, 16, whole=True))
    h.add_pods(gpushare("share", 2))
    h.run()
    h.add_pods(
        make_pod("whole-a").uid("whole-a").req({GPU: 1}, cpu="1"),
        make_pod("whole-b").uid("whole-b").req({GPU: 1}, cpu="1"),
    )
    placements, messages = h.run()
    devices = GpuDevices.of(h.scheduler.handle)
    placed = [k for k in ("whole-a", "whole-b") if placements[f"default/{k}"]]
    (waiting,) = {"whole-a", "whole-b"} - set(placed)
    assert len(placed) == 1 and devices.devices_of(placed[0]) == (1,)
    assert devices.devices_of("share") == (0,)
    assert "Insufficient nvidia.com/gpu" in messages[f"default/{waiting}"]


def test_compute_and_memory_are_both_checked() -> None:
    """HAMi-style: 10 % of compute but 12 GiB of memory; a second one does not fit the
    16 GiB device although compute is plenty."""
    h = SchedulerHarness()
    # A HAMi node: its device plugin reports 10 vGPUs per device as nvidia.com/gpu; GPU
    # Feature Discovery's labels say 1 device of 16 GiB.
    h.add_nodes(node("n", 10, 16384).label("nvidia.com/gpu.count", "1"))
    hami = {GPU: 1, "nvidia.com/gpumem": 12288, "nvidia.com/gpucores": 10}
    h.add_pods(
        make_pod("a-hami").uid("a-hami").req(cpu="1").lim(hami),
        make_pod("b-hami").uid("b-hami").req(cpu="1").lim(hami),
        make_pod("c-milli")
        .uid("c-milli")
        .req(cpu="1")
        .annotations({"alibabacloud.com/gpu-milli": "500"}),
    )
    placements, messages = h.run()
    assert [k for k, n in placements.items() if n] == ["default/a-hami"]
    assert int(GpuDevices.of(h.scheduler.handle).count[0]) == 1
    assert "Insufficient GPU memory on any single device" in messages["default/b-hami"]
    # The 500-milli share needs 8 GiB in proportion: 4 GiB are left.
    assert "Insufficient GPU" in messages["default/c-milli"]


def test_node_memory_from_gpushare_resources() -> None:
    h = SchedulerHarness()
    h.add_nodes(
        make_node("ali").capacity(
            {"cpu": "32", "memory": "128Gi", "aliyun.com/gpu-mem": 32, "aliyun.com/gpu-count": 2}
        )
    )
    h.add_pods(gpushare("a", 10), gpushare("b", 10), gpushare("c", 10))
    placements, _ = h.run()
    devices = GpuDevices.of(h.scheduler.handle)
    assert int(devices.mem[h.scheduler.cluster.table.row_of["ali"]]) == 16 * 1024
    assert sum(1 for n in placements.values() if n) == 2  # one 10-GiB share per device
    assert {devices.devices_of(k) for k in ("a", "b", "c")} >= {(0,), (1,)}


def test_a_queue_caps_memory_shares_by_their_own_resource() -> None:
    h = SchedulerHarness()
    h.add_nodes(gpushare_node("n", 2, 16))
    capped = decode(
        {"metadata": {"name": "team"}, "spec": {"max": {"aliyun.com/gpu-mem": 8}}}, Queue
    )
    assert h.scheduler.apply_queues([capped]) == []
    h.add_pods(*(gpushare(f"s{i}", 4).labels({"shoal.dev/queue": "team"}) for i in range(3)))
    placements, messages = h.run()
    assert sum(1 for n in placements.values() if n) == 2
    waiting = next(k for k, n in placements.items() if not n)
    assert "queue team would exceed its max aliyun.com/gpu-mem" in messages[waiting]


def test_a_vgpu_memory_pod_preempts_a_whole_gpu_pod() -> None:
    """Preemption's could-fit arithmetic leaves out what NodeResourcesFit leaves out:
    HAMi's nvidia.com/gpumem is a size of one device, no node reports it as a column
    (before: 'removing lower-priority pods would not make room', never preempting)."""
    h = SchedulerHarness()
    h.add_nodes(node("n0", 1, memory_mib=16384))
    h.add_pods(make_pod("low").req({GPU: 1}, cpu="100m").priority(0))
    h.run()
    h.add_pods(
        make_pod("high").req(cpu="100m").lim({GPU: 1, "nvidia.com/gpumem": 1024}).priority(100)
    )
    h.advance(30)
    assert h.node_of("high") == "n0"
    assert list(h.evicted) == ["default/low"]


def test_volcano_vgpus_without_memory_take_a_device_each_and_percentages_share_one() -> None:
    def vgpu(name: str, **limits: int) -> PodBuilder:
        asked = {"volcano.sh/vgpu-number": 1, **{f"volcano.sh/{k}": v for k, v in limits.items()}}
        return make_pod(name).uid(name).req(cpu="1").lim(asked)

    def volcano_node(gpus: int) -> NodeBuilder:
        # Volcano's device plugin reports vGPUs (10 per device) and the memory of all.
        resources = {"cpu": "32", "memory": "128Gi", GPU: gpus}
        resources |= {"volcano.sh/vgpu-number": 10 * gpus, "volcano.sh/vgpu-memory": 16384 * gpus}
        return make_node("gpu").capacity(resources)

    h = SchedulerHarness()
    h.add_nodes(volcano_node(2))
    # Neither vgpu-memory nor a percentage: all of a device's memory each (Volcano).
    h.add_pods(vgpu("a"), vgpu("b"), vgpu("c"))
    placements, messages = h.run()
    assert sorted(k for k, n in placements.items() if n) == ["default/a", "default/b"]
    assert messages["default/c"]  # no third device
    devices = GpuDevices.of(h.scheduler.handle)
    row = h.scheduler.cluster.table.row_of["gpu"]
    assert devices.mem_free[row].tolist()[:2] == [0, 0]

    h = SchedulerHarness()
    h.add_nodes(volcano_node(1))
    # vgpu-memory-percentage 25: four of them on the one device, a fifth waits.
    h.add_pods(*(vgpu(f"q{i}", **{"vgpu-memory-percentage": 25}) for i in range(5)))
    placements, _ = h.run()
    assert sum(1 for n in placements.values() if n) == 4
    row = h.scheduler.cluster.table.row_of["gpu"]
    assert GpuDevices.of(h.scheduler.handle).mem_free[row, 0] == 0
