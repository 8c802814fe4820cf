"""The device-plugin protocols of HAMi and Volcano's vGPU: the devices their device
plugins register on the Node, and the allocation their device plugins read from the Pod.

Both plugins name devices by UUID and learn, from annotations the scheduler writes on the
pod, which devices (and how much memory and compute of each) every container gets; a pod
bound without them does not start. The formats follow the sources (docs/gpu-sharing.md
names the files and commits):

Node (written by the device plugin, read here)
  * HAMi: `hami.io/node-nvidia-register`, a JSON list of devices (`id`, `count`,
    `devmem`, `devcore`, `type`, `numa`, `mode`, `health`, `index`; HAMi's
    `UnMarshalNodeDevices`), or the older text form `uuid,count,devmem,devcore,type,
    numa,health[,index,mode]:` per device (HAMi's `DecodeNodeDevices`, 7 or 9 fields).
  * Volcano: `volcano.sh/node-vgpu-register`, `uuid,count,devmem,type,health[,mode]:`
    per device (Volcano's `decodeNodeDevices`, 5 or 6 fields).
  * Their handshakes (`hami.io/node-handshake`, `volcano.sh/node-vgpu-handshake`): a
    value starting with `Deleted` means the scheduler side retired the registration.

Pod (written at bind, in the Binding)
  * per container in `spec.containers` order (empty for a container without GPUs, the
    device plugins index containers by position): `uuid,NVIDIA,<MiB>,<cores %>:` per
    device; containers end with `;` (HAMi's `EncodePodSingleDevice`) or are joined by
    `;` (Volcano's `encodePodDevices`);
  * HAMi: `hami.io/vgpu-devices-to-allocate` and `-allocated`, `hami.io/vgpu-node`,
    `hami.io/vgpu-time`, `hami.io/bind-phase: allocating`, `hami.io/bind-time`;
  * Volcano: `volcano.sh/devices-to-allocate` and `vgpu-ids-new`, `volcano.sh/vgpu-node`,
    `volcano.sh/vgpu-time`, `volcano.sh/bind-phase: allocating`, `volcano.sh/bind-time`.

A registration that cannot be read is refused with `RegistrationError` naming the
annotation, the device and the fix (`check_node_gpus` turns it into the node's
InvalidObject); parsing is cached per annotation text, so node updates that do not change
it cost a dictionary lookup.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from shoal.api.objects import Node

__all__ = [
    "ALLOCATED_ANNOTATIONS",
    "ANNOTATION_HAMI_HANDSHAKE",
    "ANNOTATION_HAMI_REGISTER",
    "ANNOTATION_VOLCANO_HANDSHAKE",
    "ANNOTATION_VOLCANO_REGISTER",
    "HAMI",
    "MAX_DEVICE_MEMORY",
    "MAX_SPLIT",
    "VOLCANO",
    "ContainerDevices",
    "RegisteredDevice",
    "Registration",
    "RegistrationError",
    "allocated_devices",
    "allocation_annotations",
    "node_registration",
]

HAMI = "HAMi"
VOLCANO = "Volcano vGPU"
ANNOTATION_HAMI_REGISTER = "hami.io/node-nvidia-register"
ANNOTATION_HAMI_HANDSHAKE = "hami.io/node-handshake"
ANNOTATION_VOLCANO_REGISTER = "volcano.sh/node-vgpu-register"
ANNOTATION_VOLCANO_HANDSHAKE = "volcano.sh/node-vgpu-handshake"
_STACKS = (
    (HAMI, ANNOTATION_HAMI_REGISTER, ANNOTATION_HAMI_HANDSHAKE),
    (VOLCANO, ANNOTATION_VOLCANO_REGISTER, ANNOTATION_VOLCANO_HANDSHAKE),
)
# Where each scheduler records a bound pod's devices (read back for pods Shoal did not
# bind: HAMi's or Volcano's own scheduler, before Shoal took over).
_ALLOCATED = {HAMI: "hami.io/vgpu-devices-allocated", VOLCANO: "volcano.sh/vgpu-ids-new"}
ALLOCATED_ANNOTATIONS = tuple(_ALLOCATED.values())
_DEVICE_TYPE = "NVIDIA"  # the device type keyword both device plugins match on

MAX_REGISTERED = 256
"""The most devices one registration may list (as `MAX_DEVICES` for node resources)."""
MAX_SPLIT = 1000
"""The most vGPUs a device may be split into (HAMi's default is 10)."""
MAX_DEVICE_MEMORY = 1 << 20
"""MiB of one device above which a registration is a mistake (1 TiB)."""
MAX_CORES = 10_000
"""Percent of a device's compute (HAMi's `devcore`, 100 unless scaled)."""

_UUID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-\[\]/]{0,127}$")
_WHOLE = re.compile(r"^[0-9]+$")


