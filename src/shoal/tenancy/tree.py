"""The queue tree: validated structure plus per-queue quotas as dense arrays.

A tree is built from a valid set of queues (`QueueTree` raises `TreeError` naming every
problem otherwise). `queue_issues` finds the problems of a set and blames each on the
queue whose change caused it, so that `shoal.tenancy.validation` can reject exactly the
bad objects and apply the rest. Quotas live in arrays indexed
[queue, resource] over the resources that any queue names, so admission checks along a
path are a few vector operations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import GPU_MILLI, GpuRequestError, pod_gpu_request
from shoal.api.podinfo import PodInfo
from shoal.api.queue import DEFAULT_QUEUE, ElasticQuota, Queue, QueueOrdering
from shoal.api.resources import GPU, ResourceList, format_amount, parse_quota_list

__all__ = ["UNLIMITED", "Issue", "QueueDef", "QueueTree", "TreeError", "queue_issues"]

UNLIMITED = np.iinfo(np.int64).max // 4


class TreeError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class QueueDef:
    name: str
    parent: str = ""
    weight: int = 1
    guaranteed: dict[str, int] = field(default_factory=dict)
    maximum: dict[str, int] | None = None
    reclaimable: bool = True
    priority: int = 0
    ordering: QueueOrdering = "Priority"
    pools: tuple[str, ...] = ()
    closed: bool = False  # spec.state: Closed
    # Resources whose guarantee the object leaves unset and that are taken as the sum of
    # its children's (shoal.tenancy.validation.defaulted_guarantees).
    defaulted: tuple[str, ...] = ()
    source: str = "Queue"
    object_name: str = ""  # an ElasticQuota's own name (its queue is named by namespace)
    fields: tuple[str, str] = ("spec.guaranteed", "spec.max")  # as the object spells them

    @property
    def ref(self) -> str:
        """The object as problems name it: `Queue team-a`, `ElasticQuota ml/quota`."""
        if self.source == "ElasticQuota":
            return f"ElasticQuota {self.name}/{self.object_name}"
        return f"Queue {self.name}"

    @classmethod
    def from_queue(cls, q: Queue) -> QueueDef:
        spec = q.spec
        return cls(
            name=q.metadata.name,
            parent=spec.parent,
            weight=spec.weight,
            guaranteed=q.guaranteed(),
            maximum=q.maximum(),
            reclaimable=spec.reclaimable,
            priority=spec.priority,
            ordering=spec.ordering,
            pools=tuple(spec.pools),
            closed=spec.state == "Closed",
            fields=("spec.resources.requests", "spec.resources.limits")
            if spec.resources is not None
            else ("spec.guaranteed", "spec.max"),
        )

    @classmethod
    def from_elastic_quota(cls, eq: ElasticQuota) -> QueueDef:
        ns = eq.metadata.namespace or "default"
        return cls(
            name=ns,
            guaranteed=parse_quota_list(eq.spec.min),
            maximum=parse_quota_list(eq.spec.max) or None,
            source="ElasticQuota",
            object_name=eq.metadata.name,
            fields=("spec.min", "spec.max"),
        )


class QueueTree:
    """Immutable once built. Index 0 is the virtual root (the cluster)."""

    def __init__(self, defs: Iterable[QueueDef], default_queue: str = DEFAULT_QUEUE) -> None:
        defs = list(defs)
        if not any(d.name == default_queue for d in defs):
            defs.append(QueueDef(name=default_queue, source="default"))
        by_name: dict[str, QueueDef] = {}
        problems = []
        for d in defs:
            if not d.name:
                problems.append(f"{d.source} <unnamed>: metadata.name is required")
                continue
            if d.name in by_name:
                problems.append(
                    f"{d.ref}: defined twice (by {by_name[d.name].source} and {d.source})"
                )
            by_name[d.name] = d
        problems += [issue.message for issue in queue_issues(by_name)]
        if problems:
            raise TreeError(problems)
        self.default_queue = default_queue
        self.defs: dict[str, QueueDef] = {d.name: d for d in defs}
        self.names: list[str] = ["<root>", *sorted(self.defs)]
        self.index: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        self.parent = np.zeros(len(self.names), dtype=np.intp)
        for name, d in self.defs.items():
            self.parent[self.index[name]] = self.index[d.parent] if d.parent else 0
        self.parent[0] = -1
        self.children: dict[int, list[int]] = {i: [] for i in range(len(self.names))}
        for i in range(1, len(self.names)):
            self.children[int(self.parent[i])].append(i)
        self.leaves = frozenset(i for i, kids in self.children.items() if not kids and i)
        # path from a queue up to (excluding) the root
        self.paths: dict[int, NDArray[np.intp]] = {}
        for i in range(1, len(self.names)):
            path = []
            j = i
            while j > 0:
                path.append(j)
                j = int(self.parent[j])
            self.paths[i] = np.array(path, dtype=np.intp)
        self.path_lists: dict[int, list[int]] = {i: p.tolist() for i, p in self.paths.items()}
        # The nearest closed queue on each queue's path (itself first), 0 if none is.
        self.closed_by: list[int] = [0] * len(self.names)
        for i, path in self.path_lists.items():
            self.closed_by[i] = next((j for j in path if self.defs[self.names[j]].closed), 0)
        # Quota resources, plus the ones fair share always looks at.
        resources: set[str] = {"cpu", "memory", "nvidia.com/gpu"}
        for d in defs:
            resources.update(d.guaranteed)
            resources.update(d.maximum or {})
        self.resources = sorted(resources)
        self.resource_index = {r: k for k, r in enumerate(self.resources)}
        q, r = len(self.names), len(self.resources)
        self.guaranteed = np.zeros((q, r), dtype=np.int64)
        self.maximum = np.full((q, r), UNLIMITED, dtype=np.int64)
        self.weight = np.ones(q, dtype=np.float64)
        for name, d in self.defs.items():
            i = self.index[name]
            self.weight[i] = d.weight
            for res, amount in d.guaranteed.items():
                self.guaranteed[i, self.resource_index[res]] = amount
            for res, amount in (d.maximum or {}).items():
                self.maximum[i, self.resource_index[res]] = amount

        # Resources some queue guarantees or caps (the others are not under quota).
        guaranteed = np.any(self.guaranteed[1:] > 0, axis=0)
        capped = np.any(self.maximum[1:] < UNLIMITED, axis=0)
        self.quota_mask: NDArray[np.bool_] = np.asarray(guaranteed | capped, dtype=bool)
        # Plain lists for the per-pop fair-share walk (faster than numpy scalars).
        self.weight_list: list[float] = self.weight.tolist()
        self.maximum_lists: list[list[int]] = self.maximum.tolist()
        self.guaranteed_lists: list[list[int]] = self.guaranteed.tolist()
        self.quota_list: list[bool] = self.quota_mask.tolist()
        self._vectors: dict[object, NDArray[np.int64]] = {}
        # What a pod's DRA claims ask for, (resource, devices) (shoal.tenancy.devices);
        # set by the QueueManager when the cluster has a device catalog.
        self.device_charges: Callable[[PodInfo], tuple[tuple[str, int], ...]] | None = None
        self.children_list: list[list[int]] = [self.children[i] for i in range(q)]

    def vector(self, amounts: ResourceList) -> NDArray[np.int64]:
        """Quota-unit amounts over the tree's quota resources (others do not count for
        quota). Cached by shape: workloads repeat a few shapes. Do not mutate."""
        key = tuple(amounts.items())
        vec = self._vectors.get(key)
        if vec is None:
            vec = np.array([amounts.get(r, 0) for r in self.resources], dtype=np.int64)
            vec.flags.writeable = False
            if len(self._vectors) < 4096:
                self._vectors[key] = vec
        return vec

    def charge(self, pod: PodInfo) -> NDArray[np.int64]:
        """What the pod charges its queue, in quota units: its requests, with
        nvidia.com/gpu in milli-GPU, so a GPU share (`alibabacloud.com/gpu-milli`)
        charges its fraction of a GPU per device and a whole GPU 1000, plus the devices
        its DRA claims ask for (`device_charges`). Do not mutate."""
        requests = pod.requests
        try:
            request = pod_gpu_request(pod)
            # Sized by memory alone (vGPU memory, aliyun.com/gpu-mem): what the spec
            # asks of nvidia.com/gpu (HAMi's vGPUs; none for the others, whose memory
            # resource is charged by its own name).
            gpu = request.total_milli if request.milli else requests.get(GPU, 0) * GPU_MILLI
        except GpuRequestError:  # refused by GpuShare; count what the spec asks
            gpu = requests.get(GPU, 0) * GPU_MILLI
        devices = (
            self.device_charges(pod)
            if self.device_charges is not None and pod.pod.spec.resource_claims
            else ()
        )
        key = (tuple(requests.items()), gpu, devices)
        vec = self._vectors.get(key)
        if vec is None:
            claimed = dict(devices)
            gpu += claimed.pop(GPU, 0) * GPU_MILLI
            vec = np.array(
                [
                    gpu if r == GPU else requests.get(r, 0) + claimed.get(r, 0)
                    for r in self.resources
                ],
                dtype=np.int64,
            )
            vec.flags.writeable = False
            if len(self._vectors) < 4096:
                self._vectors[key] = vec
        return vec

    def is_leaf(self, name: str) -> bool:
        i = self.index.get(name)
        return i is not None and i in self.leaves

    def has_limits(self) -> bool:
        """Whether any queue sets a maximum (else admission never rejects)."""
        return bool((self.maximum[1:] < UNLIMITED).any())


@dataclass(frozen=True)
class Issue:
    """A problem with one object, blamed on the object whose change caused it.

    `blame` is (kind, name): kind "Queue" covers ElasticQuotas too (they are queues named
    after their namespace); "QueueBinding" and "NodePool" name those objects. Normally the
    blamed object's change is undone (rejected); with `restore` the blamed object is one
    being deleted, and the deletion waits (the object stays in force) because
    `message`'s object still depends on it."""

    message: str
    blame: tuple[str, str]
    restore: bool = False


