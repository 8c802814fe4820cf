"""The effects port: the one way a decision leaves the scheduling core.

The core never mutates API objects and never performs I/O. Everything that must reach
the cluster (or the simulator's in-memory cluster) is an *effect* handed to the
`Effects` port that the driver wired in:

* `Bind`: bind the pod to the node, writing `annotations` (e.g. the GPU device indices
  chosen at Reserve) onto the pod with the binding, through the API (or an HTTP
  extender's bind verb). Its outcome is not awaited: the port reports it back as a
  `BindOutcome` event through the same inbox as every other observation, and the core
  finishes the binding cycle then (or earlier, when the watch shows the pod bound).
  An ambiguous answer is not an outcome: the port reads the cluster until it knows,
  and the room stays held meanwhile;
* `Nominate` (the preemptor's `status.nominatedNodeName`), `BindingExpected` (the node
  a pod is about to be bound to, while PreBind work or a Permit wait delays its bind:
  `status.nominatedNodeName` too, as kube-scheduler's NominatedNodeNameForExpectation),
  `Evict` (preemption, reclaim; with the reason the owner reads), `Unschedulable` (the
  PodScheduled=False condition and the FailedScheduling event with kube's explanation),
  `Bound` and
  `BindFailed` (outcomes of a binding cycle, for events and for recorders),
  `GroupStatus`, `QueueStatus` and `BindingStatus` (the status of PodGroup, Queue and
  QueueBinding objects), `BindVolumes` (VolumeBinding's PreBind: claims bound to
  volumes or marked with the node their volume is to be provisioned for).

A port implementation only *queues* work in `emit` (it is called from inside a
scheduling cycle), in the order emitted (a `Bind` goes after the `BindVolumes` of its
PreBind). The Kubernetes driver turns effects into API calls; the in-memory
driver applies them and echoes the resulting objects back into the core the way an API
server's watch would (a bound pod comes back with `spec.nodeName` and its annotations,
an evicted pod comes back deleted), so the simulator and a cluster see the same thing.

Plugins never mutate pods: a PreBind plugin that must record something on the pod adds
an annotation to the binding with `annotate(state, key, value)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from shoal.api.objects import NodeSelectorTerm
from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.status import Status

__all__ = [
    "AllocateClaims",
    "Bind",
    "BindError",
    "BindFailed",
    "BindOutcome",
    "BindVolumes",
    "BindingExpected",
    "BindingStatus",
    "Bound",
    "ClaimAllocation",
    "DeallocateClaim",
    "Effect",
    "Effects",
    "Evict",
    "ExternalBinder",
    "GroupStatus",
    "Nominate",
    "NullEffects",
    "QueueStatus",
    "SubGroupStatus",
    "Unschedulable",
    "annotate",
    "annotations_of",
]


class BindError(Exception):
    """Binding failed (conflict, pod deleted, API error); the pod is forgotten and retried."""


@dataclass(frozen=True, slots=True)
class BindingExpected:
    """`pod` is about to be bound to `node`, after PreBind work (claims to provision,
    devices to allocate) or a Permit wait: a cluster says so in the pod's
    `status.nominatedNodeName` meanwhile, as kube-scheduler does since 1.35
    (NominatedNodeNameForExpectation), so that other components (cluster autoscaler,
    Karpenter, other schedulers) count the pod on that node. The API server clears it
    when the pod is bound; a failed binding clears it too (with `BindFailed`)."""

    pod: PodInfo
    node: str


@dataclass(frozen=True, slots=True)
class Nominate:
    """Preemption made room for `pod` on `node` ("" clears the nomination)."""

    pod: PodInfo
    node: str


@dataclass(frozen=True, slots=True)
class Evict:
    """Remove a running pod (preemption or reclaim) gracefully, with a reason."""

    pod: PodInfo
    node: str
    reason: str
    preemptor: str = ""  # namespace/name of the pod (or gang) the room is for


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """A scheduling attempt failed: PodScheduled=False with kube's explanation. With
    `gated`, the pod was not tried at all: PreEnqueue keeps it out of the queue (kube's
    SchedulingGated reason)."""

    pod: PodInfo
    status: Status
    message: str
    nominated: str = ""
    gated: bool = False


class ExternalBinder(Protocol):
    """Who binds instead of the API's `pods/binding` (an HTTP extender's bind verb)."""

    @property
    def name(self) -> str: ...

    async def bind(self, pod: PodInfo, node: str) -> None:
        """Bind, or raise (the error's text is the outcome's)."""
        ...


@dataclass(frozen=True, slots=True)
class Bind:
    """Bind `pod` to `node` with `annotations` written onto the pod by the binding
    itself; through `binder` when one is named (an extender), else the API. The port
    answers with a `BindOutcome` event (see the module docstring)."""

    pod: PodInfo
    node: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    binder: ExternalBinder | None = None


@dataclass(frozen=True, slots=True)
class BindOutcome:
    """What became of a `Bind` (an event into the core, `Scheduler.bind_outcome`):
    `error` "" when the pod is bound to `node`, else why it is not (and will not be)."""

    uid: str
    node: str
    error: str = ""


@dataclass(frozen=True, slots=True)
class Bound:
    """The binding cycle succeeded: the cluster has the pod on the node. `note`: what
    the pod's device plugin will not find on it ("" when nothing; the Kubernetes driver
    adds it to the Scheduled event and logs it)."""

    pod: PodInfo
    node: str
    note: str = ""


@dataclass(frozen=True, slots=True)
class BindFailed:
    """Permit, PreBind or Bind failed after the pod was assumed; it is requeued."""

    pod: PodInfo
    node: str
    status: Status


@dataclass(frozen=True, slots=True)
class SubGroupStatus:
    """One role (sub-group) of a pod group, counted as the group is: its members (pods
    that exist and have not finished), of those bound to a node and started by their
    kubelet, and those that succeeded, against the role's own minMember."""

    name: str
    min_member: int
    members: int
    scheduled: int  # bound (placed), started or not
    running: int  # of those, started by a kubelet (pod phase Running)
    succeeded: int = 0


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """The observed state of a pod group, for its PodGroup object's status."""

    namespace: str
    name: str
    source: str  # which API the group came from ("scheduler-plugins", "volcano", ...)
    has_object: bool  # backed by a PodGroup object (else named by pod labels only)
    phase: str
    min_member: int
    scheduled: int  # members bound to a node and not finished
    running: int  # of those, members whose pod is in phase Running (started by a kubelet)
    succeeded: int
    failed: int
    reason: str = ""
    sub_groups: tuple[SubGroupStatus, ...] = ()  # per role, in declared order (if any)


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """The observed state of a tenant queue, for its Queue object's status."""

    name: str
    allocated: Mapping[str, int] = field(default_factory=dict)
    guaranteed: Mapping[str, int] = field(default_factory=dict)
    fair_share: Mapping[str, int] = field(default_factory=dict)
    pending_pods: int = 0
    running_pods: int = 0  # started by a kubelet (phase Running)
    borrowed: Mapping[str, int] = field(default_factory=dict)  # allocated above guaranteed
    pending_jobs: int = 0  # jobs: pod groups, or pods on their own
    running_jobs: int = 0
    # Open, Closing (closed, pods still placed in it), Closed, or Invalid (the object was
    # rejected and is not in force).
    state: str = "Open"
    problem: str = ""  # why the object (or its latest edit) was rejected; "" = accepted
    note: str = ""  # what the scheduler read into it (a guarantee taken from its children)
    bound_pods: int = 0  # placed (bound or being bound), started or not


