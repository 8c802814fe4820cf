"""VolumeBinding (PreFilter, Filter, Reserve, PreBind): the pod's PersistentVolumeClaims
must be usable on the node, as kube-scheduler's volumebinding plugin decides it.

* A claim that is not found, is being deleted, or is a generic ephemeral volume's claim
  not created (or not owned) by the pod: the pod waits, with kube's message.
* A bound claim: its PersistentVolume's `nodeAffinity` must match the node ("node(s)
  had volume node affinity conflict"); a volume that does not exist fails everywhere.
* An unbound claim whose StorageClass binds `Immediate` (or has no class): the pod waits
  until the PersistentVolume controller binds it ("pod has unbound immediate
  PersistentVolumeClaims").
* An unbound claim whose StorageClass is `WaitForFirstConsumer` (kube's delayed
  binding): on each node, claims (smallest request first) take the smallest available
  static volume of their class that fits (capacity, access modes, volume mode, selector,
  node affinity; a volume pre-bound to the claim wins), never one another claim took;
  a claim left over must be provisionable there (a provisioner other than
  `kubernetes.io/no-provisioner`, `allowedTopologies` matching the node, and the node
  named by the claim's `volume.kubernetes.io/selected-node` if it has one). Otherwise
  "node(s) didn't find available persistent volumes to bind". When the provisioner is
  a CSIDriver with `storageCapacity: true`, a CSIStorageCapacity of the class that
  reaches the node must also allow the claim's size, else "node(s) did not have enough
  free storage" (`shoal.cache.storage_capacity`).
* Volume sources Shoal does not know keep the pod pending with a message that names
  them: it is never bound where its volume might not attach. (Inline disks and
  `ReadWriteOncePod` claims in use are VolumeRestrictions'.)

Speed: PreFilter works the verdict out for every node at once, Filter only indexes it.
Static volumes are numpy columns (`shoal.cache.volume_index`): a claim's candidates are
a few vector operations, a local volume is one row, other node affinities one cached
label mask each; with several claims the greedy choice runs once per distinct pattern of
usable volumes, not per node. Pods without claims skip the plugin.

Reserve picks the volumes for the chosen node and assumes them in the `VolumeCatalog`
(later pods see them taken); PreBind sends a `BindVolumes` effect (claimRef on the
chosen volumes, `volume.kubernetes.io/selected-node` on claims to provision), which the
port carries out before the pod is bound; as kube-scheduler's, it then waits (up to
`bindTimeoutSeconds`) until the claims are bound, and the bind fails if a claim's
provisioning failed there (`shoal.drivers.kube.volumes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from shoal.api.podinfo import PodInfo, controlled_by_pod
from shoal.api.volumes import (
    ANNOTATION_SELECTED_NODE,
    NO_PROVISIONER,
    PersistentVolumeClaim,
    StorageClass,
    claim_class,
    pod_claims,
    unsupported_volumes,
)
from shoal.cache.storage_capacity import StorageCapacityIndex
from shoal.cache.volume_index import VolumeIndex
from shoal.cache.volumes import ClaimBinding, VolumeCatalog
from shoal.framework.cycle_state import CycleState
from shoal.framework.effects import BindVolumes
from shoal.framework.handle import Handle
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

__all__ = [
    "NAME",
    "REASON_BIND_CONFLICT",
    "REASON_NODE_CONFLICT",
    "REASON_NOT_ENOUGH_SPACE",
    "REASON_PV_NOT_EXIST",
    "REASON_UNBOUND_IMMEDIATE",
    "VolumeBinding",
    "VolumeBindingArgs",
]

NAME = "VolumeBinding"
REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
REASON_NODE_CONFLICT = "node(s) had volume node affinity conflict"
REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
REASON_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"

_UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
_STATE = NAME
_BINDINGS = _STATE + "/bindings"  # what Reserve chose, for PreBind and Unreserve


class VolumeBindingArgs(BaseModel):
    """kube's VolumeBindingArgs: `bindTimeoutSeconds`, how long PreBind waits for the
    pod's claims to be bound (600 s, as kube); `shape` is accepted so stock
    configurations load, and not used (see `not_used`)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    bind_timeout_seconds: int = Field(default=600, ge=0)
    shape: list[dict[str, int]] | None = None

    def not_used(self) -> list[str]:
        notes = []
        if self.shape is not None:
            notes.append(
                "VolumeBinding's shape is not used: Shoal does not score nodes by storage capacity"
            )
        return notes


