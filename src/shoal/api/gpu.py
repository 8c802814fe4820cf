"""GPU requests of pods and GPU devices of nodes (whole GPUs and GPU sharing).

A node has `count` GPU devices of one model; each device has 1000 milli-GPU. A pod asks
for `count` devices and `milli` per device: whole GPUs (`milli == 1000`) or a share of
one device (`milli < 1000`), optionally restricted to some GPU models.

Keys read (the ones GPU-sharing deployments use in the field, see docs/gpu-sharing.md):

Pod
  * `resources.requests["nvidia.com/gpu"]`: whole GPUs (NVIDIA device plugin).
  * annotation `alibabacloud.com/gpu-milli`: milli-GPU per device, a whole number
    1..1000 (Alibaba's GPU-sharing scheduler, and the openb trace artifact).
  * annotation `alibabacloud.com/gpu-count`: number of devices, a whole number 0..256
    (default: the `nvidia.com/gpu` request, else 1 when `gpu-milli` is set).

Anything else ("0.5", "0", "1e20", "abc") is refused with the annotation and the range
(`GpuRequestError`; GpuShare's PreFilter makes the pod unschedulable with that message).
  * annotation `alibabacloud.com/gpu-card-model`: allowed models, `|`-separated.
  * annotation `shoal.dev/gpu-index` (or `alibabacloud.com/gpu-index`): device indices
    of a pod that is already bound (written by Shoal at bind time).

Node
  * allocatable (or capacity) `nvidia.com/gpu` or `alibabacloud.com/gpu-count`: devices.
  * label `alibabacloud.com/gpu-card-model` or `nvidia.com/gpu.product`: the model.
  * HAMi's or Volcano's device registration annotation (`shoal.api.vgpu_protocol`): when
    present, the devices (count, order, memory) are the registered ones.

Other vocabularies (Volcano vGPU, HAMi incl. `nvidia.com/gpumem-percentage`, Alibaba
gpushare) are read by `_vgpu_request`; docs/gpu-sharing.md has the table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shoal.api.objects import Node
from shoal.api.podinfo import PodInfo
from shoal.api.quantity import QuantityError, to_units
from shoal.api.resources import GPU, ResourceList, parse_resource_list
from shoal.api.vgpu_protocol import Registration, RegistrationError, node_registration

__all__ = [
    "ANNOTATION_GPU_COUNT",
    "ANNOTATION_GPU_INDEX",
    "ANNOTATION_GPU_INDEX_ALIBABA",
    "ANNOTATION_GPU_MILLI",
    "ANNOTATION_GPU_MODEL",
    "DEVICE_LEVEL_RESOURCES",
    "GPU_MILLI",
    "LABEL_GPU_COUNT",
    "LABEL_GPU_MEMORY",
    "LABEL_GPU_MODEL",
    "LABEL_GPU_PRODUCT",
    "MAX_DEVICES",
    "MIB_PER_GIB",
    "NO_GPU",
    "RESOURCE_ALIYUN_GPU_COUNT",
    "RESOURCE_ALIYUN_GPU_MEM",
    "RESOURCE_GPU_COUNT",
    "RESOURCE_HAMI_GPUCORES",
    "RESOURCE_HAMI_GPUMEM",
    "RESOURCE_HAMI_GPUMEM_PERCENTAGE",
    "RESOURCE_VGPU_CORES",
    "RESOURCE_VGPU_MEMORY",
    "RESOURCE_VGPU_MEMORY_PERCENTAGE",
    "RESOURCE_VGPU_NUMBER",
    "GpuRequest",
    "GpuRequestError",
    "check_node_gpus",
    "format_gpu_index",
    "node_gpu_memory",
    "node_gpus",
    "parse_gpu_index",
    "pod_gpu_index",
    "pod_gpu_request",
    "registration_of",
]

GPU_MILLI = 1000
"""Milli-GPU of one whole device."""

ANNOTATION_GPU_MILLI = "alibabacloud.com/gpu-milli"
ANNOTATION_GPU_COUNT = "alibabacloud.com/gpu-count"
ANNOTATION_GPU_MODEL = "alibabacloud.com/gpu-card-model"
ANNOTATION_GPU_INDEX = "shoal.dev/gpu-index"
"""Written on the pod at bind time: comma-separated device indices ("0,3")."""
ANNOTATION_GPU_INDEX_ALIBABA = "alibabacloud.com/gpu-index"
"""Read for pods bound by Alibaba's GPU-sharing scheduler: dash-separated ("0-3")."""
LABEL_GPU_MODEL = "alibabacloud.com/gpu-card-model"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
RESOURCE_GPU_COUNT = "alibabacloud.com/gpu-count"