@dataclass(frozen=True, slots=True)
class BindingStatus:
    """What the namespaces of a QueueBinding run, for its object's status (against its
    maxPods and maxRunningJobs)."""

    name: str
    pods: int = 0
    running_jobs: int = 0
    namespaces: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # pods, jobs


@dataclass(frozen=True, slots=True)
class BindVolumes:
    """VolumeBinding's PreBind for `pod` on `node`: bind each claim in `static` to its
    PersistentVolume (the volume's claimRef, as kube-scheduler writes it), and mark each
    claim in `provision` with the node (`volume.kubernetes.io/selected-node`) for its
    provisioner. Keys are `namespace/name` of claims. Then, as kube-scheduler's PreBind
    does, wait up to `timeout` seconds (VolumeBinding's bindTimeoutSeconds) until every
    one of those claims, and those in `provisioning` (marked for this node before), is
    bound. A port carries these out before the pod's own `Bind`, which fails if they
    did: a write refused, a claim's provisioning failed (its provisioner took the
    node's mark away), a claim or volume gone, or the time up."""

    pod: PodInfo
    node: str
    static: tuple[tuple[str, str], ...] = ()  # (claim key, volume name)
    provision: tuple[str, ...] = ()
    provisioning: tuple[str, ...] = ()
    timeout: float = 600.0


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """One ResourceClaim of a pod: `results` (request, driver, pool, device) to write as
    its `status.allocation`, restricted to `node` ("" when its devices are reachable
    from every node), or no results when the claim is already allocated. `shares`,
    parallel to `results`, gives (shareID, consumed capacity) for a share of a device
    that allows multiple allocations, None for a device allocated whole."""

    claim: str  # namespace/name
    results: tuple[tuple[str, str, str, str], ...] = ()
    node: str = ""
    shares: tuple[tuple[str, tuple[tuple[str, str], ...]] | None, ...] = ()
    # Devices of network-attached pools only: the nodes that reach them all (the
    # requirements of their slices' node selectors, in one term).
    selector: NodeSelectorTerm | None = None
    # Requests allocated for admin access (their results say `adminAccess: true`).
    admin: tuple[str, ...] = ()
    # The allocation's `devices.config`: the classes' and the claim's driver parameters
    # (`shoal.api.dra.allocation_config`), JSON as written.
    config: tuple[dict[str, Any], ...] = ()
    # The claim made for the pod's extended resources (KEP-5004): its manifest, to be
    # created before its status is written, and the pod's
    # `status.extendedResourceClaimStatus.requestMappings` to write after it.
    create: dict[str, Any] | None = None
    mappings: tuple[dict[str, str], ...] = ()
    # Parallel to `results`: the (binding, binding failure) conditions of devices that
    # have them (KEP-5007), None for others; the pod is bound once the driver reports
    # every binding condition True in the claim's `status.devices`.
    binding: tuple[tuple[tuple[str, ...], tuple[str, ...]] | None, ...] = ()

    @property
    def waits(self) -> bool:
        """Does the pod's Binding wait for the driver (binding conditions)?"""
        return any(b is not None for b in self.binding)


