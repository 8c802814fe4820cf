"""Kubernetes v1 objects the scheduler reads, decoded from ordinary manifests.

Only the fields that scheduling depends on are declared; unknown fields are ignored, as
the API server's clients do. Types and enumerations are checked while decoding, so a bad
manifest fails with the JSON path of the bad field (see `shoal.api.manifests`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Protocol

import msgspec

from shoal.api.resources import parse_resource_list

__all__ = [
    "AWSElasticBlockStoreVolumeSource",
    "Affinity",
    "Container",
    "ContainerExtendedResourceRequest",
    "ContainerImage",
    "ContainerPort",
    "ContainerRestartRule",
    "ContainerStatus",
    "GCEPersistentDiskVolumeSource",
    "ISCSIVolumeSource",
    "LabelSelector",
    "LabelSelectorRequirement",
    "Node",
    "NodeAffinity",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeSpec",
    "NodeStatus",
    "ObjectMeta",
    "OwnerReference",
    "Pod",
    "PodAffinity",
    "PodAffinityTerm",
    "PodAntiAffinity",
    "PodExtendedResourceClaimStatus",
    "PodSpec",
    "PodStatus",
    "PreferredSchedulingTerm",
    "PriorityClass",
    "RBDVolumeSource",
    "ResourceRequirements",
    "StatusResources",
    "Taint",
    "TaintEffect",
    "Toleration",
    "TopologySpreadConstraint",
    "Volume",
    "WeightedPodAffinityTerm",
]

Quantity = str | int | float
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
NodeSelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
LabelSelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]


class _Base(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    pass


class OwnerReference(_Base):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


# RFC 1123 subdomain: what the API server allows as the name of most objects (and as a
# pod's schedulerName); namespaces are RFC 1123 labels (no dots, at most 63).
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def dns_name_problem(value: str, label: bool = False) -> str:
    """Why the API server would refuse `value` as a name ("" when it would not)."""
    limit, pattern = (63, _DNS_LABEL) if label else (253, _DNS_SUBDOMAIN)
    if len(value) > limit:
        return f"{value!r} is longer than {limit} characters"
    if not pattern.fullmatch(value):
        what = "label" if label else "subdomain"
        return (
            f"{value!r} is not a valid name (RFC 1123 {what}: lowercase letters, digits and "
            f"'-'{'' if label else ', dots between parts'}; the API server refuses it)"
        )
    return ""


class ObjectMeta(_Base):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    creation_timestamp: str | None = None
    resource_version: str = ""
    owner_references: list[OwnerReference] = []
    deletion_timestamp: str | None = None

    def __post_init__(self) -> None:
        if self.namespace and (why := dns_name_problem(self.namespace, label=True)):
            raise ValueError(f"namespace: {why}")

    def name_problem(self) -> str:
        """For kinds the API server names by RFC 1123 (pods, nodes, PriorityClasses; not
        custom resources, whose names it takes more freely): why it would refuse this
        name ("" when it would not, or when there is none yet: whoever needs the name
        reports its absence). No unicode, zero-width or right-to-left characters.
        Checked where files come in (the simulator's inputs); objects from an API
        server were checked by it."""
        return dns_name_problem(self.name) if self.name else ""


# ---- selectors ---------------------------------------------------------------------


class NodeSelectorRequirement(_Base):
    key: str
    operator: NodeSelectorOperator
    values: list[str] = []

    def __post_init__(self) -> None:
        _check_requirement(self.operator, self.values)
        if self.operator in ("Gt", "Lt"):
            if len(self.values) != 1:
                raise ValueError(f"operator {self.operator} needs exactly one value")
            try:
                int(self.values[0])
            except ValueError:
                raise ValueError(
                    f"operator {self.operator} needs an integer value, got {self.values[0]!r}"
                ) from None


class NodeSelectorTerm(_Base):
    match_expressions: list[NodeSelectorRequirement] = []
    match_fields: list[NodeSelectorRequirement] = []


class NodeSelector(_Base):
    node_selector_terms: list[NodeSelectorTerm]


class PreferredSchedulingTerm(_Base):
    weight: int
    preference: NodeSelectorTerm

    def __post_init__(self) -> None:
        if not 1 <= self.weight <= 100:
            raise ValueError(f"weight {self.weight} must be in 1..100")


class NodeAffinity(_Base):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = []


class LabelSelectorRequirement(_Base):
    key: str
    operator: LabelSelectorOperator
    values: list[str] = []

    def __post_init__(self) -> None:
        _check_requirement(self.operator, self.values)


class LabelSelector(_Base):
    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirement] = []


class PodAffinityTerm(_Base):
    topology_key: str
    label_selector: LabelSelector | None = None
    namespaces: list[str] = []
    namespace_selector: LabelSelector | None = None
    match_label_keys: list[str] = []
    mismatch_label_keys: list[str] = []

    def __post_init__(self) -> None:
        if not self.topology_key:
            raise ValueError("topologyKey must not be empty")


class WeightedPodAffinityTerm(_Base):
    weight: int
    pod_affinity_term: PodAffinityTerm

    def __post_init__(self) -> None:
        if not 1 <= self.weight <= 100:
            raise ValueError(f"weight {self.weight} must be in 1..100")


class PodAffinity(_Base):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = []
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = []


class PodAntiAffinity(_Base):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = []
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = []


class Affinity(_Base):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAntiAffinity | None = None


# ---- taints ------------------------------------------------------------------------


class TaintLike(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def effect(self) -> str: ...


class TolerationLike(TaintLike, Protocol):
    @property
    def operator(self) -> str: ...


def tolerates(toleration: TolerationLike, taint: TaintLike) -> bool:
    """kube's ToleratesTaint, for a node's taints (core/v1) and a device's (resource/v1)
    alike: an empty effect or key matches any; Exists ignores the value, Equal (or no
    operator) compares it."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.operator in ("", "Equal") and toleration.value == taint.value


class Taint(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True, frozen=True):
    key: str
    effect: TaintEffect
    value: str = ""

    def __str__(self) -> str:
        # As `kubectl taint` writes it: key=value:Effect (key:Effect without a value).
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


class Toleration(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True, frozen=True):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""
    toleration_seconds: int | None = None

    def __post_init__(self) -> None:
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if not self.key and self.operator != "Exists":
            raise ValueError("operator must be Exists when key is empty")

    def tolerates(self, taint: Taint) -> bool:
        """v1 Toleration.ToleratesTaint."""
        return tolerates(self, taint)


# ---- pods --------------------------------------------------------------------------


class ResourceRequirements(_Base):
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}

    def __post_init__(self) -> None:
        parsed = []
        for field, raw in (("requests", self.requests), ("limits", self.limits)):
            try:
                parsed.append(parse_resource_list(raw))
            except ValueError as err:
                raise ValueError(f"{field}.{err}") from None
        requests, limits = parsed
        for name, limit in limits.items():
            if requests.get(name, 0) > limit:
                # The API server's validation: a request above its limit is refused.
                raise ValueError(
                    f"requests.{name}: {self.requests[name]!r} is more than the limit "
                    f"{self.limits[name]!r} (the API server refuses it)"
                )


