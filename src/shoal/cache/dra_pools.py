"""Which resource pools may be allocated from, node by node (kube's `GatherPools`).

A DRA driver publishes a pool in one or more ResourceSlices, all carrying the pool's
`generation` and `resourceSliceCount`. Kube's allocator gathers, for each node, the
slices of the newest generation that target that node (its own `nodeName` slices and
the `allNodes` slices) and then

* allocates nothing from a pool that is **incomplete** there (it sees a number of
  slices other than `resourceSliceCount`: the driver is still publishing or replacing
  them) or **invalid** there (two devices of the same name);
* fails a request with `allocationMode: All` on a node that any such pool reaches
  ("asks for all devices, but resource pool ... is currently being updated"), since
  "all" cannot be known.

`unsettled_pools` computes that from the newest-generation slices, once per device
table. Slices with a `nodeSelector` or per-device node selection count for the whole
pool (as `allNodes` ones do: exact when all such slices of a pool reach the same
nodes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from shoal.api.dra import ResourceSlice

__all__ = ["UnsettledPools", "unsettled_pools"]

PoolId = tuple[str, str]  # (driver, pool name)


@dataclass
class UnsettledPools:
    """Pools not to allocate from: on one node (`local`) or, for the devices of their
    `allNodes` and `nodeSelector` slices, anywhere (`everywhere`). Each maps to why, in
    words."""

    local: dict[tuple[PoolId, str], str] = field(default_factory=dict)
    everywhere: dict[PoolId, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.local or self.everywhere)

    def usable(self, pool: PoolId, node: str) -> bool:
        """May the devices of this pool's slice on `node` ("" for `allNodes` and
        `nodeSelector` slices) be used?"""
        if pool in self.everywhere:
            return False
        return not node or (pool, node) not in self.local

    def reasons(self) -> list[tuple[str, str]]:
        """(node, or "" for every node; why) for each pool not to allocate from, sorted."""
        out = [(node, why) for (_, node), why in self.local.items()]
        out += [("", why) for why in self.everywhere.values()]
        return sorted(out)


def unsettled_pools(current: Iterable[ResourceSlice]) -> UnsettledPools:
    """`current`: the slices of each pool's newest generation."""
    local: dict[PoolId, dict[str, list[ResourceSlice]]] = {}
    everywhere: dict[PoolId, list[ResourceSlice]] = {}
    expected: dict[PoolId, int] = {}
    for s in sorted(current, key=lambda s: s.metadata.name):
        spec = s.spec
        pool = (spec.driver, spec.pool.name)
        if spec.node_name:
            local.setdefault(pool, {}).setdefault(spec.node_name, []).append(s)
        elif spec.all_nodes or spec.node_selector is not None or spec.per_device_node_selection:
            # A nodeSelector slice counts as if it reached every node the pool's other
            # such slices reach (exact when they all select the same nodes, as a
            # network-attached pool's slices do).
            everywhere.setdefault(pool, [])
            everywhere[pool].append(s)
        else:
            continue
        expected.setdefault(pool, spec.pool.resource_slice_count)
    out = UnsettledPools()
    for pool, slices in everywhere.items():
        for s in slices:
            selector = s.spec.node_selector
            if selector is not None and len(selector.node_selector_terms) != 1:
                # The API allows exactly one term; kube's allocator refuses others.
                out.everywhere[pool] = (
                    f"resource pool {pool[0]}/{pool[1]} is invalid (ResourceSlice "
                    f"{s.metadata.name}: spec.nodeSelector has "
                    f"{len(selector.node_selector_terms)} terms, exactly one is allowed)"
                )
    for pool, want in expected.items():
        if pool in out.everywhere:
            continue
        name = f"{pool[0]}/{pool[1]}"
        shared = everywhere.get(pool, [])
        for node, own in local.get(pool, {}).items():
            why = _problem(name, own + shared, want, f" for node {node}")
            if why:
                out.local[(pool, node)] = why
        if shared:
            why = _problem(name, shared, want, "") if pool not in local else ""
            if not why and any(key[0] == pool for key in out.local):
                # The allNodes devices of a pool that is unsettled on some node are
                # kept from every node (the device table has one row for them).
                why = next(w for key, w in out.local.items() if key[0] == pool)
            if why:
                out.everywhere[pool] = why
    return out


def _problem(name: str, slices: list[ResourceSlice], want: int, where: str) -> str:
    if len(slices) != want:
        return (
            f"resource pool {name} is being updated ({len(slices)} of its {want} "
            f"ResourceSlices seen{where})"
        )
    seen: set[str] = set()
    for s in slices:
        for device in s.spec.devices:
            if device.name in seen:
                return f"resource pool {name} is invalid (duplicate device name {device.name})"
            seen.add(device.name)
    return ""
