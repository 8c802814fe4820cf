"""What a GPU pod's device plugin reads from the pod, written with its Binding.

Shoal's own `shoal.dev/gpu-index` goes on every GPU pod (the scheduler's binding cycle
writes it); this module adds, beside it, the annotations of the device plugin that will
start the pod's containers, in that plugin's vocabulary:

* Alibaba's gpushare (`aliyun.com/gpu-mem` pods): the device index, the pod's and the
  device's GiB, `ASSIGNED: false` and the assume time in ns (as
  gpushare-scheduler-extender writes them);
* HAMi (`nvidia.com/gpu` pods, with or without `gpumem`, `gpumem-percentage`,
  `gpucores`) and Volcano vGPU (`volcano.sh/vgpu-*` pods) on a node whose device plugin
  registered its devices: per container, the UUIDs of the devices Shoal chose with the
  memory and compute the container asked (`shoal.api.vgpu_protocol`).

A HAMi or Volcano pod on a node without its plugin's registration gets Shoal's index
only, and a note that says so (`DevicePluginWrite.note`, carried to the pod's Scheduled
event and the log) instead of silence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shoal.api.gpu import (
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MILLI,
    MIB_PER_GIB,
    RESOURCE_ALIYUN_GPU_MEM,
    RESOURCE_HAMI_GPUCORES,
    RESOURCE_HAMI_GPUMEM,
    RESOURCE_HAMI_GPUMEM_PERCENTAGE,
    RESOURCE_VGPU_CORES,
    RESOURCE_VGPU_MEMORY,
    RESOURCE_VGPU_NUMBER,
    registration_of,
)
from shoal.api.podinfo import PodInfo
from shoal.api.resources import GPU, parse_resource_list
from shoal.api.vgpu_protocol import (
    ANNOTATION_HAMI_REGISTER,
    ANNOTATION_VOLCANO_REGISTER,
    HAMI,
    VOLCANO,
    ContainerDevices,
    Registration,
    allocation_annotations,
)
from shoal.cache.gpu_devices import GpuDevices

__all__ = ["DevicePluginWrite", "device_plugin_write"]

_HAMI_SIZES = (RESOURCE_HAMI_GPUMEM, RESOURCE_HAMI_GPUCORES, RESOURCE_HAMI_GPUMEM_PERCENTAGE)
_REGISTER = {HAMI: ANNOTATION_HAMI_REGISTER, VOLCANO: ANNOTATION_VOLCANO_REGISTER}


@dataclass(frozen=True, slots=True)
class DevicePluginWrite:
    """Annotations for the pod's device plugin, and why some could not be written
    ("" when nothing is missing)."""

    annotations: dict[str, str] = field(default_factory=dict)
    note: str = ""


def device_plugin_write(
    pod: PodInfo, held: tuple[int, ...], devices: GpuDevices, node: str, now: float
) -> DevicePluginWrite:
    """What the pod's device plugin reads from the pod (see the module docstring);
    `held` are the device indices the cache gave the pod on `node`, `now` the binding's
    time in seconds since the epoch."""
    requests = pod.requests
    row = devices.table.row_of.get(node)
    device_mem = int(devices.mem[row]) if row is not None else 0
    gib = requests.get(RESOURCE_ALIYUN_GPU_MEM, 0)
    if gib:
        if len(held) != 1:
            return DevicePluginWrite()
        return DevicePluginWrite(
            {
                "ALIYUN_COM_GPU_MEM_IDX": str(held[0]),
                "ALIYUN_COM_GPU_MEM_POD": str(gib),
                "ALIYUN_COM_GPU_MEM_DEV": str(device_mem // MIB_PER_GIB),
                "ALIYUN_COM_GPU_MEM_ASSIGNED": "false",
                "ALIYUN_COM_GPU_MEM_ASSUME_TIME": str(int(now * 1e9)),
            }
        )
    if requests.get(RESOURCE_VGPU_NUMBER, 0) or requests.get(RESOURCE_VGPU_MEMORY, 0):
        stack = VOLCANO
    elif any(requests.get(key, 0) for key in _HAMI_SIZES):
        stack = HAMI
    elif requests.get(GPU, 0) and ANNOTATION_GPU_MILLI not in pod.pod.metadata.annotations:
        stack = ""  # whole GPUs: HAMi's if its plugin runs there, else NVIDIA's
    else:
        return DevicePluginWrite()
    registration = registration_of(devices.table.nodes[row]) if row is not None else None
    if registration is None or (stack and registration.stack != stack):
        if not stack:
            return DevicePluginWrite()  # the NVIDIA device plugin reads nothing from pods
        return DevicePluginWrite(
            note=f"node {node} has no {stack} device registration (annotation "
            f"{_REGISTER[stack]}), so only {ANNOTATION_GPU_INDEX} was written: {stack}'s "
            "device plugin cannot start this pod's containers there",
        )
    containers = _containers(pod, registration, held, device_mem)
    if containers is None:
        return DevicePluginWrite(
            note=f"the {len(held)} device(s) the pod holds on {node} do not match its "
            f"containers' requests, so {registration.stack}'s allocation annotations were "
            "not written"
        )
    return DevicePluginWrite(allocation_annotations(registration, containers, node, now))


def _containers(
    pod: PodInfo, registration: Registration, held: tuple[int, ...], device_mem: int
) -> list[ContainerDevices] | None:
    """The pod's devices split among its containers in order, with each container's
    memory (MiB) and compute (%) per device: what it asked, or what Shoal counted for it
    (a share sized by compute alone holds memory in proportion, HAMi's whole GPU all of
    the device's memory and 100 % of its compute); None when the held devices do not
    add up to the containers' requests."""
    hami = registration.stack == HAMI
    out: list[ContainerDevices] = []
    taken = 0
    for container in pod.pod.spec.containers:
        res = container.resources
        amounts = parse_resource_list({**res.requests, **res.limits})
        if hami:
            number = amounts.get(GPU, 0)
            memory = amounts.get(RESOURCE_HAMI_GPUMEM, 0)
            cores = amounts.get(RESOURCE_HAMI_GPUCORES, 0)
            percent = amounts.get(RESOURCE_HAMI_GPUMEM_PERCENTAGE, 0)
        else:
            number = amounts.get(RESOURCE_VGPU_NUMBER, 0)
            memory = amounts.get(RESOURCE_VGPU_MEMORY, 0)
            cores = amounts.get(RESOURCE_VGPU_CORES, 0)
            percent = 0
        if not number and (memory or cores or percent):
            number = 1  # a size without a count: one device (as GpuShare counted it)
        if not number:
            out.append(ContainerDevices())
            continue
        mine = held[taken : taken + number]
        taken += number
        if not memory:
            if percent:
                memory = percent * device_mem // 100
            elif cores:
                memory = cores * device_mem // 100
            elif hami:  # a whole GPU
                memory, cores = device_mem, 100
            else:  # Volcano's vgpu-number alone: a tenth of the device
                memory = device_mem // 10
        out.append(ContainerDevices(tuple(mine), memory, cores))
    if taken != len(held) or any(d >= len(registration.devices) for d in held):
        return None
    return out
