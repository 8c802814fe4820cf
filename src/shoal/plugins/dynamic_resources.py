"""DynamicResources (PreEnqueue, PreFilter, Filter, Reserve, Unreserve, PreBind):
kube-scheduler's Dynamic Resource Allocation for the core subset (docs/dra.md).

* PreEnqueue: the pod waits until each of its ResourceClaims exists (for a template,
  the claim the resource-claim controller creates, named in the pod's
  `status.resourceClaimStatuses`, and owned by the pod).
* PreFilter reads the claims once per cycle. An allocated claim (by its status, or
  chosen by this scheduler for a pod placed earlier) restricts the pod to the nodes
  where its devices are; an unallocated claim's requests (`exactly`: device class,
  CEL selectors, `ExactCount` with `count` or `All`, `matchAttribute` constraints,
  `capacity.requests` on devices shared by capacity, devices taking shared counters,
  tolerations of device taints; `firstAvailable` sub-requests, each choice tried in
  kube's order) are judged against every node's free devices at once
  (`shoal.cache.dra_alloc`).
  A request with `adminAccess` may take any matching device, allocated to others or
  not, and takes nothing from them. A `distinctAttribute` constraint is judged by the
  exact search on each node the columns pass. What Shoal cannot allocate (a selector
  CEL cannot compile) refuses the pod with a message
  naming the claim, the field and what to do; so does a selector whose evaluation
  fails on a device of a node (kube's "CEL runtime error"), naming the device and
  the error too. Devices a nominated preemptor of equal or higher priority will take
  on its node are not offered (kube keeps nominated room the same way), so the
  devices its victims free are not taken by another pod before it is retried.
* Preemption: PreFilter and Filter judge the cache as it is, so in a victim search's
  transaction (victims taken off their node) the devices of claims only the victims
  used count as free (`shoal.cache.dra`): a pod asking for devices can preempt the
  pods holding them.
* Filter indexes the verdict; the explanations count per node, in kube's FitError.
* The devices are chosen when the pod is assumed on its node (the `DeviceCatalog`
  observes placements, so gang members and later pods see them taken); Reserve
  checks that the choice was made and records it; Unreserve forgets the record (the
  cache releases the devices when the pod is forgotten).
* PreBind emits `AllocateClaims`: the claims' `status.allocation` (results and the
  node selector) and the pod added to `status.reservedFor`, written before the bind.

The logic lives in `shoal.cache.dra` (the catalog and the observer) and
`shoal.cache.dra_alloc` (the allocation); this module is the framework's side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import msgspec
import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, field_validator
from pydantic.alias_generators import to_camel

from shoal.api.dra import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    ClaimUse,
    DeviceSelector,
    DeviceSubRequest,
    ExactDeviceRequest,
    ResourceClaim,
    allocation_config,
    extended_requests,
    pod_claim_names,
)
from shoal.api.manifests import decode
from shoal.api.podinfo import PodInfo, controlled_by_pod
from shoal.api.quantity import QuantityError, parse_quantity
from shoal.cache.dra import GLOBAL, SELECTED, DeviceCatalog, PodPlan, Reach
from shoal.cache.dra_alloc import (
    Constraint,
    Devices,
    Req,
    Verdict,
    allocate,
    choices,
    feasible,
    prepare,
)
from shoal.cache.dra_cel import CompiledSelector, SelectorError, compile_selector
from shoal.config.durations import parse_duration
from shoal.framework.cycle_state import CycleState
from shoal.framework.effects import AllocateClaims, ClaimAllocation, DeallocateClaim
from shoal.framework.handle import Handle
from shoal.framework.interfaces import NodeFilterStatuses, PostFilterResult
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    Failure,
    FilterResult,
    PreFilterResult,
)

__all__ = ["NAME", "DynamicResources", "DynamicResourcesArgs"]

NAME = "DynamicResources"
_UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
_STATE = "PreFilter" + NAME
# Pools not allocated from named in one explanation at most (`_unsettled_said`).
_NAMED_POOLS = 3
_RESERVED = NAME + "/claims"
_DOCS = "see docs/dra.md"
_EXTENDED_KEPT = 10_000  # in-memory extended-resource claims kept between cycles
_BINDING_TIMEOUT = 600.0  # kube's default bindingTimeout (10m)


class DynamicResourcesArgs(BaseModel):
    """kube's DynamicResourcesArgs: `bindingTimeout` (a Go duration, default 10m) is how
    long a binding waits for devices' binding conditions; `filterTimeout` is accepted so
    stock configurations load and does not change what Shoal does (see `not_used`)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    filter_timeout: str | float | None = None
    binding_timeout: str | float | None = None

    @field_validator("binding_timeout")
    @classmethod
    def _duration(cls, value: str | float | None) -> str | float | None:
        if value is not None and parse_duration(value) <= 0:
            raise ValueError(f"bindingTimeout {value!r} must be above zero, e.g. 10m")
        return value

    def binding_seconds(self) -> float:
        return (
            _BINDING_TIMEOUT
            if self.binding_timeout is None
            else parse_duration(self.binding_timeout)
        )

    def not_used(self) -> list[str]:
        notes = []
        if self.filter_timeout is not None:
            notes.append(
                "DynamicResources' filterTimeout is not used: Shoal's Filter judges every "
                "node at once over device columns"
            )
        return notes