class ContainerPort(_Base):
    container_port: int
    host_port: int = 0
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    host_ip: str = msgspec.field(default="", name="hostIP")
    name: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.host_port <= 65535:
            raise ValueError(f"hostPort {self.host_port} must be in 0..65535")


class ContainerRestartRule(_Base):
    """`restartPolicyRules[]` of a container (ContainerRestartRules): only the action
    matters to scheduling (RestartAllContainers needs a node that declares it)."""

    action: str = ""


class Container(_Base):
    name: str = ""
    image: str = ""
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    ports: list[ContainerPort] = []
    # Always on an init container: a sidecar. A regular container may say any of the
    # three since ContainerRestartRules (beta in 1.34).
    restart_policy: Literal["Always", "OnFailure", "Never"] | None = None
    restart_policy_rules: tuple[ContainerRestartRule, ...] = ()


class TopologySpreadConstraint(_Base):
    max_skew: int
    topology_key: str
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: Literal["Honor", "Ignore"] = "Honor"
    node_taints_policy: Literal["Honor", "Ignore"] = "Ignore"
    match_label_keys: list[str] = []

    def __post_init__(self) -> None:
        if self.max_skew < 1:
            raise ValueError(f"maxSkew {self.max_skew} must be at least 1")
        if self.min_domains is not None:
            if self.min_domains < 1:
                raise ValueError(f"minDomains {self.min_domains} must be at least 1")
            if self.when_unsatisfiable != "DoNotSchedule":
                raise ValueError("minDomains needs whenUnsatisfiable: DoNotSchedule")
        if not self.topology_key:
            raise ValueError("topologyKey must not be empty")


