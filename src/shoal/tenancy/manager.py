"""QueueManager: which queue a pod belongs to, what each queue and each job uses, and
whether a placement keeps every queue on its path within its maximum.

Usage is charged to pods, not node rows: the manager is an `AssignmentObserver` of the
cluster state, told when a pod is assigned to a node (assumed or bound) or released,
whether or not the node is in the cache, so a node that drops out of the cache for a
while does not make its pods' usage disappear. Usage is kept per queue (its whole
subtree) in an int64 array [queue, resource], and per job (a gang, or a pod on its own)
for DRF ordering, updated incrementally, so the admission check is a vector compare
along the pod's path. The QueueCapacity plugin is a thin adapter over this manager
(PreFilter = admission, PostFilter = reclaim).

A pod's queue, first match wins: the label `shoal.dev/queue`; Volcano's pod annotation
`scheduling.volcano.sh/queue-name`; the `spec.queue` of its Volcano PodGroup; its
namespace's QueueBinding; its namespace's ElasticQuota; the default queue.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import GPU_MILLI
from shoal.api.objects import LabelSelector, Pod
from shoal.api.podgroup import group_of
from shoal.api.podinfo import PodInfo, qos_class
from shoal.api.queue import (
    DEFAULT_QUEUE,
    QUEUE_LABEL,
    VOLCANO_QUEUE_ANNOTATION,
    ElasticQuota,
    NodePool,
    Queue,
    QueueBinding,
)
from shoal.api.resources import GPU, format_amount
from shoal.api.selectors import label_selector_matches
from shoal.cache.cluster import ClusterState
from shoal.cache.dra import SERVICE_KEY as DRA_SERVICE
from shoal.cache.dra import DeviceCatalog
from shoal.cache.node_table import NodeColumns
from shoal.framework.effects import BindingStatus, QueueStatus
from shoal.framework.handle import Handle
from shoal.tenancy.devices import claim_charges
from shoal.tenancy.fairshare import choose_leaf, fair_shares, hdrf_fair_share
from shoal.tenancy.tree import UNLIMITED, QueueDef, QueueTree
from shoal.tenancy.validation import TenancyObjects, problem_subject, reconcile

__all__ = ["SERVICE_KEY", "QueueManager", "QueueObservation", "Refusal"]

SERVICE_KEY = "shoal.tenancy"

QueueObservation = tuple[str, dict[str, int], dict[str, int], dict[str, int], int, int]
"""name, allocated, guaranteed, fair share (resource -> amount), pending pods, running pods"""


class Refusal(NamedTuple):
    """Why a queue limit keeps a pod out (`QueueManager.refusal`)."""

    reason: str
    # Refused only by the maximum of a queue on the pod's path (its leaf or one above):
    # the other rules would admit it once pods of its leaf freed what the max needs,
    # so lower-priority pods of its own leaf queue going can let it in (within-queue
    # preemption). Never set for the borrowing rule or a QueueBinding's limits, nor
    # for a max when the borrowing rule would refuse the pod under it too: capacity
    # owed to other queues is reclaim's to take back.
    max_only: bool = False


@dataclass
class _Placed:
    leaf: int
    vector: NDArray[np.int64]
    pod: PodInfo
    job: str


@dataclass
class _Job:
    usage: NDArray[np.int64]  # over the tree's resources
    pods: int


class QueueManager:
    def __init__(self, default_queue: str = DEFAULT_QUEUE) -> None:
        self.default_queue = default_queue
        self.objects = TenancyObjects()  # in force (always a valid set)
        self.namespace_labels: dict[str, dict[str, str]] = {}
        # Volcano PodGroups' spec.queue: group key (namespace/name) -> queue name.
        self.group_queues: dict[str, str] = {}
        self.tree = QueueTree([], default_queue)
        self._has_quota = False
        self._capped: frozenset[int] = frozenset()  # leaves with a max on their path
        self.usage = np.zeros_like(self.tree.guaranteed)
        self._placed: dict[str, _Placed] = {}
        # Every pod assigned to a node, charged or not: one whose queue does not exist
        # yet (its Queue arrives after it, or is deleted and re-created) is charged the
        # moment the tree has it, so usage is always what is bound.
        self._assigned: dict[str, PodInfo] = {}
        self._by_leaf: dict[int, set[str]] = {}  # leaf -> uids placed there
        self._jobs: dict[str, _Job] = {}  # job key -> what its placed pods use
        self._leaf_of: dict[str, tuple[int, str]] = {}  # uid -> (leaf, error), cached
        self.pending = Counter[int]()  # leaf -> pods waiting (maintained by the scheduler)
        self.pending_sum = np.zeros_like(self.tree.guaranteed)  # leaf -> pending requests
        # uid -> (leaf, request) the pod's pending counts went to, so they leave the same
        # leaf even if its queue changes meanwhile.
        self._pending: dict[str, tuple[int, NDArray[np.int64]]] = {}
        self._pending_job: dict[str, str] = {}  # uid -> job, for pending jobs per queue
        self.share_list = [0.0] * len(self.tree.names)  # dominant share per queue
        self.saturated_list = [False] * len(self.tree.names)  # at its max somewhere
        self.active_list = [0] * len(self.tree.names)  # active pods per subtree
        self.active_unqueued = 0  # active pods whose queue is unusable
        self.on_install: list[Callable[[], None]] = []
        self.cluster: ClusterState | None = None  # for cluster capacity (DRF shares)
        # The handle's services, where the DRA device catalog is (claims charge queues).
        self.services: dict[str, object] | None = None
        self._capacity_key: tuple[int, int] = (-1, -1)
        self._capacity = np.zeros(0)
        self._capacity_list: list[float] = []
        self.pods_per_namespace = Counter[str]()
        # Running jobs per namespace: job key -> placed pods (a job is a pod group, or a
        # pod on its own). `job_of` is wired by the scheduler to the gang manager.
        self.jobs_per_namespace: dict[str, Counter[str]] = {}
        self.job_of: Callable[[PodInfo], str] = lambda pod: pod.uid
        self.version = 0  # bumped when the tree, bindings or pools change
        # Queue name -> why its object (or its latest edit) was rejected, for its status.
        self.rejected: dict[str, str] = {}

    def _device_charges(self, pod: PodInfo) -> tuple[tuple[str, int], ...]:
        catalog = self.services.get(DRA_SERVICE) if self.services is not None else None
        if not isinstance(catalog, DeviceCatalog):
            return ()
        return claim_charges(pod, catalog)

    @classmethod
    def of(cls, handle: Handle) -> QueueManager:
        manager = handle.services.get(SERVICE_KEY)
        if manager is None:
            manager = handle.services[SERVICE_KEY] = cls()
            manager.cluster = handle.cluster
            manager.services = handle.services
            manager.tree.device_charges = manager._device_charges
            handle.cluster.assignment_observers.append(manager)
        assert isinstance(manager, QueueManager)
        return manager

    @property
    def bindings(self) -> dict[str, QueueBinding]:
        return self.objects.bindings

    @property
    def pools(self) -> dict[str, NodePool]:
        return self.objects.pools

    # ---- objects (each validated on its own) ----------------------------------------

    def apply(
        self,
        queues: Iterable[Queue] = (),
        elastic_quotas: Iterable[ElasticQuota] = (),
        deleted: Iterable[str] = (),
        *,
        bindings: Iterable[QueueBinding] = (),
        pools: Iterable[NodePool] = (),
        deleted_bindings: Iterable[str] = (),
        deleted_pools: Iterable[str] = (),
    ) -> list[str]:
        """Add, replace or delete queue objects (`deleted` names Queues, and namespaces
        whose ElasticQuota went). Each object is validated on its own: the invalid ones
        are rejected (an edit leaves the version in force, a deletion that an object in
        force still depends on waits) and the rest applies. Returns the problems, each
        naming its object, the field and the fix."""
        queues = list(queues)
        deleted = list(deleted)
        desired = self.objects.copy()
        for name in deleted:
            desired.queues.pop(name, None)
            desired.elastic.pop(name, None)
        for name in deleted_bindings:
            desired.bindings.pop(name, None)
        for name in deleted_pools:
            desired.pools.pop(name, None)
        for q in queues:
            desired.queues[q.metadata.name] = q
        for eq in elastic_quotas:
            desired.elastic[eq.metadata.namespace or "default"] = eq
        for b in bindings:
            desired.bindings[b.metadata.name] = b
        for p in pools:
            desired.pools[p.metadata.name] = p
        accepted, problems = reconcile(self.objects, desired, self.default_queue)
        self._commit(accepted)
        for name in (*deleted, *(q.metadata.name for q in queues)):
            self.rejected.pop(name, None)  # judged again just now
        for problem in problems:
            subject = problem_subject(problem)
            if subject is not None and subject[0] == "Queue":
                self.rejected.setdefault(subject[1], problem)
        return problems

    def apply_bindings(
        self, bindings: Iterable[QueueBinding], deleted: Iterable[str] = ()
    ) -> list[str]:
        return self.apply(bindings=bindings, deleted_bindings=deleted)

    def apply_pools(self, pools: Iterable[NodePool], deleted: Iterable[str] = ()) -> list[str]:
        return self.apply(pools=pools, deleted_pools=deleted)

    def _commit(self, accepted: TenancyObjects) -> None:
        old = self.objects
        self.objects = accepted
        defs = accepted.defs(self.default_queue)
        if defs != self.tree.defs:
            self._install(QueueTree(defs.values(), self.default_queue))
            return
        if accepted.pools != old.pools:
            self.version += 1
        if accepted.bindings != old.bindings:
            self._reindex()

    def _install(self, tree: QueueTree) -> None:
        tree.device_charges = self._device_charges
        self.tree = tree
        self._has_quota = bool(tree.quota_mask.any())
        capped: list[bool] = np.any(tree.maximum < UNLIMITED, axis=1).tolist()
        self._capped = frozenset(
            leaf for leaf in tree.leaves if any(capped[q] for q in tree.path_lists[leaf])
        )
        self._capacity_key = (-1, -1)
        self._reindex()

    def _reindex(self) -> None:
        """Pods' queues may have changed (new tree, bindings or namespace labels): count
        every placed pod again and let the scheduling queue re-file its pods."""
        tree = self.tree
        self.version += 1
        self._leaf_of.clear()
        self._placed.clear()
        self._by_leaf.clear()
        self._jobs.clear()
        self.usage = np.zeros_like(tree.guaranteed)
        self.pods_per_namespace.clear()
        self.jobs_per_namespace.clear()
        self.pending.clear()
        self.pending_sum = np.zeros_like(tree.guaranteed)
        self._pending.clear()
        self._pending_job.clear()
        self.active_unqueued = 0
        self.share_list = [0.0] * len(tree.names)
        self.saturated_list = [False] * len(tree.names)
        self.active_list = [0] * len(tree.names)
        for pod in self._assigned.values():
            self._charge(pod)
        self._refresh_shares(list(range(1, len(tree.names))))
        for hook in self.on_install:  # the scheduling queue re-files and re-announces
            hook()

    def set_group_queue(self, group: str, queue: str, members: Iterable[PodInfo] = ()) -> bool:
        """A Volcano PodGroup (key `namespace/name`) names its queue ("" for none). Its
        known `members` move to their new queue, running or pending; returns whether the
        queue changed (the caller re-files the members waiting in the scheduling queue)."""
        if self.group_queues.get(group, "") == queue:
            return False
        if queue:
            self.group_queues[group] = queue
        else:
            self.group_queues.pop(group, None)
        for pod in members:
            self._refile(pod)
        return True

    def set_namespace_labels(self, namespace: str, labels: dict[str, str]) -> bool:
        """A namespace's labels (for QueueBindings' namespaceSelector). Returns whether
        that moved the namespace to another queue."""
        before = self._bound_queue(namespace)
        self.namespace_labels[namespace] = dict(labels)
        if self._bound_queue(namespace) == before:
            return False
        self._reindex()
        return True

    def _refile(self, pod: PodInfo) -> None:
        """The pod's queue may have changed: move its pending counts and its usage."""
        uid = pod.uid
        self._leaf_of.pop(uid, None)
        waiting = self._pending.pop(uid, None)
        if waiting is not None:
            leaf, vec = waiting
            self.pending[leaf] -= 1
            self.pending_sum[leaf] -= vec
            self.on_pending(pod, 1)
        assigned = self._assigned.get(uid)
        if assigned is not None:
            self._discharge(uid)
            self._charge(assigned)

    # ---- which queue ---------------------------------------------------------------

    def queue_of(self, pod: PodInfo) -> tuple[int, str]:
        """(leaf index, "") or (-1, why the pod has no usable queue)."""
        cached = self._leaf_of.get(pod.uid)
        if cached is not None:
            return cached
        name, source = self._named_queue(pod.pod)
        tree = self.tree
        if name not in tree.index:
            found = (
                -1,
                f"queue {name!r} does not exist ({source} names it); create the Queue or fix "
                "the name",
            )
        elif not tree.is_leaf(name):
            found = (
                -1,
                f"queue {name!r} is not a leaf queue ({source} names it); only leaves hold "
                "workloads",
            )
        else:
            found = (tree.index[name], "")
        self._leaf_of[pod.uid] = found
        return found

    def closed_reason(self, pod: PodInfo) -> str:
        """Why the pod may not start because its queue, or one above it, is closed
        (spec.state: Closed); "" if its queue admits it (or it has no usable queue:
        admission says why)."""
        leaf, error = self.queue_of(pod)
        if error:
            return ""
        tree = self.tree
        closed = tree.closed_by[leaf]
        if not closed:
            return ""
        name = tree.names[closed]
        where = f"queue {name}" if closed == leaf else f"queue {name} (above {tree.names[leaf]})"
        return (
            f"{where} is closed (spec.state: Closed): it admits no new pods until it is "
            f"opened again (shoal queue open {name})"
        )

    @property
    def closed_queues(self) -> frozenset[str]:
        return frozenset(n for n, d in self.tree.defs.items() if d.closed)

    def named_queue(self, pod: PodInfo) -> str:
        """The queue the pod is in by the scheduler's precedence (label, Volcano
        annotation, its PodGroup's queue, QueueBinding, ElasticQuota, default), whether or
        not that queue exists (for reports: a typo shows under the name given)."""
        cached = self._leaf_of.get(pod.uid)
        if cached is not None and not cached[1]:
            return self.tree.names[cached[0]]
        return self._named_queue(pod.pod)[0]

    def capped_queue_of(self, pod: Pod) -> str:
        """The queue of a pod not yet known to the scheduler when that queue or one
        above it has a max ("" otherwise): what must be decided in one place for the
        max to hold."""
        tree = self.tree
        if len(tree.names) <= 1:
            return ""
        name = self._named_queue(pod)[0]
        index = tree.index.get(name)
        if index is None:
            return ""
        path = tree.paths.get(index)
        if path is None or not bool((tree.maximum[path] < UNLIMITED).any()):
            return ""
        return name

    def _named_queue(self, pod: Pod) -> tuple[str, str]:
        """The pod's queue name and what names it."""
        if name := pod.metadata.labels.get(QUEUE_LABEL):
            return name, f"label {QUEUE_LABEL}"
        if name := pod.metadata.annotations.get(VOLCANO_QUEUE_ANNOTATION):
            return name, f"annotation {VOLCANO_QUEUE_ANNOTATION}"
        if self.group_queues:
            try:
                ref = group_of(pod)
            except ValueError:
                ref = None  # the gang manager reports a malformed key
            if ref is not None and (name := self.group_queues.get(ref.key, "")):
                return name, f"spec.queue of Volcano PodGroup {ref.key}"
        namespace = pod.metadata.namespace or "default"
        if (b := self.binding_of(namespace)) is not None:
            return b.spec.queue, f"QueueBinding {b.metadata.name}"
        # An ElasticQuota in the namespace makes that namespace its own leaf queue.
        if namespace in self.objects.elastic:
            return namespace, f"the ElasticQuota of namespace {namespace}"
        return self.default_queue, "the default queue"

    def _bound_queue(self, namespace: str) -> str:
        b = self.binding_of(namespace)
        return b.spec.queue if b is not None else ""

    def binding_of(self, namespace: str) -> QueueBinding | None:
        """The QueueBinding that binds `namespace`: one that lists it by name, else one
        whose namespaceSelector matches its labels. Its limits (maxPods,
        maxRunningJobs) apply to the namespace either way."""
        for b in self.bindings.values():
            if namespace in b.spec.namespaces:
                return b
        labels = self.namespace_labels.get(namespace, {})
        for b in self.bindings.values():
            sel: LabelSelector | None = b.spec.namespace_selector
            if sel is not None and label_selector_matches(sel, labels):
                return b
        return None

    # ---- pending work and fair-share order ------------------------------------------

    def partition_of(self, pod: PodInfo) -> int:
        leaf, error = self.queue_of(pod)
        return 0 if error else leaf

    def on_active_delta(self, partition: int, delta: int) -> None:
        if partition <= 0:
            self.active_unqueued += delta
        else:
            for q in self.tree.path_lists[partition]:
                self.active_list[q] += delta
        self.active_list[0] += delta

    def on_pending(self, pod: PodInfo, delta: int) -> None:
        if delta > 0:
            leaf, error = self.queue_of(pod)
            if error or pod.uid in self._pending:
                return
            vec = self.tree.charge(pod)
            self._pending[pod.uid] = (leaf, vec)
            self._pending_job[pod.uid] = self.job_of(pod)
            self.pending[leaf] += 1
            self.pending_sum[leaf] += vec
            return
        waiting = self._pending.pop(pod.uid, None)
        self._pending_job.pop(pod.uid, None)
        if waiting is not None:
            leaf, vec = waiting
            self.pending[leaf] -= 1
            self.pending_sum[leaf] -= vec
        if pod.uid not in self._placed:
            self._leaf_of.pop(pod.uid, None)  # gone (or back later: looked up again)

    def _refresh_shares(self, queues: list[int]) -> None:
        """Dominant share and saturation of these queues (kept current for the HDRF walk).
        Plain Python: a path is a few queues over a few resources."""
        cap = self._capacity_list
        if len(cap) != self.usage.shape[1]:
            return  # capacity not known yet: `capacity()` recomputes every queue
        maximum = self.tree.maximum_lists
        for q in queues:
            share = 0.0
            saturated = False
            for used, c, m in zip(self.usage[q].tolist(), cap, maximum[q], strict=True):
                if c > 0 and used / c > share:
                    share = used / c
                if used >= m:
                    saturated = True
            self.share_list[q] = share
            self.saturated_list[q] = saturated

    def capacity(self, table: NodeColumns) -> NDArray[np.float64]:
        """Cluster allocatable over the tree's resources (for dominant shares)."""
        key = (table.nodes_version, id(self.tree))
        if key != self._capacity_key:
            cols = [table.resource_index.get(r, -1) for r in self.tree.resources]
            n = table.n
            # Node columns count GPUs whole; queues count milli-GPU (quota units).
            scale = [GPU_MILLI if r == GPU else 1 for r in self.tree.resources]
            self._capacity = np.array(
                [
                    float(table.allocatable[:n, c].sum()) * k if c >= 0 else 0.0
                    for c, k in zip(cols, scale, strict=True)
                ]
            )
            self._capacity_key = key
            self._capacity_list = self._capacity.tolist()
            self._refresh_shares(list(range(1, len(self.tree.names))))
        return self._capacity

    def choose_partition(self) -> int:
        """The leaf queue whose pod is tried next (HDRF), 0 for pods without a queue
        (the scheduling queue's `Partitions`)."""
        if self.active_unqueued > 0:
            return 0
        tree = self.tree
        if len(tree.leaves) == 1:
            return next(iter(tree.leaves))
        if self.cluster is not None:
            self.capacity(self.cluster.table)  # refreshes shares when nodes changed
        return choose_leaf(tree, self.active_list, self.share_list, self.saturated_list)

    def order_key(self, pod: PodInfo, base: tuple[object, ...]) -> tuple[object, ...]:
        """The queue's ordering policy applied to the profile's QueueSort key
        (`base` starts with -priority)."""
        leaf, error = self.queue_of(pod)
        if error:
            return base
        ordering = self.tree.defs[self.tree.names[leaf]].ordering
        if ordering == "Priority":
            return base
        if ordering == "FIFO":
            return base[1:]
        if ordering == "QoS":
            return (base[0], qos_rank(pod), *base[1:])
        # DRF among jobs: the job (gang or pod) using the smallest dominant share first.
        return (self.job_share(self.job_of(pod)), *base)

    def job_share(self, job: str) -> float:
        """The dominant share of the cluster that a job's placed pods use (0 for a job
        with none): max over resources of its usage / the cluster's allocatable."""
        record = self._jobs.get(job)
        if record is None:
            return 0.0
        if self.cluster is not None:
            self.capacity(self.cluster.table)
        share = 0.0
        for used, c in zip(record.usage.tolist(), self._capacity_list, strict=False):
            if c > 0 and used / c > share:
                share = used / c
        return share

    # ---- admission -----------------------------------------------------------------

    def admit(
        self,
        pod: PodInfo,
        table: NodeColumns | None = None,
        ahead: Callable[[], Iterable[PodInfo]] | None = None,
    ) -> str:
        """Why placing the pod would break a queue limit ("" if it would not); see
        `refusal`."""
        refused = self.refusal(pod, table, ahead)
        return refused.reason if refused is not None else ""

    def refusal(
        self,
        pod: PodInfo,
        table: NodeColumns | None = None,
        ahead: Callable[[], Iterable[PodInfo]] | None = None,
    ) -> Refusal | None:
        """Why placing the pod would break a queue limit (None if it would not).

        The rules: its namespace's QueueBinding stays within maxPods and
        maxRunningJobs; every queue on the pod's path stays within its maximum; and a
        queue that would go above its guarantee (borrow) may only use capacity that no
        other queue is waiting for up to its own guarantee (given `table`, for
        capacity). `ahead`: the pods that come first (nominated preemptors of higher or
        equal priority), asked for only when a queue on the pod's path has a max and
        the pod fits the maxima without them: what they will use is held for them in
        every queue they share with this pod, as kube holds a nominated pod's room on
        its node.

        A refusal by a maximum that the other rules would not add to (they would admit
        the pod once pods of its leaf queue freed what the max needs) is `max_only`:
        lower-priority pods of its own leaf queue going can let it in.
        """
        leaf, error = self.queue_of(pod)
        if error:
            return Refusal(error)
        binding = self.binding_of(pod.namespace)
        limit = binding.spec.max_pods if binding is not None else None
        if (
            binding is not None
            and limit is not None
            and (self.pods_per_namespace[pod.namespace] + 1 > limit)
        ):
            return Refusal(
                f"QueueBinding {binding.metadata.name}: namespace {pod.namespace} already "
                f"runs {self.pods_per_namespace[pod.namespace]} pods (maxPods "
                f"{binding.spec.max_pods})"
            )
        jobs_limit = binding.spec.max_running_jobs if binding is not None else None
        if binding is not None and jobs_limit is not None:
            running = self.jobs_per_namespace.get(pod.namespace, Counter())
            if self.job_of(pod) not in running and len(running) + 1 > jobs_limit:
                return Refusal(
                    f"QueueBinding {binding.metadata.name}: namespace {pod.namespace} already "
                    f"runs {len(running)} jobs (maxRunningJobs {jobs_limit})"
                )
        tree = self.tree
        if not self._has_quota:
            return None
        vec = tree.charge(pod)
        asked = vec.tolist()
        held: dict[int, list[int]] | None = None
        over = self._over_max(leaf, asked, {})
        if not over and ahead is not None and leaf in self._capped:
            held = self._held_for(leaf, ahead())
            if held:
                over = self._over_max(leaf, asked, held)
        if not over:
            borrowing = self._borrow_refusal(leaf, vec, asked, table)
            return Refusal(borrowing) if borrowing else None
        # Refused by a max. Within-queue preemption may resolve it only when the other
        # rules would admit the pod once pods of its leaf freed what the max needs: if
        # the borrowing rule would still refuse it there, the capacity is owed to other
        # queues (reclaim's business), and taking more of its own queue's pods for it
        # would do reclaim's job without reclaim's rules.
        if held is None:
            held = self._held_for(leaf, ahead()) if ahead is not None else {}
        freed = self._max_excess(leaf, asked, held)
        return Refusal(over, max_only=not self._borrow_refusal(leaf, vec, asked, table, freed))

    def _over_max(self, leaf: int, asked: list[int], held: dict[int, list[int]]) -> str:
        """Why the pod (asking `asked`) would take a queue on `leaf`'s path above its
        maximum, counting what is `held` there for pods ahead of it ("" if it would
        not). Plain Python over the path: a few queues x a few resources, the common
        case being "fits" (numpy's per-call overhead would dominate here)."""
        tree = self.tree
        maximum = tree.maximum_lists
        for q in tree.path_lists[leaf]:
            kept = held.get(q)
            for k, (used, want, cap) in enumerate(
                zip(self.usage[q].tolist(), asked, maximum[q], strict=True)
            ):
                hold = kept[k] if kept is not None else 0
                if used + hold + want > cap:
                    res = tree.resources[k]
                    holding = (
                        f" (+{format_amount(res, hold)} held for nominated pods of higher "
                        "or equal priority)"
                        if hold
                        else ""
                    )
                    return (
                        f"queue {tree.names[q]} would exceed its max {res}: uses "
                        f"{format_amount(res, used)}{holding}, pod asks "
                        f"{format_amount(res, want)}, max {format_amount(res, cap)}"
                    )
        return ""

    def _max_excess(
        self, leaf: int, asked: list[int], held: dict[int, list[int]]
    ) -> NDArray[np.int64]:
        """Per resource: how much must leave `leaf` for the pod to fit every max on its
        path (what is `held` there counted), the most any of those queues needs."""
        tree = self.tree
        excess = [0] * len(asked)
        for q in tree.path_lists[leaf]:
            kept = held.get(q)
            for k, (used, want, cap) in enumerate(
                zip(self.usage[q].tolist(), asked, tree.maximum_lists[q], strict=True)
            ):
                hold = kept[k] if kept is not None else 0
                excess[k] = max(excess[k], used + hold + want - cap)
        return np.array(excess, dtype=np.int64)

    def _held_for(self, leaf: int, ahead: Iterable[PodInfo]) -> dict[int, list[int]]:
        """Per queue on `leaf`'s path: what the pods `ahead` will use there (each is
        charged to the queues its own path shares with `leaf`'s)."""
        tree = self.tree
        path = tree.path_lists[leaf]
        held: dict[int, list[int]] = {}
        for other in ahead:
            other_leaf, error = self.queue_of(other)
            if error:
                continue
            shared = tree.path_lists[other_leaf]
            amounts = tree.charge(other).tolist()
            for q in path:
                if q in shared:
                    total = held.setdefault(q, [0] * len(amounts))
                    for k, amount in enumerate(amounts):
                        total[k] += amount
        return held

    def _borrow_refusal(
        self,
        leaf: int,
        vec: NDArray[np.int64],
        asked: list[int],
        table: NodeColumns | None,
        freed: NDArray[np.int64] | None = None,
    ) -> str:
        """The borrowing rule: why the pod may not take its queue above its guarantee
        ("" if it stays within it or the capacity it borrows is owed to nobody).
        `freed`: judged as if pods of `leaf` using that much had gone."""
        tree = self.tree
        guaranteed = tree.guaranteed_lists[leaf]
        quota = tree.quota_list
        usage = self.usage[leaf] if freed is None else self.usage[leaf] - freed
        if not any(
            want > 0 and quota[k] and used + want > guaranteed[k]
            for k, (used, want) in enumerate(zip(usage.tolist(), asked, strict=True))
        ):
            return ""  # within its guarantee: no borrowing
        return self._borrow_check(leaf, vec, table, freed)

    def beyond_max(self, pods: list[PodInfo]) -> str:
        """Why these pods together could never run, even alone in their queues: what
        they ask exceeds the max of a queue on their paths ("" if it does not). Gangs
        that could never start reserve no nodes (shoal.gang.reservation)."""
        tree = self.tree
        if not self._has_quota or not pods:
            return ""
        asked = np.zeros_like(self.usage)
        for pod in pods:
            leaf, error = self.queue_of(pod)
            if error:
                continue
            asked[tree.paths[leaf]] += tree.charge(pod)
        over = asked > tree.maximum
        if not over.any():
            return ""
        q, k = (int(i) for i in np.argwhere(over)[0])
        res = tree.resources[k]
        return (
            f"asks {format_amount(res, int(asked[q, k]))} {res} in queue {tree.names[q]}, "
            f"more than its max {format_amount(res, int(tree.maximum[q, k]))}"
        )

    def _borrow_check(
        self,
        leaf: int,
        vec: NDArray[np.int64],
        table: NodeColumns | None,
        freed: NDArray[np.int64] | None = None,
    ) -> str:
        tree = self.tree
        mask = (vec > 0) & tree.quota_mask
        usage = self.usage[leaf] if freed is None else self.usage[leaf] - freed
        borrowing = (usage + vec > tree.guaranteed[leaf]) & mask
        if table is None or not borrowing.any() or not self.pending:
            return ""
        # What other leaves are owed: their unmet guarantee, as far as they have demand.
        leaves = np.fromiter(
            (q for q, count in self.pending.items() if count > 0 and q != leaf), dtype=np.intp
        )
        if not leaves.size:
            return ""
        want = np.minimum(tree.guaranteed[leaves], self.usage[leaves] + self.pending_sum[leaves])
        owed = np.clip(want - self.usage[leaves], 0, None).sum(axis=0)
        # (paths stop below the virtual root: total usage is the sum of the top level)
        free = self.capacity(table) - self.usage[tree.children[0]].sum(axis=0)
        if freed is not None:
            free = free + freed
        short = (free - vec < owed) & borrowing & (owed > 0)
        if not short.any():
            return ""
        k = int(np.flatnonzero(short)[0])
        res = tree.resources[k]
        waiting = [
            tree.names[int(q)]
            for q in leaves
            if self.usage[q, k]
            < min(tree.guaranteed[q, k], self.usage[q, k] + self.pending_sum[q, k])
        ]
        return (
            f"queue {tree.names[leaf]} may not borrow {res} beyond its guarantee "
            f"({format_amount(res, int(tree.guaranteed[leaf, k]))}): queue(s) "
            f"{', '.join(waiting)} below their guarantee are waiting for "
            f"{format_amount(res, int(owed[k]))} of it"
        )

    # ---- usage (AssignmentObserver) ------------------------------------------------

    def pod_assigned(self, pod: PodInfo, node: str) -> None:
        self._assigned[pod.uid] = pod
        self._charge(pod)

    def pod_released(self, pod: PodInfo, node: str) -> None:
        self._assigned.pop(pod.uid, None)
        self._discharge(pod.uid)
        if pod.uid not in self._pending:
            self._leaf_of.pop(pod.uid, None)  # gone (or re-queued: looked up again)

    def _charge(self, pod: PodInfo) -> None:
        if pod.uid in self._placed:
            return
        leaf, error = self.queue_of(pod)
        if error:
            return
        vec = self.tree.charge(pod)
        path = self.tree.path_lists[leaf]
        for q in path:
            self.usage[q] += vec
        self._refresh_shares(path)
        job = self.job_of(pod)
        self._placed[pod.uid] = _Placed(leaf, vec, pod, job)
        self._by_leaf.setdefault(leaf, set()).add(pod.uid)
        self.pods_per_namespace[pod.namespace] += 1
        self.jobs_per_namespace.setdefault(pod.namespace, Counter())[job] += 1
        record = self._jobs.get(job)
        if record is None:
            self._jobs[job] = _Job(vec.copy(), 1)
        else:
            record.usage += vec
            record.pods += 1

    def _discharge(self, uid: str) -> None:
        rec = self._placed.pop(uid, None)
        if rec is None:
            return
        path = self.tree.path_lists[rec.leaf]
        for q in path:
            self.usage[q] -= rec.vector
        self._refresh_shares(path)
        self._by_leaf.get(rec.leaf, set()).discard(uid)
        self.pods_per_namespace[rec.pod.namespace] -= 1
        jobs = self.jobs_per_namespace.get(rec.pod.namespace)
        if jobs is not None:
            jobs[rec.job] -= 1
            if jobs[rec.job] <= 0:
                del jobs[rec.job]
        record = self._jobs.get(rec.job)
        if record is not None:
            record.pods -= 1
            if record.pods <= 0:
                del self._jobs[rec.job]
            else:
                record.usage -= rec.vector

    def observed(self, table: NodeColumns) -> list[QueueObservation]:
        """Per queue (the tree's order, the virtual root left out): name, allocated,
        guaranteed and HDRF fair share (resource -> amount), pending and running pods
        in its subtree. What a Queue object's status shows."""
        tree = self.tree
        names = tree.names
        capacity = self.capacity(table)
        fair = hdrf_fair_share(tree, self.usage + self.pending_sum, capacity)
        pending = [0] * len(names)
        running = [0] * len(names)
        for leaf in tree.leaves:
            for q in tree.path_lists[leaf]:
                pending[q] += self.pending.get(leaf, 0)
                running[q] += len(self._by_leaf.get(leaf, ()))

        def amounts(row: NDArray[Any]) -> dict[str, int]:
            return {r: int(v) for r, v in zip(tree.resources, row.tolist(), strict=True) if v}

        out = []
        for q in range(1, len(names)):
            out.append(
                (
                    names[q],
                    amounts(self.usage[q]),
                    amounts(tree.guaranteed[q]),
                    amounts(np.floor(fair[q])),
                    pending[q],
                    running[q],
                )
            )
        return out

    def started_pods(self) -> list[int]:
        """Per queue (the tree's index, subtrees summed): placed pods their kubelets
        started (phase Running), the `running` of every report; `observed` gives the
        placed ones (bound). O(placed pods): for status and reports, not for cycles."""
        tree = self.tree
        started = [0] * len(tree.names)
        placed = self.cluster.placed if self.cluster is not None else {}
        for uid, rec in self._placed.items():
            record = placed.get(uid)
            if record is not None and record.pod.pod.status.phase == "Running":
                for q in tree.path_lists[rec.leaf]:
                    started[q] += 1
        return started

    def queue_statuses(self, table: NodeColumns) -> list[QueueStatus]:
        """What each Queue object's status shows: `observed`, plus what each queue
        borrows (allocated above its guarantee) and its pending and running jobs (a job
        is a pod group, or a pod on its own). Counts every pending and placed pod: meant
        for the status publisher (about once a second), not for scheduling cycles."""
        tree = self.tree
        pending_jobs: dict[int, set[str]] = {}
        for uid, job in self._pending_job.items():
            waiting = self._pending.get(uid)
            if waiting is not None:
                pending_jobs.setdefault(waiting[0], set()).add(job)
        running_jobs: dict[int, set[str]] = {}
        for rec in self._placed.values():
            running_jobs.setdefault(rec.leaf, set()).add(rec.job)
        started = self.started_pods()
        # Only resources some queue guarantees or caps: the others are not lent by anyone.
        quota = {r for r, q in zip(tree.resources, tree.quota_list, strict=True) if q}
        out = []
        for q, row in enumerate(self.observed(table), start=1):
            name, allocated, guaranteed, fair, pending, bound = row
            borrowed = {
                r: used - guaranteed.get(r, 0)
                for r, used in allocated.items()
                if used > guaranteed.get(r, 0) and r in quota
            }
            leaves = self._leaves_under(q)
            state = "Open"
            if tree.closed_by[q]:
                state = "Closing" if bound else "Closed"
            out.append(
                QueueStatus(
                    name,
                    allocated,
                    guaranteed,
                    fair,
                    pending,
                    started[q],
                    borrowed=borrowed,
                    pending_jobs=len(set().union(*(pending_jobs.get(leaf, ()) for leaf in leaves))),
                    running_jobs=len(set().union(*(running_jobs.get(leaf, ()) for leaf in leaves))),
                    state=state,
                    problem=self.rejected.get(name, ""),
                    note=_defaulted_note(tree.defs[name]),
                    bound_pods=bound,
                )
            )
        # Queue objects rejected outright: their status says why.
        for name, problem in sorted(self.rejected.items()):
            if name not in tree.index:
                out.append(QueueStatus(name, state="Invalid", problem=problem))
        return out

    def binding_statuses(self) -> list[BindingStatus]:
        """Pods and running jobs in the namespaces each QueueBinding binds (listed or
        selected), per namespace and in total, for its object's status."""
        counts: dict[str, dict[str, tuple[int, int]]] = {name: {} for name in self.bindings}
        for namespace, pods in self.pods_per_namespace.items():
            binding = self._binding_name(namespace)
            if binding and pods > 0:
                jobs = len(self.jobs_per_namespace.get(namespace, ()))
                counts[binding][namespace] = (pods, jobs)
        return [
            BindingStatus(
                name,
                sum(p for p, _ in spaces.values()),
                sum(j for _, j in spaces.values()),
                dict(sorted(spaces.items())),
            )
            for name, spaces in sorted(counts.items())
        ]

    def _binding_name(self, namespace: str) -> str:
        """The QueueBinding that binds `namespace` ("" for none), as `_bound_queue`."""
        b = self.binding_of(namespace)
        return b.metadata.name if b is not None else ""

    def placed_in(self, leaves: set[int]) -> list[str]:
        """Uids of pods placed in these leaf queues."""
        return [uid for leaf in leaves for uid in self._by_leaf.get(leaf, ())]

    def placed_leaf(self, uid: str) -> int:
        rec = self._placed.get(uid)
        return -1 if rec is None else rec.leaf

    # ---- reporting -----------------------------------------------------------------

    def status(self, table: NodeColumns | None = None) -> dict[str, dict[str, object]]:
        """Per queue: parent, allocated, guaranteed and max (quota units), pending pods
        and, given the node table, the weighted max-min fair share."""
        tree = self.tree
        shares = fair_shares(self, self.capacity(table)) if table is not None else {}
        out: dict[str, dict[str, object]] = {}
        for name, i in tree.index.items():
            if i == 0:
                continue
            used = {
                r: int(self.usage[i, k]) for k, r in enumerate(tree.resources) if self.usage[i, k]
            }
            guaranteed = {
                r: int(tree.guaranteed[i, k])
                for k, r in enumerate(tree.resources)
                if tree.guaranteed[i, k]
            }
            maximum = {
                r: int(tree.maximum[i, k])
                for k, r in enumerate(tree.resources)
                if tree.maximum[i, k] < UNLIMITED
            }
            pending = sum(self.pending[j] for j in self._leaves_under(i))
            out[name] = {
                "parent": tree.defs[name].parent,
                "allocated": used,
                "guaranteed": guaranteed,
                "max": maximum,
                "fairShare": shares.get(name, 0.0),
                "pending": pending,
            }
        return out

    def _leaves_under(self, i: int) -> list[int]:
        if i in self.tree.leaves:
            return [i]
        out: list[int] = []
        for c in self.tree.children[i]:
            out += self._leaves_under(c)
        return out


_QOS_RANK = {"Guaranteed": 0, "Burstable": 1, "BestEffort": 2}


def _defaulted_note(d: QueueDef) -> str:
    if not d.defaulted:
        return ""
    amounts = ", ".join(f"{r} {format_amount(r, d.guaranteed[r])}" for r in d.defaulted)
    return (
        f"{d.fields[0]} sets no {', '.join(d.defaulted)}: guaranteed its children's sum ({amounts})"
    )


def qos_rank(pod: PodInfo) -> int:
    return _QOS_RANK[qos_class(pod.pod)]
