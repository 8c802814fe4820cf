"""Consumable capacity (KEP-5075) and shared counters (KEP-4815) as device columns.

* **Consumable capacity.** A device with `allowMultipleAllocations: true` is shared by
  several claims while its capacities last. A request consumes from *every* capacity
  of such a device: what it asks for in `capacity.requests`, rounded up by the
  capacity's `requestPolicy` (`validRange` min/step, `validValues`), or, for a capacity
  it does not name, the policy's `default` (the whole value without one). A device the
  request cannot take whatever else it holds (it lacks a requested capacity, the
  rounded amount breaks the policy or exceeds the value) does not match the request at
  all. This is kube-scheduler v1.36's allocator (`consumable_capacity.go`): requests
  are rounded with `resource.Quantity.Value()` arithmetic (whole units, rounded up)
  when a step is given; a capacity named without a domain is the driver's
  (`bandwidth` is `<driver>/bandwidth`). A device allocated whole (no
  `allowMultipleAllocations`) must still have every requested capacity, at least as
  much of it as asked.
* **Shared counters.** A pool publishes counter sets (`sharedCounters`, in a slice of
  their own) and its devices `consumesCounters` from them: a device can be allocated
  only while the counters it takes are left by the other allocated devices of the pool
  (MIG-like partitions of one GPU and the whole GPU take from the same set). A device
  shared by capacity takes its counters once, while any share of it is allocated. A
  device that names a counter set or counter its pool does not publish is never
  allocated.

The checks are numpy work over device rows: capacities and counters are int64 columns
counted in thousandths of a unit (coarser for values above about 4.5e12 units, so that
sums stay exact); a device's capacity and a counter's total are rounded down to that,
what is consumed is rounded up, so Shoal never allocates past a capacity or a counter
(it may refuse by less than a thousandth of a unit what kube would fit). The exact
amounts (`Fraction`) are what goes into `consumedCapacity`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import msgspec
import numpy as np
from numpy.typing import NDArray

from shoal.api.dra import DeviceCapacity, ResourceSlice, SliceDevice
from shoal.api.quantity import QuantityError, parse_quantity

__all__ = [
    "CapacityColumns",
    "CounterColumns",
    "Demand",
    "consumed_amount",
    "consumption",
    "format_quantity",
    "qualify",
    "violates_policy",
]

_MIN_EXPONENT = -3  # thousandths of a unit
_HEADROOM = 2**52  # per value: sums of many stay inside int64


def qualify(name: str, driver: str) -> str:
    """A capacity name with its domain (names without one are the driver's)."""
    return name if "/" in name else f"{driver}/{name}"


def _value(q: Fraction) -> int:
    """`resource.Quantity.Value()`: whole units, rounded up."""
    return math.ceil(q)


def _quantity(text: str | int | None) -> Fraction | None:
    return None if text is None else parse_quantity(text)


def consumed_amount(requested: Fraction | None, cap: DeviceCapacity) -> Fraction:
    """What a request consumes of one capacity of a shared device (kube's
    calculateConsumedCapacity): the policy's default (or the whole value) when the
    request does not name it, else the request rounded up by the policy."""
    policy = cap.request_policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return parse_quantity(policy.default)
        return parse_quantity(cap.value)
    if policy is None:
        return requested
    rng = policy.valid_range
    if rng is not None and rng.min is not None:
        low = parse_quantity(rng.min)
        if requested < low:
            return low
        if rng.step is None:
            return requested
        step = _value(parse_quantity(rng.step))
        base = _value(low)
        added = _value(requested) - base
        if step <= 0:
            return requested
        n = -(-added // step)  # added >= 0 here: requested >= min
        return Fraction(base + step * n)
    if policy.valid_values:
        for text in policy.valid_values:
            valid = parse_quantity(text)
            if requested <= valid:
                return valid
    return requested


def violates_policy(amount: Fraction, cap: DeviceCapacity) -> bool:
    """Does the consumed amount break the capacity's request policy (kube's
    violatesPolicy)?"""
    policy = cap.request_policy
    if policy is None:
        return False
    if policy.default is not None and amount == parse_quantity(policy.default):
        return False
    rng = policy.valid_range
    if rng is not None:
        if rng.max is not None and amount > parse_quantity(rng.max):
            return True
        if rng.step is not None:
            step = _value(parse_quantity(rng.step))
            low = _value(parse_quantity(rng.min)) if rng.min is not None else 0
            if step > 0 and (_value(amount) - low) % step != 0:
                return True
        return False
    if policy.valid_values:
        return all(amount != parse_quantity(v) for v in policy.valid_values)
    return False


def consumption(
    requests: Mapping[str, Fraction], driver: str, capacity: Mapping[str, DeviceCapacity]
) -> dict[str, Fraction] | None:
    """What a request takes of a device's capacities (keyed as the device names them),
    or None when the device cannot serve it at all: a requested capacity it lacks, a
    policy the amount breaks, more than the capacity's value. Raises QuantityError on
    a quantity that does not parse."""
    by_name: dict[str, str] = {}
    for name in capacity:
        qualified = qualify(name, driver)
        if qualified not in by_name or "/" in name:  # the qualified spelling wins
            by_name[qualified] = name
    wanted: dict[str, Fraction] = {}
    for name, amount in requests.items():
        own = by_name.get(qualify(name, driver))
        if own is None or own in wanted:
            return None  # not a capacity of the device (or named twice)
        wanted[own] = amount
    out: dict[str, Fraction] = {}
    for name, cap in capacity.items():
        if by_name.get(qualify(name, driver)) != name:
            continue  # shadowed by the qualified spelling of the same capacity
        amount = consumed_amount(wanted.get(name), cap)
        if amount < 0 or violates_policy(amount, cap) or amount > parse_quantity(cap.value):
            return None
        out[name] = amount
    return out


def format_quantity(amount: Fraction) -> str:
    """A quantity string for an exact amount (whole units, else milli/micro/nano,
    rounded up to nano units as Kubernetes keeps them)."""
    if amount.denominator == 1:
        return str(amount.numerator)
    nano = math.ceil(amount * 10**9)
    for suffix, scale in (("m", 10**6), ("u", 10**3)):
        if nano % scale == 0:
            return f"{nano // scale}{suffix}"
    return f"{nano}n"


def _exponent(largest: Fraction) -> int:
    exponent = _MIN_EXPONENT
    while abs(largest) >= _HEADROOM * Fraction(10) ** exponent:
        exponent += 1
    return exponent


def _scaled(amount: Fraction, exponent: int, *, up: bool) -> int:
    units = amount / Fraction(10) ** exponent
    return math.ceil(units) if up else math.floor(units)


# ---- capacities -----------------------------------------------------------------------


@dataclass
class CapacityColumns:
    """Per device: whether it allows multiple allocations, its capacity profile (one
    per distinct driver and capacity map), and for shared devices the value of each
    capacity column (scaled ints, 0 where the device has none)."""

    multi: NDArray[np.bool_]
    profile: NDArray[np.intp]
    profiles: list[tuple[str, dict[str, DeviceCapacity]]]
    broken: set[int]  # profiles whose capacities do not parse
    names: list[str] = field(default_factory=list)  # qualified column names
    index: dict[str, int] = field(default_factory=dict)
    exponents: list[int] = field(default_factory=list)
    value: NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    any_multi: bool = False  # some device allows multiple allocations

    @classmethod
    def build(cls, drivers: Sequence[str], devices: Sequence[SliceDevice]) -> CapacityColumns:
        n = len(devices)
        multi = np.fromiter(
            (bool(d.allow_multiple_allocations) for d in devices), dtype=bool, count=n
        )
        key_of: dict[tuple[str, bytes], int] = {}
        profiles: list[tuple[str, dict[str, DeviceCapacity]]] = []
        profile = np.zeros(n, dtype=np.intp)
        for i, (driver, device) in enumerate(zip(drivers, devices, strict=True)):
            key = (driver, msgspec.json.encode(device.capacity) if device.capacity else b"")
            found = key_of.get(key)
            if found is None:
                found = key_of[key] = len(profiles)
                profiles.append((driver, dict(device.capacity)))
            profile[i] = found
        out = cls(multi, profile, profiles, set(), any_multi=bool(multi.any()))
        largest: dict[str, Fraction] = {}
        values: list[dict[str, Fraction]] = []
        for p, (driver, capacity) in enumerate(profiles):
            row: dict[str, Fraction] = {}
            try:
                for name, cap in capacity.items():
                    row[qualify(name, driver)] = parse_quantity(cap.value)
            except QuantityError:
                out.broken.add(p)
                row = {}
            values.append(row)
            for name, amount in row.items():
                largest[name] = max(largest.get(name, Fraction(0)), abs(amount))
        if not out.any_multi:
            return out
        out.names = sorted(largest)
        out.index = {name: j for j, name in enumerate(out.names)}
        out.exponents = [_exponent(largest[name]) for name in out.names]
        per_profile = np.zeros((len(profiles), len(out.names)), dtype=np.int64)
        for p, row in enumerate(values):
            for name, amount in row.items():
                j = out.index[name]
                per_profile[p, j] = _scaled(amount, out.exponents[j], up=False)
        out.value = per_profile[profile]
        return out

    def column_amounts(
        self, driver: str, amounts: Sequence[tuple[str, Fraction]]
    ) -> NDArray[np.int64]:
        """Consumed amounts (by capacity name) as a row of scaled ints, rounded up."""
        row = np.zeros(len(self.names), dtype=np.int64)
        for name, amount in amounts:
            j = self.index.get(qualify(name, driver))
            if j is not None:
                row[j] = _scaled(amount, self.exponents[j], up=True)
        return row

    def demand(self, requests: Mapping[str, Fraction]) -> Demand:
        """What a request with these capacity requests takes of each device."""
        exact: list[dict[str, Fraction] | None] = []
        for p, (driver, capacity) in enumerate(self.profiles):
            if p in self.broken:
                exact.append(None)
                continue
            try:
                exact.append(consumption(requests, driver, capacity))
            except QuantityError:
                exact.append(None)
        ok_p = np.fromiter((e is not None for e in exact), dtype=bool, count=len(exact))
        cons: NDArray[np.int64] | None = None
        if self.any_multi:
            per_profile = np.zeros((len(self.profiles), len(self.names)), dtype=np.int64)
            for p, found in enumerate(exact):
                if found is not None:
                    driver = self.profiles[p][0]
                    per_profile[p] = self.column_amounts(driver, sorted(found.items()))
            cons = per_profile[self.profile]
        return Demand(ok_p[self.profile], cons, exact, self.profile, bool(requests))


@dataclass
class Demand:
    """One request's take of every device: `ok` where the device can serve it at all,
    `cons` the scaled consumption per capacity column (meaningful on shared devices),
    and the exact amounts per capacity profile (what `consumedCapacity` records)."""

    ok: NDArray[np.bool_]
    cons: NDArray[np.int64] | None
    exact: list[dict[str, Fraction] | None]
    profile: NDArray[np.intp]
    requested: bool  # the request names capacities

    def consumed(self, device: int) -> tuple[tuple[str, Fraction], ...]:
        found = self.exact[int(self.profile[device])]
        return tuple(sorted(found.items())) if found else ()


# ---- counters -------------------------------------------------------------------------


@dataclass
class CounterColumns:
    """The pools' counters as columns and what each device consumes of them (entries
    sorted by device: `start[d]:start[d+1]`)."""

    names: list[tuple[str, str, str, str]]  # (driver, pool, counter set, counter)
    total: NDArray[np.int64]
    dev: NDArray[np.intp]
    ctr: NDArray[np.intp]
    amt: NDArray[np.int64]
    start: NDArray[np.intp]
    consumes: NDArray[np.bool_]  # per device: takes counters (or names unknown ones)
    broken: NDArray[np.bool_]  # per device: names a counter its pool does not publish
    takes: dict[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)  # device ->
    # (counter, amount) pairs, for the per-node search

    @classmethod
    def build(
        cls,
        ids: Sequence[tuple[str, str, str]],
        devices: Sequence[SliceDevice],
        slices: Sequence[ResourceSlice],
    ) -> CounterColumns | None:
        """From the devices of the table and the newest slices of their pools, or None
        when no device consumes counters."""
        if not any(d.consumes_counters for d in devices):
            return None
        sets: dict[tuple[str, str, str], dict[str, Fraction | None]] = {}
        for s in slices:
            for counter_set in s.spec.shared_counters:
                key3 = (s.spec.driver, s.spec.pool.name, counter_set.name)
                counters = sets.setdefault(key3, {})
                for name, counter in counter_set.counters.items():
                    try:
                        counters[name] = parse_quantity(counter.value)
                    except QuantityError:
                        counters[name] = None
        names: list[tuple[str, str, str, str]] = []
        index: dict[tuple[str, str, str, str], int] = {}
        totals: list[Fraction] = []
        entries: list[tuple[int, int, Fraction]] = []
        n = len(devices)
        broken = np.zeros(n, dtype=bool)
        consumes = np.zeros(n, dtype=bool)
        for i, ((driver, pool, _), device) in enumerate(zip(ids, devices, strict=True)):
            for use in device.consumes_counters:
                consumes[i] = True
                published = sets.get((driver, pool, use.counter_set))
                if published is None:
                    broken[i] = True
                    continue
                for name, counter in use.counters.items():
                    key = (driver, pool, use.counter_set, name)
                    limit = published.get(name)
                    try:
                        amount = parse_quantity(counter.value)
                    except QuantityError:
                        amount = None
                    if limit is None or amount is None or amount < 0:
                        broken[i] = True
                        continue
                    j = index.get(key)
                    if j is None:
                        j = index[key] = len(names)
                        names.append(key)
                        totals.append(limit)
                    entries.append((i, j, amount))
        largest = [abs(t) for t in totals]
        for _, j, amount in entries:
            largest[j] = max(largest[j], amount)
        exponents = [_exponent(x) for x in largest]
        total = np.array(
            [_scaled(t, exponents[j], up=False) for j, t in enumerate(totals)], dtype=np.int64
        )
        entries.sort(key=lambda e: e[0])
        dev = np.array([e[0] for e in entries], dtype=np.intp)
        ctr = np.array([e[1] for e in entries], dtype=np.intp)
        amt = np.array([_scaled(e[2], exponents[e[1]], up=True) for e in entries], dtype=np.int64)
        start = np.searchsorted(dev, np.arange(n + 1)).astype(np.intp)
        takes: dict[int, list[tuple[int, int]]] = {}
        for d, c, a in zip(dev.tolist(), ctr.tolist(), amt.tolist(), strict=True):
            takes.setdefault(d, []).append((c, a))
        return cls(
            names,
            total,
            dev,
            ctr,
            amt,
            start,
            consumes,
            broken,
            {d: tuple(pairs) for d, pairs in takes.items()},
        )
