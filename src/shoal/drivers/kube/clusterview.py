"""What the scheduler would see, built from the cluster's objects: the model behind
`shoal get` and `shoal explain`.

One list of every resource `shoal run` watches is fed, through the very handlers the
running scheduler uses (`KubeBackend` in passive mode, no watch, no lease), into a
scheduler core of its own. Queue usage, guarantees and fair shares are then the tenancy
manager's; gang phases the gang manager's; and `explain` runs a real scheduling cycle
for the pod on this private copy. Nothing leaves it: a passive backend's effects port
drops everything but binds, and the binding cycles the cycle produces are never run.

The views are plain dicts and lists (what `-o json|yaml` prints): quantities in
Kubernetes' notation, as on Queue status (cpu in millicores "1500m", memory in bytes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from shoal.api.gpu import GPU_MILLI
from shoal.api.resources import GPU, format_quota
from shoal.config import ConfigError, KubeSchedulerConfiguration
from shoal.drivers.kube.backend import KubeBackend, KubeOptions
from shoal.drivers.kube.client import JSON, ApiError, ClientSettings, Connection
from shoal.drivers.kube.resources import LEASES, PODS
from shoal.drivers.kube.shards import CONFIG_ANNOTATION, ROLE_LABEL
from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import Diagnosis
from shoal.framework.status import Code
from shoal.framework.types import Candidates
from shoal.gang.manager import sub_group_of
from shoal.plugins.taint_toleration import NAME as TAINT_TOLERATION
from shoal.plugins.taint_toleration import untolerated_taints
from shoal.scheduler import Scheduler
from shoal.web.dashboard.frame import DashboardSource

__all__ = ["ClusterView", "Explanation", "load_view", "published_configs", "quantities"]

NO_POOL = "(no pool)"
# Plugins that admit a pod (its queue's limits, its gang) before any node is looked at.
_ADMISSION = frozenset({"QueueCapacity", "Coscheduling"})


def quantities(amounts: Mapping[str, int | float]) -> dict[str, str]:
    """Resource amounts in Kubernetes' notation, as a Queue's status shows them."""
    return {r: format_quota(r, int(v)) for r, v in sorted(amounts.items())}


@dataclass
class Explanation:
    """`shoal explain`'s answer; `blocked`: the pod is pending and cannot be placed now."""

    found: bool
    blocked: bool
    answer: dict[str, Any]