@dataclass(frozen=True, slots=True)
class AllocateClaims:
    """DynamicResources' PreBind for `pod` on `node`: write each claim's allocation
    (when it has results) and add the pod to its `status.reservedFor`. A port carries
    these out before the pod's own `Bind` (which fails if they did)."""

    pod: PodInfo
    node: str
    claims: tuple[ClaimAllocation, ...] = ()
    # How long the binding waits for devices' binding conditions (DynamicResourcesArgs'
    # bindingTimeout) before it fails and the claims it allocated are cleared.
    binding_timeout: float = 600.0


@dataclass(frozen=True, slots=True)
class DeallocateClaim:
    """DynamicResources' PostFilter (kube's): the claim is allocated to devices the pod
    cannot use where it would fit, and reserved for nobody else: clear its
    `status.allocation` and `reservedFor` so its devices can be chosen again. `seen` is
    the claim's resourceVersion when decided: a claim changed since is left alone."""

    pod: PodInfo
    claim: str  # namespace/name
    seen: str = ""


Effect = (
    Bind
    | Nominate
    | BindingExpected
    | Evict
    | Unschedulable
    | Bound
    | BindFailed
    | GroupStatus
    | QueueStatus
    | BindingStatus
    | BindVolumes
    | AllocateClaims
    | DeallocateClaim
)


class Effects(Protocol):
    """Where effects go: the Kubernetes API in a cluster, the in-memory cluster in the
    simulator and in tests."""

    def emit(self, effect: Effect) -> None:
        """Queue an effect; never blocks, never raises for I/O. A `Bind`'s outcome comes
        back later, as a `BindOutcome` event."""
        ...


class NullEffects:
    """Binds nothing anywhere and drops every effect (for tools that only ask what-ifs:
    a pod whose Bind is dropped stays assumed, its outcome never comes)."""

    def emit(self, effect: Effect) -> None:
        return None


_ANNOTATIONS_KEY = "shoal.framework/bind-annotations"


def annotate(state: CycleState, key: str, value: str) -> None:
    """Ask for `key: value` to be written on the pod with its binding (PreBind)."""
    found = state.get(_ANNOTATIONS_KEY)
    if not isinstance(found, dict):
        found = {}
        state.write(_ANNOTATIONS_KEY, found)
    found[key] = value


def annotations_of(state: CycleState) -> dict[str, str]:
    """The annotations PreBind plugins asked for (empty when none)."""
    found = state.get(_ANNOTATIONS_KEY)
    return dict(found) if isinstance(found, dict) else {}