def queue_issues(
    defs: dict[str, QueueDef],
    changed: Callable[[str], bool] = lambda name: True,
    dropped: frozenset[str] = frozenset(),
    deleted: frozenset[str] = frozenset(),
) -> list[Issue]:
    """Problems of a set of queues (by name), each blamed on a queue that changed.

    `changed(name)`: whether the queue is new or differs from the version in force (the
    set in force is valid, so every problem involves a change). `dropped`: queues whose
    new version was rejected (their dependents are told so); `deleted`: queues being
    deleted (a queue in force still depending on one keeps it in force)."""
    issues: list[Issue] = []

    def missing(d: QueueDef) -> Issue:
        subject = f"{d.ref}: spec.parent {d.parent!r}"
        if changed(d.name) or d.parent not in deleted:
            if d.parent in dropped:
                return Issue(
                    f"{subject} was rejected (see its own problem); fix Queue {d.parent} first",
                    ("Queue", d.name),
                )
            return Issue(f"{subject} does not exist; create it or fix the name", ("Queue", d.name))
        return Issue(
            f"{subject} is being deleted; delete this queue or change spec.parent first "
            f"(Queue {d.parent} stays in force until then)",
            ("Queue", d.parent),
            restore=True,
        )

    for d in defs.values():
        for res, g in d.guaranteed.items():
            m = (d.maximum or {}).get(res)
            if m is not None and g > m:
                issues.append(
                    Issue(
                        f"{d.ref}: {d.fields[0]}.{res} ({format_amount(res, g)}) exceeds "
                        f"{d.fields[1]}.{res} ({format_amount(res, m)}); "
                        "lower the guarantee or raise the maximum",
                        ("Queue", d.name),
                    )
                )
        if d.parent and d.parent not in defs:
            issues.append(missing(d))
    # Cycles: every queue on one is reported; the ones that changed are rejected.
    on_cycle: set[str] = set()
    for d in defs.values():
        seen: list[str] = []
        name = d.name
        while name and name in defs and name not in seen and name not in on_cycle:
            seen.append(name)
            name = defs[name].parent
        if name in seen:
            cycle = seen[seen.index(name) :]
            on_cycle.update(cycle)
            path = " -> ".join([*cycle, name])
            blamed = [q for q in cycle if changed(q)] or cycle
            issues += [
                Issue(
                    f"{defs[q].ref}: spec.parent forms a cycle ({path}); point one of them "
                    "elsewhere",
                    ("Queue", q),
                )
                for q in blamed
            ]
    if on_cycle:
        return issues
    kids: dict[str, list[QueueDef]] = {}
    for d in defs.values():
        if d.parent in defs:
            kids.setdefault(d.parent, []).append(d)
    for parent, children in kids.items():
        pd = defs[parent]
        total: dict[str, int] = {}
        for c in children:
            for res, g in c.guaranteed.items():
                total[res] = total.get(res, 0) + g
        for res, t in total.items():
            pg = pd.guaranteed.get(res, 0)
            if t <= pg:
                continue
            if changed(parent):
                issues.append(
                    Issue(
                        f"{pd.ref}: children's spec.guaranteed.{res} add up to "
                        f"{format_amount(res, t)}, more than its own guarantee "
                        f"{format_amount(res, pg)}; raise the parent's guarantee or lower the "
                        "children's",
                        ("Queue", parent),
                    )
                )
                continue
            issues += [
                Issue(
                    f"{c.ref}: {c.fields[0]}.{res} ({format_amount(res, c.guaranteed[res])}) "
                    f"does not fit in parent {parent}'s guarantee ({format_amount(res, pg)}; "
                    f"its children's add up to {format_amount(res, t)}); "
                    "lower it or raise the parent's guarantee",
                    ("Queue", c.name),
                )
                for c in children
                if c.guaranteed.get(res, 0) > 0 and changed(c.name)
            ]
        for c in children:
            for res, m in (c.maximum or {}).items():
                pm = (pd.maximum or {}).get(res)
                if pm is None or m <= pm:
                    continue
                if changed(c.name) or not changed(parent):
                    issues.append(
                        Issue(
                            f"{c.ref}: {c.fields[1]}.{res} ({format_amount(res, m)}) exceeds "
                            f"its parent {parent}'s max ({format_amount(res, pm)}); it can never "
                            "use more than the parent",
                            ("Queue", c.name),
                        )
                    )
                else:
                    issues.append(
                        Issue(
                            f"{pd.ref}: {pd.fields[1]}.{res} ({format_amount(res, pm)}) is below "
                            f"its child {c.name}'s max ({format_amount(res, m)}); raise it or "
                            "lower the child's first",
                            ("Queue", parent),
                        )
                    )
    return issues