@dataclass
class _Plan:
    """The pod's unbound delayed-binding claims and what may serve them, over all rows."""

    to_match: list[PersistentVolumeClaim]  # smallest request first
    candidates: list[NDArray[np.intp]]  # per claim: volume slots, smallest first
    index: VolumeIndex
    n: int
    selected: list[PersistentVolumeClaim]  # claims already marked for a node
    passed: NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))
    failures: list[Failure] = field(default_factory=list)

    def choose(self, row: int) -> tuple[list[ClaimBinding], list[int]]:
        """kube's findMatchingVolumes on one row: a static volume per claim where one
        fits (never one an earlier claim took), else the claim is to be provisioned.
        Returns the bindings and the indexes of the claims left to provision."""
        chosen: set[int] = set()
        bindings = [ClaimBinding(c.key) for c in self.selected]
        left: list[int] = []
        for i, claim in enumerate(self.to_match):
            slots = self.candidates[i]
            usable = slots[self.index.usable_at(slots, row, self.n)] if len(slots) else slots
            pick = next((int(v) for v in usable if int(v) not in chosen), None)
            if pick is None:
                left.append(i)
                bindings.append(ClaimBinding(claim.key))
            else:
                chosen.add(pick)
                volume = self.index.volume(pick).metadata.name
                bindings.append(ClaimBinding(claim.key, volume))
        return bindings, left


