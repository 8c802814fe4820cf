"""Resource names and their integer units.

Every resource is an integer column in the node table. CPU is counted in millicores,
all other resources in whole base units (bytes for memory, devices for GPUs), exactly as
kube-scheduler's `framework.Resource` does.

Queues count in *quota units*: the same, except that `nvidia.com/gpu` is counted in
milli-GPU too, because a GPU share (a fraction of one device) charges its fraction of a
GPU to its queue (`QUOTA_MILLI`, `parse_quota_list`, `format_quota`, `quota_value`).
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
    "QUOTA_MILLI",
    "ResourceList",
    "add_into",
    "format_amount",
    "format_quota",
    "is_extended",
    "max_into",
    "parse_quota_list",
    "parse_resource_list",
    "quota_value",
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

QUOTA_MILLI = frozenset({CPU, GPU})
"""Resources queues count in thousandths (millicores; milli-GPU, so shares count)."""


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


def parse_quota_list(raw: Mapping[str, str | int | float]) -> ResourceList:
    """Parse a queue's ResourceList into quota units ("1.5" nvidia.com/gpu -> 1500);
    raises ValueError naming the offending resource."""
    out: ResourceList = {}
    for name, value in raw.items():
        try:
            amount = to_milli(value) if name in QUOTA_MILLI else to_units(value)
        except QuantityError as err:
            raise ValueError(f"{name}: {err}") from None
        if amount < 0:
            raise ValueError(f"{name}: quantity {value!r} must not be negative")
        out[name] = amount
    return out


def format_quota(name: str, amount: int) -> str:
    """A quota-unit amount in Kubernetes' canonical notation, as the API server would
    print the Quantity: "4" cpu (not "4000m"), "1500m" cpu, "2" or "1600m"
    nvidia.com/gpu, "512Mi" of memory when it is a whole number of a binary unit, else
    bytes; counts as they are."""
    if name in QUOTA_MILLI:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if amount and (name == MEMORY or name.startswith(("hugepages-", "ephemeral-storage"))):
        for unit, size in _BINARY_UNITS:
            if amount % size == 0:
                return f"{amount // size}{unit}"
    return str(amount)


_BINARY_UNITS = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
    ("Ki", 2**10),
)


def format_amount(name: str, amount: int) -> str:
    """A quota-unit amount for people (messages, tables): cores and GPUs as numbers
    ("4", "1.5", "0.4"), memory and storage in binary units ("4Gi", "512Mi"), counts as
    they are. Status fields keep Kubernetes' notation (`format_quota`)."""
    if name in QUOTA_MILLI:
        return f"{amount / 1000:.3f}".rstrip("0").rstrip(".")
    if name == MEMORY or name.startswith(("hugepages-", "ephemeral-storage")):
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if abs(amount) >= size:
                scaled = f"{amount / size:.2f}".rstrip("0").rstrip(".")
                return f"{scaled}{unit}"
    return str(amount)


def quota_value(name: str, amount: int | float) -> float:
    """A quota-unit amount in the resource's base unit (cores, GPUs, bytes)."""
    return amount / 1000.0 if name in QUOTA_MILLI else float(amount)


def add_into(target: ResourceList, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        target[name] = target.get(name, 0) + amount


def max_into(target: ResourceList, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > target.get(name, 0):
            target[name] = amount