@dataclass
class _Verdict:
    keys: list[str]
    passed: NDArray[np.bool_]
    failures: list[Failure] = field(default_factory=list)
    # Claims allocated (in their status) to devices some node cannot use: PostFilter
    # may deallocate one of them (kube's unavailableClaims).
    unavailable: list[str] = field(default_factory=list)


class DynamicResources:
    name = NAME
    # Optimistic workers may decide with it: the pods they take (no claims) pass it
    # on any node (shoal.scheduler.optimistic).
    row_local = True

    def __init__(self, handle: Handle, args: DynamicResourcesArgs | None = None) -> None:
        self.handle = handle
        self.catalog = DeviceCatalog.of(handle)
        self.binding_timeout = (args or DynamicResourcesArgs()).binding_seconds()
        # uid -> (the class mapping it was made with, the claim for the pod's extended
        # resources as PreFilter made it in memory); bounded, rebuilt when missing.
        self._extended: dict[str, tuple[dict[str, str], ResourceClaim]] = {}

    # ---- PreEnqueue -----------------------------------------------------------------

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not pod.pod.spec.resource_claims:
            return Status()
        _, status = self._claims(pod)
        return status

    def _claims(self, pod: PodInfo) -> tuple[list[ResourceClaim], Status]:
        """The pod's claims, then the claim for its extended resources backed by DRA
        (last: its requests come after every other claim's, and no constraint or
        sub-request refers to them)."""
        claims: list[ResourceClaim] = []
        seen: set[str] = set()
        for use in pod_claim_names(pod.pod):
            claim, why = self._claim(pod, use)
            if claim is None:
                return [], Status(_UNRESOLVABLE, why)
            if claim.key not in seen:
                seen.add(claim.key)
                claims.append(claim)
        extended = self._extended_claim(pod)
        if extended is not None:
            claims.append(extended)
        return claims, Status()

    def _extended_claim(self, pod: PodInfo) -> ResourceClaim | None:
        """The claim for the pod's extended resources that a DeviceClass stands for
        (KEP-5004): the one written for it, or one made in memory (kube's
        "<extended-resources>" claim) with a request per container and resource; None
        when the pod asks for none. It is created in the cluster at PreBind."""
        catalog = self.catalog
        mapping = catalog.extended_mapping()
        if not mapping or not any(r in mapping for r in pod.requests):
            if catalog.extended:
                catalog.extended.pop(pod.uid, None)
            return None
        key = catalog.extended_key(pod) or catalog.plan_extended(pod)
        written = catalog.claims.get(key)
        if written is not None:
            return written
        kept = self._extended.get(pod.uid)
        if kept is not None and kept[0] is mapping:
            return kept[1]
        requests = extended_requests(pod.pod, mapping)
        if not requests:
            catalog.extended.pop(pod.uid, None)
            return None
        namespace, _, name = key.partition("/")
        claim = decode(
            {
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
                    "ownerReferences": [
                        {"kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": True}
                    ],
                },
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": r.name,
                                "exactly": {
                                    "deviceClassName": r.device_class,
                                    "allocationMode": "ExactCount",
                                    "count": r.count,
                                },
                            }
                            for r in requests
                        ]
                    }
                },
            },
            ResourceClaim,
        )
        if len(self._extended) >= _EXTENDED_KEPT:
            self._extended.clear()
        self._extended[pod.uid] = (mapping, claim)
        return claim

    def _device_plugin_rows(
        self, pod: PodInfo, claim: ResourceClaim
    ) -> dict[str, NDArray[np.bool_]]:
        """Per request of the extended-resource claim, the nodes (rows) whose allocatable
        has its resource: there the device plugin serves it, not DRA (kube's
        filterExtendedResources). Only requests with such nodes are listed."""
        snap = self.handle.snapshot
        n = snap.n
        resource_of = {
            r.name: r.resource for r in extended_requests(pod.pod, self.catalog.extended_mapping())
        }
        out: dict[str, NDArray[np.bool_]] = {}
        for request in claim.spec.devices.requests:
            col = snap.resource_index.get(resource_of.get(request.name, ""))
            if col is None:
                continue
            served = snap.allocatable[:n, col] > 0
            if served.any():
                out[request.name] = served
        return out

    def _claim(self, pod: PodInfo, use: ClaimUse) -> tuple[ResourceClaim | None, str]:
        if not use.key:
            return None, (
                f"waiting for the resource claim controller to create the ResourceClaim of "
                f'spec.resourceClaims "{use.entry}" (from ResourceClaimTemplate '
                f'"{use.template}")'
            )
        claim = self.catalog.claims.get(use.key)
        name = use.key.partition("/")[2]
        if claim is None:
            return None, f'resourceclaim "{name}" not found'
        if use.template and not controlled_by_pod(claim.metadata, pod):
            return (
                None,
                f"ResourceClaim {use.key} was not created for pod {pod.key} (pod is not owner)",
            )
        if claim.metadata.deletion_timestamp:
            return None, f'resourceclaim "{name}" is being deleted'
        return claim, ""

    # ---- PreFilter --------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if not pod.pod.spec.resource_claims and self._extended_claim(pod) is None:
            return None, Status(Code.SKIP)
        claims, status = self._claims(pod)
        if not status.ok:
            return None, status
        catalog = self.catalog
        n = self.handle.snapshot.n
        rows = catalog.rows()
        reach = catalog.reach()
        now = catalog.state()
        held = self._held_for_nominees(pod, claims, rows, now)
        if held is not None:
            now = now.holding(held)
        passed = np.ones(n, dtype=bool)
        failures: list[Failure] = []
        unavailable: list[str] = []
        reqs: list[Req] = []
        constraints: list[Constraint] = []
        options: dict[int, list[Req]] = {}
        for claim in claims:
            devices = catalog.allocated(claim.key)
            if devices is None and catalog.lapsed(claim.key):
                if not catalog.fits_again(claim.key, now):
                    return None, Status(
                        Code.UNSCHEDULABLE,
                        f"resourceclaim {claim.metadata.name} is still allocated to devices "
                        "given to other claims since its last user left: waiting for the "
                        "resource claim controller to deallocate it",
                    )
                # Its allocation comes back with this pod (see DeviceCatalog.lapsed).
                devices = catalog.written(claim.key)
            if devices is not None:
                allowed = self._allocated_rows(claim, devices, rows, n, reach)
                bad = passed & ~allowed
                if bad.any():
                    reason = (
                        f"resourceclaim {claim.metadata.name} is allocated to devices "
                        "of another node"
                    )
                    failures.append(Failure(reason, bad, _UNRESOLVABLE))
                    passed &= allowed
                if not allowed.all():
                    unavailable.append(claim.key)
                continue
            problem = self._requests(claim, reqs, constraints, options, evaluated=True)
            if problem:
                return None, Status(_UNRESOLVABLE, problem)
        passed &= self._all_mode_reach(reqs, passed, failures)
        alternatives = choices(reqs, constraints, options)
        first_reqs, first_constraints = alternatives[0]
        extended = claims[-1].key if claims and claims[-1].key == catalog.extended_key(pod) else ""
        served = self._device_plugin_rows(pod, claims[-1]) if extended else {}
        only = {(extended, name): ~rows_served for name, rows_served in served.items()}
        catalog.plans[pod.uid] = PodPlan(
            first_reqs, first_constraints, catalog.plan_version, held, alternatives[1:], only
        )
        if reqs:
            on_node = _NodeDevices(rows, reach)
            fits = np.zeros(n, dtype=bool)
            for where, dropped in _variants(served, n):
                # Nodes whose device plugin serves some of the extended resources judge
                # the requests without those (kube: a node-specific claim).
                variant = [
                    (
                        [r for r in chosen if not (r.claim == extended and r.name in dropped)],
                        chosen_constraints,
                    )
                    for chosen, chosen_constraints in alternatives
                ]
                fits |= (
                    self._judge(variant, rows, now, n, on_node, reach, passed & where, failures)
                    & where
                )
            passed &= fits
        state.write(_STATE, _Verdict([c.key for c in claims], passed, failures, unavailable))
        return None, Status()

    def _judge(
        self,
        alternatives: list[tuple[list[Req], list[Constraint]]],
        rows: NDArray[np.intp],
        now: Devices,
        n: int,
        on_node: _NodeDevices,
        reach: Reach | None,
        passed: NDArray[np.bool_],
        failures: list[Failure],
    ) -> NDArray[np.bool_]:
        """Where some choice of sub-requests fits (with firstAvailable); the
        explanations, on the `passed` nodes, are those of the first choice."""
        fits = np.zeros(n, dtype=bool)
        for k, (chosen, chosen_constraints) in enumerate(alternatives):
            verdict = self._feasible(chosen, chosen_constraints, rows, now, n, on_node, reach)
            if k == 0:
                for reason, mask in verdict.reasons:
                    code = _UNRESOLVABLE if reason.startswith("no device") else Code.UNSCHEDULABLE
                    bad = mask & passed
                    if bad.any():
                        failures.extend(self._unsettled_said(reason, bad, code))
            fits |= verdict.passed
            if fits.all():
                break
        return fits

    # ---- PostFilter -------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: NodeFilterStatuses
    ) -> tuple[PostFilterResult | None, Status]:
        """No node fits: kube's DynamicResources PostFilter. A claim of the pod that is
        allocated to devices some node cannot use, and reserved for nobody (or only for
        this pod, which is not running), is deallocated, so the next attempt can choose
        its devices anew wherever the pod fits. One claim per attempt (kube picks one at
        random; here the first by name). DefaultPreemption still runs after it."""
        verdict: _Verdict | None = state.get(_STATE)
        if verdict is None or not verdict.unavailable:
            return None, Status(Code.UNSCHEDULABLE)
        for key in sorted(verdict.unavailable):
            claim = self.catalog.claims.get(key)
            if claim is None or claim.status.allocation is None:
                continue
            reserved = claim.status.reserved_for
            if len(reserved) > 1 or (reserved and reserved[0].uid != pod.uid):
                continue
            self.handle.effects.emit(
                DeallocateClaim(pod, key, claim.metadata.resource_version or "")
            )
            where = self.catalog.allocated_node(key)
            on = f" on {where}" if where else ""
            return None, Status(
                Code.UNSCHEDULABLE,
                f"resourceclaim {claim.metadata.name} was allocated{on} where the pod does "
                "not fit: deallocated, to be allocated again where it does",
            )
        return None, Status(Code.UNSCHEDULABLE)

    def _unsettled_said(self, reason: str, bad: NDArray[np.bool_], code: Code) -> list[Failure]:
        """The failure, with the nodes a pool not allocated from reaches (incomplete or
        invalid: its devices are not counted) told apart and the pool named, for the
        first `_NAMED_POOLS` such pools."""
        unsettled = self._unsettled(bad.size)
        if not unsettled:
            return [Failure(reason, bad, code)]
        rest = bad.copy()
        out: list[Failure] = []
        for reaches, why in unsettled:
            if len(out) == _NAMED_POOLS:
                break
            reached = rest & reaches
            if reached.any():
                out.append(Failure(f"{reason}; {why}", reached, code))
                rest &= ~reached
        if rest.any():
            out.append(Failure(reason, rest, code))
        return out

    def _unsettled(self, n: int) -> list[tuple[NDArray[np.bool_], str]]:
        """(node rows 0..n-1 it reaches, why) for each pool not allocated from
        (`shoal.cache.dra_pools`): one node's, or every node's."""
        reasons = self.catalog.table().unsettled.reasons()
        if not reasons:
            return []
        names = self.handle.snapshot.names[:n]
        return [
            (np.ones(n, dtype=bool) if not node else names == node, why) for node, why in reasons
        ]

    def _all_mode_reach(
        self, reqs: list[Req], passed: NDArray[np.bool_], failures: list[Failure]
    ) -> NDArray[np.bool_]:
        """Where no request for all devices can be allocated: nodes that a pool being
        updated or invalid reaches (kube: "asks for all devices, but resource pool ...
        is currently being updated"; `shoal.cache.dra_pools`)."""
        allowed = np.ones(passed.size, dtype=bool)
        every = [r for r in reqs if r.all_mode]
        if not every:
            return allowed
        what = f"{every[0].claim.partition('/')[2]}/{every[0].name}"
        for reached, why in self._unsettled(passed.size):
            bad = reached & passed & allowed
            if bad.any():
                reason = f"request {what} asks for all devices (allocationMode All), but {why}"
                failures.append(Failure(reason, bad, Code.UNSCHEDULABLE))
                allowed &= ~reached
        return allowed

    @staticmethod
    def _feasible(
        reqs: list[Req],
        constraints: list[Constraint],
        rows: NDArray[np.intp],
        now: Devices,
        n: int,
        on_node: _NodeDevices,
        reach: Reach | None,
    ) -> Verdict:
        prepared = prepare(reqs, now)

        def exact(row: int) -> bool:
            devs = on_node.of(row)
            return allocate(reqs, constraints, devs, now, prepared) is not None

        return feasible(reqs, constraints, rows, now, n, exact, prepared, reach)

    def _allocated_rows(
        self,
        claim: ResourceClaim,
        devices: tuple[tuple[str, str, str], ...],
        rows: NDArray[np.intp],
        n: int,
        reach: Reach | None,
    ) -> NDArray[np.bool_]:
        allowed = np.ones(n, dtype=bool)
        index = self.catalog.table().index
        for ident in devices:
            at = index.get(ident)
            if at is None:
                node = self.catalog.allocated_node(claim.key)
                if node is not None:
                    allowed &= self.handle.snapshot.names[:n] == node
                continue
            row = int(rows[at])
            if row == GLOBAL:
                continue
            if row == SELECTED and reach is not None:
                allowed &= reach.rows_of(at, n)
                continue
            only = np.zeros(n, dtype=bool)
            if 0 <= row < n:
                only[row] = True
            allowed &= only
        return allowed

    def _held_for_nominees(
        self,
        pod: PodInfo,
        claims: list[ResourceClaim],
        rows: NDArray[np.intp],
        now: Devices,
    ) -> NDArray[np.bool_] | None:
        """Devices kept for nominated pods of equal or higher priority than `pod`
        (kube's rule for nominated room), on their nominated nodes: the devices each
        would be allocated there now. While its victims are still being evicted, the
        devices they will free count for it too, and what of its choice is free now
        is kept (the victims' shares of devices shared by capacity and the counters
        their devices take count as free for that too). None when nothing is kept. (A
        device shared by capacity is kept whole for the nominee.)"""
        nominees = self.catalog.nominees()
        if not nominees:
            return None
        catalog = self.catalog
        free = now.free
        row_of = self.handle.snapshot.row_of
        mine = {c.key for c in claims}
        held: NDArray[np.bool_] | None = None
        later: Devices | None = None
        for uid, node, other in nominees:
            row = row_of.get(node)
            if uid == pod.uid or other.priority < pod.priority or row is None:
                continue
            theirs, status = self._claims(other)
            if not status.ok:
                continue
            reqs: list[Req] = []
            constraints: list[Constraint] = []
            options: dict[int, list[Req]] = {}
            todo = [c for c in theirs if c.key not in mine and catalog.allocated(c.key) is None]
            if not todo or any(self._requests(c, reqs, constraints, options) for c in todo):
                continue
            alternatives = choices(reqs, constraints, options)
            devices = catalog.devices_of(row)
            base = now if held is None else now.holding(held)
            chosen = _first_fit(alternatives, devices, base)
            if chosen is None:
                if later is None:
                    later = catalog.leaving_state()
                soon = later if held is None else later.holding(held)
                chosen = _first_fit(alternatives, devices, soon)
            if chosen is None:
                continue
            if held is None:
                held = np.zeros_like(free)
            for devs in chosen:
                held[np.array(devs, dtype=np.intp)] = True
        if held is not None:
            held &= free  # what is not free yet is not offered anyway
        return held

    def _requests(
        self,
        claim: ResourceClaim,
        reqs: list[Req],
        constraints: list[Constraint],
        options: dict[int, list[Req]],
        *,
        evaluated: bool = False,
    ) -> str:
        """Add the claim's requests; the refusal's text when Shoal cannot judge them.
        With `evaluated`, also when a selector fails to evaluate on a device of a node
        (kube's CEL runtime error; see `DeviceCatalog.selector_failure`)."""
        name = claim.metadata.name
        spec = claim.spec.devices
        where = f"resourceclaim {claim.key}"
        if not spec.requests:
            return f"{where} has no spec.devices.requests"
        by_name: dict[str, int] = {}
        sub_names: dict[str, int] = {}
        for i, request in enumerate(spec.requests):
            field_path = f"spec.devices.requests[{i}]"
            exact = request.exactly
            if exact is None and not request.first_available:
                return f"{where}: {field_path} has neither exactly nor firstAvailable"
            if exact is not None:
                made = self._request(
                    claim, request.name, exact, f"{field_path}.exactly", evaluated=evaluated
                )
                if isinstance(made, str):
                    return made
                by_name[request.name] = len(reqs)
                reqs.append(made)
                continue
            subs: list[Req] = []
            for k, sub in enumerate(request.first_available):
                full = f"{request.name}/{sub.name}"
                made = self._request(
                    claim, full, sub, f"{field_path}.firstAvailable[{k}]", evaluated=evaluated
                )
                if isinstance(made, str):
                    return made
                subs.append(made)
                sub_names[full] = len(reqs)
            by_name[request.name] = len(reqs)
            options[len(reqs)] = subs
            reqs.append(subs[0])
        for j, constraint in enumerate(spec.constraints):
            path = f"spec.devices.constraints[{j}]"
            attribute = constraint.match_attribute or constraint.distinct_attribute
            if not attribute:
                continue
            members = constraint.requests or [r.name for r in spec.requests]
            unknown = [m for m in members if m not in by_name and m not in sub_names]
            if unknown:
                return f"{where}: {path}.requests names {unknown[0]!r}, not a request of {name}"
            whole = {by_name[m] for m in members if m in by_name}
            only: dict[int, set[str]] = {}
            for m in members:
                if m in sub_names and sub_names[m] not in whole:
                    only.setdefault(sub_names[m], set()).add(m)
            constraints.append(
                Constraint(
                    claim.key,
                    attribute,
                    sorted(whole | set(only)),
                    self.catalog.codes(attribute),
                    {i: frozenset(names) for i, names in only.items()},
                    distinct=not constraint.match_attribute,
                )
            )
        return ""

    def _request(
        self,
        claim: ResourceClaim,
        request_name: str,
        exact: ExactDeviceRequest | DeviceSubRequest,
        field_path: str,
        *,
        evaluated: bool,
    ) -> Req | str:
        """One request (or sub-request of firstAvailable) as a Req, or the refusal's
        text."""
        where = f"resourceclaim {claim.key}"
        wanted: dict[str, Fraction] = {}
        for capacity, amount in (exact.capacity.requests if exact.capacity else {}).items():
            try:
                wanted[capacity] = parse_quantity(amount)
            except QuantityError as err:
                return f"{where}: {field_path}.capacity.requests[{capacity}]: {err}"
        device_class = self.catalog.classes.get(exact.device_class_name)
        if device_class is None:
            return f'deviceclass "{exact.device_class_name}" not found (requested by {where})'
        selectors: list[CompiledSelector] = []
        sources: list[tuple[str, DeviceSelector]] = [
            (f"deviceclass {exact.device_class_name} spec.selectors[{j}]", sel)
            for j, sel in enumerate(device_class.spec.selectors)
        ] + [(f"{field_path}.selectors[{j}]", sel) for j, sel in enumerate(exact.selectors)]
        for path, sel in sources:
            if sel.cel is None:
                return f"{where}: {path} has no cel expression, the only selector Shoal reads"
            try:
                selectors.append(compile_selector(sel.cel.expression))
            except SelectorError as err:
                return (
                    f"{where}: {path}.cel.expression cannot be used ({err}); fix the "
                    f"expression: Shoal evaluates selectors with cel-python ({_DOCS})"
                )
        if exact.allocation_mode == "ExactCount" and exact.count < 1:
            return f"{where}: {field_path}.count must be at least 1"
        catalog = self.catalog
        match = catalog.match(selectors)
        demand = catalog.demand(wanted)
        if demand is not None:
            match = match & demand.ok
        if evaluated:
            failure = catalog.selector_failure(selectors)
            if failure is not None:
                position, device, why = failure
                path, sel = sources[position]
                expression = sel.cel.expression if sel.cel is not None else ""
                ident = "/".join(catalog.table().ids[device])
                return (
                    f"{where}: {path}.cel.expression {_quoted(expression)} failed on "
                    f"device {ident}: CEL runtime error: {why}; guard attributes a "
                    f"device may lack with has(...) ({_DOCS})"
                )
        untolerated: NDArray[np.bool_] | None = None
        taint = ""
        tolerated = catalog.tolerated(exact.tolerations)
        if tolerated is not None:
            ok, why_not = tolerated
            blocked = match & ~ok
            if blocked.any():
                first = int(np.flatnonzero(blocked)[0])
                taint = f"device {'/'.join(catalog.table().ids[first])} has taint {why_not[first]}"
                untolerated = blocked
                match = match & ok
        return Req(
            claim.key,
            request_name,
            exact.device_class_name,
            match,
            all_mode=exact.allocation_mode == "All",
            count=exact.count,
            has_selectors=bool(exact.selectors),
            demand=demand,
            untolerated=untolerated,
            taint=taint,
            admin=isinstance(exact, ExactDeviceRequest) and bool(exact.admin_access),
        )

    # ---- Filter -----------------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        verdict: _Verdict = state.read(_STATE)
        index = nodes.index
        passed = verdict.passed[index]
        if passed.all():
            return FilterResult(passed)
        return FilterResult(
            passed, [Failure(f.reason, f.nodes[index], f.code) for f in verdict.failures]
        )

    # ---- Reserve / PreBind ------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        if not pod.pod.spec.resource_claims and not self.catalog.extended_key(pod):
            return Status()
        catalog = self.catalog
        failed = catalog.failed.pop(pod.uid, None)
        if failed:
            return Status(Code.UNSCHEDULABLE, failed)
        claims, status = self._claims(pod)
        if not status.ok:
            return status
        out: list[ClaimAllocation] = []
        table = catalog.table()
        for claim in claims:
            assumed = catalog.assumed.get(claim.key)
            if assumed is not None and assumed.owner == pod.uid:
                if assumed.node != node:
                    return Status(
                        Code.UNSCHEDULABLE,
                        f"resourceclaim {claim.metadata.name} was allocated on {assumed.node}",
                    )
                results = tuple((request, *table.ids[d]) for request, d in assumed.results)
                devices = [table.devices[d] for _, d in assumed.results]
                binding = tuple(
                    (tuple(dev.binding_conditions), tuple(dev.binding_failure_conditions))
                    if dev.binding_conditions
                    else None
                    for dev in devices
                )
                # bindsToNode: the allocation is limited to the node it was made on.
                pinned = assumed.node_local or any(dev.binds_to_node for dev in devices)
                out.append(
                    ClaimAllocation(
                        claim.key,
                        results,
                        node if pinned else "",
                        assumed.share_results(),
                        assumed.selector,
                        tuple(sorted(assumed.admin)),
                        allocation_config(claim.spec, catalog.classes, results),
                        *self._to_create(pod, claim, results),
                        binding if any(b is not None for b in binding) else (),
                    )
                )
            elif catalog.allocated(claim.key) is not None:
                # Allocated already (written for this pod before a failed bind, or
                # shared): its node-local devices decide where the pod may go.
                where = catalog.allocated_node(claim.key)
                if where is not None and where != node:
                    return Status(
                        Code.UNSCHEDULABLE,
                        f"resourceclaim {claim.metadata.name} is allocated on {where}",
                    )
                out.append(ClaimAllocation(claim.key))
            elif claim.key == catalog.extended_key(pod) and not self._needs_devices(pod, node):
                continue  # the device plugin of this node serves the extended resources
            else:
                return Status(
                    Code.UNSCHEDULABLE,
                    f"resourceclaim {claim.metadata.name} could not be allocated on {node}",
                )
        state.write(_RESERVED, tuple(out))
        return Status()

    def _needs_devices(self, pod: PodInfo, node: str) -> bool:
        """Does the extended-resource claim take devices on this node (some request is
        not served by the node's device plugin)?"""
        plan = self.catalog.plans.get(pod.uid)
        row = self.handle.snapshot.row_of.get(node)
        key = self.catalog.extended_key(pod)
        if plan is None or row is None:
            return True
        return any(plan.applies(r, row) for r in plan.reqs if r.claim == key)

    def _to_create(
        self, pod: PodInfo, claim: ResourceClaim, results: tuple[tuple[str, str, str, str], ...]
    ) -> tuple[dict[str, Any] | None, tuple[dict[str, str], ...]]:
        """For the claim made in memory for the pod's extended resources: the manifest
        to create (with only the requests that got devices on the chosen node) and
        the pod's `status.extendedResourceClaimStatus.requestMappings`; (None, ()) for
        any other claim."""
        if claim.key != self.catalog.extended_key(pod) or claim.key in self.catalog.claims:
            return None, ()
        used = {request for request, *_ in results}
        requests = [r for r in claim.spec.devices.requests if r.name in used]
        mappings = tuple(
            {"containerName": r.container, "resourceName": r.resource, "requestName": r.name}
            for r in extended_requests(pod.pod, self.catalog.extended_mapping())
            if r.name in used
        )
        meta = claim.metadata
        manifest: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": meta.name,
                "namespace": meta.namespace,
                "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod.name,
                        "uid": pod.uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {"devices": {"requests": [msgspec.to_builtins(r) for r in requests]}},
        }
        return manifest, mappings

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        # The devices are released by the cache when the pod is forgotten.
        if state.get(_RESERVED) is not None:
            state.delete(_RESERVED)

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """Work when the pod has claims to write (kube: any claim)."""
        return Status() if state.get(_RESERVED) else Status(Code.SKIP)

    def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        claims: tuple[ClaimAllocation, ...] | None = state.get(_RESERVED)
        if claims:
            self.handle.effects.emit(AllocateClaims(pod, node, claims, self.binding_timeout))
        return Status()

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.ALL),
            ClusterEvent(EventResource.RESOURCE_SLICE, ActionType.ALL),
            ClusterEvent(EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE),
            # Network-attached pools reach nodes by their labels (kube registers label
            # and taint changes for the same reason).
            ClusterEvent(
                EventResource.NODE,
                ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT,
            ),
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE),
        ]

    @classmethod
    def new(cls, args: DynamicResourcesArgs | None, handle: Handle) -> DynamicResources:
        return cls(handle, args)