class VolumeBinding:
    name = NAME
    # Optimistic workers may decide with it: the pods they take (no claims) pass it
    # on any node (shoal.scheduler.optimistic).
    row_local = True
    # Its verdict on a node does not depend on the pods there.
    preemption_local = True

    def __init__(self, handle: Handle, bind_timeout_seconds: float = 600.0) -> None:
        self.handle = handle
        self.bind_timeout_seconds = bind_timeout_seconds
        self.catalog = VolumeCatalog.of(handle)
        self.index = VolumeIndex(self.catalog, handle.snapshot)
        self.capacity = StorageCapacityIndex(self.catalog, handle.snapshot)
        # Per class: (object, nodes version, rows) -> mask over all rows.
        self._class_masks: dict[str, tuple[object, int, int, NDArray[np.bool_]]] = {}

    # ---- PreFilter ------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if not pod.pod.spec.volumes:
            return None, Status(Code.SKIP)
        problems = unsupported_volumes(pod.pod)
        if problems:
            return None, Status(_UNRESOLVABLE, *problems)
        uses = pod_claims(pod.pod)
        if not uses:
            return None, Status(Code.SKIP)
        catalog = self.catalog
        bound: list[PersistentVolumeClaim] = []
        delayed: list[PersistentVolumeClaim] = []
        for use in uses:
            claim = catalog.claim(use.key)
            if claim is None:
                if use.ephemeral:
                    why = (
                        "waiting for ephemeral volume controller to create the "
                        f'persistentvolumeclaim "{use.name}"'
                    )
                else:
                    why = f'persistentvolumeclaim "{use.name}" not found'
                return None, Status(_UNRESOLVABLE, why)
            if use.ephemeral and not controlled_by_pod(claim.metadata, pod):
                why = f"PVC {use.key} was not created for pod {pod.key} (pod is not owner)"
                return None, Status(_UNRESOLVABLE, why)
            if claim.metadata.deletion_timestamp:
                return None, Status(
                    _UNRESOLVABLE, f'persistentvolumeclaim "{use.name}" is being deleted'
                )
            if claim.spec.volume_name:
                bound.append(claim)
                continue
            class_name = claim_class(claim)
            storage_class = catalog.classes.get(class_name) if class_name else None
            if class_name and storage_class is None:
                return None, Status(
                    _UNRESOLVABLE,
                    f'storageclass.storage.k8s.io "{class_name}" not found '
                    f"(used by persistentvolumeclaim {claim.key})",
                )
            if storage_class is None or storage_class.volume_binding_mode != "WaitForFirstConsumer":
                return None, Status(_UNRESOLVABLE, REASON_UNBOUND_IMMEDIATE)
            delayed.append(claim)
        plan = self._plan(bound, delayed)
        state.write(_STATE, plan)
        return None, Status()

    def _plan(
        self, bound: list[PersistentVolumeClaim], delayed: list[PersistentVolumeClaim]
    ) -> _Plan:
        snap = self.handle.snapshot
        n = snap.n
        catalog = self.catalog
        failures: list[Failure] = []
        passed = np.ones(n, dtype=bool)
        # Bound claims: the volume must exist and its node affinity match.
        missing = False
        conflict = np.zeros(n, dtype=bool)
        index = self.index
        index.sync()
        for claim in bound:
            slot = index.slot_of.get(claim.spec.volume_name)
            if slot is None:
                missing = True
                continue
            conflict |= ~index.any_mask(np.array([slot], dtype=np.intp), n)
        if missing:
            failures.append(Failure(REASON_PV_NOT_EXIST, np.ones(n, dtype=bool), _UNRESOLVABLE))
            passed[:] = False
        elif conflict.any():
            failures.append(Failure(REASON_NODE_CONFLICT, conflict.copy(), _UNRESOLVABLE))
            passed &= ~conflict
        # Delayed claims: a selected node pins the claim; the others match or provision.
        selected = [c for c in delayed if catalog.selected_node(c)]
        to_match = sorted(
            (c for c in delayed if not catalog.selected_node(c)), key=lambda c: c.request
        )
        candidates = [index.candidates(claim) for claim in to_match]
        plan = _Plan(to_match, candidates, index, n, selected)
        if selected or to_match:
            conflict, no_space = self._unbound_failures(plan, n)
            if conflict.any():
                failures.append(Failure(REASON_BIND_CONFLICT, conflict, _UNRESOLVABLE))
                passed &= ~conflict
            if no_space.any():
                failures.append(Failure(REASON_NOT_ENOUGH_SPACE, no_space, _UNRESOLVABLE))
                passed &= ~no_space
        plan.passed = passed
        plan.failures = failures
        return plan

    def _unbound_failures(self, plan: _Plan, n: int) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
        """kube's FindPodVolumes for the unbound delayed claims, on every row at once.
        Returns the rows failing with "didn't find available persistent volumes to bind"
        and those failing with "did not have enough free storage".

        A claim whose selected node is another row fails that row at once. Then the
        claims to provision there (the selected ones in the pod's order, then those no
        static volume was left for) are checked in that order, and the first one that
        fails decides the reason: a class that cannot provision there (no provisioner,
        `allowedTopologies`) is a bind conflict, too little storage capacity is not
        enough space."""
        names = self.handle.snapshot.names[:n]
        conflict = np.zeros(n, dtype=bool)
        for claim in plan.selected:
            conflict |= names != self.catalog.selected_node(claim)
        decided = conflict.copy()
        no_space = np.zeros(n, dtype=bool)
        to_provision: list[tuple[PersistentVolumeClaim, NDArray[np.bool_] | None]] = [
            (claim, None) for claim in plan.selected
        ]
        if plan.to_match:
            to_provision += zip(plan.to_match, self._unmatched(plan, n), strict=True)
        for claim, needed in to_provision:
            where = self._provision_mask(claim, n)
            fails = ~where if needed is None else needed & ~where
            fails &= ~decided
            conflict |= fails
            decided |= fails
            short = self._short_of_capacity(claim, n)
            if short is None:
                continue
            fails = short & where & ~decided
            if needed is not None:
                fails &= needed
            no_space |= fails
            decided |= fails
        return conflict, no_space

    def _unmatched(self, plan: _Plan, n: int) -> list[NDArray[np.bool_]]:
        """Per claim to match: the rows where no static volume is left for it (kube's
        findMatchingVolumes), so it is to be provisioned there."""
        index = plan.index
        if len(plan.to_match) == 1:
            slots = plan.candidates[0]
            if not len(slots):
                return [np.ones(n, dtype=bool)]
            return [~index.any_mask(slots, n)]
        # kube's greedy, for every row at once: claim i takes its first usable volume
        # that an earlier claim did not take there, else it is to be provisioned. Its
        # first len(to_match) usable volumes per row are enough to decide.
        m = len(plan.to_match)
        out: list[NDArray[np.bool_]] = []
        taken: list[NDArray[np.intp]] = []
        for i in range(m):
            first = index.first_per_row(plan.candidates[i], m, n)
            choice = np.full(n, -1, dtype=np.intp)
            for j in range(m):
                candidate = first[:, j]
                free = (candidate >= 0) & (choice < 0)
                for earlier in taken:
                    free &= candidate != earlier
                choice[free] = candidate[free]
            taken.append(choice)
            out.append(choice < 0)
        return out

    def _short_of_capacity(self, claim: PersistentVolumeClaim, n: int) -> NDArray[np.bool_] | None:
        """Rows without enough storage capacity for the claim (None: not checked)."""
        storage_class = self.catalog.classes.get(claim_class(claim))
        if storage_class is None or not self.capacity.checked(claim, storage_class):
            return None
        return ~self.capacity.rows(claim, storage_class)

    def _provision_mask(self, claim: PersistentVolumeClaim, n: int) -> NDArray[np.bool_]:
        """kube's checkVolumeProvisions: rows where the claim's class may provision."""
        storage_class = self.catalog.classes.get(claim_class(claim))
        if storage_class is None or storage_class.provisioner in ("", NO_PROVISIONER):
            return np.zeros(n, dtype=bool)
        version = self.handle.snapshot.nodes_version
        name = storage_class.metadata.name
        cached = self._class_masks.get(name)
        if (
            cached is not None
            and cached[0] is storage_class
            and cached[1] == version
            and cached[2] == n
        ):
            return cached[3]
        mask = self._topology_mask(storage_class, n)
        self._class_masks[name] = (storage_class, version, n, mask)
        return mask

    def _topology_mask(self, storage_class: StorageClass, n: int) -> NDArray[np.bool_]:
        if not storage_class.allowed_topologies:
            return np.ones(n, dtype=bool)
        labels = self.handle.snapshot.labels
        mask = np.zeros(n, dtype=bool)
        for term in storage_class.allowed_topologies:
            term_mask = np.ones(n, dtype=bool)
            for req in term.match_label_expressions:
                codes = labels.column(req.key, slice(0, n))
                wanted = labels.value_codes(req.key, req.values)
                if not wanted:
                    term_mask[:] = False
                    break
                term_mask &= np.isin(codes, wanted)
            mask |= term_mask
        return mask

    # ---- Filter ---------------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        plan: _Plan = state.read(_STATE)
        index = nodes.index
        passed = plan.passed[index]
        if passed.all():
            return FilterResult(passed)
        return FilterResult(
            passed, [Failure(f.reason, f.nodes[index], f.code) for f in plan.failures]
        )

    # ---- Score ------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> Status:
        # kube-scheduler scores here only with its StorageCapacityScoring feature gate;
        # without it (and in Shoal) PreScore skips, so a configuration that enables
        # VolumeBinding at score loads and ranks nodes as kube-scheduler does without
        # that gate.
        return Status(Code.SKIP)

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        return np.zeros(nodes.size, dtype=np.int64)

    # ---- Reserve / PreBind ----------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        plan: _Plan | None = state.get(_STATE)
        if plan is None or not (plan.to_match or plan.selected):
            return Status()
        row = self.handle.snapshot.row(node)
        if row is None or row >= len(plan.passed):
            return Status(Code.ERROR, f"node {node} left the cache", plugin=NAME)
        bindings, _ = plan.choose(row)
        self.catalog.assume(bindings, node)
        state.write(_BINDINGS, bindings)
        return Status()

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        bindings: list[ClaimBinding] | None = state.get(_BINDINGS)
        if bindings:
            self.catalog.revert(bindings)
            state.delete(_BINDINGS)

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """Work (kube: unless all the pod's claims are bound): claims to bind or to
        provision, whose binding PreBind waits for."""
        bindings: list[ClaimBinding] | None = state.get(_BINDINGS)
        return Status() if bindings else Status(Code.SKIP)

    def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        bindings: list[ClaimBinding] | None = state.get(_BINDINGS)
        if not bindings:
            return Status()
        static = tuple((b.claim, b.volume) for b in bindings if b.volume)
        to_provision = [b.claim for b in bindings if not b.volume]
        provision = tuple(c for c in to_provision if self._needs_mark(c, node))
        provisioning = tuple(c for c in to_provision if c not in provision)
        self.handle.effects.emit(
            BindVolumes(
                pod, node, static, provision, provisioning, float(self.bind_timeout_seconds)
            )
        )
        return Status()

    def _needs_mark(self, claim: str, node: str) -> bool:
        found = self.catalog.claim(claim)
        if found is None:
            return True
        return found.metadata.annotations.get(ANNOTATION_SELECTED_NODE) != node

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ALL),
            ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ADD | ActionType.UPDATE),
            ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD | ActionType.UPDATE),
            ClusterEvent(EventResource.CSI_NODE, ActionType.ADD | ActionType.UPDATE),
            ClusterEvent(EventResource.CSI_DRIVER, ActionType.ADD | ActionType.UPDATE),
            ClusterEvent(EventResource.CSI_STORAGE_CAPACITY, ActionType.ADD | ActionType.UPDATE),
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
        ]

    @classmethod
    def new(cls, args: VolumeBindingArgs | None, handle: Handle) -> VolumeBinding:
        timeout = args.bind_timeout_seconds if args is not None else 600
        return cls(handle, float(timeout))
