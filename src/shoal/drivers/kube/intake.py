"""Intake: what the informers observe, applied to the scheduler core.

The informers call `on_upsert` / `on_delete` / `on_undecodable` on the I/O loop; each is
posted to the core's inbox and handled there, in the order observed (`CoreThread`).
Handling means: decode the object (one that cannot be read is reported, once per
resourceVersion, and named in /readyz, and never stops the rest of its kind), hand it to
the scheduler, skip updates that change nothing the scheduler reads, and notice a
pending pod of ours that someone else bound (two schedulers for one schedulerName). A
pod being bound gets its updates like any other: the core settles its binding cycle
from the one that shows it bound.

What each watched kind does to the scheduler is one `Watched` entry in `WATCHED`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shoal.api.errors import ManifestError
from shoal.api.hypernode import HyperNode, Topology
from shoal.api.manifests import decode
from shoal.api.objects import Node, Pod, PriorityClass
from shoal.api.podgroup import PodGroup, UpstreamPodGroup, VolcanoPodGroup, group_of
from shoal.api.podinfo import PodInfo
from shoal.api.queue import PodDisruptionBudget
from shoal.api.resources import ResourceList, parse_resource_list
from shoal.drivers.kube.binder import SCHEDULED_BY
from shoal.drivers.kube.client import JSON
from shoal.drivers.kube.core import CoreThread, IoPort
from shoal.drivers.kube.dra import DRA_WATCHED
from shoal.drivers.kube.leader import LeaderElector
from shoal.drivers.kube.resources import (
    ELASTIC_QUOTAS,
    ELASTIC_QUOTAS_SIGS,
    HYPERNODES,
    KUEUE_TOPOLOGIES,
    NAMESPACES,
    NODE_POOLS,
    NODES,
    PDBS,
    PODGROUPS,
    PODGROUPS_SIGS,
    PODS,
    PRIORITY_CLASSES,
    QUEUE_BINDINGS,
    QUEUES,
    UPSTREAM_PODGROUPS,
    VOLCANO_PODGROUPS,
    ResourceKind,
    object_key,
    object_ref,
)
from shoal.drivers.kube.shards import Routing, unschedulable_since
from shoal.drivers.kube.status import EventRecorder
from shoal.drivers.kube.volumes import VOLUME_KINDS
from shoal.gang.manager import sub_groups_problem
from shoal.preemption.budgets import DisruptionBudgets
from shoal.scheduler import Scheduler
from shoal.web.metrics import SchedulerMetrics

if TYPE_CHECKING:
    from shoal.drivers.kube.informer import Informer
    from shoal.drivers.kube.tenancy import TenancySync

__all__ = ["GROUP_PRECEDENCE", "WATCHED", "Intake", "Watched"]

log = logging.getLogger("shoal.kube")


# ---- what is watched, and what each kind does to the scheduler ------------------------

Upsert = Callable[["Intake", Any, JSON], None]  # intake, decoded object, raw object
Remove = Callable[["Intake", str, str], None]  # intake, namespace, name


@dataclass(frozen=True)
class Watched:
    """A kind the backend watches: its resource, and how objects reach the core.

    Pods and nodes are handled by the intake itself (`upsert` None); every other kind
    is decoded with `kind.model` (an undecodable object is reported, not applied) and
    handed to `upsert` / `remove`. Watching a new kind is one `Watched(...)` entry in
    `WATCHED`.
    """

    kind: ResourceKind
    upsert: Upsert | None = None
    remove: Remove | None = None


def _priority_class(b: Intake, pc: PriorityClass, raw: JSON) -> None:
    b.scheduler.add_priority_class(pc)


def _priority_class_gone(b: Intake, namespace: str, name: str) -> None:
    b.scheduler.priority_classes.pop(name, None)


AnyPodGroup = PodGroup | VolcanoPodGroup | UpstreamPodGroup

# PodGroup objects of one namespace/name in several APIs define one gang. When they
# disagree on it (minMember, minResources), the one of the API first here is in force and
# the others are skipped and reported, whatever order the informers deliver them in.
GROUP_PRECEDENCE = (PODGROUPS, PODGROUPS_SIGS, VOLCANO_PODGROUPS, UPSTREAM_PODGROUPS)
_GROUP_RANK = {k.name: i for i, k in enumerate(GROUP_PRECEDENCE)}


def _gang_terms(group: AnyPodGroup) -> tuple[int, ResourceList]:
    """What a PodGroup object says of its gang: the minimum members and resources."""
    if isinstance(group, UpstreamPodGroup):
        return group.min_member, {}
    return max(1, group.spec.min_member), parse_resource_list(group.spec.min_resources)


def _say(terms: tuple[int, ResourceList]) -> str:
    minimum, resources = terms
    return f"minMember {minimum}" + (f", minResources {resources}" if resources else "")


def _other_groups(
    b: Intake, kind: ResourceKind, key: str
) -> list[tuple[ResourceKind, JSON, tuple[int, ResourceList]]]:
    """The readable PodGroup objects of `key` in the other APIs, with their terms."""
    out = []
    for other in list(b.group_kinds.get(key, {}).values()):
        informer = b.informers.get(other.name)
        raw = informer.store.get(key) if informer is not None else None
        if other.name == kind.name or raw is None or other.model is None:
            continue
        try:
            obj = decode(raw, other.model)
            if isinstance(obj, PodGroup | VolcanoPodGroup | UpstreamPodGroup):
                out.append((other, raw, _gang_terms(obj)))
        except (ManifestError, ValueError):
            continue  # reported on its own
    return out


def _conflict(
    key: str,
    kind: ResourceKind,
    terms: tuple[int, ResourceList],
    winner: ResourceKind,
    winning: tuple[int, ResourceList],
) -> str:
    order = ", ".join(k.group for k in GROUP_PRECEDENCE)
    return (
        f"PodGroup {key} ({kind.group}) says {_say(terms)}, but PodGroup {key} "
        f"({winner.group}) says {_say(winning)}: a gang is defined once, and the "
        f"{winner.group} one is in force (precedence: {order}); delete one of them or make "
        "them agree"
    )


def _pod_groups(kind: ResourceKind) -> Watched:
    """PodGroups of one API (scheduler-plugins' two groups, Volcano). The intake records
    which APIs hold an object for each group: its status is written back there."""

    def upsert(b: Intake, group: AnyPodGroup, raw: JSON) -> None:
        key = object_key(raw)
        meta = raw.get("metadata") or {}
        problem = sub_groups_problem(meta.get("annotations") or {})
        if problem:
            b._group_seen.pop((kind.name, key), None)
            raise ValueError(f"PodGroup {key}: {problem}")
        # Our own status writes come back through the watch: not a change for the core.
        relevant = (raw.get("spec"), meta.get("labels"), meta.get("annotations"))
        if b._group_seen.get((kind.name, key)) == relevant:
            return
        mine = _gang_terms(group)
        rivals = [r for r in _other_groups(b, kind, key) if r[2] != mine]
        above = [r for r in rivals if _GROUP_RANK[r[0].name] < _GROUP_RANK[kind.name]]
        if above:
            # Another API's object of this name is in force: this one is skipped (and
            # applies if that one goes: `remove` re-reads the APIs recorded here).
            b.group_kinds.setdefault(key, {})[kind.name] = kind
            b._group_seen.pop((kind.name, key), None)
            b._group_conflicts.add((kind.name, key))
            winner, _, winning = min(above, key=lambda r: _GROUP_RANK[r[0].name])
            raise ValueError(_conflict(key, kind, mine, winner, winning))
        for other, other_raw, theirs in rivals:  # all below this one: skipped from now on
            b._group_seen.pop((other.name, key), None)
            b._group_conflicts.add((other.name, key))
            b.report_invalid(other, other_raw, _conflict(key, other, theirs, kind, mine))
        for other, other_raw, theirs in _other_groups(b, kind, key):
            if theirs == mine and (other.name, key) in b._group_conflicts:
                b._group_conflicts.discard((other.name, key))  # agrees now
                b.clear_invalid(other, other_raw)
        b._group_conflicts.discard((kind.name, key))
        b.scheduler.add_pod_group(group)
        b._group_seen[(kind.name, key)] = relevant
        b.group_kinds.setdefault(key, {})[kind.name] = kind

    def remove(b: Intake, namespace: str, name: str) -> None:
        namespace = namespace or "default"
        key = f"{namespace}/{name}"
        b._group_seen.pop((kind.name, key), None)
        b._group_conflicts.discard((kind.name, key))
        kinds = b.group_kinds.get(key, {})
        kinds.pop(kind.name, None)
        if not kinds:
            b.group_kinds.pop(key, None)
        s = b.scheduler
        if kind.name == VOLCANO_PODGROUPS.name:
            s.clear_group_queue(key)
        if kinds:
            # Another API still has an object of that name: it defines the group now.
            for other in list(kinds.values()):
                b._group_seen.pop((other.name, key), None)
                raw = b.informers[other.name].store.get(key)
                if raw is not None:
                    b._upsert(other, None, raw)
            return
        s.delete_pod_group(namespace, name)

    return Watched(kind, upsert, remove)


def _pdb(b: Intake, pdb: PodDisruptionBudget, raw: JSON) -> None:
    DisruptionBudgets.of(b.scheduler.handle).add(pdb)


def _pdb_gone(b: Intake, namespace: str, name: str) -> None:
    DisruptionBudgets.of(b.scheduler.handle).remove(namespace or "default", name)


def _namespace(b: Intake, namespace: JSON, raw: JSON) -> None:
    meta = raw.get("metadata") or {}
    name = str(meta.get("name", ""))
    labels = meta.get("labels") or {}
    # Kept as raw JSON (no model): labels that are not a map of strings would otherwise
    # reach the selectors as whatever they are. Reported; the labels in force stay.
    if not isinstance(labels, dict):
        raise ValueError(
            f"Namespace {name}: field metadata.labels: expected a map of strings, got "
            f"{type(labels).__name__}"
        )
    for key, value in labels.items():
        if not isinstance(value, str):
            raise ValueError(
                f"Namespace {name}: field metadata.labels.{key}: expected a string, got "
                f"{type(value).__name__} {value!r}"
            )
    b.scheduler.set_namespace_labels(name, dict(labels))


def _namespace_gone(b: Intake, namespace: str, name: str) -> None:
    b.scheduler.set_namespace_labels(name, {})


def _hypernode(b: Intake, hypernode: HyperNode, raw: JSON) -> None:
    b.scheduler.upsert_hypernode(hypernode)
    if b.hypernodes_ready:
        b.report_hypernodes(raw)


def _hypernode_gone(b: Intake, namespace: str, name: str) -> None:
    b.scheduler.delete_hypernode(name)
    if b.hypernodes_ready:
        b.report_hypernodes()


def _kueue_topology(b: Intake, topology: Topology, raw: JSON) -> None:
    # Each is checked on its own: a malformed one is reported (an InvalidObject, once
    # per resourceVersion) and skipped; fixed, it is cleared by the decoding.
    problem = b.scheduler.upsert_kueue_topology(topology)
    if problem:
        raise ValueError(problem)


def _kueue_topology_gone(b: Intake, namespace: str, name: str) -> None:
    b.scheduler.delete_kueue_topology(name)


def _tenancy(kind: ResourceKind) -> Watched:
    def upsert(b: Intake, obj: Any, raw: JSON) -> None:
        assert b.tenancy is not None
        b.tenancy.upsert(kind, obj, raw)

    def remove(b: Intake, namespace: str, name: str) -> None:
        assert b.tenancy is not None
        b.tenancy.remove(kind, namespace, name)

    return Watched(kind, upsert, remove)


WATCHED: list[Watched] = [
    Watched(NODES),
    Watched(PODS),
    Watched(PRIORITY_CLASSES, _priority_class, _priority_class_gone),
    Watched(PDBS, _pdb, _pdb_gone),
    Watched(NAMESPACES, _namespace, _namespace_gone),
    _pod_groups(PODGROUPS),
    _pod_groups(PODGROUPS_SIGS),
    _pod_groups(VOLCANO_PODGROUPS),
    _pod_groups(UPSTREAM_PODGROUPS),
    Watched(HYPERNODES, _hypernode, _hypernode_gone),
    Watched(KUEUE_TOPOLOGIES, _kueue_topology, _kueue_topology_gone),
    _tenancy(QUEUES),
    _tenancy(QUEUE_BINDINGS),
    _tenancy(NODE_POOLS),
    _tenancy(ELASTIC_QUOTAS),
    _tenancy(ELASTIC_QUOTAS_SIGS),
    *(Watched(kind, upsert, remove) for kind, upsert, remove in VOLUME_KINDS),
    *(Watched(kind, upsert, remove) for kind, upsert, remove in DRA_WATCHED),
]


# ---- the intake ------------------------------------------------------------------------


class Intake:
    """Informer updates into the scheduler core (see the module docstring). Everything
    here but the three `on_*` entry points runs on the core thread."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        core: CoreThread,
        io: IoPort,
        events: EventRecorder,
        metrics: SchedulerMetrics,
        identity: str,
        passive: bool,
        watched: Mapping[str, Watched],
        wake: Callable[[], None],
        issued: set[str] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.core = core
        self.io = io
        self.events = events
        self.metrics = metrics
        self.identity = identity
        self.passive = passive
        self.watched = dict(watched)
        self.wake = wake  # the scheduling loop has something new to look at
        # Set by the backend once built (they need the intake first).
        self.informers: Mapping[str, Informer] = {}
        self.tenancy: TenancySync | None = None
        self.elector: LeaderElector | None = None
        # Pod uids handed to the scheduler, with what of them scheduling depends on.
        self._known: dict[str, tuple[object, ...]] = {}
        # Pod uids this process sent a Binding for (the binder adds, the watch removes).
        self._issued: set[str] = issued if issued is not None else set()
        self.foreign_binds = 0
        # (when, pod, node, binder) of the last pod of ours someone else bound.
        self.last_foreign_bind: tuple[float, str, str, str] | None = None
        # Objects skipped because they cannot be read: (kind, key) -> (kind, raw, why).
        self.invalid: dict[tuple[str, str], tuple[ResourceKind, JSON, str]] = {}
        self._undecodable: set[tuple[str, str]] = set()  # of the `invalid` keys
        # namespace/name -> the PodGroup APIs holding an object of that name (by kind name).
        self.group_kinds: dict[str, dict[str, ResourceKind]] = {}
        self._group_seen: dict[tuple[str, str], tuple[object, ...]] = {}
        # (kind name, namespace/name) of PodGroup objects skipped because another API's
        # object of that name says otherwise (GROUP_PRECEDENCE).
        self._group_conflicts: set[tuple[str, str]] = set()
        # HyperNodes skipped as malformed by the scheduler's topology (not undecodable
        # ones): reported while they stay so, cleared when they are fine again.
        self._bad_hypernodes: dict[str, str] = {}
        # Set once every informer listed: HyperNodes are checked as a whole from then on
        # (each check looks at all of them: not once per object of the first list).
        self.hypernodes_ready = False
        # Which pending pods this replica decides when several share the nodes (node
        # shards); None: all of them.
        self.routing: Routing | None = None

    def on_upsert(self, kind: ResourceKind, old: JSON | None, new: JSON) -> None:
        """An object added or changed (from an informer): handled on the core, in order."""
        self.core.post(self._upsert, kind, old, new)

    def on_delete(self, kind: ResourceKind, old: JSON) -> None:
        """An object deleted (from an informer): handled on the core, in order."""
        self.core.post(self._delete, kind, old)

    def on_undecodable(self, kind: ResourceKind, stub: JSON, error: str) -> None:
        """An object the informer could not decode (e.g. nested deeper than the decoder
        allows): reported as an invalid one, and named in /readyz until it is fixed or
        deleted. The rest of its kind is unaffected."""
        self.core.post(self._mark_undecodable, kind, stub, error)

    def _upsert(self, kind: ResourceKind, old: JSON | None, new: JSON) -> None:
        if self._undecodable and (kind.name, object_key(new)) in self._undecodable:
            # It can be read again: what is wrong with it now (if anything) is reported
            # by the decoding below.
            self._undecodable.discard((kind.name, object_key(new)))
            self.invalid.pop((kind.name, object_key(new)), None)
        if kind.name == PODS.name:
            uid = str((new.get("metadata") or {}).get("uid", ""))
            old_uid = str(((old or {}).get("metadata") or {}).get("uid", ""))
            if old is not None and old_uid and old_uid != uid:
                # Deleted and recreated under the same name while we were not watching.
                self._delete(kind, old)
            self._apply_pod(new)
        elif kind.name == NODES.name:
            node = self._decode(kind, new, Node)
            if node is not None:
                name = node.metadata.name
                if name in self.scheduler.cluster.table.row_of:
                    self.scheduler.update_node(node)
                else:
                    self.scheduler.add_node(node)
        else:
            watched = self.watched.get(kind.name)
            if watched is not None and watched.upsert is not None:
                obj = new if kind.model is None else self._decode(kind, new, kind.model)
                if obj is not None:
                    try:
                        watched.upsert(self, obj, new)
                    except ValueError as err:
                        self.report_invalid(kind, new, str(err))
                    else:
                        if kind.model is None:  # raw JSON, checked by `upsert`: fine now
                            self.clear_invalid(kind, new)
        self.wake()

    def _delete(self, kind: ResourceKind, old: JSON) -> None:
        meta = old.get("metadata") or {}
        self.invalid.pop((kind.name, object_key(old)), None)
        self._undecodable.discard((kind.name, object_key(old)))
        if kind.name == PODS.name:
            uid = str(meta.get("uid", ""))
            self._issued.discard(uid)
            self._delete_pod(uid)  # ends its binding cycle, if one runs
        elif kind.name == NODES.name:
            self.scheduler.delete_node(str(meta.get("name", "")))
        else:
            watched = self.watched.get(kind.name)
            if watched is not None and watched.remove is not None:
                watched.remove(self, str(meta.get("namespace", "")), str(meta.get("name", "")))
        self.wake()

    def _mark_undecodable(self, kind: ResourceKind, stub: JSON, error: str) -> None:
        self._undecodable.add((kind.name, object_key(stub)))
        self.report_invalid(kind, stub, error)

    def _decode(self, kind: ResourceKind, raw: JSON, model: type[Any]) -> Any:
        try:
            obj = decode(raw, model)
        except ManifestError as err:
            self.report_invalid(kind, raw, str(err))
            return None
        self.invalid.pop((kind.name, object_key(raw)), None)
        return obj

    def report_hypernodes(self, raw: JSON | None = None) -> None:
        """After a HyperNode changed (`raw`, if not deleted): every HyperNode the
        topology skips now is reported (once per problem: a change of one HyperNode can
        make another wrong, a cycle or a tier, or right again; a status-only update of a
        bad one says nothing new), and those fixed are cleared."""
        problems = self.scheduler.hypernode_problems()
        informer = self.informers.get(HYPERNODES.name)
        before = self._bad_hypernodes
        for name, message in problems.items():
            obj = raw if raw is not None and object_key(raw) == name else None
            if obj is None and informer is not None:
                obj = informer.store.get(name)
            if obj is None:
                continue
            if before.get(name) == message:
                self.keep_invalid(HYPERNODES, obj, message)
            else:
                self.report_invalid(HYPERNODES, obj, message)
        for name in before.keys() - problems.keys():
            if (HYPERNODES.name, name) not in self._undecodable:
                self.invalid.pop((HYPERNODES.name, name), None)
        self._bad_hypernodes = dict(problems)

    def clear_invalid(self, kind: ResourceKind, raw: JSON) -> None:
        self.invalid.pop((kind.name, object_key(raw)), None)

    def keep_invalid(self, kind: ResourceKind, raw: JSON, message: str) -> None:
        """Still bad and reported already (a status-only change of it came back): named
        on /readyz under its newest version, with no new event, log line or count."""
        self.invalid[(kind.name, object_key(raw))] = (kind, raw, message)

    def report_invalid(
        self, kind: ResourceKind, raw: JSON, message: str, log_it: bool = True
    ) -> None:
        """A bad object: an event on it (leader only), a log line, a metric. Once per
        resourceVersion; the scheduler carries on with everything else."""
        key = (kind.name, object_key(raw))
        rv = str((raw.get("metadata") or {}).get("resourceVersion", ""))
        seen = self.invalid.get(key)
        if log_it and seen is not None and seen[2] == message and _rv(seen[1]) == rv:
            return
        self.invalid[key] = (kind, raw, message)
        if log_it:
            self.metrics.invalid_objects.labels(kind.name).inc()
            log.warning(
                "ignoring invalid %s %s: %s",
                kind.kind,
                object_key(raw) or "(name unknown)",
                message,
                extra={"resource": kind.name, "object": object_key(raw), "error": message},
            )
        if not (raw.get("metadata") or {}).get("name"):
            return  # nothing to attach an event to
        controller = next(iter(self.scheduler.profiles), "shoal")
        self.io.post(
            self.events.record,
            object_ref(kind, raw),
            "Warning",
            "InvalidObject",
            "Reading",
            message,
            controller,
        )

    def _apply_pod(self, raw: JSON) -> None:
        uid = str((raw.get("metadata") or {}).get("uid", ""))
        relevant = _scheduling_relevant(raw)
        if self._known.get(uid) == relevant:
            # Only status or bookkeeping changed (e.g. our own PodScheduled=False
            # patch): not a reason to retry the pod, as kube-scheduler's isPodUpdated.
            return
        pod: Pod | None = self._decode(PODS, raw, Pod)
        if pod is None:
            return
        s = self.scheduler
        known = uid in self._known
        phase = pod.status.phase
        if phase in ("Succeeded", "Failed"):
            if not known and phase == "Succeeded" and pod.spec.node_name and _in_gang(pod):
                # A finished gang member still counts for its group (dependencies),
                # also after a restart.
                s.add_pod(pod)
                known = True
            if known:
                s.finish_pod(uid, succeeded=phase == "Succeeded")
                self._known.pop(uid, None)
            return
        if pod.metadata.deletion_timestamp and not pod.spec.node_name:
            self._delete_pod(uid)  # being deleted: not worth scheduling
            return
        if not pod.spec.node_name and pod.spec.scheduler_name not in s.profiles:
            return  # another scheduler's pending pod
        if not pod.spec.node_name and not self._mine(pod, raw):
            # Another replica's to decide (node shards): dropped here unless we are
            # binding it already (its outcome settles it).
            if known and uid not in s.binding:
                self._delete_pod(uid)
            return
        if pod.spec.node_name:
            # Ours: we sent a Binding for it and the API server copied our identity from
            # it (a conflicting bind by another replica carries its own, or none).
            binder = pod.metadata.annotations.get(SCHEDULED_BY, "")
            ours = uid in self._issued and binder == self.identity
            self._issued.discard(uid)
            before = self._known[uid][0] if known else None
            was_pending = known and not (isinstance(before, dict) and before.get("nodeName"))
            if (
                was_pending
                and not ours
                and not self._peer(binder)
                and pod.spec.scheduler_name in s.profiles
                and not self.passive
            ):
                self._foreign_bind(pod, raw)
        if known:
            s.update_pod(pod)
        else:
            s.add_pod(self._arriving(pod, raw))
        self._known[uid] = relevant

    def _arriving(self, pod: Pod, raw: JSON) -> Pod | PodInfo:
        """A pending pod a scheduler has tried already (PodScheduled=False, reason
        Unschedulable: written by this scheduler before a restart or failover, or by a
        replica it was routed to): its wait counts from that condition's transition, not
        from now, so a reclaim delay (`reclaimDelaySeconds`) is not started over by every
        restart. The cluster's condition is the record; clocks are the replicas' own."""
        since = None if pod.spec.node_name else unschedulable_since(raw)
        if since is None:
            return pod
        s = self.scheduler
        info = s.pod_info(pod)
        info.initial_attempt_time = s.clock.now() - max(0.0, time.time() - since)
        return info

    def _mine(self, pod: Pod, raw: JSON) -> bool:
        routing = self.routing
        if routing is None or routing.members is None:
            return True
        key = self.scheduler.routing_key(pod)
        return routing.mine(key, pod.spec.scheduler_name, unschedulable_since(raw), time.time())

    def _peer(self, binder: str) -> bool:
        """Another replica of ours (node shards): it binds only to nodes it holds."""
        members = self.routing.members if self.routing is not None else None
        return bool(binder) and bool(members) and any(m.identity == binder for m in members or ())

    def reroute(self, pending: list[JSON]) -> None:
        """The routing changed (replicas joined or left, or pods passed to the next
        replica): take up pending pods that are ours now, drop those that are not."""
        s = self.scheduler
        for raw in pending:
            uid = str((raw.get("metadata") or {}).get("uid", ""))
            if uid not in self._known:
                self._apply_pod(raw)
                continue
            known = s.known_pod(uid)
            if known is None or known.pod.spec.node_name or uid in s.binding:
                continue
            if not self._mine(known.pod, raw):
                self._delete_pod(uid)
        self.wake()

    def _foreign_bind(self, pod: Pod, raw: JSON) -> None:
        """A pending pod of our profiles was bound, and not by us: another scheduler
        runs for the same schedulerName (no leader election, or another Lease), and
        both place pods on capacity each thinks is free."""
        binder = pod.metadata.annotations.get(SCHEDULED_BY, "")
        who = (
            f"Shoal instance {binder!r}"
            if binder and binder != self.identity
            else "an unknown binder"
            if not binder
            else f"another Shoal instance with our identity {binder!r}"
        )
        node = pod.spec.node_name
        self.foreign_binds += 1
        self.last_foreign_bind = (time.monotonic(), object_key(raw), node, who)
        profile = pod.spec.scheduler_name
        self.metrics.foreign_binds.labels(profile).inc()
        lease = ""
        if self.elector is not None:
            lease = (
                f"; our Lease {self.elector.settings.namespace}/{self.elector.settings.name} "
                f"is held by {self.elector.leader!r}"
            )
        else:
            lease = "; leader election is off here"
        message = (
            f"pod {object_key(raw)} (schedulerName {profile!r}) was bound to {node} by {who}, "
            f"not by this scheduler ({self.identity!r}){lease}. Two schedulers for one "
            "schedulerName overcommit nodes: run every replica with leader election on the "
            "same Lease (leaderElection.resourceName), or give them different schedulerNames"
        )
        log.warning(
            message,
            extra={"pod": object_key(raw), "node": node, "binder": binder, "profile": profile},
        )
        self.io.post(
            self.events.record,
            object_ref(PODS, raw),
            "Warning",
            "ForeignBinding",
            "Binding",
            message,
            profile,
        )

    def _delete_pod(self, uid: str) -> None:
        self._issued.discard(uid)
        if uid in self._known:
            self._known.pop(uid, None)
            self.scheduler.delete_pod(uid)


def _scheduling_relevant(raw: JSON) -> tuple[object, ...]:
    """What of a pod the scheduler reads: spec, labels, annotations, deletion, phase,
    the ResourceClaims made for it, the resources the kubelet allocated and actuated
    for its containers and for the whole pod, and whether a resize is infeasible
    (in-place resize: see `shoal.api.podinfo.pod_requests`). Other status conditions,
    nominations and resourceVersions are not."""
    meta = raw.get("metadata") or {}
    status = raw.get("status") or {}
    return (
        raw.get("spec"),
        meta.get("labels"),
        meta.get("annotations"),
        meta.get("deletionTimestamp"),
        status.get("phase"),
        status.get("resourceClaimStatuses"),
        _container_resources(status.get("containerStatuses")),
        _container_resources(status.get("initContainerStatuses")),
        _resize_pending(status.get("conditions")),
        status.get("allocatedResources"),
        status.get("resources"),
    )


def _container_resources(statuses: object) -> tuple[object, ...]:
    if not isinstance(statuses, list):
        return ()
    return tuple(
        (s.get("name"), s.get("allocatedResources"), s.get("resources"))
        for s in statuses
        if isinstance(s, dict) and ("allocatedResources" in s or "resources" in s)
    )


def _resize_pending(conditions: object) -> object:
    if not isinstance(conditions, list):
        return None
    for condition in conditions:
        if isinstance(condition, dict) and condition.get("type") == "PodResizePending":
            return condition.get("reason")
    return None


def _in_gang(pod: Pod) -> bool:
    try:
        return group_of(pod) is not None
    except ValueError:
        return False


def _rv(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
