"""DeviceCatalog: the scheduler's cache of Dynamic Resource Allocation objects.

Backends feed it DeviceClasses, ResourceSlices, ResourceClaims and
ResourceClaimTemplates (the kube backend from informers, the simulator and the test
harness directly; `shoal.scheduler.dra`). The DynamicResources plugin reads it.

* **Devices are rows** of a table rebuilt when slices change: driver, pool, name, the
  node they are on (a node row per cycle, `GLOBAL` for `allNodes` slices), and per
  selector a boolean column (`match`), computed once per slice generation with the
  evaluation itself cached by what the expression can see of a device
  (`shoal.cache.dra_cel`); the devices where evaluating a selector failed are kept
  with the error (`selector_failure`). Only the newest generation of a pool counts, as
  in kube.
* **Allocated devices** are those of claims with an allocation: written in
  `status.allocation` (from the API) or chosen by this scheduler and not echoed yet
  (*assumed*). A claim whose users (pods placed in the cache, and pods in its
  `status.reservedFor` that are not known to be gone) have all left counts no more:
  the resource-claim controller deallocates it, Shoal does not wait to see that. The
  same holds inside a what-if: a preemption victim taken off its node in a transaction
  frees the devices of the claims only it used (kube's DRA preemption, KEP-5690).
  Such a claim keeps its written allocation until the controller clears it (the API
  server lets no one replace it), so a pod that uses it again before then gets that
  allocation back, and only while its devices are still free (`lapsed`, `fits_again`).
* **Departed pods** are remembered only while a claim still names them in
  `status.reservedFor` (the controller removes them, or the claim goes), plus the
  last `RECENT_DEPARTURES` that no claim names (a claim written for a pod may be seen
  after the pod is gone): memory is bounded by the claims the cache holds.
* **Shared devices and counters** (`shoal.cache.dra_capacity`): a device that allows
  multiple allocations holds shares (each with the capacity it consumes, from an
  allocation's `shareID`/`consumedCapacity`, or chosen here), and stays free for more
  while capacity lasts; devices taking a pool's shared counters leave the rest of the
  counters to others. Both are kept per device like allocations (`state()`), freed
  with the claims that hold them, in what-ifs too.
* **Nominated preemptors** (`nominees`, `leaving_state`): the plugin keeps the devices
  a nominated pod with claims will take on its node away from pods of lower priority,
  as kube keeps nominated room (choosing them in the state once its terminating
  victims are gone).
* **Placement observer.** When a pending pod is assumed on a node (a single pod, a
  gang member in its transaction, a what-if), its unallocated claims are allocated on
  that node at once, so the next pod of the same cycle or gang sees those devices
  taken; when it leaves the node the assumed allocation goes (a transaction's
  rollback, Unreserve's forget). A claim re-placed on the node it had keeps its
  devices when they are still free (devices allocated whole that take no counters).

Nothing here performs I/O; it is created once per scheduler (`DeviceCatalog.of`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from shoal.api.dra import (
    BLOCKING_TAINT_EFFECTS,
    DEVICE_CLASS_RESOURCE_PREFIX,
    DeviceClass,
    DeviceTaint,
    DeviceTaintRule,
    DeviceToleration,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    SliceDevice,
    extended_claim_name,
    pod_claim_names,
)
from shoal.api.objects import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from shoal.api.podinfo import PodInfo
from shoal.api.quantity import QuantityError, parse_quantity
from shoal.cache.cluster import ClusterState, observer_service
from shoal.cache.dra_alloc import (
    GLOBAL,
    SELECTED,
    Constraint,
    Counters,
    Devices,
    Reach,
    Req,
    allocate,
)
from shoal.cache.dra_capacity import CapacityColumns, CounterColumns, Demand, format_quantity
from shoal.cache.dra_cel import CompiledSelector
from shoal.cache.dra_pools import UnsettledPools, unsettled_pools

__all__ = [
    "GLOBAL",
    "RECENT_DEPARTURES",
    "SELECTED",
    "SERVICE_KEY",
    "Assumed",
    "DeviceCatalog",
    "DeviceId",
    "PodPlan",
    "Reach",
    "Share",
]

_SERVICE = "dra"
SERVICE_KEY = _SERVICE  # where a handle's services keep the catalog
RECENT_DEPARTURES = 1024  # departed claim users no claim names yet, kept for late echoes

DeviceId = tuple[str, str, str]  # driver, pool, device


class _Services(Protocol):
    services: dict[str, object]
    cluster: ClusterState


_SHARE_IDS = uuid.UUID("7c1c2a3e-55a8-4d0c-9d43-6e0f5b1d2a90")  # namespace of shareIDs


@dataclass(frozen=True)
class Share:
    """One share of a device that allows multiple allocations: its ID and the capacity
    it consumes (capacity name as the device spells it, exact amount)."""

    id: str
    consumed: tuple[tuple[str, Fraction], ...] = ()


@dataclass(frozen=True)
class Assumed:
    """Devices this scheduler chose for a claim, not yet seen in its status."""

    node: str
    results: tuple[tuple[str, int], ...]  # (request, device index in the table)
    devices: tuple[DeviceId, ...]
    node_local: bool
    owner: str  # uid of the pod whose placement chose them (it writes the allocation)
    shares: tuple[Share | None, ...] = ()  # parallel to results: None = allocated whole
    # Devices of network-attached pools only: their slices' node selectors in one term.
    selector: NodeSelectorTerm | None = None
    # Requests allocated for admin access: their devices are not taken from others.
    admin: frozenset[str] = frozenset()

    def share_results(self) -> tuple[tuple[str, tuple[tuple[str, str], ...]] | None, ...]:
        """`shares` as the allocation result writes them (shareID, consumedCapacity)."""
        return tuple(
            None
            if share is None
            else (share.id, tuple((name, format_quantity(q)) for name, q in share.consumed))
            for share in self.shares
        )


@dataclass(frozen=True)
class _Mark:
    """What one claim's counted allocation holds: devices allocated whole, and shares
    (device, capacity consumed as scaled columns)."""

    whole: NDArray[np.intp]
    shared: NDArray[np.intp]
    used: NDArray[np.int64]


@dataclass
class PodPlan:
    """What the plugin asked for, per pod, so the observer can allocate at assume."""

    reqs: list[Req]
    constraints: list[Constraint]
    version: tuple[int, int]  # DeviceCatalog.plan_version
    # Devices kept for nominated pods of equal or higher priority (not for this pod).
    held: NDArray[np.bool_] | None = None
    # With firstAvailable: the other choices of sub-requests (as reqs, constraints),
    # tried in order when the first does not fit.
    more: list[tuple[list[Req], list[Constraint]]] = field(default_factory=list)
    # (claim, request) -> the node rows where the request is to be allocated; others
    # everywhere (the extended-resource claim's requests are not where a device plugin
    # serves their resource).
    only: dict[tuple[str, str], NDArray[np.bool_]] = field(default_factory=dict)

    def applies(self, r: Req, row: int) -> bool:
        rows = self.only.get((r.claim, r.name))
        return rows is None or (row < rows.size and bool(rows[row]))


@dataclass
class _Table:
    ids: list[DeviceId] = field(default_factory=list)
    devices: list[SliceDevice] = field(default_factory=list)
    node: list[str] = field(default_factory=list)  # "" = every node (or `group`'s)
    # Per device: the node selector of its slice (an index into `selectors`) for
    # network-attached pools, -1 for devices of one node or of every node.
    group: list[int] = field(default_factory=list)
    selectors: list[NodeSelectorTerm] = field(default_factory=list)
    index: dict[DeviceId, int] = field(default_factory=dict)
    capacity: CapacityColumns | None = None  # None: no device has capacities or shares
    counters: CounterColumns | None = None  # None: no device consumes counters
    # Pools not allocated from (incomplete or invalid, `shoal.cache.dra_pools`): their
    # devices are left out of the table.
    unsettled: UnsettledPools = field(default_factory=UnsettledPools)


class DeviceCatalog:
    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.classes: dict[str, DeviceClass] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.claims: dict[str, ResourceClaim] = {}
        self.templates: dict[str, ResourceClaimTemplate] = {}
        self.taint_rules: dict[str, DeviceTaintRule] = {}
        self._rules_version = 0
        # Extended resources backed by DRA (KEP-5004): resource name -> DeviceClass
        # (None: to be gathered again after a class changed), and per pod (uid) the key
        # of the claim for its extended resources, from when PreFilter plans it.
        self._extended_mapping: dict[str, str] | None = None
        self.extended: dict[str, str] = {}
        self.classes_version = 0  # any DeviceClass change
        # uid -> {node row: device index}: the device a GPU policy chose for a pod's
        # share on each node (tried first when the pod is assumed there).
        self.preferred: dict[str, dict[int, int]] = {}
        self.version = 0  # any change (plugins key cycle caches on it)
        self._slices_version = 0
        self._table = _Table()
        self._table_version = -1
        self._rows: NDArray[np.intp] = np.zeros(0, np.intp)
        self._rows_key: tuple[int, int, int] = (-1, -1, -1)
        self._reach: Reach | None = None
        self._match: dict[tuple[str, ...], NDArray[np.bool_]] = {}
        # expression -> {device index: why evaluating it there failed}, in table order.
        self._errors: dict[str, dict[int, str]] = {}
        self._codes: dict[str, NDArray[np.int64]] = {}
        self._code_of: dict[str, dict[object, int]] = {}
        # tolerations -> (devices whose blocking taints they all tolerate, per device
        # the first taint they do not tolerate).
        self._tolerated: dict[
            tuple[tuple[str, str, str, str], ...], tuple[NDArray[np.bool_], dict[int, str]]
        ] = {}
        self._tainted: list[int] | None = None  # devices with a blocking taint
        # Per device index: the taints DeviceTaintRules add (None: not gathered for
        # this table and these rules yet).
        self._ruled: dict[int, list[DeviceTaint]] | None = None
        # Allocations.
        self.assumed: dict[str, Assumed] = {}
        self._sticky: dict[str, Assumed] = {}
        self._users: dict[str, set[str]] = {}  # claim key -> uids placed in the cache
        self._pod_claims: dict[str, list[str]] = {}  # uid -> claim keys
        # uid -> keys of the claims whose status.reservedFor names it.
        self._listed: dict[str, set[str]] = {}
        # Pods that left the cache: named by a claim's reservedFor (`_gone`, pruned when
        # no claim names them any more), or not (`_left`, the newest RECENT_DEPARTURES,
        # oldest first, moved to `_gone` if a claim naming them arrives late).
        self._gone: set[str] = set()
        self._left: dict[str, None] = {}
        self._ever_used: set[str] = set()
        self._nominees: list[tuple[str, str, PodInfo]] = []
        self._nominees_version = -1
        # Allocated devices, kept incrementally: per device the claims holding it whole,
        # the shares of it and the capacity they consume, per claim what is marked, and
        # the claims changed since (`free`).
        self._taken: NDArray[np.int32] = np.zeros(0, np.int32)
        self._shares: NDArray[np.int32] = np.zeros(0, np.int32)
        self._used: NDArray[np.int64] = np.zeros((0, 0), np.int64)
        self._marked: dict[str, _Mark] = {}
        self._marks_version = 0
        self._dirty: set[str] = set()
        self._taken_table = -1
        self._free: NDArray[np.bool_] = np.zeros(0, bool)
        self._state: Devices | None = None
        self._state_key: tuple[int, int] = (-1, -1)
        self._demands: dict[tuple[tuple[str, Fraction], ...], Demand | None] = {}
        self.plans: dict[str, PodPlan] = {}  # uid -> the pod's requests (PreFilter)
        self.failed: dict[str, str] = {}  # uid -> why its claims did not fit at assume

    @classmethod
    def of(cls, handle: _Services) -> DeviceCatalog:
        return observer_service(handle.services, handle.cluster, _SERVICE, cls, cls)

    # ---- objects from the API -------------------------------------------------------

    def upsert_class(self, obj: DeviceClass) -> None:
        self.classes[obj.metadata.name] = obj
        self.classes_version += 1
        self._extended_mapping = None
        self._match.clear()
        self._errors.clear()
        self.version += 1

    def delete_class(self, name: str) -> None:
        self.classes.pop(name, None)
        self.classes_version += 1
        self._extended_mapping = None
        self._match.clear()
        self._errors.clear()
        self.version += 1

    def upsert_slice(self, obj: ResourceSlice) -> None:
        self.slices[obj.metadata.name] = obj
        self._slices_changed()

    def delete_slice(self, name: str) -> None:
        self.slices.pop(name, None)
        self._slices_changed()

    def _slices_changed(self) -> None:
        self._slices_version += 1
        self.version += 1

    def upsert_claim(self, obj: ResourceClaim) -> None:
        key = obj.key
        old = self.claims.get(key)
        self._relist(key, old, obj)
        self.claims[key] = obj
        if obj.status.allocation is not None:
            self.assumed.pop(key, None)  # the API has the word now
            self._sticky.pop(key, None)
        if obj.status.reserved_for:
            self._ever_used.add(key)
            for consumer in obj.status.reserved_for:
                self.plans.pop(consumer.uid, None)  # its pod is placed: nothing to plan
        self._dirty.add(key)
        self.version += 1

    def delete_claim(self, namespace: str, name: str) -> None:
        key = f"{namespace or 'default'}/{name}"
        self._relist(key, self.claims.pop(key, None), None)
        self.assumed.pop(key, None)
        self._sticky.pop(key, None)
        if key not in self._users:
            self._ever_used.discard(key)  # a claim made again by that name starts afresh
        self._dirty.add(key)
        self.version += 1

    def _relist(self, key: str, old: ResourceClaim | None, new: ResourceClaim | None) -> None:
        """Keep `_listed` (and the departed pods worth remembering) in step with the
        claim's status.reservedFor."""
        before = {r.uid for r in old.status.reserved_for} if old is not None else set()
        after = {r.uid for r in new.status.reserved_for} if new is not None else set()
        for uid in after - before:
            self._listed.setdefault(uid, set()).add(key)
            if uid in self._left:
                del self._left[uid]
                self._gone.add(uid)  # it left before the claim naming it was seen
        for uid in before - after:
            keys = self._listed.get(uid)
            if keys is None:
                continue
            keys.discard(key)
            if not keys:
                del self._listed[uid]
                self._gone.discard(uid)  # no claim names it: nothing to remember

    @property
    def departed(self) -> int:
        """How many departed pods the catalog remembers (bounded, see the module)."""
        return len(self._gone) + len(self._left)

    def extended_mapping(self) -> dict[str, str]:
        """Extended resource name -> the DeviceClass that stands for it: each class's
        `extendedResourceName`, and `deviceclass.resource.kubernetes.io/<class>` for
        every class. When several classes name one resource, the newest (by creation
        time, then name) wins, as kube's extended resource cache keeps the latest."""
        found = self._extended_mapping
        if found is None:
            found = {}
            ranked = sorted(
                self.classes.values(),
                key=lambda c: (c.metadata.creation_timestamp or "", c.metadata.name),
            )
            for device_class in ranked:
                name = device_class.metadata.name
                found[DEVICE_CLASS_RESOURCE_PREFIX + name] = name
                if device_class.spec.extended_resource_name:
                    found[device_class.spec.extended_resource_name] = name
            self._extended_mapping = found
        return found

    def extended_key(self, pod: PodInfo) -> str:
        """The key of the claim for the pod's extended resources ("" when it has none):
        named in its status once written, else planned by PreFilter."""
        status = pod.pod.status.extended_resource_claim_status
        if status is not None and status.resource_claim_name:
            return f"{pod.namespace or 'default'}/{status.resource_claim_name}"
        return self.extended.get(pod.uid, "")

    def plan_extended(self, pod: PodInfo) -> str:
        """Record that the pod's extended resources take devices: the key of its claim."""
        key = f"{pod.namespace or 'default'}/{extended_claim_name(pod.name, pod.uid)}"
        self.extended[pod.uid] = key
        return key

    def prefer(self, uid: str, rows: NDArray[np.intp], devices: NDArray[np.int64]) -> None:
        """Record the device a placement policy chose for the pod on each of `rows`."""
        if rows.size:
            self.preferred[uid] = dict(zip(rows.tolist(), devices.tolist(), strict=True))
        else:
            self.preferred.pop(uid, None)

    def upsert_taint_rule(self, obj: DeviceTaintRule) -> None:
        self.taint_rules[obj.metadata.name] = obj
        self._taints_changed()

    def delete_taint_rule(self, name: str) -> None:
        if self.taint_rules.pop(name, None) is not None:
            self._taints_changed()

    def _taints_changed(self) -> None:
        self._rules_version += 1
        self._ruled = None
        self._tainted = None
        self._tolerated.clear()
        self.version += 1

    def upsert_template(self, obj: ResourceClaimTemplate) -> None:
        self.templates[obj.key] = obj
        self.version += 1

    def delete_template(self, namespace: str, name: str) -> None:
        self.templates.pop(f"{namespace or 'default'}/{name}", None)
        self.version += 1

    # ---- the device table -------------------------------------------------------------

    @property
    def table_version(self) -> int:
        """The version of the device table `table()` returns (after calling it)."""
        return self._table_version

    @property
    def plan_version(self) -> tuple[int, int]:
        """What a `PodPlan` was made against: the device table and the DeviceTaintRules
        (a plan whose version moved is not allocated from at assume)."""
        return self._table_version, self._rules_version

    def table(self) -> _Table:
        if self._table_version == self._slices_version:
            return self._table
        newest: dict[tuple[str, str], int] = {}
        for s in self.slices.values():
            pool = (s.spec.driver, s.spec.pool.name)
            newest[pool] = max(newest.get(pool, s.spec.pool.generation), s.spec.pool.generation)
        table = _Table()
        current = [
            s
            for s in self.slices.values()
            if s.spec.pool.generation == newest[(s.spec.driver, s.spec.pool.name)]
        ]
        unsettled = table.unsettled = unsettled_pools(current)
        for name in sorted(self.slices):
            s = self.slices[name]
            spec = s.spec
            if spec.pool.generation != newest[(spec.driver, spec.pool.name)]:
                continue
            if unsettled and not unsettled.usable(
                (spec.driver, spec.pool.name), spec.node_name or ""
            ):
                continue  # kube allocates nothing from it (shoal.cache.dra_pools)
            per_device = bool(spec.per_device_node_selection)
            of_slice = (
                None
                if per_device
                else _placement(spec.node_name, spec.all_nodes, spec.node_selector, table)
            )
            if of_slice is None and not per_device:
                continue
            for device in spec.devices:
                ident = (spec.driver, spec.pool.name, device.name)
                if ident in table.index:
                    continue
                where = (
                    _placement(device.node_name, device.all_nodes, device.node_selector, table)
                    if per_device
                    else of_slice
                )
                if where is None:
                    continue
                node, group = where
                table.index[ident] = len(table.ids)
                table.ids.append(ident)
                table.devices.append(device)
                table.node.append(node)
                table.group.append(group)
        table.capacity = CapacityColumns.build([i[0] for i in table.ids], table.devices)
        table.counters = CounterColumns.build(table.ids, table.devices, current)
        self._table = table
        self._table_version = self._slices_version
        self._demands.clear()
        self._match.clear()
        self._errors.clear()
        self._codes.clear()
        self._code_of.clear()
        self._tolerated.clear()
        self._tainted = None
        self._ruled = None
        self._rows_key = (-1, -1, -1)
        return table

    def rows(self) -> NDArray[np.intp]:
        """Per device: the node row it is on, GLOBAL, or -1 (node not in the cache)."""
        table = self.table()
        node_table = self.cluster.table
        key = (self._table_version, node_table.nodes_version, node_table.n)
        if key != self._rows_key:
            row_of = node_table.row_of
            self._rows = np.fromiter(
                (
                    (SELECTED if group >= 0 else GLOBAL) if not node else row_of.get(node, -1)
                    for node, group in zip(table.node, table.group, strict=True)
                ),
                dtype=np.intp,
                count=len(table.node),
            )
            self._reach = self._reach_of(table) if table.selectors else None
            self._rows_key = key
        return self._rows

    def devices_of(self, row: int) -> NDArray[np.intp]:
        """The devices node `row` can use, in table order: its own, those of every node,
        and those of network-attached pools whose selector picks it."""
        rows = self.rows()
        mask = (rows == row) | (rows == GLOBAL)
        if self._reach is not None:
            mask[self._reach.of(row)] = True
        return np.flatnonzero(mask).astype(np.intp)

    def reach(self) -> Reach | None:
        """Which node rows reach the devices of network-attached pools (slices with a
        `nodeSelector`), or None when there are none. Valid with `rows()`."""
        self.rows()
        return self._reach

    def _reach_of(self, table: _Table) -> Reach:
        node_table = self.cluster.table
        n = node_table.n
        names = node_table.names_array[:n]
        nodes = np.zeros((len(table.selectors), n), dtype=bool)
        for g, term in enumerate(table.selectors):
            nodes[g] = node_table.labels.term_mask(term, names, slice(0, n))
        return Reach(np.array(table.group, dtype=np.intp), nodes)

    def match(self, selectors: Iterable[CompiledSelector]) -> NDArray[np.bool_]:
        """Per device: do all the selectors match it (cached per device table)."""
        chosen = list(selectors)
        table = self.table()
        key = tuple(s.expression for s in chosen)
        found = self._match.get(key)
        if found is not None:
            return found
        mask = np.ones(len(table.ids), dtype=bool)
        for sel in chosen:
            single = self._match.get((sel.expression,))
            if single is None:
                single = np.zeros(len(table.ids), dtype=bool)
                errors: dict[int, str] = {}
                for i, ((driver, _, _), dev) in enumerate(
                    zip(table.ids, table.devices, strict=True)
                ):
                    outcome = sel.outcome(driver, dev)
                    if isinstance(outcome, str):
                        errors[i] = outcome
                    elif outcome:
                        single[i] = True
                self._match[(sel.expression,)] = single
                self._errors[sel.expression] = errors
            mask &= single
        self._match[key] = mask
        return mask

    def selector_failure(
        self, selectors: Sequence[CompiledSelector]
    ) -> tuple[int, int, str] | None:
        """(position of the selector, device index, error) of the first failed
        evaluation on a device of a node (in the cache, or of every node) that every
        earlier selector accepted, or None. Kube's allocator evaluates a class's
        selectors, then the request's, in order, stops at the first that does not
        match, and fails on an evaluation error. `match(selectors)` must have been
        called (per device table)."""
        if not any(self._errors.get(s.expression) for s in selectors):
            return None
        reached = self.rows() != -1
        for position, sel in enumerate(selectors):
            for device, why in self._errors.get(sel.expression, {}).items():
                if reached[device]:
                    return position, device, why
            single = self._match.get((sel.expression,))
            if single is None:
                return None
            reached = reached & single
        return None

    def tolerated(
        self, tolerations: Sequence[DeviceToleration]
    ) -> tuple[NDArray[np.bool_], dict[int, str]] | None:
        """Per device: are all its NoSchedule and NoExecute taints tolerated, and per
        device that is not, the first taint not tolerated (as key=value:effect); None
        when no device has such a taint (cached per device table)."""
        table = self.table()
        if self._tainted is None:
            ruled = self._rule_taints(table)
            self._tainted = [
                i
                for i, dev in enumerate(table.devices)
                if any(t.effect in BLOCKING_TAINT_EFFECTS for t in dev.taints)
                or any(t.effect in BLOCKING_TAINT_EFFECTS for t in ruled.get(i, ()))
            ]
        if not self._tainted:
            return None
        key = tuple((t.key, t.operator, t.value, t.effect) for t in tolerations)
        found = self._tolerated.get(key)
        if found is not None:
            return found
        ok = np.ones(len(table.ids), dtype=bool)
        why: dict[int, str] = {}
        ruled = self._rule_taints(table)
        for i in self._tainted:
            for taint in (*table.devices[i].taints, *ruled.get(i, ())):
                if taint.effect not in BLOCKING_TAINT_EFFECTS:
                    continue
                if not any(t.tolerates(taint) for t in tolerations):
                    ok[i] = False
                    why[i] = taint.text()
                    break
        self._tolerated[key] = (ok, why)
        return ok, why

    def _rule_taints(self, table: _Table) -> dict[int, list[DeviceTaint]]:
        """Per device index, the taints of the DeviceTaintRules selecting it, in rule
        name order (gathered once per device table and set of rules; a rule naming a
        device is one lookup, others are a pass over the devices)."""
        if self._ruled is not None:
            return self._ruled
        ruled: dict[int, list[DeviceTaint]] = {}
        for name in sorted(self.taint_rules):
            rule = self.taint_rules[name]
            chosen = rule.spec.device_selector
            if chosen is None:
                continue
            if chosen.driver is not None and chosen.pool is not None and chosen.device is not None:
                found = table.index.get((chosen.driver, chosen.pool, chosen.device))
                hits: Iterable[int] = () if found is None else (found,)
            else:
                hits = (i for i, ident in enumerate(table.ids) if chosen.selects(*ident))
            for i in hits:
                ruled.setdefault(i, []).append(rule.spec.taint)
        self._ruled = ruled
        return ruled

    def codes(self, attribute: str) -> NDArray[np.int64]:
        """Per device: an integer code of the attribute's value (-1 without it)."""
        table = self.table()
        found = self._codes.get(attribute)
        if found is not None:
            return found
        domain, _, name = attribute.rpartition("/")
        values = self._code_of.setdefault(attribute, {})
        out = np.full(len(table.ids), -1, dtype=np.int64)
        for i, ((driver, _, _), dev) in enumerate(zip(table.ids, table.devices, strict=True)):
            attr = dev.attributes.get(attribute)
            if attr is None and domain == driver:
                attr = dev.attributes.get(name)
            if attr is None:
                continue
            value = attr.value()
            out[i] = values.setdefault(value, len(values))
        self._codes[attribute] = out
        return out

    # ---- allocations ------------------------------------------------------------------

    def _live(self, key: str) -> bool:
        if self._users.get(key):
            return True
        claim = self.claims.get(key)
        if claim is not None and any(r.uid not in self._gone for r in claim.status.reserved_for):
            return True
        return key not in self._ever_used

    def allocated(self, key: str) -> tuple[DeviceId, ...] | None:
        """The devices of the claim's counted allocation, or None when it has none."""
        found = self.assumed.get(key)
        if found is not None:
            return found.devices
        claim = self.claims.get(key)
        if claim is None or claim.status.allocation is None or not self._live(key):
            return None
        return self.written(key)

    def written(self, key: str) -> tuple[DeviceId, ...] | None:
        """The devices of the allocation in the claim's status, counted or not."""
        claim = self.claims.get(key)
        if claim is None or claim.status.allocation is None:
            return None
        return tuple((r.driver, r.pool, r.device) for r in claim.status.allocation.devices.results)

    def lapsed(self, key: str) -> bool:
        """The claim's status still holds an allocation that counts no more: every user
        left, so its devices were given to others already, and the resource-claim
        controller has not deallocated it yet. A pod that now uses the claim gets that
        allocation back (the API server does not let it be replaced), so only where it
        still fits (`fits_again`)."""
        claim = self.claims.get(key)
        return (
            claim is not None
            and claim.status.allocation is not None
            and key not in self.assumed
            and not self._live(key)
        )

    def fits_again(self, key: str, state: Devices) -> bool:
        """Does the allocation written in the claim's status fit the devices' state: the
        devices it holds whole neither taken nor shared, its shares within the capacity
        left and not on devices taken whole, and the counters of its devices that are not
        in use yet left?"""
        table = self.table()
        mark = self._mark(key, table, written=True)
        if mark is None:
            return True
        in_use = ~state.free
        if state.shares is not None:
            in_use = in_use | (state.shares > 0)
        if in_use[mark.whole].any() or not state.free[mark.shared].all():
            return False
        if mark.used.size and state.used is not None and state.cap is not None:
            used = state.used.copy()
            np.add.at(used, mark.shared, mark.used)
            if (used[mark.shared] > state.cap[mark.shared]).any():
                return False
        counters = state.counters
        if counters is not None:
            mine = np.zeros(state.free.size, dtype=bool)
            mine[mark.whole] = True
            mine[mark.shared] = True
            new = (mine & ~in_use)[counters.dev]
            spent = np.zeros_like(counters.remaining)
            np.add.at(spent, counters.ctr[new], counters.amt[new])
            if ((spent > 0) & (spent > counters.remaining)).any():
                return False
        return True

    def allocated_node(self, key: str) -> str | None:
        """The node named by the allocation's nodeSelector (matchFields metadata.name),
        if it names one."""
        claim = self.claims.get(key)
        selector = (
            claim.status.allocation.node_selector if claim and claim.status.allocation else None
        )
        if selector is None:
            return None
        for term in selector.node_selector_terms:
            for req in term.match_fields:
                if req.key == "metadata.name" and req.operator == "In" and len(req.values) == 1:
                    return req.values[0]
        return None

    def demand(self, requests: Mapping[str, Fraction]) -> Demand | None:
        """What a request with these capacity requests takes of each device (cached per
        device table), or None when nothing limits it: no capacity requested and no
        device allows multiple allocations."""
        table = self.table()
        capacity = table.capacity
        if capacity is None or (not requests and not capacity.any_multi):
            return None
        key = tuple(sorted(requests.items()))
        if key not in self._demands:
            self._demands[key] = capacity.demand(requests)
        return self._demands[key]

    def _holdings(
        self, key: str, written: bool = False
    ) -> list[tuple[DeviceId, bool, tuple[tuple[str, Fraction], ...] | None]] | None:
        """The claim's counted allocation (with `written`, the one in its status, counted
        or not): (device, shared, capacity consumed) per result; the consumed capacity is
        None for a share whose amounts do not parse (counted as the whole device)."""
        found = None if written else self.assumed.get(key)
        if found is not None:
            shares = found.shares or (None,) * len(found.devices)
            return [
                (ident, share is not None, share.consumed if share is not None else ())
                for ident, share, (request, _) in zip(
                    found.devices, shares, found.results, strict=True
                )
                if request not in found.admin
            ]
        claim = self.claims.get(key)
        if claim is None or claim.status.allocation is None or not (written or self._live(key)):
            return None
        out: list[tuple[DeviceId, bool, tuple[tuple[str, Fraction], ...] | None]] = []
        for r in claim.status.allocation.devices.results:
            if r.admin_access:
                continue  # admin access takes nothing from other claims
            ident = (r.driver, r.pool, r.device)
            if r.share_id is None:
                out.append((ident, False, ()))
                continue
            try:
                consumed: tuple[tuple[str, Fraction], ...] | None = tuple(
                    (name, parse_quantity(v)) for name, v in sorted(r.consumed_capacity.items())
                )
            except QuantityError:
                consumed = None
            out.append((ident, True, consumed))
        return out

    def _mark(self, key: str, table: _Table, written: bool = False) -> _Mark | None:
        holdings = self._holdings(key, written)
        if not holdings:
            return None
        capacity = table.capacity
        width = len(capacity.names) if capacity is not None else 0
        whole: list[int] = []
        shared: list[int] = []
        used: list[NDArray[np.int64]] = []
        for ident, is_share, consumed in holdings:
            at = table.index.get(ident)
            if at is None:
                continue
            if not is_share:
                whole.append(at)
                continue
            shared.append(at)
            if capacity is None or not width:
                used.append(np.zeros(width, np.int64))
            elif consumed is None:
                used.append(capacity.value[at].copy())
            else:
                used.append(capacity.column_amounts(ident[0], consumed))
        if not whole and not shared:
            return None
        return _Mark(
            np.array(whole, dtype=np.intp),
            np.array(shared, dtype=np.intp),
            np.array(used, dtype=np.int64).reshape(len(shared), width),
        )

    def free(self) -> NDArray[np.bool_]:
        """Per device: not part of a counted allocation as a whole device (a device
        that allows multiple allocations stays free while shared; see `state`)."""
        table = self.table()
        if self._taken_table != self._table_version:
            n = len(table.ids)
            width = len(table.capacity.names) if table.capacity is not None else 0
            self._taken = np.zeros(n, dtype=np.int32)
            self._shares = np.zeros(n, dtype=np.int32)
            self._used = np.zeros((n, width), dtype=np.int64)
            self._marked = {}
            self._dirty = set(self.claims) | set(self.assumed)
            self._taken_table = self._table_version
            self._free = np.ones(n, dtype=bool)
            self._marks_version += 1
        if self._dirty:
            taken, shares, used = self._taken, self._shares, self._used
            for claim in self._dirty:
                old = self._marked.pop(claim, None)
                if old is not None:
                    np.subtract.at(taken, old.whole, 1)
                    np.subtract.at(shares, old.shared, 1)
                    if old.used.size:
                        np.subtract.at(used, old.shared, old.used)
                new = self._mark(claim, table)
                if new is not None:
                    self._marked[claim] = new
                    np.add.at(taken, new.whole, 1)
                    np.add.at(shares, new.shared, 1)
                    if new.used.size:
                        np.add.at(used, new.shared, new.used)
            self._dirty.clear()
            self._free = taken == 0
            self._marks_version += 1
        return self._free

    def state(self) -> Devices:
        """The devices' state for the allocator: free, and where the table has them, the
        shares of devices that allow multiple allocations with the capacity they
        consume, and what is left of the pools' shared counters."""
        self.free()
        key = (self._table_version, self._marks_version)
        if self._state is None or self._state_key != key:
            self._state = self._devices(self._taken, self._shares.copy(), self._used.copy())
            self._state_key = key
        return self._state

    def _devices(
        self, taken: NDArray[np.int32], shares: NDArray[np.int32], used: NDArray[np.int64]
    ) -> Devices:
        table = self._table
        capacity = table.capacity
        multi = capacity.multi if capacity is not None and capacity.any_multi else None
        counters = None
        columns = table.counters
        if columns is not None:
            in_use = (taken > 0) | (shares > 0)
            spent = np.zeros(columns.total.size, dtype=np.int64)
            held = in_use[columns.dev]
            np.add.at(spent, columns.ctr[held], columns.amt[held])
            counters = Counters(
                columns.dev,
                columns.ctr,
                columns.amt,
                columns.start,
                columns.consumes,
                columns.broken,
                columns.total - spent,
                columns.takes,
            )
        free = taken == 0
        if multi is not None and capacity is not None:
            return Devices(free, multi, shares, used, capacity.value, counters)
        return Devices(free, counters=counters)

    # ---- nominated preemptors -----------------------------------------------------------

    def nominees(self) -> list[tuple[str, str, PodInfo]]:
        """(uid, node, pod) of the nominated pods that have claims (cached per change
        of the nominations: pods without claims never look at them)."""
        cluster = self.cluster
        if self._nominees_version != cluster.nominations_version:
            self._nominees = [
                (uid, node, other)
                for uid, (node, other) in cluster.nominations.items()
                if other.pod.spec.resource_claims
            ]
            self._nominees_version = cluster.nominations_version
        return self._nominees

    def _leaving(self) -> list[_Mark]:
        """The marks of the claims every user of which is being evicted."""
        out: list[_Mark] = []
        evicting = self.cluster.evicting
        seen: set[str] = set()
        for uid in evicting:
            for key in self._pod_claims.get(uid, ()):
                marked = self._marked.get(key)
                if key in seen or marked is None:
                    continue
                seen.add(key)
                users = set(self._users.get(key, ()))
                claim = self.claims.get(key)
                if claim is not None:
                    users.update(r.uid for r in claim.status.reserved_for)
                users -= self._gone
                if users and users <= evicting:
                    out.append(marked)
        return out

    def leaving_state(self) -> Devices:
        """The devices' state once the pods being evicted are gone: what the claims
        every user of which is being evicted hold (devices, shares and the capacity they
        consume, counters) is free."""
        state = self.state()
        gone = self._leaving()
        if not gone:
            return state
        taken, shares, used = self._taken.copy(), self._shares.copy(), self._used.copy()
        for marked in gone:
            np.subtract.at(taken, marked.whole, 1)
            np.subtract.at(shares, marked.shared, 1)
            if marked.used.size:
                np.subtract.at(used, marked.shared, marked.used)
        return self._devices(taken, shares, used)

    # ---- placement observer -----------------------------------------------------------

    def _claim_keys(self, pod: PodInfo) -> list[str]:
        """The claims the pod uses: its own, then the one for its extended resources."""
        keys = [use.key for use in pod_claim_names(pod.pod) if use.key]
        extended = self.extended_key(pod)
        if extended:
            keys.append(extended)
        return keys

    def _uses_claims(self, pod: PodInfo) -> bool:
        return bool(
            pod.pod.spec.resource_claims
            or pod.uid in self.extended
            or pod.pod.status.extended_resource_claim_status is not None
        )

    def pod_placed(self, row: int, pod: PodInfo) -> None:
        if not self._uses_claims(pod):
            return
        keys = self._claim_keys(pod)
        self._pod_claims[pod.uid] = keys
        self._gone.discard(pod.uid)
        self._left.pop(pod.uid, None)
        for key in keys:
            self._users.setdefault(key, set()).add(pod.uid)
            self._ever_used.add(key)
        self._dirty.update(keys)
        if pod.node_name:
            self.plans.pop(pod.uid, None)  # bound: nothing left to plan
        else:
            self._assume(row, pod, keys)

    def _assume(self, row: int, pod: PodInfo, keys: list[str]) -> None:
        plan = self.plans.get(pod.uid)
        if plan is None or plan.version != self.plan_version:
            return
        todo = [k for k in dict.fromkeys(r.claim for r in plan.reqs) if self.allocated(k) is None]
        if not todo:
            return
        node = self.cluster.table.nodes[row].metadata.name
        self.table()
        state = self.state()
        if plan.held is not None and plan.held.size == state.free.size:
            # What nominated preemptors will take stays theirs.
            state = state.holding(plan.held)
        devices = self.devices_of(row)
        preferred = self.preferred.pop(pod.uid, {}).get(row)
        if preferred is not None and preferred in devices:
            # A placement policy's choice (a GPU share's device) comes first.
            devices = np.concatenate(([preferred], devices[devices != preferred])).astype(
                devices.dtype
            )
        sticky = self._reuse(todo, node, state)
        if sticky:
            for key, assumed in sticky.items():
                self.assumed[key] = replace(assumed, owner=pod.uid)
            self._dirty.update(sticky)
            return
        chosen: list[list[int]] | None = None
        reqs: list[Req] = []
        for every_req, every_constraint in [(plan.reqs, plan.constraints), *plan.more]:
            reqs = [r for r in every_req if r.claim in todo and plan.applies(r, row)]
            positions = {id(r): i for i, r in enumerate(reqs)}
            constraints = [
                replace(c, requests=[positions[id(every_req[i])] for i in c.requests])
                for c in every_constraint
                if c.claim in todo
            ]
            chosen = allocate(reqs, constraints, devices.astype(np.intp), state)
            if chosen is not None:
                break
        if chosen is None:
            self.failed[pod.uid] = f"the devices for the pod's claims are no longer free on {node}"
            return
        self.failed.pop(pod.uid, None)
        table = self._table
        per_claim: dict[str, list[tuple[Req, int]]] = {}
        for r, devs in zip(reqs, chosen, strict=True):
            per_claim.setdefault(r.claim, []).extend((r, d) for d in devs)
        multi = state.multi
        for key, results in per_claim.items():
            shares = tuple(
                self._share(key, r, d) if multi is not None and multi[d] else None
                for r, d in results
            )
            local = any(table.node[d] for _, d in results)
            self.assumed[key] = Assumed(
                node,
                tuple((r.name, d) for r, d in results),
                tuple(table.ids[d] for _, d in results),
                local,
                pod.uid,
                shares if any(share is not None for share in shares) else (),
                None if local else _joined(table, [d for _, d in results]),
                frozenset(r.name for r, _ in results if r.admin),
            )
        self._dirty.update(per_claim)

    def _share(self, key: str, r: Req, device: int) -> Share:
        """A new share of a device for request r of the claim: a shareID (a UUID derived
        from the claim, the request and the device, so runs are reproducible) and what
        it consumes."""
        claim = self.claims.get(key)
        uid = claim.metadata.uid if claim is not None else ""
        name = "/".join((uid or "", key, r.name, *self._table.ids[device]))
        consumed = r.demand.consumed(device) if r.demand is not None else ()
        return Share(str(uuid.uuid5(_SHARE_IDS, name)), consumed)

    def _reuse(self, todo: list[str], node: str, state: Devices) -> dict[str, Assumed]:
        """The claims' previous choices on this node, if all of them still hold (only
        for devices allocated whole that take no counters: for the others, a new
        choice is made)."""
        out = {}
        ids = self._table.ids
        special = state.special
        for key in todo:
            prev = self._sticky.get(key)
            if prev is None or prev.node != node or prev.shares:
                return {}
            for (_, d), ident in zip(prev.results, prev.devices, strict=True):
                if d >= len(ids) or ids[d] != ident or not state.free[d]:
                    return {}
                if special is not None and special[d]:
                    return {}
            out[key] = prev
        return out

    def pod_unplaced(self, row: int, pod: PodInfo) -> None:
        if not self._uses_claims(pod):
            return
        if pod.uid in self.cluster.placed:
            # Still placed: its node left the cache (the pod still exists) or it is
            # being moved to another node. It keeps using its claims.
            return
        if pod.node_name:
            # A bound pod off its node: deleted or evicted (in the cluster, or in a
            # preemption what-if). A pod that was only assumed (its bind failed, a
            # transaction rolled back) still exists and goes back to the queue: what
            # the cluster allocated and reserved for it stays its own (kube's Unreserve
            # keeps the devices too); it departs when it is deleted (`forget_pod`).
            self._depart(pod.uid)
        keys = self._pod_claims.pop(pod.uid, [])
        self._dirty.update(keys)
        for key in keys:
            users = self._users.get(key)
            if users is not None:
                users.discard(pod.uid)
                if not users:
                    del self._users[key]
                    gone = self.assumed.pop(key, None)
                    if gone is not None and self._table_version == self._slices_version:
                        self._sticky[key] = gone

    def row_moved(self, src: int, dst: int) -> None:
        return None

    def node_changed(self, row: int) -> None:
        return None

    def forget_pod(self, uid: str) -> None:
        """The pod left the scheduler (deleted): drop what PreFilter planned for it; the
        claims that still name it no longer count it as a user."""
        self.plans.pop(uid, None)
        self.failed.pop(uid, None)
        self.extended.pop(uid, None)
        self.preferred.pop(uid, None)
        self._depart(uid)  # also for a claim written for it that is seen only later
        listed = self._listed.get(uid)
        if listed:
            self._dirty.update(listed)
            self.version += 1

    def _depart(self, uid: str) -> None:
        """Remember that the pod is gone (bounded: see the module)."""
        if uid in self._listed:
            self._gone.add(uid)
            return
        left = self._left
        left.pop(uid, None)
        left[uid] = None
        if len(left) > RECENT_DEPARTURES:
            del left[next(iter(left))]


