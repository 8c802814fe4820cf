"""QueueManager: which queue a pod belongs to, what each queue uses, and whether a
placement keeps every queue on its path within its maximum.

Usage is kept per queue (its whole subtree) in an int64 array [queue, resource] and
updated incrementally as pods are placed and removed (a PlacementObserver), so the
admission check is a vector compare along the pod's path. The QueueCapacity plugin is a
thin adapter over this manager (PreFilter = admission, PostFilter = reclaim).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import LabelSelector
from shoal.api.podinfo import PodInfo
from shoal.api.queue import (
    DEFAULT_QUEUE,
    QUEUE_LABEL,
    ElasticQuota,
    NodePool,
    Queue,
    QueueBinding,
)
from shoal.api.selectors import label_selector_matches
from shoal.cache.node_table import NodeTable
from shoal.framework.handle import Handle
from shoal.tenancy.tree import UNLIMITED, QueueDef, QueueTree, TreeError

__all__ = ["SERVICE_KEY", "QueueManager"]

SERVICE_KEY = "shoal.tenancy"


@dataclass
class _Placed:
    leaf: int
    vector: NDArray[np.int64]
    pod: PodInfo


class QueueManager:
    def __init__(self, default_queue: str = DEFAULT_QUEUE) -> None:
        self.default_queue = default_queue
        self._queues: dict[str, Queue] = {}
        self._elastic: dict[str, ElasticQuota] = {}
        self.bindings: dict[str, QueueBinding] = {}
        self.pools: dict[str, NodePool] = {}
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self.tree = QueueTree([], default_queue)
        self._has_quota = False
        self.usage = np.zeros_like(self.tree.guaranteed)
        self._placed: dict[str, _Placed] = {}
        self._by_leaf: dict[int, set[str]] = {}  # leaf -> uids placed there
        self._leaf_of: dict[str, tuple[int, str]] = {}  # uid -> (leaf, error)
        self.pending = Counter[int]()  # leaf -> pods waiting (maintained by the scheduler)
        self.pending_sum = np.zeros_like(self.tree.guaranteed)  # leaf -> pending requests
        self.share_list = [0.0] * len(self.tree.names)  # dominant share per queue
        self.saturated_list = [False] * len(self.tree.names)  # at its max somewhere
        self.active_list = [0] * len(self.tree.names)  # active pods per subtree
        self.active_unqueued = 0  # active pods whose queue is unusable
        self.on_install: list[Callable[[], None]] = []
        self._capacity_key: tuple[int, int] = (-1, -1)
        self._capacity = np.zeros(0)
        self._capacity_list: list[float] = []
        self.pods_per_namespace = Counter[str]()
        # Running jobs per namespace: job key -> placed pods (a job is a pod group, or a
        # pod on its own). `job_of` is wired by the scheduler to the gang manager.
        self.jobs_per_namespace: dict[str, Counter[str]] = {}
        self.job_of: Callable[[PodInfo], str] = lambda pod: pod.uid
        self.version = 0  # bumped when the tree or bindings change

    @classmethod
    def of(cls, handle: Handle) -> QueueManager:
        manager = handle.services.get(SERVICE_KEY)
        if manager is None:
            manager = handle.services[SERVICE_KEY] = cls()
            handle.cluster.observers.append(manager)
        assert isinstance(manager, QueueManager)
        return manager

    # ---- objects (validated as a whole, never half-applied) ------------------------

    def apply(
        self,
        queues: Iterable[Queue] = (),
        elastic_quotas: Iterable[ElasticQuota] = (),
        deleted: Iterable[str] = (),
    ) -> list[str]:
        """Add/replace Queue and ElasticQuota objects. Returns the problems; when there
        are any, nothing changes."""
        new_queues = dict(self._queues)
        new_elastic = dict(self._elastic)
        for name in deleted:
            new_queues.pop(name, None)
            new_elastic.pop(name, None)
        for q in queues:
            new_queues[q.metadata.name] = q
        for eq in elastic_quotas:
            new_elastic[eq.metadata.namespace or "default"] = eq
        defs = [QueueDef.from_queue(q) for q in new_queues.values()]
        defs += [QueueDef.from_elastic_quota(eq) for eq in new_elastic.values()]
        try:
            tree = QueueTree(defs, self.default_queue)
        except TreeError as err:
            return err.problems
        problems = self._binding_problems(self.bindings.values(), tree)
        if problems:
            return problems
        self._queues, self._elastic = new_queues, new_elastic
        self._install(tree)
        return []

    def apply_bindings(
        self, bindings: Iterable[QueueBinding], deleted: Iterable[str] = ()
    ) -> list[str]:
        new = dict(self.bindings)
        for name in deleted:
            new.pop(name, None)
        for b in bindings:
            new[b.metadata.name] = b
        problems = self._binding_problems(new.values(), self.tree)
        if problems:
            return problems
        self.bindings = new
        self._leaf_of.clear()
        self.version += 1
        return []

    def apply_pools(self, pools: Iterable[NodePool]) -> list[str]:
        new = dict(self.pools)
        for p in pools:
            new[p.metadata.name] = p
        problems = [
            f"NodePool {p.metadata.name}: spec.exclusiveTo names unknown queue {q!r}"
            for p in new.values()
            for q in p.spec.exclusive_to
            if q not in self.tree.index
        ]
        for name, d in self.tree.defs.items():
            problems += [
                f"Queue {name}: spec.pools names unknown NodePool {pool!r}"
                for pool in d.pools
                if pool not in new
            ]
        if problems:
            return problems
        self.pools = new
        self.version += 1
        return []

    def _binding_problems(self, bindings: Iterable[QueueBinding], tree: QueueTree) -> list[str]:
        problems = []
        for b in bindings:
            q = b.spec.queue
            where = f"QueueBinding {b.metadata.name}: spec.queue {q!r}"
            if q not in tree.index:
                problems.append(f"{where} does not exist; create the Queue or fix the name")
            elif not tree.is_leaf(q):
                problems.append(f"{where} is not a leaf queue; only leaves hold workloads")
        return problems

    def _install(self, tree: QueueTree) -> None:
        self.tree = tree
        self._has_quota = bool(tree.quota_mask.any())
        self.usage = np.zeros_like(tree.guaranteed)
        self._leaf_of.clear()
        placed = [rec.pod for rec in self._placed.values()]
        self._placed.clear()
        self._by_leaf.clear()
        self.pending.clear()
        self.pending_sum = np.zeros_like(tree.guaranteed)
        self.active_unqueued = 0
        self.share_list = [0.0] * len(tree.names)
        self.saturated_list = [False] * len(tree.names)
        self.active_list = [0] * len(tree.names)
        self._capacity_key = (-1, -1)
        self.pods_per_namespace.clear()
        self.jobs_per_namespace.clear()
        for pod in placed:  # re-count under the new tree (a pod's queue may have changed)
            self.pod_placed(-1, pod)
        self.version += 1
        for hook in self.on_install:  # the scheduling queue re-partitions its pods
            hook()

    # ---- which queue ---------------------------------------------------------------

    def queue_of(self, pod: PodInfo) -> tuple[int, str]:
        """(leaf index, "") or (-1, why the pod has no usable queue)."""
        cached = self._leaf_of.get(pod.uid)
        if cached is not None:
            return cached
        name = pod.labels.get(QUEUE_LABEL) or self._bound_queue(pod.namespace) or self.default_queue
        tree = self.tree
        if name not in tree.index:
            found = (
                -1,
                f"queue {name!r} does not exist (label {QUEUE_LABEL} or a QueueBinding names it)",
            )
        elif not tree.is_leaf(name):
            found = (-1, f"queue {name!r} is not a leaf queue; only leaves hold workloads")
        else:
            found = (tree.index[name], "")
        self._leaf_of[pod.uid] = found
        return found

    def _bound_queue(self, namespace: str) -> str:
        for b in self.bindings.values():
            if namespace in b.spec.namespaces:
                return b.spec.queue
        labels = self.namespace_labels.get(namespace, {})
        for b in self.bindings.values():
            sel: LabelSelector | None = b.spec.namespace_selector
            if sel is not None and label_selector_matches(sel, labels):
                return b.spec.queue
        # An ElasticQuota in the namespace makes that namespace its own leaf queue.
        if namespace in self._elastic:
            return namespace
        return ""

    def binding_of(self, namespace: str) -> QueueBinding | None:
        for b in self.bindings.values():
            if namespace in b.spec.namespaces:
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
        leaf, error = self.queue_of(pod)
        if error:
            return
        self.pending[leaf] += delta
        if delta > 0:
            self.pending_sum[leaf] += self.tree.vector(pod.requests)
        else:
            self.pending_sum[leaf] -= self.tree.vector(pod.requests)

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

    def capacity(self, table: NodeTable) -> NDArray[np.float64]:
        """Cluster allocatable over the tree's resources (for dominant shares)."""
        key = (table.nodes_version, id(self.tree))
        if key != self._capacity_key:
            cols = [table.resource_index.get(r, -1) for r in self.tree.resources]
            n = table.n
            self._capacity = np.array(
                [float(table.allocatable[:n, c].sum()) if c >= 0 else 0.0 for c in cols]
            )
            self._capacity_key = key
            self._capacity_list = self._capacity.tolist()
            self._refresh_shares(list(range(1, len(self.tree.names))))
        return self._capacity

    def choose_partition(self, table: NodeTable) -> int:
        """The leaf queue whose pod is tried next (HDRF), 0 for pods without a queue."""
        if self.active_unqueued > 0:
            return 0
        tree = self.tree
        if len(tree.leaves) == 1:
            return next(iter(tree.leaves))
        from shoal.tenancy.fairshare import choose_leaf

        self.capacity(table)  # refreshes shares when nodes changed
        return choose_leaf(self)

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
        share = float(dominant_shares_of(self, pod))
        return (share, *base)

    # ---- admission -----------------------------------------------------------------

    def admit(
        self,
        pod: PodInfo,
        extra: NDArray[np.int64] | None = None,
        table: NodeTable | None = None,
    ) -> str:
        """Why placing the pod would break a queue limit ("" if it would not).

        Two rules: every queue on the pod's path stays within its maximum; and a queue
        that would go above its guarantee (borrow) may only use capacity that no other
        queue is waiting for up to its own guarantee (given `table`, for capacity).
        """
        leaf, error = self.queue_of(pod)
        if error:
            return error
        binding = self.binding_of(pod.namespace)
        limit = binding.spec.max_pods if binding is not None else None
        if (
            binding is not None
            and limit is not None
            and (self.pods_per_namespace[pod.namespace] + 1 > limit)
        ):
            return (
                f"QueueBinding {binding.metadata.name}: namespace {pod.namespace} already "
                f"runs {self.pods_per_namespace[pod.namespace]} pods (maxPods "
                f"{binding.spec.max_pods})"
            )
        jobs_limit = binding.spec.max_running_jobs if binding is not None else None
        if binding is not None and jobs_limit is not None:
            running = self.jobs_per_namespace.get(pod.namespace, Counter())
            if self.job_of(pod) not in running and len(running) + 1 > jobs_limit:
                return (
                    f"QueueBinding {binding.metadata.name}: namespace {pod.namespace} already "
                    f"runs {len(running)} jobs (maxRunningJobs {jobs_limit})"
                )
        tree = self.tree
        if not self._has_quota:
            return ""
        vec = tree.vector(pod.requests)
        if extra is not None:
            vec = vec + extra
        # Plain Python over the path: a few queues x a few resources, the common case
        # being "fits" (numpy's per-call overhead would dominate here).
        asked = vec.tolist()
        maximum = tree.maximum_lists
        for q in tree.path_lists[leaf]:
            for k, (used, want, cap) in enumerate(
                zip(self.usage[q].tolist(), asked, maximum[q], strict=True)
            ):
                if used + want > cap:
                    return (
                        f"queue {tree.names[q]} would exceed its max {tree.resources[k]}: "
                        f"uses {used}, pod asks {want}, max {cap}"
                    )
        guaranteed = tree.guaranteed_lists[leaf]
        quota = tree.quota_list
        if not any(
            want > 0 and quota[k] and used + want > guaranteed[k]
            for k, (used, want) in enumerate(zip(self.usage[leaf].tolist(), asked, strict=True))
        ):
            return ""  # within its guarantee: no borrowing
        return self._borrow_check(leaf, vec, table)

    def _borrow_check(self, leaf: int, vec: NDArray[np.int64], table: NodeTable | None) -> str:
        tree = self.tree
        mask = (vec > 0) & tree.quota_mask
        borrowing = (self.usage[leaf] + vec > tree.guaranteed[leaf]) & mask
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
        short = (free - vec < owed) & borrowing
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
            f"({int(tree.guaranteed[leaf, k])}): queue(s) {', '.join(waiting)} below their "
            f"guarantee are waiting for {int(owed[k])} of it"
        )

    # ---- usage (PlacementObserver) -------------------------------------------------

    def pod_placed(self, row: int, pod: PodInfo) -> None:
        leaf, error = self.queue_of(pod)
        if error:
            return
        vec = self.tree.vector(pod.requests)
        path = self.tree.path_lists[leaf]
        for q in path:
            self.usage[q] += vec
        self._refresh_shares(path)
        self._placed[pod.uid] = _Placed(leaf, vec, pod)
        self._by_leaf.setdefault(leaf, set()).add(pod.uid)
        self.pods_per_namespace[pod.namespace] += 1
        self.jobs_per_namespace.setdefault(pod.namespace, Counter())[self.job_of(pod)] += 1

    def pod_unplaced(self, row: int, pod: PodInfo) -> None:
        rec = self._placed.pop(pod.uid, None)
        if rec is None:
            return
        path = self.tree.path_lists[rec.leaf]
        for q in path:
            self.usage[q] -= rec.vector
        self._refresh_shares(path)
        self._by_leaf.get(rec.leaf, set()).discard(pod.uid)
        self.pods_per_namespace[rec.pod.namespace] -= 1
        jobs = self.jobs_per_namespace.get(rec.pod.namespace)
        if jobs is not None:
            job = self.job_of(rec.pod)
            jobs[job] -= 1
            if jobs[job] <= 0:
                del jobs[job]

    def row_moved(self, src: int, dst: int) -> None:
        pass

    def node_changed(self, row: int) -> None:
        pass

    def placed_in(self, leaves: set[int]) -> list[str]:
        """Uids of pods placed in these leaf queues."""
        return [uid for leaf in leaves for uid in self._by_leaf.get(leaf, ())]

    def placed_leaf(self, uid: str) -> int:
        rec = self._placed.get(uid)
        return -1 if rec is None else rec.leaf

    # ---- reporting -----------------------------------------------------------------

    def status(self, capacity: dict[str, int] | None = None) -> dict[str, dict[str, object]]:
        from shoal.tenancy.fairshare import fair_shares

        tree = self.tree
        shares = fair_shares(self, capacity) if capacity else {}
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


def qos_rank(pod: PodInfo) -> int:
    from shoal.api.podinfo import qos_class

    return _QOS_RANK[qos_class(pod.pod)]


def dominant_shares_of(manager: QueueManager, pod: PodInfo) -> float:
    """The dominant share of what the pod's job already runs (0 for a new job)."""
    return 0.0