class RegistrationError(ValueError):
    """A device plugin's node registration that cannot be read."""


@dataclass(frozen=True, slots=True)
class RegisteredDevice:
    """One device as its device plugin registered it."""

    uuid: str
    split: int  # vGPUs that may share the device (GpuDevices blocks it at that many pods)
    memory: int  # MiB
    model: str
    healthy: bool


@dataclass(frozen=True, slots=True)
class Registration:
    """The devices a node's HAMi or Volcano device plugin registered, in their order
    (Shoal's device index i is the i-th device here)."""

    stack: str  # HAMI or VOLCANO
    annotation: str
    devices: tuple[RegisteredDevice, ...]

    @property
    def memory(self) -> int:
        """MiB per device for the device table: the smallest device's (one size per
        node; a node mixing sizes is counted at its smallest, never over)."""
        return min(d.memory for d in self.devices)

    @property
    def model(self) -> str:
        return self.devices[0].model


def node_registration(node: Node) -> Registration | None:
    """The node's HAMi or Volcano registration (None: none, or retired by its
    handshake); raises RegistrationError when it cannot be read."""
    annotations = node.metadata.annotations
    if not annotations:
        return None
    for stack, key, handshake in _STACKS:
        text = annotations.get(key)
        if text is None or annotations.get(handshake, "").startswith("Deleted"):
            continue
        found = _parse_cached(stack, key, text)
        if isinstance(found, RegistrationError):
            raise RegistrationError(str(found))  # the caller names the node
        return found
    return None


@lru_cache(maxsize=4096)
def _parse_cached(stack: str, key: str, text: str) -> Registration | RegistrationError:
    try:
        if stack == HAMI and text.lstrip().startswith("["):
            devices = _parse_hami_json(key, text)
        else:
            devices = _parse_text(stack, key, text)
        _check_list(key, devices)
    except RegistrationError as err:
        return err
    return Registration(stack, key, tuple(devices))


def _problem(key: str, where: str, what: str) -> RegistrationError:
    return RegistrationError(
        f"metadata.annotations.{key}: {where}{what}; fix or restart the node's device "
        "plugin (it rewrites the annotation), or remove the annotation to count the "
        "node's GPUs from its resources and labels"
    )


def _whole(key: str, where: str, name: str, value: Any, low: int, high: int) -> int:
    text = str(value).strip() if not isinstance(value, bool) else "?"
    if not _WHOLE.match(text) or not low <= int(text) <= high:
        raise _problem(key, where, f"{name} {value!r} must be a whole number from {low} to {high}")
    return int(text)


def _uuid(key: str, where: str, value: Any) -> str:
    if not isinstance(value, str) or not _UUID.match(value):
        raise _problem(
            key,
            where,
            f"device UUID {value!r} is not a device id (letters, digits, '-', '.', '_', "
            "'[', ']', '/'; at most 128 characters)",
        )
    return value


def _healthy(key: str, where: str, value: Any) -> bool:
    text = str(value).strip().lower()
    if text not in ("true", "false", "1", "0", "t", "f"):
        raise _problem(key, where, f"health {value!r} must be true or false")
    return text in ("true", "1", "t")


def _device(
    key: str, where: str, uuid: Any, split: Any, memory: Any, model: Any, health: Any
) -> RegisteredDevice:
    return RegisteredDevice(
        _uuid(key, where, uuid),
        _whole(key, where, "split count", split, 1, MAX_SPLIT),
        _whole(key, where, "memory (MiB)", memory, 1, MAX_DEVICE_MEMORY),
        str(model),
        _healthy(key, where, health),
    )


def _parse_hami_json(key: str, text: str) -> list[RegisteredDevice]:
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise _problem(key, "", f"not a JSON list of devices ({err})") from None
    if not isinstance(raw, list):
        raise _problem(key, "", "not a JSON list of devices")
    devices = []
    for i, item in enumerate(raw[: MAX_REGISTERED + 1]):
        where = f"device {i}: "
        if not isinstance(item, dict):
            raise _problem(key, where, "not a JSON object")
        # Go's omitempty drops zero values: a missing number is 0, a missing health false.
        _whole(key, where, "devcore", item.get("devcore", 0), 0, MAX_CORES)
        devices.append(
            _device(
                key,
                where,
                item.get("id"),
                item.get("count", 0),
                item.get("devmem", 0),
                item.get("type", ""),
                item.get("health", False),
            )
        )
    if len(raw) > MAX_REGISTERED:
        raise _problem(key, "", f"{len(raw)} devices is more than {MAX_REGISTERED}")
    return devices