# Other vocabularies (docs/gpu-sharing.md has the table).
RESOURCE_ALIYUN_GPU_MEM = "aliyun.com/gpu-mem"
"""GiB of one device's memory (Alibaba's gpushare device plugin; pod and node)."""
RESOURCE_ALIYUN_GPU_COUNT = "aliyun.com/gpu-count"
RESOURCE_VGPU_NUMBER = "volcano.sh/vgpu-number"
"""vGPUs, each on its own device (Volcano's vGPU device plugin)."""
RESOURCE_VGPU_MEMORY = "volcano.sh/vgpu-memory"
"""MiB of device memory per vGPU."""
RESOURCE_VGPU_CORES = "volcano.sh/vgpu-cores"
"""Percent of a device's compute per vGPU."""
RESOURCE_VGPU_MEMORY_PERCENTAGE = "volcano.sh/vgpu-memory-percentage"
"""Percent of a device's memory per vGPU (Volcano; `volcano.sh/vgpu-memory` wins)."""
RESOURCE_HAMI_GPUMEM = "nvidia.com/gpumem"
"""MiB of device memory per GPU (HAMi, with `nvidia.com/gpu` counting vGPUs)."""
RESOURCE_HAMI_GPUCORES = "nvidia.com/gpucores"
"""Percent of a device's compute per GPU (HAMi)."""
RESOURCE_HAMI_GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
"""Percent of a device's memory per GPU (HAMi; `nvidia.com/gpumem` wins when both are set)."""
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
"""MiB of memory per device (NVIDIA GPU Feature Discovery)."""
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
"""Physical devices (GPU Feature Discovery; wins over a vGPU-inflated `nvidia.com/gpu`)."""
MIB_PER_GIB = 1024
DEVICE_LEVEL_RESOURCES = (
    RESOURCE_VGPU_MEMORY,
    RESOURCE_VGPU_CORES,
    RESOURCE_VGPU_MEMORY_PERCENTAGE,
    RESOURCE_HAMI_GPUMEM,
    RESOURCE_HAMI_GPUCORES,
    RESOURCE_HAMI_GPUMEM_PERCENTAGE,
)
"""Sizes of one device a pod asks for: checked per device (GpuShare), not per node."""


class GpuRequestError(ValueError):
    """A pod's GPU annotations or requests are inconsistent."""


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """`count` devices with `milli` free milli-GPU each, on a node of one of `models`."""

    count: int
    milli: int  # compute per device; 0 with `memory`: sized by memory (see GpuDevices)
    models: frozenset[str] | None = None  # None: any model
    memory: int = 0  # MiB of device memory per device; 0: in proportion to `milli`
    # Percent of each device's memory (HAMi's gpumem-percentage, with gpucores sizing
    # compute apart; alone it is `milli` in proportion); 0: none.
    memory_percent: int = 0

    @property
    def total_milli(self) -> int:
        return self.count * self.milli

    @property
    def shared(self) -> bool:
        """A fraction of a device (milli < 1000, or sized by memory)."""
        return self.count > 0 and self.milli < GPU_MILLI

    def __bool__(self) -> bool:
        return self.count > 0

    def allows(self, model: str) -> bool:
        return self.models is None or model in self.models

    @property
    def affinity(self) -> str:
        """The pod's GPU kind: "no-gpu", "share-gpu" or "<count>-gpu"."""
        if not self.count:
            return "no-gpu"
        return "share-gpu" if self.shared else f"{self.count}-gpu"


