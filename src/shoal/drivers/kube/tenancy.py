"""Tenant queue objects from the API, applied to the scheduler.

Queues, QueueBindings, NodePools and ElasticQuotas depend on each other (a binding
names a queue, a queue names pools), and informers deliver them in no particular order.
So the backend keeps the latest object of each kind and hands the scheduler the whole
set with the deletions (`Scheduler.apply_queues`), which validates each object on its
own: the invalid ones are rejected (an edit leaves the version in force) and the rest
applies. Nothing is applied before every informer has synced; after that every change
re-applies the set. Each problem is reported on the object it names (an event and a log
line), e.g. a QueueBinding naming a queue that does not exist, and an object that is
fine again is cleared. A deletion that an object in force still depends on (a parent
queue, a bound queue, a listed pool) waits, and is retried with every later change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from shoal.api.queue import ElasticQuota, NodePool, Queue, QueueBinding
from shoal.drivers.kube.client import JSON
from shoal.drivers.kube.resources import (
    ELASTIC_QUOTAS,
    ELASTIC_QUOTAS_SIGS,
    NODE_POOLS,
    QUEUE_BINDINGS,
    QUEUES,
    ResourceKind,
)
from shoal.scheduler import Scheduler
from shoal.tenancy.validation import problem_subject

__all__ = ["TenancySync"]

_KINDS = {
    "Queue": QUEUES,
    "QueueBinding": QUEUE_BINDINGS,
    "NodePool": NODE_POOLS,
    "ElasticQuota": ELASTIC_QUOTAS,
}

Report = Callable[[ResourceKind, JSON, str], None]


@dataclass
class TenancySync:
    scheduler: Scheduler
    report: Report  # an event + log line on a bad object
    clear: Callable[[ResourceKind, JSON], None]  # the object is fine again
    # Still bad, said already: keep it named (e.g. on /readyz) under its newest version.
    keep: Report = lambda kind, raw, problem: None
    ready: bool = False
    queues: dict[str, Queue] = field(default_factory=dict)
    bindings: dict[str, QueueBinding] = field(default_factory=dict)
    pools: dict[str, NodePool] = field(default_factory=dict)
    elastic: dict[str, ElasticQuota] = field(default_factory=dict)  # by namespace
    raw: dict[tuple[str, str], tuple[ResourceKind, JSON]] = field(default_factory=dict)
    deleted_queues: set[str] = field(default_factory=set)
    deleted_bindings: set[str] = field(default_factory=set)
    deleted_pools: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    _flagged: dict[tuple[str, str], str] = field(default_factory=dict)  # key -> problem

    def upsert(self, kind: ResourceKind, obj: object, raw: JSON) -> None:
        key = _raw_key(obj)
        if key is not None and _status_only(self.raw.get(key), raw):
            # Our own status write coming back through the watch: nothing to apply.
            if isinstance(obj, Queue):
                self.queues[obj.metadata.name] = obj
            elif isinstance(obj, QueueBinding):
                self.bindings[obj.metadata.name] = obj
            elif isinstance(obj, ElasticQuota):
                self.elastic[obj.metadata.namespace or "default"] = obj
            self.raw[key] = (kind, raw)
            problem = self._flagged.get(key)
            if problem is not None:
                # Decoding the new version counted it as fine; it is not.
                self.keep(kind, raw, problem)
            return
        if isinstance(obj, Queue):
            self.queues[obj.metadata.name] = obj
            self.deleted_queues.discard(obj.metadata.name)
            self.raw[("Queue", obj.metadata.name)] = (kind, raw)
        elif isinstance(obj, QueueBinding):
            self.bindings[obj.metadata.name] = obj
            self.deleted_bindings.discard(obj.metadata.name)
            self.raw[("QueueBinding", obj.metadata.name)] = (kind, raw)
        elif isinstance(obj, NodePool):
            self.pools[obj.metadata.name] = obj
            self.deleted_pools.discard(obj.metadata.name)
            self.raw[("NodePool", obj.metadata.name)] = (kind, raw)
        elif isinstance(obj, ElasticQuota):
            namespace = obj.metadata.namespace or "default"
            self.elastic[namespace] = obj
            self.deleted_queues.discard(namespace)
            self.raw[("ElasticQuota", f"{namespace}/{obj.metadata.name}")] = (kind, raw)
        self.apply()

    def remove(self, kind: ResourceKind, namespace: str, name: str) -> None:
        if kind is QUEUES:
            self.queues.pop(name, None)
            self.deleted_queues.add(name)
            self.raw.pop(("Queue", name), None)
        elif kind is QUEUE_BINDINGS:
            self.bindings.pop(name, None)
            self.deleted_bindings.add(name)
            self.raw.pop(("QueueBinding", name), None)
        elif kind is NODE_POOLS:
            self.pools.pop(name, None)
            self.deleted_pools.add(name)
            self.raw.pop(("NodePool", name), None)
        elif kind in (ELASTIC_QUOTAS, ELASTIC_QUOTAS_SIGS):
            namespace = namespace or "default"
            self.elastic.pop(namespace, None)
            self.deleted_queues.add(namespace)
            self.raw.pop(("ElasticQuota", f"{namespace}/{name}"), None)
        self.apply()

    def apply(self) -> list[str]:
        """Apply the desired set; returns the problems (only the objects they name are
        rejected)."""
        if not self.ready:
            return []
        s = self.scheduler
        problems = s.apply_queues(
            list(self.queues.values()),
            list(self.elastic.values()),
            list(self.bindings.values()),
            list(self.pools.values()),
            deleted_queues=sorted(self.deleted_queues),
            deleted_bindings=sorted(self.deleted_bindings),
            deleted_pools=sorted(self.deleted_pools),
        )
        self.problems = problems
        # Deletions that wait for a dependent stay pending.
        in_force = s.tenant_queues.objects
        self.deleted_queues = {
            n for n in self.deleted_queues if n in in_force.queues or n in in_force.elastic
        }
        self.deleted_bindings = {n for n in self.deleted_bindings if n in in_force.bindings}
        self.deleted_pools = {n for n in self.deleted_pools if n in in_force.pools}
        flagged: dict[tuple[str, str], str] = {}
        for problem in problems:
            subject = problem_subject(problem)
            key: tuple[str, str] | None = subject
            found = self.raw.get(key) if key else None
            if found is None and subject is not None:
                # An ElasticQuota is read as a queue named after its namespace.
                key = next(
                    (
                        k
                        for k in self.raw
                        if k[0] == "ElasticQuota" and k[1].split("/")[0] == subject[1]
                    ),
                    None,
                )
                found = self.raw.get(key) if key else None
            if found is not None and key is not None:
                flagged[key] = problem
                self.report(found[0], found[1], problem)
            else:
                kind = _KINDS.get(subject[0], QUEUES) if subject else QUEUES
                self.report(kind, {"metadata": {"name": subject[1] if subject else ""}}, problem)
        for key in self._flagged.keys() - flagged.keys():
            fine = self.raw.get(key)
            if fine is not None:
                self.clear(*fine)
        self._flagged = flagged
        return problems


def _raw_key(obj: object) -> tuple[str, str] | None:
    """Where `TenancySync.raw` keeps an object that has a status written by Shoal."""
    if isinstance(obj, Queue):
        return ("Queue", obj.metadata.name)
    if isinstance(obj, QueueBinding):
        return ("QueueBinding", obj.metadata.name)
    if isinstance(obj, ElasticQuota):
        return ("ElasticQuota", f"{obj.metadata.namespace or 'default'}/{obj.metadata.name}")
    return None


def _status_only(seen: tuple[ResourceKind, JSON] | None, raw: JSON) -> bool:
    """Did only the status (or bookkeeping metadata) change since `seen`?"""
    if seen is None:
        return False
    old = seen[1]
    before, after = old.get("metadata") or {}, raw.get("metadata") or {}
    return (
        old.get("spec") == raw.get("spec")
        and before.get("labels") == after.get("labels")
        and before.get("annotations") == after.get("annotations")
        and before.get("deletionTimestamp") == after.get("deletionTimestamp")
    )