class PersistentVolumeClaimVolumeSource(_Base):
    claim_name: str
    read_only: bool = False


class EphemeralVolumeSource(_Base):
    volume_claim_template: dict[str, Any] | None = None


class CSIVolumeSource(_Base):
    driver: str


_Source = dict[str, Any] | None


# The inline disks kube-scheduler's VolumeRestrictions compares between pods on a node
# (the fields it reads; the API server requires the identifying ones).
class GCEPersistentDiskVolumeSource(_Base):
    pd_name: str
    read_only: bool = False


class AWSElasticBlockStoreVolumeSource(_Base):
    volume_id: str = msgspec.field(name="volumeID")
    read_only: bool = False


class ISCSIVolumeSource(_Base):
    iqn: str
    read_only: bool = False


class RBDVolumeSource(_Base):
    monitors: list[str]
    image: str
    pool: str = "rbd"  # the API server's default
    read_only: bool = False


class Volume(_Base):
    """A pod volume. Sources the scheduler acts on are typed; the others are kept as
    mappings, only so that which source a volume uses is known (see
    `shoal.api.volumes.unsupported_volumes`)."""

    name: str
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    ephemeral: EphemeralVolumeSource | None = None
    csi: CSIVolumeSource | None = None
    host_path: _Source = None
    empty_dir: _Source = None
    secret: _Source = None
    config_map: _Source = None
    downward_api: _Source = msgspec.field(default=None, name="downwardAPI")
    projected: _Source = None
    image: _Source = None
    git_repo: _Source = None
    nfs: _Source = None
    cephfs: _Source = None
    glusterfs: _Source = None
    fc: _Source = None
    azure_file: _Source = None
    flex_volume: _Source = None
    quobyte: _Source = None
    flocker: _Source = None
    iscsi: ISCSIVolumeSource | None = None
    rbd: RBDVolumeSource | None = None
    gce_persistent_disk: GCEPersistentDiskVolumeSource | None = None
    aws_elastic_block_store: AWSElasticBlockStoreVolumeSource | None = None
    azure_disk: _Source = None
    cinder: _Source = None
    vsphere_volume: _Source = None
    photon_persistent_disk: _Source = None
    portworx_volume: _Source = None
    scale_io: _Source = msgspec.field(default=None, name="scaleIO")
    storageos: _Source = None


# Pod priority is an int32 in the API; PriorityClass values above 1e9 are reserved for
# the built-in system- classes (kube's HighestUserDefinablePriority).
Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
HIGHEST_USER_PRIORITY = 1_000_000_000


class PodResourceClaim(_Base):
    """`spec.resourceClaims[]` (Dynamic Resource Allocation): the claim by name, or the
    template the resource-claim controller creates the pod's claim from (see
    `shoal.api.dra.pod_claim_names`)."""

    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PodSchedulingGroup(_Base):
    """`spec.schedulingGroup` (Kubernetes v1.36, GenericWorkload): the upstream
    `scheduling.k8s.io/v1alpha2` PodGroup the pod belongs to."""

    pod_group_name: str = ""


class PodSpec(_Base):
    containers: list[Container] = []
    init_containers: list[Container] = []
    overhead: dict[str, Quantity] = {}
    # Pod-level requests and limits (KEP-2837, PodLevelResources: beta and on by
    # default since Kubernetes 1.34): cpu, memory and hugepages-* for the whole pod.
    resources: ResourceRequirements | None = None
    node_name: str = ""
    host_network: bool = False
    host_users: bool | None = None  # False: a user namespace of its own
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    tolerations: list[Toleration] = []
    scheduler_name: str = "default-scheduler"
    priority: Int32 | None = None
    priority_class_name: str = ""
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    topology_spread_constraints: list[TopologySpreadConstraint] = []
    scheduling_gates: list[dict[str, str]] = []
    volumes: list[Volume] = []
    scheduling_group: PodSchedulingGroup | None = None
    resource_claims: list[PodResourceClaim] = []

    def __post_init__(self) -> None:
        try:
            parse_resource_list(self.overhead)
        except ValueError as err:
            raise ValueError(f"overhead.{err}") from None
        if self.resources is not None:
            for field, names in (
                ("requests", self.resources.requests),
                ("limits", self.resources.limits),
            ):
                for name in names:
                    if name not in ("cpu", "memory") and not name.startswith("hugepages-"):
                        # The API server's validation of pod-level resources.
                        raise ValueError(
                            f"resources.{field}.{name}: pod-level resources may only be cpu, "
                            "memory or hugepages-<size>; ask for it in the containers' "
                            "resources instead"
                        )