NO_GPU = GpuRequest(0, 0)


MAX_DEVICES = 256
"""The most GPU devices one node may report or one pod may ask for: an 8-GPU node with
7 MIG slices each reports 56; far larger numbers are mistakes (1e9 would make the
device table allocate hundreds of GiB), refused with the field instead."""

_WHOLE = re.compile(r"^[0-9]+$")


def _whole_number(value: str, key: str, low: int, high: int, meaning: str) -> int:
    text = value.strip()
    if not _WHOLE.match(text) or not low <= int(text) <= high:
        raise GpuRequestError(
            f"annotation {key}={value!r}: must be a whole number from {low} to {high} ({meaning})"
        )
    return int(text)


def parse_models(text: str) -> frozenset[str] | None:
    models = frozenset(m.strip() for m in text.split("|") if m.strip())
    return models or None


def _per_container(pod: PodInfo, keys: tuple[str, ...]) -> list[ResourceList]:
    """Each container's amounts of `keys` (limits, else requests), for those with any."""
    out = []
    for container in pod.pod.spec.containers:
        res = container.resources
        amounts = parse_resource_list({**res.requests, **res.limits})
        picked = {k: amounts[k] for k in keys if amounts.get(k)}
        if picked:
            out.append(picked)
    return out


def _percent(value: int, key: str) -> int:
    if not 1 <= value <= 100:
        raise GpuRequestError(f"{key} {value} must be from 1 to 100 (percent of a device)")
    return value * 10


_HAMI_SIZES = (RESOURCE_HAMI_GPUMEM, RESOURCE_HAMI_GPUCORES, RESOURCE_HAMI_GPUMEM_PERCENTAGE)


def _vgpu_request(pod: PodInfo, models: frozenset[str] | None) -> GpuRequest | None:
    """Volcano vGPU, HAMi and Alibaba gpushare (memory) requests; None if none. Memory
    and cores are per vGPU (per device), as those device plugins define them; over
    several containers the devices add up and each gets the largest size asked."""
    requests = pod.requests
    keys: tuple[str, ...]
    # Volcano counts a container with vgpu-memory but no vgpu-number as one vGPU.
    if requests.get(RESOURCE_VGPU_NUMBER, 0) or requests.get(RESOURCE_VGPU_MEMORY, 0):
        keys = (
            RESOURCE_VGPU_NUMBER,
            RESOURCE_VGPU_MEMORY,
            RESOURCE_VGPU_CORES,
            RESOURCE_VGPU_MEMORY_PERCENTAGE,
        )
        # Neither memory nor a percentage: Volcano gives the vGPU all of the device's
        # memory (its resourcereqs: percentage 100), so no other vGPU fits beside it.
        default_percent = 100
    elif any(key in requests for key in _HAMI_SIZES):
        keys = (GPU, *_HAMI_SIZES)
        default_percent = 0
    elif gib := requests.get(RESOURCE_ALIYUN_GPU_MEM, 0):
        return GpuRequest(1, 0, models, gib * MIB_PER_GIB)
    else:
        return None
    number_key, memory_key, cores_key, percent_key = keys
    containers = _per_container(pod, keys)
    count = sum(c.get(number_key, 0) or 1 for c in containers)
    if count > MAX_DEVICES:
        raise GpuRequestError(f"{number_key}: {count} devices is more than {MAX_DEVICES}")
    memory = max((c.get(memory_key, 0) for c in containers), default=0)
    cores = max((c.get(cores_key, 0) for c in containers), default=0)
    milli = _percent(cores, cores_key) if cores else 0
    share = max((c.get(percent_key, 0) for c in containers), default=0)
    percent = _percent(share, percent_key) // 10 if share else 0
    if not memory and not percent:
        percent = default_percent
    if percent and not memory:  # the percentage counts only without a size in MiB
        return GpuRequest(count, milli or percent * 10, models, 0, percent if milli else 0)
    if not memory and not milli:
        raise GpuRequestError(
            f"{RESOURCE_HAMI_GPUMEM}, {RESOURCE_HAMI_GPUMEM_PERCENTAGE} and "
            f"{RESOURCE_HAMI_GPUCORES} are all 0: ask for one of them, or for whole "
            f"GPUs with {GPU} alone"
        )
    return GpuRequest(count, milli, models, memory)