def _joined(table: _Table, devices: list[int]) -> NodeSelectorTerm | None:
    """The node selector terms of the devices' network-attached slices as one term (the
    requirements of all, each once, as kube's allocator joins them), or None when no
    device is of such a slice."""
    expressions: list[NodeSelectorRequirement] = []
    fields: list[NodeSelectorRequirement] = []
    for d in devices:
        g = table.group[d]
        if g < 0:
            continue
        term = table.selectors[g]
        expressions += [r for r in term.match_expressions if r not in expressions]
        fields += [r for r in term.match_fields if r not in fields]
    if not expressions and not fields:
        return None
    return NodeSelectorTerm(match_expressions=expressions, match_fields=fields)


def _placement(
    node_name: str | None,
    all_nodes: bool | None,
    selector: NodeSelector | None,
    table: _Table,
) -> tuple[str, int] | None:
    """(node, selector group) of a slice's devices, or of one device of a slice with
    per-device node selection: one node; every node ("", -1); or, for a network-attached
    pool, the nodes a node selector picks ("", its group). None: none set, or a
    selector of other than one term (the API allows exactly one; kube's allocator
    refuses others)."""
    if node_name:
        return node_name, -1
    if all_nodes:
        return "", -1
    if selector is None:
        return None
    terms = selector.node_selector_terms
    if len(terms) != 1:
        return None
    if terms[0] not in table.selectors:
        table.selectors.append(terms[0])
    return "", table.selectors.index(terms[0])