class PodCondition(_Base):
    type: str
    status: str
    reason: str = ""
    message: str = ""


class PodResourceClaimStatus(_Base):
    """`status.resourceClaimStatuses[]`: the claim created for a template entry."""

    name: str = ""
    resource_claim_name: str | None = None


class ContainerExtendedResourceRequest(_Base):
    """Which request of the extended-resource claim serves which container's resource."""

    container_name: str = ""
    resource_name: str = ""
    request_name: str = ""


class PodExtendedResourceClaimStatus(_Base):
    """`status.extendedResourceClaimStatus`: the ResourceClaim the scheduler created for
    the pod's extended resources backed by Dynamic Resource Allocation (KEP-5004)."""

    request_mappings: list[ContainerExtendedResourceRequest] = []
    resource_claim_name: str = ""


class StatusResources(_Base):
    """Resources as the kubelet reports them in a status (not validated as a spec is:
    what a node reports is read, never refused; see `shoal.api.podinfo`)."""

    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}


class ContainerStatus(_Base):
    """The part of `status.containerStatuses[]` the scheduler reads: the resources the
    kubelet allocated to the container and those it actuated (in-place pod resize,
    InPlacePodVerticalScaling, GA in Kubernetes 1.35)."""

    name: str = ""
    allocated_resources: dict[str, Quantity] = {}
    resources: StatusResources | None = None


class PodStatus(_Base):
    phase: str = ""
    nominated_node_name: str = ""
    conditions: list[PodCondition] = []
    # Tuples: most pods have none (pending ones) and an empty tuple is shared, where
    # an empty list per copy of every pod would be allocated and tracked by the GC.
    container_statuses: tuple[ContainerStatus, ...] = ()
    init_container_statuses: tuple[ContainerStatus, ...] = ()
    # Pod-level in-place resize (InPlacePodLevelResourcesVerticalScaling, beta in 1.36):
    # what the kubelet allocated to the pod and actuated in its cgroup (None: not
    # reported, as for nearly every pending pod; see `shoal.api.podinfo.pod_requests`).
    resources: StatusResources | None = None
    allocated_resources: dict[str, Quantity] | None = None
    resource_claim_statuses: list[PodResourceClaimStatus] = []
    extended_resource_claim_status: PodExtendedResourceClaimStatus | None = None


class Pod(_Base):
    api_version: str = "v1"
    kind: str = "Pod"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


# ---- nodes -------------------------------------------------------------------------


class NodeSpec(_Base):
    unschedulable: bool = False
    taints: list[Taint] = []


class ContainerImage(_Base, weakref=True):
    """One image a node holds (`status.images`, written by the kubelet). Weakly
    referable: the cache shares one object per distinct entry among the nodes listing
    it (`shoal.cache.images`)."""

    names: list[str] = []
    size_bytes: int = 0

    def __post_init__(self) -> None:
        if self.size_bytes < 0:
            raise ValueError(
                f"sizeBytes {self.size_bytes} of image {self.names[:1]} must not be negative"
            )


class NodeStatus(_Base):
    capacity: dict[str, Quantity] = {}
    allocatable: dict[str, Quantity] = {}
    images: list[ContainerImage] = []
    # The features the node's kubelet declares (NodeDeclaredFeatures, beta in 1.36).
    declared_features: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for field, raw in (("capacity", self.capacity), ("allocatable", self.allocatable)):
            try:
                parse_resource_list(raw)
            except ValueError as err:
                raise ValueError(f"{field}.{err}") from None


class Node(_Base):
    api_version: str = "v1"
    kind: str = "Node"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class PriorityClass(_Base):
    api_version: str = "scheduling.k8s.io/v1"
    kind: str = "PriorityClass"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    value: Int32 = 0
    global_default: bool = False
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"

    def __post_init__(self) -> None:
        if self.value > HIGHEST_USER_PRIORITY and not self.metadata.name.startswith("system-"):
            raise ValueError(
                f"value: {self.value} is above {HIGHEST_USER_PRIORITY}, which only the "
                "built-in system- classes may use (the API server refuses it)"
            )


def _check_requirement(operator: str, values: list[str]) -> None:
    if operator in ("In", "NotIn") and not values:
        raise ValueError(f"operator {operator} needs at least one value")
    if operator in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"operator {operator} takes no values")