def pod_gpu_request(pod: PodInfo) -> GpuRequest:
    """The pod's GPU request; raises GpuRequestError when it is inconsistent. Parsed
    once per PodInfo (a changed pod gets a new PodInfo)."""
    found = pod.gpu_request
    if found is None:
        try:
            found = _parse_gpu_request(pod)
        except GpuRequestError as err:
            found = err
        pod.gpu_request = found
    if isinstance(found, GpuRequestError):
        raise found
    assert isinstance(found, GpuRequest)
    return found


def _parse_gpu_request(pod: PodInfo) -> GpuRequest:
    annotations = pod.pod.metadata.annotations
    requested = pod.requests.get(GPU, 0)
    milli_text = annotations.get(ANNOTATION_GPU_MILLI)
    count_text = annotations.get(ANNOTATION_GPU_COUNT)
    if milli_text is None and count_text is None:
        requests = pod.requests
        if (
            RESOURCE_VGPU_NUMBER in requests
            or RESOURCE_VGPU_MEMORY in requests
            or RESOURCE_HAMI_GPUMEM in requests
            or RESOURCE_HAMI_GPUCORES in requests
            or RESOURCE_HAMI_GPUMEM_PERCENTAGE in requests
            or RESOURCE_ALIYUN_GPU_MEM in requests
        ) and (vgpu := _vgpu_request(pod, parse_models(annotations.get(ANNOTATION_GPU_MODEL, "")))):
            return vgpu
        if not requested:
            return NO_GPU
    if requested > MAX_DEVICES:
        raise GpuRequestError(
            f"the {GPU} request {requested} is more than {MAX_DEVICES} devices on one node"
        )
    if count_text is not None:
        count = _whole_number(
            count_text, ANNOTATION_GPU_COUNT, 0, MAX_DEVICES, "devices, each on one node"
        )
    elif requested:
        count = requested
    else:
        count = 1
    milli = (
        GPU_MILLI
        if milli_text is None
        else _whole_number(
            milli_text,
            ANNOTATION_GPU_MILLI,
            1,
            GPU_MILLI,
            "milli-GPU per device, 1000 = a whole GPU; remove it for a pod without GPU",
        )
    )
    if requested and count_text is not None and requested != count:
        raise GpuRequestError(
            f"{ANNOTATION_GPU_COUNT}={count} disagrees with the {GPU} request {requested}"
        )
    if count == 0:
        if milli_text is not None:
            raise GpuRequestError(
                f"annotation {ANNOTATION_GPU_MILLI} is set but {ANNOTATION_GPU_COUNT} is 0: "
                "remove both for a pod without GPU"
            )
        return NO_GPU
    model_text = annotations.get(ANNOTATION_GPU_MODEL, "")
    return GpuRequest(count, milli, parse_models(model_text))


def parse_gpu_index(text: str) -> tuple[int, ...]:
    """Device indices from "0,3" (Shoal) or "0-3" (Alibaba); raises ValueError."""
    sep = "," if "," in text else "-"
    parts = [p.strip() for p in text.split(sep) if p.strip()]
    indices = tuple(int(p) for p in parts)
    if any(i < 0 for i in indices):
        raise ValueError(f"negative GPU index in {text!r}")
    return indices


def format_gpu_index(devices: tuple[int, ...] | list[int]) -> str:
    return ",".join(str(int(d)) for d in devices)


