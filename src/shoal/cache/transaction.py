"""Transaction: a what-if over the cluster cache, committed or discarded as a whole.

Volcano's `Statement` is the model. Every decision that is not a plain single placement
(a gang's members, a Spark driver with its phantom executors, the victims of
preemption or reclaim) is worked out inside a transaction:

* `assume(pod, node)` counts a pending pod on a node, `unassume(pod)` takes it back;
* `evict(pod, reason)` takes a running pod off its node *tentatively*, so that the
  filters re-run against the cache see the room it would leave; `restore(pod)` puts an
  evicted pod back (preemption's reprieve);
* `nominate(pod, node)` / `clear_nomination(pod)` change who holds nominated room;
* `on_undo(fn)` registers what must also be undone if the operations before it are
  (a pod's Reserve: its Unreserve runs when the transaction takes the pod back), so
  no caller hand-rolls an undo loop next to `discard()`.

Each operation is applied to the cache at once, so every observer (node table, GPU
devices, pod-topology index, tenant-queue usage) sees the tentative state through its
ordinary incremental hooks, and is recorded. `rollback(mark)` undoes the operations after
a `mark()` in reverse order (a savepoint: preemption's reprieve uses it per victim);
`discard()` undoes everything.

A **what-if** (`Transaction(cluster, what_if=True)`, used in a `with` block) is always
discarded and cannot be committed; within it the cluster's assignment observers
(cluster-wide tallies such as tenant-queue usage) are not told of its operations nor of
their undoing. Judges that read per-node state only (preemption's victim search on
node-local filters) need no such tallies, and a what-if cannot leave them changed.

`commit()` ends the transaction and returns what was decided (`Decision`). Assumed pods
stay assumed (the scheduler hands them to binding). Evicted pods are *put back* and
marked as terminating: like kube-scheduler, the cache keeps counting a victim until the
API server says it is gone, so a failed or slow eviction can never overcommit a node;
the room it will leave is held for the preemptor by its nomination instead. For that
reason a transaction that evicts commits nominations, never placements that rely on the
victims being gone.

Nothing here performs I/O: the scheduler turns a `Decision` into effects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import ClusterState, PodRecord

__all__ = ["Decision", "EvictedPod", "Transaction", "TransactionError"]


class TransactionError(RuntimeError):
    """Misuse of a transaction (used after it ended, or an impossible commit)."""


@dataclass(frozen=True, slots=True)
class EvictedPod:
    pod: PodInfo
    node: str
    reason: str


@dataclass
class Decision:
    """What a committed transaction decided, in the order it was decided."""

    assumed: list[tuple[PodInfo, str]] = field(default_factory=list)
    evicted: list[EvictedPod] = field(default_factory=list)
    nominated: list[tuple[PodInfo, str]] = field(default_factory=list)  # node "" = cleared


@dataclass(frozen=True, slots=True)
class _Assume:
    pod: PodInfo
    node: str


@dataclass(frozen=True, slots=True)
class _Unassume:
    record: PodRecord


@dataclass(frozen=True, slots=True)
class _Evict:
    record: PodRecord
    reason: str


@dataclass(frozen=True, slots=True)
class _Restore:
    record: PodRecord


@dataclass(frozen=True, slots=True)
class _Nominate:
    pod: PodInfo
    node: str  # "" = cleared
    previous: tuple[str, PodInfo] | None


@dataclass(frozen=True, slots=True)
class _Undo:
    undo: Callable[[], None]


_Op = _Assume | _Unassume | _Evict | _Restore | _Nominate | _Undo


class Transaction:
    """See the module docstring. Use as a context manager to discard on an exception."""

    __slots__ = ("_done", "_entered", "_off", "_ops", "cluster", "what_if")

    def __init__(self, cluster: ClusterState, *, what_if: bool = False) -> None:
        self.cluster = cluster
        self.what_if = what_if
        self._ops: list[_Op] = []
        self._off: dict[str, PodRecord] = {}  # uid -> record of pods evicted right now
        self._done = False
        self._entered = False

    def __enter__(self) -> Transaction:
        if self.what_if:
            self.cluster.unobserved += 1
        self._entered = True
        return self

    def __exit__(self, kind: object, value: object, tb: object) -> None:
        try:
            if not self._done:
                self.discard()
        finally:
            if self.what_if:
                self.cluster.unobserved -= 1

    # ---- operations ----------------------------------------------------------------

    def assume(self, pod: PodInfo, node: str) -> None:
        self._check()
        self.cluster.assume(pod, node)
        self._ops.append(_Assume(pod, node))

    def unassume(self, pod: PodInfo) -> None:
        """Take back a pod assumed earlier (in this transaction or before it)."""
        self._check()
        record = self.cluster.placed.get(pod.uid)
        if record is None or not record.assumed:
            raise TransactionError(f"pod {pod.key} is not assumed")
        self.cluster.forget(pod)
        self._ops.append(_Unassume(record))

    def evict(self, pod: PodInfo, reason: str = "") -> None:
        """Take a running pod off its node for the rest of the transaction."""
        self._check()
        record = self.cluster.placed.get(pod.uid)
        if record is None:
            raise TransactionError(f"pod {pod.key} is not running on any node")
        if record.assumed:
            raise TransactionError(f"pod {pod.key} is still being bound; it cannot be evicted")
        self.cluster.remove_pod(pod.uid)
        self._ops.append(_Evict(record, reason))
        self._off[pod.uid] = record

    def restore(self, pod: PodInfo) -> None:
        """Put back a pod this transaction evicted."""
        self._check()
        record = self._off.pop(pod.uid, None)
        if record is None:
            raise TransactionError(f"pod {pod.key} was not evicted in this transaction")
        self.cluster.add_bound_pod(record.pod, record.node)
        self._ops.append(_Restore(record))

    def nominate(self, pod: PodInfo, node: str) -> None:
        self._check()
        previous = self.cluster.nominations.get(pod.uid)
        if node:
            self.cluster.nominate(pod, node)
        else:
            self.cluster.clear_nomination(pod.uid)
        self._ops.append(_Nominate(pod, node, previous))

    def clear_nomination(self, pod: PodInfo) -> None:
        if pod.uid in self.cluster.nominations:
            self.nominate(pod, "")

    def on_undo(self, undo: Callable[[], None]) -> None:
        """Run `undo` when a rollback or discard passes this point (newest first, as
        every operation); nothing on commit."""
        self._check()
        self._ops.append(_Undo(undo))

    # ---- what has been done so far -------------------------------------------------

    def evicted(self) -> list[PodInfo]:
        """Pods this transaction currently has off their nodes."""
        return [record.pod for record in self._off.values()]

    def is_evicted(self, uid: str) -> bool:
        return uid in self._off

    def node_of_evicted(self, uid: str) -> str | None:
        """The node a pod this transaction evicted was running on (None: not evicted)."""
        record = self._off.get(uid)
        return None if record is None else record.node

    @property
    def closed(self) -> bool:
        """Committed or discarded."""
        return self._done

    # ---- savepoints, discard, commit ----------------------------------------------

    def mark(self) -> int:
        """A savepoint for `rollback`."""
        return len(self._ops)

    def rollback(self, mark: int = 0) -> None:
        """Undo every operation after `mark`, newest first."""
        self._check()
        cluster = self.cluster
        while len(self._ops) > mark:
            op = self._ops.pop()
            if isinstance(op, _Assume):
                cluster.forget(op.pod)
            elif isinstance(op, _Unassume):
                cluster.assume(op.record.pod, op.record.node)
            elif isinstance(op, _Evict):
                cluster.add_bound_pod(op.record.pod, op.record.node)
                del self._off[op.record.pod.uid]
            elif isinstance(op, _Restore):
                cluster.remove_pod(op.record.pod.uid)
                self._off[op.record.pod.uid] = op.record
            elif isinstance(op, _Undo):
                op.undo()
            elif op.previous is not None:
                cluster.nominate(op.previous[1], op.previous[0])
            else:
                cluster.clear_nomination(op.pod.uid)

    def discard(self) -> None:
        """Undo everything; the transaction ends."""
        self.rollback(0)
        self._done = True

    def commit(self) -> Decision:
        """End the transaction, keeping what it decided (see the module docstring)."""
        self._check()
        if self.what_if:
            raise TransactionError("a what-if transaction is always discarded, never committed")
        decision = Decision()
        placed: dict[str, tuple[PodInfo, str]] = {}
        evicted: dict[str, EvictedPod] = {}
        nominated: dict[str, tuple[PodInfo, str]] = {}
        for op in self._ops:
            if isinstance(op, _Assume):
                placed[op.pod.uid] = (op.pod, op.node)
            elif isinstance(op, _Unassume):
                placed.pop(op.record.pod.uid, None)
            elif isinstance(op, _Evict):
                evicted[op.record.pod.uid] = EvictedPod(op.record.pod, op.record.node, op.reason)
            elif isinstance(op, _Restore):
                evicted.pop(op.record.pod.uid, None)
            elif isinstance(op, _Nominate):
                nominated[op.pod.uid] = (op.pod, op.node)
        if evicted and placed:
            names = ", ".join(p.key for p, _ in placed.values())
            raise TransactionError(
                f"a transaction that evicts cannot also place pods ({names}): nominate them "
                "and place them once the victims are gone"
            )
        # Victims stay counted until the API server reports them gone.
        for victim in evicted.values():
            self.cluster.add_bound_pod(victim.pod, victim.node)
            self.cluster.evicting.add(victim.pod.uid)
        decision.assumed = list(placed.values())
        decision.evicted = list(evicted.values())
        decision.nominated = list(nominated.values())
        self._ops.clear()
        self._off.clear()
        self._done = True
        return decision

    def _check(self) -> None:
        if self._done:
            raise TransactionError("the transaction has already been committed or discarded")
        if self.what_if and not self._entered:
            raise TransactionError(
                "a what-if transaction is used as a context manager (`with`), which "
                "turns the assignment observers off for exactly its span"
            )
