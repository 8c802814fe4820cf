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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

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
    VolcanoPodGroup,
    group_of,
)
from shoal.api.podinfo import PodInfo
from shoal.api.resources import ResourceList, parse_resource_list
from shoal.framework.handle import Handle

__all__ = [
    "DEFAULT_SCHEDULE_TIMEOUT",
    "GangConfig",
    "GangManager",
    "GangPlugin",
    "Group",
    "Reservation",
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


@runtime_checkable
class GangPlugin(Protocol):
    """A plugin that makes its profile's pods join pod groups (Coscheduling): the
    scheduler asks the profile's plugins for this, not for a plugin class, so another
    gang plugin can take Coscheduling's place."""

    @property
    def gang_config(self) -> GangConfig: ...


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
    depends_on: tuple[str, ...] = ()
    suspended: bool = False  # its PodGroup says shoal.dev/suspended: "true"
    sub_groups: dict[str, SubGroup] = field(default_factory=dict)  # roles, in order
    min_executors: int = 0  # Spark driver-first: executors that must fit with the driver
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

    def needed(self) -> int:
        """Members still to place before the group counts as running."""
        return max(0, self.min_member - len(self.bound) - len(self.succeeded))

    def sub_group_needed(self, name: str) -> int:
        """Members of sub-group `name` still to place before it reaches its minimum
        (placed members count; succeeded ones are no longer known by role)."""
        sub = self.sub_groups.get(name)
        if sub is None:
            return 0
        have = sum(
            1
            for uid in self.bound
            if (m := self.members.get(uid)) is not None and sub_group_of(m) == name
        )
        return max(0, sub.min_member - have)


class GangManager:
    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self._group_of_uid: dict[str, str] = {}
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
        else:
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
        self._read_shoal_annotations(group, meta.annotations)
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
        group.sub_groups = {}
        if raw := annotations.get(SUB_GROUPS):
            group.sub_groups, problem = parse_sub_groups(raw)
            if problem:
                group.reason = problem
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
        group.members[pod.uid] = pod
        group.priority = max(group.priority, pod.priority)
        self._group_of_uid[pod.uid] = group.key
        if pod.node_name:
            group.bound.add(pod.uid)
        self._update_phase(group)
        return group

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
        group.members.pop(uid, None)
        (group.succeeded if succeeded else group.failed).add(uid)
        self._update_phase(group)

    def member_removed(self, uid: str) -> None:
        key = self._group_of_uid.pop(uid, None)
        group = self.groups.get(key) if key else None
        if group is None:
            return
        group.members.pop(uid, None)
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
        existing = len(group.members) + len(group.succeeded)
        if existing < group.min_member:
            return (
                f"gang {group.key}: {existing}/{group.min_member} members exist, "
                f"waiting for {group.min_member - existing} more"
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
            elif self.gate(group):
                group.phase = "Pending"
                if group.suspended:
                    group.reason = self.gate(group)
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

    def status(self) -> dict[str, dict[str, object]]:
        """Per group: phase, counts and reason (for reports and explanations)."""
        return {
            key: {
                "phase": self.observed_phase(g),
                "minMember": g.min_member,
                "members": len(g.members),
                "bound": len(g.bound),
                "running": self.started(g),
                "succeeded": len(g.succeeded),
                "failed": len(g.failed),
                "reason": g.reason,
            }
            for key, g in self.groups.items()
        }