class _NodeDevices:
    """The devices of each node (its own and those of every node), in table order,
    grouped once per PreFilter for the per-node searches."""

    def __init__(self, rows: NDArray[np.intp], reach: Reach | None = None) -> None:
        self.rows = rows
        self.reach = reach
        self._order: NDArray[np.intp] | None = None
        self._bounds: NDArray[np.intp] = np.zeros(0, np.intp)
        self._global: NDArray[np.intp] = np.zeros(0, np.intp)

    def of(self, row: int) -> NDArray[np.intp]:
        if self._order is None:
            rows = self.rows
            self._order = np.argsort(rows, kind="stable").astype(np.intp)
            top = int(rows.max()) + 2 if rows.size else 1
            self._bounds = np.searchsorted(rows[self._order], np.arange(top)).astype(np.intp)
            self._global = np.flatnonzero(rows == GLOBAL).astype(np.intp)
        if row + 1 >= self._bounds.size:
            local = np.zeros(0, np.intp)
        else:
            local = self._order[self._bounds[row] : self._bounds[row + 1]]
        reached = self.reach.of(row) if self.reach is not None else None
        if not self._global.size and (reached is None or not reached.size):
            return local
        parts = [local, self._global] if reached is None else [local, self._global, reached]
        return np.sort(np.concatenate(parts)).astype(np.intp)


def _first_fit(
    alternatives: list[tuple[list[Req], list[Constraint]]],
    devices: NDArray[np.intp],
    state: Devices,
) -> list[list[int]] | None:
    """The devices of the first choice of sub-requests that fits, or None."""
    for reqs, constraints in alternatives:
        chosen = allocate(reqs, constraints, devices, state)
        if chosen is not None:
            return chosen
    return None


def _quoted(expression: str, limit: int = 120) -> str:
    text = expression if len(expression) <= limit else expression[: limit - 3] + "..."
    return f"({text!r})"


def _variants(
    served: dict[str, NDArray[np.bool_]], n: int
) -> list[tuple[NDArray[np.bool_], frozenset[str]]]:
    """(nodes, requests of the extended-resource claim their device plugin serves) for
    each distinct such set among the nodes; one variant (every node, none served) in
    the usual case of resources served by DRA alone."""
    if not served:
        return [(np.ones(n, dtype=bool), frozenset())]
    names = sorted(served)
    matrix = np.stack([served[name] for name in names], axis=1)  # [n, k]
    patterns, inverse = np.unique(matrix, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    return [
        (inverse == i, frozenset(name for name, on in zip(names, pattern, strict=True) if on))
        for i, pattern in enumerate(patterns)
    ]
