"""Pod groups (gangs) and the keys that put a pod into one.

Users arrive with the keys of the system they came from; all of them map to one
`GroupRef` (namespace, name, minimum members):

* scheduler-plugins: label `scheduling.x-k8s.io/pod-group`; minimum from the PodGroup
  object's `spec.minMember`.
* no-CRD labels: `pod-group.scheduling.sigs.k8s.io/name` and `.../min-available`.
* Volcano: annotation `scheduling.k8s.io/group-name`; minimum from the Volcano PodGroup,
  its `spec.networkTopology` HyperNode tiers to keep the gang in (`shoal.api.hypernode`).
* Koordinator: `gang.scheduling.koordinator.sh/name` and `.../min-available` (annotation
  or label).
* Kueue: label `kueue.x-k8s.io/pod-group-name`; minimum = annotation
  `kueue.x-k8s.io/pod-group-total-count` (Kueue pod groups are all-or-nothing).
* YuniKorn: annotation `yunikorn.apache.org/task-group-name` with the application id
  label; minimum = the sum of minMember in `yunikorn.apache.org/task-groups`.
* Kubernetes (v1.36, `GenericWorkload` gate): `spec.schedulingGroup.podGroupName`; the
  minimum from the `scheduling.k8s.io/v1alpha2` PodGroup's
  `spec.schedulingPolicy.gang.minCount` (a `basic` policy: pods one by one), its
  `spec.schedulingConstraints.topology[0].key` a required topology level.

Shoal's own annotations (on the pod or the PodGroup) add what the others lack:
`shoal.dev/topology-required` / `shoal.dev/topology-preferred` (a node label key, e.g. a
leaf-switch label: keep the gang inside one domain of that level, or span as few as
possible) and `shoal.dev/depends-on` (comma-separated group names, optionally
`namespace/name`, that must succeed before this group starts) and `shoal.dev/suspended:
"true"` (on the PodGroup: the gang is held and its placed members evicted until the
annotation goes; `shoal suspend` / `shoal resume`). For Spark-style jobs
whose executors are created only after the driver runs, `shoal.dev/min-executors: N`
with the group's minResources (driver + N executors) makes the scheduler check that the
driver *and* N executors of shape (minResources - driver) / N would fit on real nodes
before it places the driver.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

import msgspec

from shoal.api.objects import ObjectMeta, Pod
from shoal.api.resources import parse_resource_list

__all__ = [
    "DEPENDS_ON",
    "MIN_EXECUTORS",
    "SUB_GROUPS",
    "SUB_GROUP_LABEL",
    "SUSPENDED",
    "TOPOLOGY_PREFERRED",
    "TOPOLOGY_REQUIRED",
    "GroupRef",
    "PodGroup",
    "PodGroupCondition",
    "PodGroupSpec",
    "PodGroupStatus",
    "PodGroupSubGroupStatus",
    "UpstreamPodGroup",
    "VolcanoNetworkTopology",
    "VolcanoPodGroup",
    "group_of",
]

SCHEDULER_PLUGINS_LABEL = "scheduling.x-k8s.io/pod-group"
LIGHT_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LIGHT_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
KOORD_NAME = "gang.scheduling.koordinator.sh/name"
KOORD_MIN = "gang.scheduling.koordinator.sh/min-available"
KUEUE_NAME = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
YUNIKORN_TASK_GROUP = "yunikorn.apache.org/task-group-name"
YUNIKORN_TASK_GROUPS = "yunikorn.apache.org/task-groups"
YUNIKORN_APP_IDS = ("yunikorn.apache.org/app-id", "applicationId")
TOPOLOGY_REQUIRED = "shoal.dev/topology-required"
TOPOLOGY_PREFERRED = "shoal.dev/topology-preferred"
DEPENDS_ON = "shoal.dev/depends-on"
MIN_EXECUTORS = "shoal.dev/min-executors"
# On a PodGroup object, "true": the gang is suspended (`shoal suspend`): its pending
# members wait and its placed members are evicted, as a whole, until it is resumed.
SUSPENDED = "shoal.dev/suspended"
# On a PodGroup: the gang's roles, each with its own minimum and topology, placed all or
# nothing together: {"stage-0": {"minMember": 8, "topologyRequired": "leaf"}, ...}
# (JSON). A member names its role with the pod label SUB_GROUP_LABEL.
SUB_GROUPS = "shoal.dev/sub-groups"
SUB_GROUP_LABEL = "shoal.dev/sub-group"


class _Base(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    pass


class PodGroupSpec(_Base):
    min_member: int = 1
    min_resources: dict[str, str | int | float] = {}
    schedule_timeout_seconds: int | None = None

    def __post_init__(self) -> None:
        if self.min_member < 1:
            raise ValueError(f"minMember {self.min_member} must be at least 1")
        if self.schedule_timeout_seconds is not None and self.schedule_timeout_seconds < 1:
            raise ValueError("scheduleTimeoutSeconds must be at least 1")
        try:
            parse_resource_list(self.min_resources)
        except ValueError as err:
            raise ValueError(f"minResources.{err}") from None


class PodGroupCondition(_Base):
    """A metav1.Condition on a PodGroup (Shoal's `Scheduled`, with why a gang does not fit)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class PodGroupSubGroupStatus(_Base):
    """A role of a gang with sub-groups (`shoal.dev/sub-groups`) and its pods' counts."""

    name: str
    min_member: int = 0  # the role's own minimum
    members: int = 0  # its pods that exist and have not finished
    scheduled: int = 0  # of those, bound to a node (placed)
    running: int = 0  # of those, started by their kubelet (phase Running)
    succeeded: int = 0


class PodGroupStatus(_Base):
    # Every phase scheduler-plugins defines: objects its controller wrote must decode.
    phase: Literal[
        "",
        "Pending",
        "PreScheduling",
        "Scheduling",
        "Scheduled",
        "Running",
        "Unknown",
        "Finished",
        "Failed",
    ] = ""
    occupied_by: str = ""
    scheduled: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    schedule_start_time: str | None = None
    conditions: list[PodGroupCondition] = []
    sub_groups: list[PodGroupSubGroupStatus] = []  # written by Shoal for gangs with roles


class PodGroup(_Base):
    """scheduler-plugins `scheduling.x-k8s.io/v1alpha1` PodGroup."""

    api_version: str = "scheduling.x-k8s.io/v1alpha1"
    kind: str = "PodGroup"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodGroupSpec = msgspec.field(default_factory=PodGroupSpec)
    status: PodGroupStatus = msgspec.field(default_factory=PodGroupStatus)

    @property
    def finished(self) -> bool:
        return self.status.phase == "Finished"


class GangSchedulingPolicy(_Base):
    min_count: int

    def __post_init__(self) -> None:
        if self.min_count < 1:
            raise ValueError(f"gang.minCount {self.min_count} must be at least 1")


class SchedulingPolicy(_Base):
    """Exactly one of `basic` (pods one by one) and `gang`."""

    basic: dict[str, object] | None = None
    gang: GangSchedulingPolicy | None = None

    def __post_init__(self) -> None:
        if (self.basic is None) == (self.gang is None):
            raise ValueError("exactly one of basic and gang must be set")


class TopologyConstraint(_Base):
    key: str


class SchedulingConstraints(_Base):
    topology: list[TopologyConstraint] = []


class UpstreamPodGroupSpec(_Base):
    scheduling_policy: SchedulingPolicy
    scheduling_constraints: SchedulingConstraints | None = None
    priority: int | None = None
    priority_class_name: str = ""
    disruption_mode: str = ""
    pod_group_template_ref: dict[str, object] | None = None
    resource_claims: list[dict[str, object]] = []


class UpstreamPodGroupStatus(_Base):
    conditions: list[PodGroupCondition] = []


class UpstreamPodGroup(_Base):
    """Kubernetes' own `scheduling.k8s.io/v1alpha2` PodGroup (v1.36, GenericWorkload):
    the runtime group a workload controller makes from a Workload's podGroupTemplate."""

    api_version: str = "scheduling.k8s.io/v1alpha2"
    kind: str = "PodGroup"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: UpstreamPodGroupSpec = msgspec.field(
        default_factory=lambda: UpstreamPodGroupSpec(
            scheduling_policy=SchedulingPolicy(gang=GangSchedulingPolicy(min_count=1))
        )
    )
    status: UpstreamPodGroupStatus = msgspec.field(default_factory=UpstreamPodGroupStatus)

    @property
    def min_member(self) -> int:
        gang = self.spec.scheduling_policy.gang
        return gang.min_count if gang is not None else 1

    @property
    def topology_key(self) -> str:
        constraints = self.spec.scheduling_constraints
        return constraints.topology[0].key if constraints and constraints.topology else ""

    @property
    def finished(self) -> bool:
        return False  # its status has no phase that says the group finished


class VolcanoNetworkTopology(_Base):
    """`spec.networkTopology` of a Volcano PodGroup: `hard`, all members inside one
    HyperNode of tier <= `highestTierAllowed` (or of the tier named
    `highestTierName`); `soft`, as few HyperNodes as possible, lowest tier first, never
    blocking. Volcano's CRD defaults: mode hard, highestTierAllowed 1."""

    mode: str = "hard"
    highest_tier_allowed: int | None = None
    highest_tier_name: str = ""

    def __post_init__(self) -> None:
        if self.mode not in ("hard", "soft"):
            raise ValueError(f"networkTopology.mode {self.mode!r} must be hard or soft")
        if self.highest_tier_allowed is not None and self.highest_tier_allowed < 1:
            raise ValueError(
                f"networkTopology.highestTierAllowed {self.highest_tier_allowed} must be at least 1"
            )


class VolcanoPodGroupSpec(_Base):
    min_member: int = 1
    min_resources: dict[str, str | int | float] = {}
    queue: str = ""
    priority_class_name: str = ""
    network_topology: VolcanoNetworkTopology | None = None

    def __post_init__(self) -> None:
        if self.min_member < 0:
            raise ValueError(f"minMember {self.min_member} must not be negative")
        try:
            parse_resource_list(self.min_resources)
        except ValueError as err:
            raise ValueError(f"minResources.{err}") from None


class VolcanoPodGroupStatus(_Base):
    # Volcano's phases (Pending, Running, Unknown, Inqueue, Completed); kept as text.
    phase: str = ""


class VolcanoPodGroup(_Base):
    """Volcano `scheduling.volcano.sh/v1beta1` PodGroup, read as the same model."""

    api_version: str = "scheduling.volcano.sh/v1beta1"
    kind: str = "PodGroup"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: VolcanoPodGroupSpec = msgspec.field(default_factory=VolcanoPodGroupSpec)
    status: VolcanoPodGroupStatus = msgspec.field(default_factory=VolcanoPodGroupStatus)

    @property
    def finished(self) -> bool:
        return self.status.phase == "Completed"


@dataclass(frozen=True, slots=True)
class GroupRef:
    """Which group a pod belongs to, as read from the pod alone."""

    namespace: str
    name: str
    min_member: int | None  # None: comes from a PodGroup object
    source: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _positive_int(raw: str, what: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{what} {raw!r} is not an integer") from None
    if value < 1:
        raise ValueError(f"{what} {value} must be at least 1")
    return value


def group_of(pod: Pod) -> GroupRef | None:
    """The pod's group, from any supported key. Raises ValueError for a malformed key."""
    meta = pod.metadata
    labels, annotations = meta.labels, meta.annotations
    ns = meta.namespace or "default"

    def either(key: str) -> str | None:
        return labels.get(key) or annotations.get(key)

    group = pod.spec.scheduling_group
    if group is not None and group.pod_group_name:
        return GroupRef(ns, group.pod_group_name, None, "kubernetes")
    if name := labels.get(SCHEDULER_PLUGINS_LABEL):
        return GroupRef(ns, name, None, "scheduler-plugins")
    if name := either(LIGHT_NAME):
        raw = either(LIGHT_MIN)
        minimum = _positive_int(raw, LIGHT_MIN) if raw else None
        return GroupRef(ns, name, minimum, "pod-group labels")
    if name := either(KOORD_NAME):
        raw = either(KOORD_MIN)
        minimum = _positive_int(raw, KOORD_MIN) if raw else None
        return GroupRef(ns, name, minimum, "koordinator")
    if name := either(KUEUE_NAME):
        raw = either(KUEUE_TOTAL)
        minimum = _positive_int(raw, KUEUE_TOTAL) if raw else None
        return GroupRef(ns, name, minimum, "kueue")
    if name := annotations.get(VOLCANO_GROUP):
        return GroupRef(ns, name, None, "volcano")
    if annotations.get(YUNIKORN_TASK_GROUP):
        app = next((either(k) for k in YUNIKORN_APP_IDS if either(k)), None)
        if app is None:
            raise ValueError(f"{YUNIKORN_TASK_GROUP} needs an application id label")
        minimum = None
        raw_groups = annotations.get(YUNIKORN_TASK_GROUPS)
        if raw_groups:
            try:
                groups = json.loads(raw_groups)
                minimum = sum(int(g.get("minMember", 0)) for g in groups) or None
            except (ValueError, TypeError, AttributeError):
                raise ValueError(
                    f"{YUNIKORN_TASK_GROUPS} is not a JSON list of task groups"
                ) from None
        return GroupRef(ns, app, minimum, "yunikorn")
    return None