# The text form of each stack's registration, per device: the field counts accepted, the
# layout named in errors, and where uuid, count, devmem, type and health are.
_TEXT_LAYOUTS: dict[str, tuple[tuple[int, ...], str, tuple[int, int, int, int, int]]] = {
    HAMI: ((7, 9), "uuid,count,devmem,devcore,type,numa,health[,index,mode]", (0, 1, 2, 4, 6)),
    VOLCANO: ((5, 6), "uuid,count,devmem,type,health[,mode]", (0, 1, 2, 3, 4)),
}


def _parse_text(stack: str, key: str, text: str) -> list[RegisteredDevice]:
    entries = [e for e in text.split(":") if e.strip()]
    if len(entries) > MAX_REGISTERED:
        raise _problem(key, "", f"{len(entries)} devices is more than {MAX_REGISTERED}")
    counts, layout, at = _TEXT_LAYOUTS[stack]
    devices = []
    for i, entry in enumerate(entries):
        where = f"device {i}: "
        fields = entry.split(",")
        if len(fields) not in counts:
            expected = " or ".join(str(c) for c in counts)
            raise _problem(
                key, where, f"{len(fields)} fields in {entry!r}, expected {expected} ({layout})"
            )
        if stack == HAMI:
            _whole(key, where, "devcore", fields[3], 0, MAX_CORES)
        uuid, split, memory, model, health = (fields[j] for j in at)
        devices.append(_device(key, where, uuid.strip(), split, memory, model.strip(), health))
    return devices


def _check_list(key: str, devices: list[RegisteredDevice]) -> None:
    if not devices:
        raise _problem(key, "", "no device is listed")
    seen: set[str] = set()
    for i, device in enumerate(devices):
        if device.uuid in seen:
            raise _problem(key, f"device {i}: ", f"UUID {device.uuid!r} is listed twice")
        seen.add(device.uuid)


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """What one container gets: device indices (into the registration), and the MiB
    and compute percent it may use on each (0: no compute limit)."""

    devices: tuple[int, ...] = ()
    memory: int = 0
    cores: int = 0


def allocation_annotations(
    registration: Registration, containers: list[ContainerDevices], node: str, now: float
) -> dict[str, str]:
    """The annotations the registration's device plugin reads from the pod, for
    `containers` (one per `spec.containers` entry, in order) bound to `node` at `now`
    (seconds since the epoch, written as whole seconds as both schedulers do)."""
    uuids = [d.uuid for d in registration.devices]
    encoded = [
        "".join(f"{uuids[d]},{_DEVICE_TYPE},{c.memory},{c.cores}:" for d in c.devices)
        for c in containers
    ]
    seconds = str(int(now))
    if registration.stack == HAMI:
        devices = "".join(f"{e};" for e in encoded)
        return {
            "hami.io/vgpu-devices-to-allocate": devices,
            "hami.io/vgpu-devices-allocated": devices,
            "hami.io/vgpu-node": node,
            "hami.io/vgpu-time": seconds,
            "hami.io/bind-phase": "allocating",
            "hami.io/bind-time": seconds,
        }
    devices = ";".join(encoded)
    return {
        "volcano.sh/devices-to-allocate": devices,
        "volcano.sh/vgpu-ids-new": devices,
        "volcano.sh/vgpu-node": node,
        "volcano.sh/vgpu-time": seconds,
        "volcano.sh/bind-phase": "allocating",
        "volcano.sh/bind-time": seconds,
    }


def allocated_devices(
    registration: Registration, annotations: dict[str, str]
) -> tuple[int, ...] | None:
    """The device indices a bound pod's allocation annotation names (HAMi's
    `vgpu-devices-allocated`, Volcano's `vgpu-ids-new`), in the registration's order;
    None when the pod has none or names a device the registration does not list."""
    text = annotations.get(_ALLOCATED[registration.stack])
    if not text:
        return None
    index = {d.uuid: i for i, d in enumerate(registration.devices)}
    found = []
    for container in text.split(";"):
        for entry in container.split(":"):
            if entry.strip():
                uuid = entry.split(",", 1)[0].split("[", 1)[0].strip()  # MIG: uuid[t-i]
                if uuid not in index:
                    return None
                found.append(index[uuid])
    return tuple(found) or None