class ClusterView:
    """The cluster as the scheduler's core holds it, after one list of everything."""

    def __init__(self, backend: KubeBackend) -> None:
        self.backend = backend
        self.scheduler: Scheduler = backend.scheduler
        # Which scheduler configuration judged this view (`--config`, the running
        # scheduler's, or the default): `shoal explain` says it.
        self.config_source = "the default"

    # ---- queues --------------------------------------------------------------------

    def queues(self) -> dict[str, Any]:
        """The queue tree (parents before children) with allocation, guarantee, max and
        HDRF fair share: the tenancy manager's numbers, as the dashboard shows them."""
        source = DashboardSource(self.scheduler, clock_kind="wall")
        raw = source.build().queues
        # Pod counts and state as the Queue objects' status says them (one status model:
        # bound = placed, running = started by a kubelet).
        statuses = {
            q.name: q
            for q in self.scheduler.tenant_queues.queue_statuses(self.scheduler.cluster.table)
        }
        rows = []
        for q in raw["queues"]:
            status = statuses.get(q["name"])
            rows.append(
                {
                    "name": q["name"],
                    "parent": q["parent"],
                    "depth": q["depth"],
                    "leaf": q["leaf"],
                    "weight": q["weight"],
                    "allocated": quantities(q["allocated"]),
                    "guaranteed": quantities(q["guaranteed"]),
                    "max": quantities(q["maximum"]),
                    "fairShare": quantities(q["fairShare"]),
                    "pendingPods": q["pending"],
                    "boundPods": status.bound_pods if status else q["running"],
                    "runningPods": status.running_pods if status else 0,
                    "state": status.state if status else "Open",
                    "problem": status.problem if status else "",
                    "dominantShare": q["share"],
                }
            )
        # Queue objects the scheduler rejected: listed, saying so.
        for name, status in statuses.items():
            if status.state == "Invalid":
                rows.append(
                    {
                        "name": name,
                        "parent": "",
                        "depth": 0,
                        "leaf": True,
                        "weight": 1,
                        "allocated": {},
                        "guaranteed": {},
                        "max": {},
                        "fairShare": {},
                        "pendingPods": 0,
                        "boundPods": 0,
                        "runningPods": 0,
                        "state": "Invalid",
                        "problem": status.problem,
                        "dominantShare": {},
                    }
                )
        return {
            "capacity": quantities(raw["capacity"]),
            "defaultQueue": raw["defaultQueue"],
            "queues": rows,
        }

    # ---- pod groups ----------------------------------------------------------------

    def podgroups(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Gangs with their phase and members: scheduled (bound or assumed), running
        (pod phase Running), succeeded, failed, against minMember."""
        sched = self.scheduler
        store = self.backend.pods.store
        out = []
        for _, g in sorted(sched.gangs.groups.items()):
            if namespace is not None and g.namespace != namespace:
                continue
            running = 0
            started: set[str] = set()
            for uid, info in g.members.items():
                raw = store.get(info.key) or {}
                if (raw.get("status") or {}).get("phase") == "Running":
                    running += 1
                    started.add(uid)
            first = next(iter(g.members.values()), None)
            phase, reason = self._gang_phase(g)
            row: dict[str, Any] = {
                "namespace": g.namespace,
                "name": g.name,
                "phase": phase,
                "minMember": g.min_member,
                "members": len(g.members),
                "scheduled": len(g.bound),
                "running": running,
                "succeeded": len(g.succeeded),
                "failed": len(g.failed),
                "queue": sched.tenant_queues.named_queue(first) if first is not None else "",
                "source": g.source,
                "hasObject": g.has_object,
                "reason": reason,
            }
            if g.sub_groups:
                row.update(self._sub_groups_part(g, started))
            out.append(row)
        return out

    def _sub_groups_part(self, group: Any, started: set[str] | None = None) -> dict[str, Any]:
        """A gang's roles: per role minMember, members, scheduled (bound), running
        (started by a kubelet: `started`, else the members' phase) and succeeded; and
        which role keeps it short (`shortSubGroup`, "" when none does)."""
        gangs = self.scheduler.gangs
        roles = gangs.sub_group_status(group)
        if started is not None:
            per_role = Counter(
                sub_group_of(group.members[uid])
                for uid in group.bound
                if uid in started and uid in group.members
            )
            roles = tuple(dataclasses.replace(r, running=per_role[r.name]) for r in roles)
        return {
            "subGroups": [
                {
                    "name": r.name,
                    "minMember": r.min_member,
                    "members": r.members,
                    "scheduled": r.scheduled,
                    "running": r.running,
                    "succeeded": r.succeeded,
                }
                for r in roles
            ],
            "shortSubGroup": gangs.short_role(roles),
        }

    # ---- node pools ----------------------------------------------------------------

    def pools(self) -> list[dict[str, Any]]:
        """Node pools with their nodes' allocatable and requested resources (GPUs
        included), and the nodes in no pool as `(no pool)`."""
        table = self.scheduler.cluster.table
        n = table.n
        resources = list(table.resources)
        in_some = np.zeros(n, dtype=bool)
        out = []
        for name, pool in sorted(self.scheduler.tenant_queues.pools.items()):
            selector = pool.spec.node_selector
            mask = np.fromiter(
                (
                    all(node.metadata.labels.get(k) == v for k, v in selector.items())
                    for node in table.nodes[:n]
                ),
                dtype=bool,
                count=n,
            )
            in_some |= mask
            out.append(
                self._pool_row(name, mask, resources, selector, list(pool.spec.exclusive_to))
            )
        out.append(self._pool_row(NO_POOL, ~in_some, resources, {}, []))
        return out

    def _pool_row(
        self,
        name: str,
        mask: np.ndarray,
        resources: list[str],
        selector: dict[str, str],
        exclusive_to: list[str],
    ) -> dict[str, Any]:
        table = self.scheduler.cluster.table
        n = table.n
        allocatable = table.allocatable[:n][mask].sum(axis=0)
        requested = table.requested[:n][mask].sum(axis=0)
        # In quota units, as queues count: GPUs in thousandths, shares included.
        scale = [GPU_MILLI if r == GPU else 1 for r in resources]
        capacity = {
            r: int(allocatable[i]) * scale[i] for i, r in enumerate(resources) if allocatable[i]
        }
        used = {r: int(requested[i]) * scale[i] for i, r in enumerate(resources) if capacity.get(r)}
        devices = self.scheduler.cluster.gpu_devices
        if devices is not None and GPU in capacity:
            rows = np.flatnonzero(mask)
            used[GPU] = int(devices.count[rows].sum()) * GPU_MILLI - int(
                devices.total_free(rows).sum()
            )
        return {
            "name": name,
            "nodeSelector": selector,
            "exclusiveTo": exclusive_to,
            "nodes": int(mask.sum()),
            "unschedulableNodes": int(table.unschedulable[:n][mask].sum()),
            "capacity": quantities(capacity),
            "used": quantities(used),
        }

    # ---- explain -------------------------------------------------------------------

    def explain(self, namespace: str, name: str) -> Explanation:
        """One answer for a pod: its queue and quota, its gang, what gates it, and where
        it fits now (a scheduling cycle on this copy of the cluster), with the
        scheduler's own last word (the pod's PodScheduled condition)."""
        key = f"{namespace}/{name}"
        raw = self.backend.pods.store.get(key)
        if raw is None:
            return Explanation(False, False, {"pod": key, "error": f"pod {key} not found"})
        sched = self.scheduler
        meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
        status = raw.get("status") or {}
        uid = str(meta.get("uid", ""))
        answer: dict[str, Any] = {
            "pod": key,
            "schedulerName": spec.get("schedulerName", "default-scheduler"),
            "phase": status.get("phase", ""),
            "node": spec.get("nodeName", ""),
            "condition": _pod_scheduled(status),
        }
        info = sched.known_pod(uid)
        if info is not None:
            answer["queue"] = self._queue_part(info)
            group = sched.gangs.group_of_uid(uid)
            answer["gang"] = None if group is None else self._gang_part(group)
        if answer["node"]:
            answer["summary"] = f"bound to node {answer['node']}"
            return Explanation(True, False, answer)
        if answer["phase"] in ("Succeeded", "Failed"):
            answer["summary"] = f"finished ({answer['phase']})"
            return Explanation(True, False, answer)
        if spec.get("schedulerName", "default-scheduler") not in sched.profiles:
            profiles = ", ".join(sorted(sched.profiles))
            answer["summary"] = (
                f"not scheduled by Shoal: schedulerName {answer['schedulerName']!r} is none of "
                f"this configuration's profiles ({profiles})"
            )
            return Explanation(True, True, answer)
        entry = sched.scheduling_queue.get(uid)
        if info is None or entry is None:
            answer["summary"] = (
                "pending but not in the scheduler's queue: the pod could not be read (see "
                "the scheduler's InvalidObject events) or is being deleted"
            )
            return Explanation(True, True, answer)
        if entry.gated_by:
            answer["gate"] = {"plugin": entry.gated_by, "message": sched.explain(uid)}
            answer["placement"] = None
            answer["nodes"] = self._nodes_part(info)  # every blocker, not just the first
            answer["summary"] = sched.explain(uid)
            return Explanation(True, True, answer)
        answer["gate"] = None
        # Before the attempt (which places the pod in this view): the best nodes now.
        answer["scores"] = [
            {"node": node, "total": total, "plugins": parts}
            for node, total, parts in sched.algorithm.top_scores(
                sched.profiles[info.scheduler_name], info
            )
        ]
        result = sched.attempt(uid)
        if result is None:
            answer["placement"] = None
            answer["summary"] = "the pod is being scheduled right now; ask again"
            return Explanation(True, False, answer)
        # Where this pod went (for a gang, result.node is the first member's node).
        record = sched.cluster.placed.get(uid)
        node = record.node if record is not None else None
        placement: dict[str, Any] = {"fits": node is not None, "node": node or ""}
        if node is None:
            diagnosis = result.diagnosis
            after = sched.scheduling_queue.get(uid)
            if result.node is not None and after is not None:
                # Its gang was placed without it (members beyond minMember).
                placement["message"] = after.message
            else:
                placement["message"] = result.message or result.status.message
            placement["plugin"] = result.status.plugin
            if result.status.plugin in _ADMISSION:
                # Refused before any node was looked at (quota, gang): say where it
                # could go once admitted too.
                answer["nodes"] = self._nodes_part(info)
            if diagnosis is not None:
                placement["nodes"] = diagnosis.num_all_nodes
                placement["reasons"] = dict(sorted(diagnosis.reasons.items()))
                placement["rejectedBy"] = dict(
                    sorted(Counter(p for p in diagnosis.rejected_by if p).items())
                )
                taints = self._taints_part(info, diagnosis)
                if taints:
                    placement["untoleratedTaints"] = taints
            answer["summary"] = placement["message"]
        else:
            answer["summary"] = (
                f"fits now: the next attempt places it on {node} (it may be waiting "
                "for its turn or a backoff)"
            )
        answer["placement"] = placement
        return Explanation(True, node is None, answer)

    def _nodes_part(self, info: Any) -> dict[str, Any] | None:
        """Where the pod would fit on its own, as things are: its profile's PreFilter
        and Filter plugins over every node, leaving out the admission plugins (quota,
        gang) whose verdict the answer gives apart. So a pod held by its gang and its
        queue still shows "Insufficient cpu" when no node could take it anyway."""
        sched = self.scheduler
        fwk = sched.profiles.get(info.scheduler_name)
        if fwk is None:
            return None
        sched.snapshot.refresh()
        n = sched.snapshot.n
        state = CycleState(dry_run=True)
        for plugin in fwk.plugins.pre_filter:
            if plugin.name in _ADMISSION:
                continue
            _, status = plugin.pre_filter(state, info)
            if status.code == Code.SKIP:
                state.skip_filter.add(plugin.name)
            elif not status.ok:
                return {"fits": False, "message": status.message, "plugin": plugin.name}
        every = Candidates.all(n)
        outcome = fwk.run_filters(state, info, every)
        count = int(outcome.passed.sum())
        if count:
            return {"fits": True, "message": f"{count}/{n} nodes could take it on its own"}
        diagnosis = Diagnosis.from_filters(n, every, outcome.results)
        part: dict[str, Any] = {
            "fits": False,
            "message": diagnosis.message(),
            "reasons": dict(sorted(diagnosis.reasons.items())),
        }
        taints = self._taints_part(info, diagnosis)
        if taints:
            part["untoleratedTaints"] = taints
        return part

    def _taints_part(self, info: Any, diagnosis: Diagnosis) -> dict[str, int]:
        """The taints behind "untolerated taint(s)" (which the pod's status does not
        name, as kube): per taint, the nodes TaintToleration rejected first for it."""
        if diagnosis.candidates is None:
            return {}
        first = diagnosis.first_rejected_by(TAINT_TOLERATION)
        if not first.any():
            return {}
        rows = diagnosis.candidates.rows[first]
        return untolerated_taints(self.scheduler.handle, info, rows)

    def _queue_part(self, info: Any) -> dict[str, Any]:
        manager = self.scheduler.tenant_queues
        name = manager.named_queue(info)
        _, error = manager.queue_of(info)
        part: dict[str, Any] = {"name": name, "problem": error}
        if not error:
            part["quota"] = manager.admit(info, table=self.scheduler.cluster.table)
            status = manager.status().get(name, {})
            for key in ("allocated", "guaranteed", "max"):
                amounts = status.get(key)
                part[key] = quantities(amounts) if isinstance(amounts, dict) else {}
        return part

    def _gang_phase(self, group: Any) -> tuple[str, str]:
        """The gang's phase and why, as the running scheduler says them. This view's core
        has not tried to place anything: a gang it finds Pending that the running
        scheduler tried and could not place is Scheduling, with the reason it wrote on
        its members (PodScheduled=False, Unschedulable), as its PodGroup status says."""
        phase = self.scheduler.gangs.observed_phase(group)
        if phase != "Pending" or group.reason:
            return phase, group.reason
        store = self.backend.pods.store
        for info in group.members.values():
            raw = store.get(info.key) or {}
            for condition in (raw.get("status") or {}).get("conditions") or ():
                if (
                    isinstance(condition, dict)
                    and condition.get("type") == "PodScheduled"
                    and condition.get("status") == "False"
                    and condition.get("reason") == "Unschedulable"
                    and condition.get("message")
                ):
                    return "Scheduling", str(condition["message"])
        return phase, group.reason

    def _gang_part(self, group: Any) -> dict[str, Any]:
        phase, reason = self._gang_phase(group)
        part: dict[str, Any] = {
            "name": group.key,
            "phase": phase,
            "minMember": group.min_member,
            "members": len(group.members),
            "scheduled": len(group.bound),
            "reason": reason,
        }
        if group.sub_groups:
            part.update(self._sub_groups_part(group))
        return part


def _pod_scheduled(status: JSON) -> dict[str, str] | None:
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "PodScheduled":
            return {
                k: str(cond[k])
                for k in ("status", "reason", "message", "lastTransitionTime")
                if cond.get(k)
            }
    return None


async def published_configs(connection: Connection) -> tuple[KubeSchedulerConfiguration, str]:
    """The configuration the running Shoal replicas schedule with, as their member Leases
    publish it (annotation `shoal.io/config`, in any namespace), and where it came from.
    Several deployments' profiles are merged by schedulerName; replicas whose Lease has
    expired count only when no replica is live. Without any (no Shoal running, or one
    too old to publish), `shoal run`'s default."""
    from shoal.config import default_config, parse_config
    from shoal.scheduler import default_registry

    client = connection.client("shoal-ctl-config", ClientSettings(user_agent="shoal"))
    try:
        listed = await client.request(
            "GET", LEASES.path(), query={"labelSelector": f"{ROLE_LABEL}=member"}
        )
    except ApiError as err:
        if err.status in (401, 403, 404):
            return default_config(), f"the default (the member Leases cannot be read: {err})"
        raise
    now = datetime.datetime.now(datetime.UTC)
    found: list[tuple[bool, str, KubeSchedulerConfiguration]] = []
    for item in listed.get("items") or []:
        meta = item.get("metadata") or {}
        text = (meta.get("annotations") or {}).get(CONFIG_ANNOTATION)
        if not text:
            continue
        spec = item.get("spec") or {}
        try:
            parsed = parse_config(json.loads(text), source="lease", registry=default_registry())
        except (ValueError, ConfigError):
            continue  # another version's plugins: judged with what can be read
        fresh = _fresh(spec, now)
        where = (
            f"Lease {meta.get('namespace', '')}/{meta.get('name', '')} "
            f"({spec.get('holderIdentity') or 'released'}{'' if fresh else ', expired'})"
        )
        found.append((fresh, where, parsed))
    if not found:
        return default_config(), "the default (no running Shoal publishes its configuration)"
    # The live replicas' configurations; only when none is live, what the last ones
    # published (replicas killed long ago are not the running scheduler).
    used = [f for f in found if f[0]] or found
    used.sort(key=lambda f: f[1])
    merged = used[0][2]
    profiles = {p.scheduler_name: p for p in merged.profiles}
    for _, _, other in used[1:]:
        for profile in other.profiles:
            profiles.setdefault(profile.scheduler_name, profile)
    merged = merged.model_copy(update={"profiles": list(profiles.values())})
    sources = sorted({where for _, where, _ in used})
    return merged, "the running scheduler's, from " + ", ".join(sources)


def _fresh(spec: JSON, now: datetime.datetime) -> bool:
    try:
        renewed = datetime.datetime.fromisoformat(str(spec.get("renewTime", "")))
    except ValueError:
        return False
    if renewed.tzinfo is None:
        renewed = renewed.replace(tzinfo=datetime.UTC)
    duration = float(spec.get("leaseDurationSeconds") or 15)
    return (now - renewed).total_seconds() <= duration


async def load_view(config: KubeSchedulerConfiguration, connection: Connection) -> ClusterView:
    """List every resource `shoal run` watches, once, into a scheduler core of its own.
    Raises `ApiError` if a list fails (CRDs that are not installed are skipped)."""
    options = KubeOptions(identity="shoal-ctl", passive=True, leader_elect=False)
    backend = KubeBackend(config, connection, options)
    pods = backend.informers[PODS.name]
    # Everything but pods first, then pods: pods find their nodes, groups and queues.
    others = [i for i in backend.informers.values() if i is not pods]
    await asyncio.gather(*(i.list_once() for i in others))
    backend.tenancy.ready = True
    backend.tenancy.apply()
    await pods.list_once()
    backend.scheduler.tick()
    return ClusterView(backend)