def pod_gpu_index(pod: PodInfo) -> tuple[int, ...] | None:
    """Device indices recorded on the pod (None if none or unreadable)."""
    annotations = pod.pod.metadata.annotations
    text = annotations.get(ANNOTATION_GPU_INDEX) or annotations.get(ANNOTATION_GPU_INDEX_ALIBABA)
    if not text:
        return None
    try:
        return parse_gpu_index(text)
    except ValueError:
        return None


def registration_of(node: Node) -> Registration | None:
    """The node's HAMi or Volcano device registration (`shoal.api.vgpu_protocol`); None
    also when it cannot be read (such nodes are refused at intake, `check_node_gpus`;
    nodes built in code are counted from their resources and labels instead)."""
    try:
        return node_registration(node)
    except RegistrationError:
        return None


def check_node_gpus(node: Node) -> None:
    """Refuse a node reporting more than MAX_DEVICES GPUs, or whose HAMi or Volcano
    device registration cannot be read (ValueError naming the field), so that it is left
    out whole rather than added with its GPUs invisible or misnamed."""
    node_registration(node)  # RegistrationError is a ValueError naming the annotation
    status = node.status
    for field, resources in (("allocatable", status.allocatable), ("capacity", status.capacity)):
        for key in (GPU, RESOURCE_GPU_COUNT, RESOURCE_ALIYUN_GPU_COUNT):
            if key not in resources:
                continue
            try:
                count = to_units(resources[key])
            except QuantityError:
                continue  # the quantity check names it
            if count > MAX_DEVICES:
                raise ValueError(
                    f"status.{field}.{key}: {count} GPU devices on one node is more than "
                    f"{MAX_DEVICES}; report the node's real device count"
                )


def node_gpu_memory(node: Node, count: int) -> int:
    """MiB of memory per device of the node (0: unknown): GPU Feature Discovery's
    `nvidia.com/gpu.memory` label, else Alibaba gpushare's `aliyun.com/gpu-mem` (GiB of
    the whole node) or Volcano's `volcano.sh/vgpu-memory` (MiB of the whole node)
    divided among the devices. A HAMi or Volcano registration wins over all of them:
    its device plugin enforces what it registered."""
    registration = registration_of(node)
    if registration is not None:
        return registration.memory
    text = node.metadata.labels.get(LABEL_GPU_MEMORY, "")
    if text.isdigit():
        return int(text)
    if count <= 0:
        return 0
    for resources in (node.status.allocatable, node.status.capacity):
        for key, unit in ((RESOURCE_ALIYUN_GPU_MEM, MIB_PER_GIB), (RESOURCE_VGPU_MEMORY, 1)):
            if key in resources:
                try:
                    return to_units(resources[key]) * unit // count
                except QuantityError:
                    return 0
    return 0


def node_gpus(node: Node) -> tuple[int, str]:
    """(device count, model) of a node; the model is "" when unknown. At most
    MAX_DEVICES (manifests and the API are refused above it: `check_node_gpus`)."""
    status = node.status
    count = 0
    registration = registration_of(node)
    if registration is not None:  # the devices, in the order their plugin names them
        labels = node.metadata.labels
        model = labels.get(LABEL_GPU_MODEL) or labels.get(LABEL_GPU_PRODUCT) or ""
        return len(registration.devices), model or registration.model
    label = node.metadata.labels.get(LABEL_GPU_COUNT, "")
    if label.isdigit():  # physical devices, whatever vGPU count the plugin reports
        labels = node.metadata.labels
        model = labels.get(LABEL_GPU_MODEL) or labels.get(LABEL_GPU_PRODUCT) or ""
        return min(int(label), MAX_DEVICES), model
    for resources in (status.allocatable, status.capacity):
        for key in (GPU, RESOURCE_GPU_COUNT, RESOURCE_ALIYUN_GPU_COUNT):
            if key in resources:
                try:
                    count = to_units(resources[key])
                except QuantityError:
                    count = 0
                break
        else:
            continue
        break
    labels = node.metadata.labels
    model = labels.get(LABEL_GPU_MODEL) or labels.get(LABEL_GPU_PRODUCT) or ""
    return min(max(count, 0), MAX_DEVICES), model
