"""GangManager: which pods form which group, and what state each group is in.

The manager owns gang bookkeeping only; the all-or-nothing placement itself is done by
the scheduler's gang cycle (`shoal.scheduler.gang_cycle`), and the Coscheduling plugin
(`shoal.plugins.coscheduling`) is a thin adapter that asks the manager for admission
and the head-of-line reservation (like scheduler-plugins' coscheduling plugin over its
PodGroupManager). Only pods whose profile enables Coscheduling join groups; the group's
settings (`GangConfig`) come from that plugin's args.

Phases: Pending (fewer than minMember pods exist, or a dependency has not succeeded),
Scheduling (tried, fewer than minMember bound), Running (>= minMember bound),
Finished (every member succeeded), Failed (a member failed, or the group did not reach
minMember within scheduleTimeoutSeconds; it keeps being retried and leaves Failed when
it is placed).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from shoal.api.hypernode import (
    KUEUE_PREFERRED,
    KUEUE_REQUIRED,
    KUEUE_UNCONSTRAINED,
    KueueTopology,
    kueue_topology,
)
from shoal.api.objects import Pod
from shoal.api.podgroup import (
    DEPENDS_ON,
    MIN_EXECUTORS,
    SUB_GROUP_LABEL,
    SUB_GROUPS,
    SUSPENDED,
    TOPOLOGY_PREFERRED,
    TOPOLOGY_REQUIRED,
    GroupRef,
    PodGroup,
    UpstreamPodGroup,
    VolcanoNetworkTopology,
    VolcanoPodGroup,
    group_of,
)
from shoal.api.podinfo import PodInfo
from shoal.api.resources import ResourceList, parse_resource_list
from shoal.cache.hypernodes import HyperNodeTopology
from shoal.cache.kueue_topologies import KueueTopologies
from shoal.framework.effects import SubGroupStatus
from shoal.framework.handle import Handle
from shoal.gang.topology import Levels, volcano_levels

__all__ = [
    "DEFAULT_SCHEDULE_TIMEOUT",
    "GangConfig",
    "GangManager",
    "Group",
    "Reservation",
    "SubGroup",
    "parse_sub_groups",
    "sub_group_of",
    "sub_groups_problem",
]

DEFAULT_SCHEDULE_TIMEOUT = 60.0  # scheduler-plugins' default scheduleTimeoutSeconds
SERVICE_KEY = "shoal.gangs"


@dataclass(frozen=True)
class GangConfig:
    """A profile's gang settings (the Coscheduling plugin's args)."""

    schedule_timeout: float = DEFAULT_SCHEDULE_TIMEOUT  # for groups that set none
    head_of_line_reservation: bool = True
    reservation_after: float = 120.0
    reservation_max: float = 300.0


DEFAULT_CONFIG = GangConfig()


@dataclass(frozen=True)
class Reservation:
    """A head-of-line reservation: `group` holds `nodes` (by name, so that rows moving
    when nodes come and go do not matter) until `until`. `serial` tells reservations
    apart (plugins cache masks per serial)."""

    group: str
    until: float
    nodes: frozenset[str]
    serial: int


@dataclass(frozen=True)
class SubGroup:
    """A role of a gang (launcher, workers, a pipeline stage): its own minimum and
    topology, placed together with the rest of the gang, all or nothing."""

    name: str
    min_member: int = 1
    topology_required: str = ""
    topology_preferred: tuple[str, ...] = ()


def parse_sub_groups(raw: str) -> tuple[dict[str, SubGroup], str]:
    """The `shoal.dev/sub-groups` annotation -> (sub-groups by name, in order; problem).
    A malformed value yields no sub-groups and a problem naming the fix."""
    try:
        doc = json.loads(raw)
    except ValueError as err:
        return {}, f"annotation {SUB_GROUPS} is not JSON ({err}); ignored"
    except RecursionError:
        return {}, f"annotation {SUB_GROUPS} is nested too deeply to read; ignored"
    if not isinstance(doc, dict):
        return {}, f'annotation {SUB_GROUPS} must map names to {{"minMember": N, ...}}; ignored'
    out: dict[str, SubGroup] = {}
    for name, spec in doc.items():
        if not isinstance(spec, dict):
            return {}, f"annotation {SUB_GROUPS}: {name!r} must be an object; ignored"
        minimum = spec.get("minMember", 1)
        if not isinstance(minimum, int) or isinstance(minimum, bool) or minimum < 0:
            return {}, f"annotation {SUB_GROUPS}: {name}.minMember must be an integer >= 0"
        required = spec.get("topologyRequired", "")
        preferred = spec.get("topologyPreferred", "")
        if not isinstance(required, str) or not isinstance(preferred, str):
            return {}, (
                f"annotation {SUB_GROUPS}: {name}.topologyRequired/topologyPreferred must be "
                "node label keys (strings)"
            )
        out[str(name)] = SubGroup(
            str(name),
            minimum,
            required.strip(),
            tuple(k for k in (p.strip() for p in preferred.split(",")) if k and k != required),
        )
    return out, ""


def sub_groups_problem(annotations: Mapping[str, str]) -> str:
    """What is wrong with a PodGroup's `shoal.dev/sub-groups` annotation, with the fix
    ("" when it is absent or fine): the Kubernetes driver and the simulator skip and
    report such a PodGroup, as any invalid object, rather than run it without roles."""
    raw = annotations.get(SUB_GROUPS)
    if not raw:
        return ""
    _, problem = parse_sub_groups(raw)
    if not problem:
        return ""
    return f"{problem.removesuffix('; ignored')}: fix the annotation or remove it"


def sub_group_of(pod: PodInfo) -> str:
    return pod.pod.metadata.labels.get(SUB_GROUP_LABEL, "")


@dataclass(eq=False)
class Group:
    key: str
    namespace: str
    name: str
    min_member: int = 1
    min_resources: ResourceList = field(default_factory=dict)
    schedule_timeout: float | None = None  # from the PodGroup object; None: the profile's
    config: GangConfig = DEFAULT_CONFIG  # from the Coscheduling args of the members' profile
    # Topology levels (node label keys): the gang must sit in one domain of the
    # required level, and preferably in one domain of the lowest preferred level, else
    # of the next one up, else in few domains of the highest (lowest level first).
    topology_required: str = ""
    topology_preferred: tuple[str, ...] = ()
    # A Volcano PodGroup's spec.networkTopology (HyperNode tiers; before the above).
    network_topology: VolcanoNetworkTopology | None = None
    # Kueue's topology annotations of the members that have them (by uid), and how many
    # members ask each: the gang's levels when it has none of the above; members that
    # disagree keep it out of the queue (`kueue_conflict`).
    kueue: dict[str, KueueTopology] = field(default_factory=dict)
    kueue_votes: Counter[KueueTopology] = field(default_factory=Counter)
    _kueue_said: tuple[int, str] = (-1, "")  # (members' answers changed, message)
    _kueue_changes: int = 0
    depends_on: tuple[str, ...] = ()
    suspended: bool = False  # its PodGroup says shoal.dev/suspended: "true"
    sub_groups: dict[str, SubGroup] = field(default_factory=dict)  # roles, in order
    # With sub-groups only: members (not finished) and succeeded members per role label,
    # kept as members come and go (`GangManager`), so admission need not count them.
    role_members: Counter[str] = field(default_factory=Counter)
    role_succeeded: Counter[str] = field(default_factory=Counter)
    min_executors: int = 0  # Spark driver-first: executors that must fit with the driver
    # A Kubernetes PodGroup's spec.disruptionMode (KEP-5832): "Pod", its running members
    # are preempted one by one like any pods; "PodGroup", all of them together. ""
    # (the other APIs): one by one while minMember stay running, else together.
    disruption_mode: str = ""
    source: str = ""
    has_object: bool = False  # backed by a PodGroup object
    finished_in_cluster: bool = False  # its object's status says it finished
    created: float = 0.0
    members: dict[str, PodInfo] = field(default_factory=dict)
    bound: set[str] = field(default_factory=set)
    succeeded: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    phase: str = "Pending"
    reason: str = ""
    # Why the gang could not start even if nothing else ran ("" if it might): set when
    # it would take the head-of-line reservation (shoal.gang.reservation), which it
    # then does not; said with every failed attempt.
    impossible: str = ""
    attempts: int = 0
    first_failure: float | None = None
    priority: int = 0

    @property
    def waiting_for_object(self) -> bool:
        return self.source in ("scheduler-plugins", "volcano", "kubernetes") and not self.has_object

    @property
    def timeout(self) -> float:
        """scheduleTimeoutSeconds: the group's own, else its profile's default."""
        if self.schedule_timeout is not None:
            return self.schedule_timeout
        return self.config.schedule_timeout

    def placed(self) -> int:
        return len(self.bound)

    def levels(
        self, hypernodes: HyperNodeTopology, kueue_topologies: KueueTopologies | None = None
    ) -> Levels:
        """The gang's topology levels, from the first source that gives any: its Volcano
        PodGroup's networkTopology (over the HyperNode tiers there are now), then its
        own levels (`shoal.dev/topology-*`, a Kubernetes PodGroup's topology key), then
        its members' Kueue annotations (when they agree): a preferred level, then each
        coarser level a Kueue Topology lists above it (as Kueue's TAS tries them)."""
        if self.network_topology is not None:
            return volcano_levels(self.network_topology, hypernodes)
        if self.topology_required or self.topology_preferred:
            return Levels(self.topology_required, self.topology_preferred)
        if len(self.kueue_votes) == 1:
            asked = next(iter(self.kueue_votes))
            if not asked.preferred or asked.preferred == asked.required:
                return Levels(asked.required)
            climb = () if kueue_topologies is None else kueue_topologies.coarser(asked.preferred)
            preferred = [asked.preferred]
            for level in climb:
                if level == asked.required:  # a required level is never left
                    break
                preferred.append(level)
            return Levels(asked.required, tuple(preferred))
        return Levels()

    def kueue_conflict(self) -> str:
        """Why the members' Kueue topology annotations cannot apply ("" when they
        agree, or the gang's levels come from elsewhere): one pod per answer."""
        if (
            len(self.kueue_votes) <= 1
            or self.network_topology is not None
            or self.topology_required
            or self.topology_preferred
        ):
            return ""
        if self._kueue_said[0] == self._kueue_changes:
            return self._kueue_said[1]
        first: dict[KueueTopology, str] = {}
        for uid, asked in self.kueue.items():
            member = self.members.get(uid)
            if member is not None and (asked not in first or member.key < first[asked]):
                first[asked] = member.key
        said = "; ".join(
            f"pod {pod} asks {asked.describe()}"
            for asked, pod in sorted(first.items(), key=lambda item: item[1])
        )
        message = (
            f"gang {self.key}: its members ask for different topologies ({KUEUE_REQUIRED}, "
            f"{KUEUE_PREFERRED}, {KUEUE_UNCONSTRAINED}): {said}; a gang is placed as one, "
            "so give all its pods the same annotations"
        )
        self._kueue_said = (self._kueue_changes, message)
        return message

    def _kueue_joined(self, pod: PodInfo) -> None:
        asked = kueue_topology(pod.pod.metadata.annotations)
        before = self.kueue.get(pod.uid)
        if asked == before:
            return
        self._kueue_changes += 1
        if before is not None:
            self._kueue_left(pod.uid)
        if asked is not None:
            self.kueue[pod.uid] = asked
            self.kueue_votes[asked] += 1

    def _kueue_left(self, uid: str) -> None:
        before = self.kueue.pop(uid, None)
        if before is not None:
            self._kueue_changes += 1
            self.kueue_votes[before] -= 1
            if self.kueue_votes[before] <= 0:
                del self.kueue_votes[before]

    def needed(self) -> int:
        """Members still to place before the group counts as running."""
        return max(0, self.min_member - len(self.bound) - len(self.succeeded))

    def sub_group_needed(self, name: str) -> int:
        """Members of sub-group `name` still to place before it reaches its minimum
        (placed and succeeded members of the role count, as for the gang's own)."""
        sub = self.sub_groups.get(name)
        if sub is None:
            return 0
        have = sum(
            1
            for uid in self.bound
            if (m := self.members.get(uid)) is not None and sub_group_of(m) == name
        )
        return max(0, sub.min_member - have - self.role_succeeded[name])

    def _count_roles(self) -> None:
        """Recount `role_members` (after the sub-groups were declared or changed)."""
        self.role_members = (
            Counter(sub_group_of(m) for m in self.members.values())
            if self.sub_groups
            else Counter()
        )

    def _role_joined(self, pod: PodInfo, before: PodInfo | None) -> None:
        if self.sub_groups:
            if before is not None:
                self.role_members[sub_group_of(before)] -= 1
            self.role_members[sub_group_of(pod)] += 1

    def _role_left(self, pod: PodInfo | None, succeeded: bool = False) -> None:
        if pod is not None and self.sub_groups:
            role = sub_group_of(pod)
            self.role_members[role] -= 1
            if succeeded:
                self.role_succeeded[role] += 1

    def short_sub_group(self) -> tuple[str, int, int] | None:
        """The first role (in declared order) with fewer members than its minimum, as
        (name, members that exist incl. succeeded ones, minMember); None if none is."""
        for name, sub in self.sub_groups.items():
            exist = self.role_members[name] + self.role_succeeded[name]
            if exist < sub.min_member:
                return name, exist, sub.min_member
        return None


class GangManager:
    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self._group_of_uid: dict[str, str] = {}
        # Pods that name a group but are not placed with it (another scheduler's, or of a
        # profile without Coscheduling): group key -> uid -> "ns/name (why)".
        self._outsiders: dict[str, dict[str, str]] = {}
        self._outsider_of: dict[str, str] = {}
        # The profiles whose pods join groups, with their settings: registered by the
        # profile's gang plugin (Coscheduling) when the profile is built.
        self._profiles: dict[str, GangConfig] = {}
        # Head-of-line reservation (policy in shoal.gang.reservation).
        self.reservation: Reservation | None = None
        self.no_block_until: dict[str, float] = {}  # group -> may not reserve before
        # Groups whose last attempt failed, oldest first failure first (dict order).
        self.failing: dict[str, float] = {}
        self.released = False  # a reservation ended: held pods are worth retrying
        self.dirty: set[str] = set()  # groups whose observable state may have changed
        # When a reservation may next start (None: none can): recomputed only after
        # `failing`, cooldowns or group settings change (`reservation_changed`).
        self.reservation_due: float | None = None
        self.reservation_stale = False
        self._serial = 0

    @property
    def blocking(self) -> str | None:
        """The group holding the head-of-line reservation, if any."""
        return self.reservation.group if self.reservation is not None else None

    def reservation_changed(self) -> None:
        self.reservation_stale = True

    @classmethod
    def of(cls, handle: Handle) -> GangManager:
        """The scheduler's shared manager (created on first use)."""
        manager = handle.services.get(SERVICE_KEY)
        if manager is None:
            manager = handle.services[SERVICE_KEY] = cls()
        assert isinstance(manager, GangManager)
        return manager

    def register_profile(self, profile_name: str, config: GangConfig) -> None:
        """The pods of this profile join groups, with these settings."""
        self._profiles[profile_name] = config

    def profile_config(self, profile_name: str) -> GangConfig | None:
        """The gang settings of a profile whose pods join groups (None: its group keys
        are plain labels)."""
        return self._profiles.get(profile_name)

    # ---- objects -------------------------------------------------------------------

    def _group(self, namespace: str, name: str, now: float) -> Group:
        key = f"{namespace}/{name}"
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group(key, namespace, name, created=now)
        return group

    def add_pod_group(
        self, obj: PodGroup | VolcanoPodGroup | UpstreamPodGroup, now: float
    ) -> Group:
        meta = obj.metadata
        group = self._group(meta.namespace or "default", meta.name, now)
        group.has_object = True
        group.source = (
            "volcano"
            if isinstance(obj, VolcanoPodGroup)
            else "kubernetes"
            if isinstance(obj, UpstreamPodGroup)
            else "scheduler-plugins"
        )
        self.dirty.add(group.key)
        if isinstance(obj, UpstreamPodGroup):
            group.min_member = obj.min_member
            group.min_resources = {}
            group.disruption_mode = obj.spec.disruption_mode or "Pod"  # the API's default
        else:
            group.disruption_mode = ""
            group.min_member = max(1, obj.spec.min_member)
            group.min_resources = parse_resource_list(obj.spec.min_resources)
        if isinstance(obj, PodGroup) and obj.spec.schedule_timeout_seconds:
            group.schedule_timeout = float(obj.spec.schedule_timeout_seconds)
        else:
            group.schedule_timeout = None
        # A group the cluster says has finished (its status, written by Shoal or by
        # another scheduler before a restart or failover) stays finished when its
        # succeeded pods are gone from the informer: groups depending on it may start.
        group.finished_in_cluster = obj.finished
        group.network_topology = (
            obj.spec.network_topology if isinstance(obj, VolcanoPodGroup) else None
        )
        self._read_shoal_annotations(group, meta.annotations)
        if group.disruption_mode not in ("", "Pod", "PodGroup"):
            group.reason = (
                f"spec.disruptionMode {group.disruption_mode!r} is neither Pod nor PodGroup: "
                "its members are preempted together, as PodGroup says"
            )
            group.disruption_mode = "PodGroup"
        if isinstance(obj, UpstreamPodGroup) and obj.topology_key:
            # schedulingConstraints.topology: all members within one domain of the key.
            group.topology_required = obj.topology_key
            group.topology_preferred = tuple(
                k for k in group.topology_preferred if k != group.topology_required
            )
        self._update_phase(group)
        return group

    def delete_pod_group(self, namespace: str, name: str) -> None:
        group = self.groups.get(f"{namespace}/{name}")
        if group is not None:
            group.has_object = False

    def _read_shoal_annotations(self, group: Group, annotations: dict[str, str]) -> None:
        group.topology_required = annotations.get(TOPOLOGY_REQUIRED, "").strip()
        group.topology_preferred = tuple(
            key
            for key in dict.fromkeys(
                part.strip() for part in annotations.get(TOPOLOGY_PREFERRED, "").split(",")
            )
            if key and key != group.topology_required
        )
        if raw := annotations.get(MIN_EXECUTORS):
            try:
                group.min_executors = max(0, int(raw))
            except ValueError:
                group.reason = f"annotation {MIN_EXECUTORS}={raw!r} is not an integer; ignored"
        group.suspended = annotations.get(SUSPENDED, "").strip().lower() == "true"
        before = group.sub_groups
        group.sub_groups = {}
        if raw := annotations.get(SUB_GROUPS):
            group.sub_groups, problem = parse_sub_groups(raw)
            if problem:
                group.reason = problem
        if group.sub_groups != before:
            group._count_roles()
        if raw := annotations.get(DEPENDS_ON):
            group.depends_on = tuple(
                d if "/" in d else f"{group.namespace}/{d}"
                for d in (part.strip() for part in raw.split(","))
                if d
            )

    # ---- members -------------------------------------------------------------------

    @staticmethod
    def ref(pod: Pod) -> GroupRef | None:
        """The pod's group reference; ValueError names the malformed key."""
        return group_of(pod)

    def member_added(
        self, pod: PodInfo, ref: GroupRef, now: float, config: GangConfig = DEFAULT_CONFIG
    ) -> Group:
        """`pod` joins its group; `config` is its profile's gang settings (the group
        keeps the settings of the profile of its first member)."""
        group = self._group(ref.namespace, ref.name, now)
        if not group.members and group.config is not config:
            group.config = config
            self.reservation_changed()
        if ref.min_member is not None and not group.has_object:
            group.min_member = ref.min_member
        group.source = group.source or ref.source
        if not group.has_object:
            self._read_shoal_annotations(group, pod.pod.metadata.annotations)
        group._role_joined(pod, group.members.get(pod.uid))
        group.members[pod.uid] = pod
        group._kueue_joined(pod)
        group.priority = max(group.priority, pod.priority)
        self._group_of_uid[pod.uid] = group.key
        if pod.node_name:
            group.bound.add(pod.uid)
        self._update_phase(group)
        return group

    def member_updated(self, group: Group, pod: PodInfo) -> None:
        """A member's pod object changed (labels, phase): the group keeps the new copy."""
        group._role_joined(pod, group.members.get(pod.uid))
        group.members[pod.uid] = pod
        group._kueue_joined(pod)

    def member_bound(self, uid: str) -> None:
        group = self.group_of_uid(uid)
        if group is not None:
            group.bound.add(uid)
            self._update_phase(group)

    def member_unbound(self, uid: str) -> None:
        """An assumed member's binding failed."""
        group = self.group_of_uid(uid)
        if group is not None:
            group.bound.discard(uid)
            self._update_phase(group)

    def member_finished(self, uid: str, succeeded: bool) -> None:
        group = self.group_of_uid(uid)
        if group is None:
            return
        group.bound.discard(uid)
        done = group.succeeded if succeeded else group.failed
        group._role_left(group.members.pop(uid, None), succeeded and uid not in done)
        group._kueue_left(uid)
        done.add(uid)
        self._update_phase(group)

    def outsider_named(self, pod: PodInfo, ref: GroupRef, why: str) -> None:
        """`pod` names group `ref` but is not one of its members (`why`: e.g. its
        schedulerName): the group's members are told, as it is not counted."""
        key = f"{ref.namespace or 'default'}/{ref.name}"
        self._outsiders.setdefault(key, {})[pod.uid] = f"{pod.key} ({why})"
        self._outsider_of[pod.uid] = key

    def member_removed(self, uid: str) -> None:
        outside = self._outsider_of.pop(uid, None)
        if outside is not None:
            named = self._outsiders.get(outside, {})
            named.pop(uid, None)
            if not named:
                self._outsiders.pop(outside, None)
        key = self._group_of_uid.pop(uid, None)
        group = self.groups.get(key) if key else None
        if group is None:
            return
        group._role_left(group.members.pop(uid, None))
        group._kueue_left(uid)
        group.bound.discard(uid)
        if not group.members and not group.has_object and not group.succeeded:
            del self.groups[group.key]
            self.dirty.add(group.key)  # its published status is forgotten too
            self.failing.pop(group.key, None)
            self.reservation_changed()
            if self.blocking == group.key:
                self.release()
            return
        self._update_phase(group)

    def reserve(self, key: str, until: float, nodes: frozenset[str]) -> Reservation:
        """Give group `key` the head-of-line reservation of `nodes` until `until`."""
        self._serial += 1
        self.reservation = Reservation(key, until, nodes, self._serial)
        self.reservation_changed()
        return self.reservation

    def release(self) -> None:
        """End the head-of-line reservation (if any)."""
        if self.reservation is not None:
            self.reservation = None
            self.released = True
            self.reservation_changed()

    def any_member(self, uids: Iterable[str]) -> bool:
        """Does any of these pods name a group (known or still awaited)?"""
        return bool(self._group_of_uid) and not self._group_of_uid.keys().isdisjoint(uids)

    def group_of_uid(self, uid: str) -> Group | None:
        key = self._group_of_uid.get(uid)
        return self.groups.get(key) if key else None

    # ---- admission and order -------------------------------------------------------

    def gate(self, group: Group) -> str:
        """Why the group cannot be tried yet ("" when it can)."""
        if group.suspended:
            return (
                f"gang {group.key} is suspended (its PodGroup has {SUSPENDED}=true); "
                f"shoal resume podgroup {group.key} lets it start again"
            )
        if group.waiting_for_object:
            return (
                f"gang {group.key}: waiting for its PodGroup object "
                f"(pods name it via {group.source} keys)"
            )
        if group.kueue_votes and (conflict := group.kueue_conflict()):
            return conflict
        existing = len(group.members) + len(group.succeeded)
        short = group.short_sub_group() if group.sub_groups else None
        if existing < group.min_member:
            outsiders = self._outsiders.get(group.key)
            return (
                f"gang {group.key}: {existing}/{group.min_member} members exist, "
                f"waiting for {group.min_member - existing} more"
                + (f" (sub-group {short[0]}: {short[1]}/{short[2]})" if short else "")
                + (
                    f"; not counted: {', '.join(sorted(outsiders.values()))}: every member "
                    "of a gang must name the same schedulerName, of a profile with "
                    "Coscheduling"
                    if outsiders
                    else ""
                )
            )
        if short is not None:
            name, exist, minimum = short
            return (
                f"gang {group.key}: sub-group {name}: {exist}/{minimum} members exist, "
                f"waiting for {minimum - exist} more"
            )
        for dep in group.depends_on:
            other = self.groups.get(dep)
            if other is None or other.phase != "Finished":
                state = "unknown" if other is None else other.phase
                return f"gang {group.key}: waits for gang {dep} to succeed (now {state})"
        return ""

    def sort_key(self, pod: PodInfo) -> tuple[object, ...]:
        """Coscheduling order: priority, then group (or pod) creation, then group name,
        so a group's members sit together in the queue."""
        group = self.group_of_uid(pod.uid)
        if group is None:
            return (-pod.priority, pod.timestamp, pod.key)
        return (-max(pod.priority, group.priority), group.created, group.key)

    def members_pending(self, group: Group) -> Iterable[PodInfo]:
        return (p for uid, p in group.members.items() if uid not in group.bound)

    # ---- outcomes ------------------------------------------------------------------

    def attempt_failed(self, group: Group, reason: str, now: float) -> None:
        self.dirty.add(group.key)
        group.attempts += 1
        group.reason = f"{reason}; the gang {group.impossible}" if group.impossible else reason
        if group.first_failure is None:
            group.first_failure = now
            self.failing[group.key] = now
            self.reservation_changed()
        if now - group.first_failure >= group.timeout:
            group.phase = "Failed"
        elif group.phase not in ("Failed",):
            group.phase = "Scheduling"

    def attempt_succeeded(self, group: Group) -> None:
        group.attempts = 0
        group.first_failure = None
        group.reason = ""
        group.impossible = ""
        if self.failing.pop(group.key, None) is not None:
            self.reservation_changed()
        if self.blocking == group.key:
            self.release()
        self._update_phase(group)

    def _update_phase(self, group: Group) -> None:
        self.dirty.add(group.key)
        if group.failed:
            group.phase = "Failed"
            group.reason = f"{len(group.failed)} member(s) failed"
        elif group.finished_in_cluster and not group.members and not group.succeeded:
            group.phase = "Finished"  # its succeeded pods are no longer seen
        elif group.members or group.succeeded:
            done = len(group.succeeded)
            if done >= group.min_member and not group.bound:
                group.phase = "Finished"
            elif len(group.bound) + done >= group.min_member:
                group.phase = "Running"
            elif gate := self.gate(group):
                group.phase = "Pending"
                if group.suspended or (group.kueue_votes and group.kueue_conflict()):
                    group.reason = gate
            elif group.phase in ("Running", "Pending", ""):
                group.phase = "Scheduling" if group.attempts else "Pending"

    @staticmethod
    def started(group: Group) -> int:
        """Members placed and started by their kubelets (pod phase Running)."""
        return sum(
            1
            for uid in group.bound
            if (m := group.members.get(uid)) is not None and m.pod.status.phase == "Running"
        )

    def observed_phase(self, group: Group) -> str:
        """The phase every report gives (PodGroup status, CLI, dashboard, simulator):
        the scheduler's phase, except that a gang whose minMember are placed but not yet
        started (Running, or already Succeeded) is `Scheduled`, as scheduler-plugins'
        PodGroup controller says; `Running` means running."""
        if group.phase == "Running" and self.started(group) + len(group.succeeded) < (
            group.min_member
        ):
            return "Scheduled"
        return group.phase

    @staticmethod
    def sub_group_status(group: Group) -> tuple[SubGroupStatus, ...]:
        """Per role, in declared order: minMember, members, bound (placed), running
        (started by their kubelets) and succeeded; () for a gang without roles."""
        if not group.sub_groups:
            return ()
        bound: Counter[str] = Counter()
        running: Counter[str] = Counter()
        for uid in group.bound:
            member = group.members.get(uid)
            if member is None:
                continue
            role = sub_group_of(member)
            bound[role] += 1
            if member.pod.status.phase == "Running":
                running[role] += 1
        return tuple(
            SubGroupStatus(
                name=name,
                min_member=sub.min_member,
                members=group.role_members[name],
                scheduled=bound[name],
                running=running[name],
                succeeded=group.role_succeeded[name],
            )
            for name, sub in group.sub_groups.items()
        )

    @staticmethod
    def short_role(roles: tuple[SubGroupStatus, ...]) -> str:
        """Which role keeps its gang short, in words: the first (in declared order) with
        fewer members than its minimum ("sub-group workers: 3/4 members exist"); else,
        once some of the gang is placed, the first with fewer placed ("sub-group workers:
        3/4 bound", e.g. a member lost and not yet replaced); "" when none is. (A gang
        none of which is placed yet says in its reason which role did not fit.)"""
        for role in roles:
            exist = role.members + role.succeeded
            if exist < role.min_member:
                return f"sub-group {role.name}: {exist}/{role.min_member} members exist"
        if any(role.scheduled or role.succeeded for role in roles):
            for role in roles:
                placed = role.scheduled + role.succeeded
                if placed < role.min_member:
                    return f"sub-group {role.name}: {placed}/{role.min_member} bound"
        return ""

    def status(self) -> dict[str, dict[str, object]]:
        """Per group: phase, counts and reason (for reports and explanations); with
        roles, `subGroups` gives each role's counts (`sub_group_status`)."""
        out: dict[str, dict[str, object]] = {}
        for key, g in self.groups.items():
            entry: dict[str, object] = {
                "phase": self.observed_phase(g),
                "minMember": g.min_member,
                "members": len(g.members),
                "bound": len(g.bound),
                "running": self.started(g),
                "succeeded": len(g.succeeded),
                "failed": len(g.failed),
                "reason": g.reason,
            }
            if g.sub_groups:
                entry["subGroups"] = [
                    {
                        "name": r.name,
                        "minMember": r.min_member,
                        "members": r.members,
                        "bound": r.scheduled,
                        "running": r.running,
                        "succeeded": r.succeeded,
                    }
                    for r in self.sub_group_status(g)
                ]
            out[key] = entry
        return out
