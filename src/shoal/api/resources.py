"""Resource names and their integer units.

Every resource is an integer column in the node table. CPU is counted in millicores,
all other resources in whole base units (bytes for memory, devices for GPUs), exactly as
kube-scheduler's `framework.Resource` does.
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal.api.quantity import QuantityError, to_milli, to_units

__all__ = [
    "CPU",
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "EPHEMERAL_STORAGE",
    "GPU",
    "MEMORY",
    "PODS",
    "ResourceList",
    "add_into",
    "is_extended",
    "max_into",
    "parse_resource_list",
    "to_quantity_units",
]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
GPU = "nvidia.com/gpu"

# kube-scheduler scores a container with no request as if it asked for this much
# (pkg/scheduler/util: DefaultMilliCPURequest, DefaultMemoryRequest).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

ResourceList = dict[str, int]
"""Resource name -> integer amount (millicores for cpu, base units otherwise)."""

_NATIVE = frozenset({CPU, MEMORY, EPHEMERAL_STORAGE, PODS})


def is_extended(name: str) -> bool:
    """Extended resources (nvidia.com/gpu, ...) are scalar and not overcommittable."""
    return name not in _NATIVE and not name.startswith("hugepages-")


def to_quantity_units(name: str, value: str | int | float) -> int:
    """Convert a quantity to this resource's integer unit (millicores for cpu)."""
    return to_milli(value) if name == CPU else to_units(value)


def parse_resource_list(
    raw: Mapping[str, str | int | float], *, allow_negative: bool = False
) -> ResourceList:
    """Parse a v1 ResourceList; raises ValueError naming the offending resource."""
    out: ResourceList = {}
    for name, value in raw.items():
        try:
            amount = to_quantity_units(name, value)
        except QuantityError as err:
            raise ValueError(f"{name}: {err}") from None
        if amount < 0 and not allow_negative:
            raise ValueError(f"{name}: quantity {value!r} must not be negative")
        out[name] = amount
    return out


def add_into(target: ResourceList, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        target[name] = target.get(name, 0) + amount


def max_into(target: ResourceList, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > target.get(name, 0):
            target[name] = amount
