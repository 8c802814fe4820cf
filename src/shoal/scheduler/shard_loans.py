"""Node shards seen from the core: which replica decides a pod, and loans for gangs.

When several replicas share the work (node shards, `shoal.drivers.kube`), each places
pods only on the nodes of the shards it holds (`ClusterState.fence`). Two things follow
for the core, kept here so the step loop does not carry them:

* `routing_key`: what one replica must decide alone (a capped tenant queue, so its max
  holds across replicas; else a gang, placed whole; else the pod), and `writes_status`
  (set by the driver): whether this replica writes the status of such an object. The
  `StatusPublisher` asks both (`StatusOwner`).
* loans: a gang that does not fit in the shards held here but would with every node
  asks the driver to borrow the other replicas' shards it would use (`borrow_shards`),
  is hurried when they arrive, and gives them back once placed and bound (`end_loans`).
  The what-if that finds those shards is a whole gang placement, so a gang it failed
  for is not tried again before the cluster or its members change.

With one replica (the simulator, tests) `borrow_shards` is None and nothing here runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from shoal.api.objects import Pod
from shoal.api.podgroup import group_of
from shoal.cache.cluster import ClusterState
from shoal.cache.node_table import node_hash
from shoal.framework.runtime import Framework
from shoal.gang.manager import GangManager, Group
from shoal.scheduler.binding import BindingCycles
from shoal.scheduler.gang_cycle import GangCycle
from shoal.scheduling_queue.queue import QueuedPod, SchedulingQueue
from shoal.tenancy.manager import QueueManager

__all__ = ["ShardLoans"]


class ShardLoans:
    def __init__(
        self,
        cluster: ClusterState,
        tenant_queues: QueueManager,
        gangs: GangManager,
        scheduling_queue: SchedulingQueue,
        gang_cycle: GangCycle,
        bindings: BindingCycles,
    ) -> None:
        self.cluster = cluster
        self.tenant_queues = tenant_queues
        self.gangs = gangs
        self.scheduling_queue = scheduling_queue
        self.gang_cycle = gang_cycle
        self.bindings = bindings
        # Whether this replica writes the status of an object shared by replicas (node
        # shards: the one that decides its pods), by routing key and schedulerName.
        self.writes_status: Callable[[str, str], bool] = lambda key, scheduler_name: True
        # Ask the driver to borrow shards of other replicas for a gang that fits only
        # with them (gang key, slots; empty: no longer). None: no borrowing (one
        # replica, the simulator). `_borrowing`: the gangs asking now.
        self.borrow_shards: Callable[[str, frozenset[int]], None] | None = None
        self._borrowing: dict[str, frozenset[int]] = {}
        # Gangs whose what-if with every node failed, and the cluster's generation and
        # their members then: not tried again before something changed.
        self._no_borrow: dict[str, tuple[int, int]] = {}
        self.borrow_trials = 0  # what-ifs run (tests)

    def routing_key(self, pod: Pod) -> str:
        """What must be decided by one replica when several share the work (node
        shards): a pod's tenant queue when it has a max (so the max holds across
        replicas), else its gang (placed whole), else the pod itself."""
        queue = self.tenant_queues.capped_queue_of(pod)
        if queue:
            return f"queue/{queue}"
        try:
            group = group_of(pod)
        except ValueError:
            group = None
        if group is not None:
            return f"gang/{group.key}"
        return f"pod/{pod.metadata.uid}"

    def set_node_shards(
        self,
        slots: int,
        held: frozenset[int] | None,
        holders: Mapping[int, str],
        me: str = "",
    ) -> bool:
        """The node shards this replica holds (None: no fencing, every node). A gang
        whose borrowed shards are all usable now is tried at once, whatever its backoff
        (the loan lasts a limited time). True when the usable nodes changed."""
        if not self.cluster.fence.set(slots, held, holders, me):
            return False
        for key, wanted in self._borrowing.items():
            group = self.gangs.groups.get(key)
            if group is not None and (held is None or wanted <= held):
                self.scheduling_queue.hurry(u for u in group.members if u not in group.bound)
        return True

    def borrow_for(self, entries: list[QueuedPod], group: Group, fwk: Framework, now: float) -> str:
        """A gang that did not fit in the node shards held here: would it fit with every
        node (a what-if: the fence lifted, nothing preempted, nothing kept)? Then ask to
        borrow the shards of other replicas it would use, and say so ("" otherwise).
        Only its home replica asks (the one its pods are routed to first)."""
        fence = self.cluster.fence
        if self.borrow_shards is None or fence.held is None or group.needed() <= 0:
            return ""
        first = entries[0].pod
        if fence.fenced() is None or not self.writes_status(
            self.routing_key(first.pod), first.scheduler_name
        ):
            return ""
        stamp = (self.cluster.table.generation, len(entries))
        if self._no_borrow.get(group.key) == stamp:
            return ""  # it fit nowhere, and nothing changed since
        fenced = fence.fenced()
        mine = None if fenced is None else ~fenced  # tried first: borrow as little as may be
        self.borrow_trials += 1
        with fence.lifted():
            trial = self.gang_cycle.decide(
                list(entries), group, fwk, now, may_preempt=False, dry_run=True, prefer=mine
            )
        held = fence.held or frozenset()
        # The minimum only (placed first): members beyond it stay queued on their own.
        minimum = trial.placed[: group.needed()]
        wanted = frozenset(node_hash(p.node) % fence.slots for p in minimum) - held
        if trial.rejected is not None or not wanted:
            if trial.rejected is not None:
                self._no_borrow[group.key] = stamp
            self._stop_borrowing(group.key)
            return ""
        self._no_borrow.pop(group.key, None)
        self._borrowing[group.key] = wanted
        self.borrow_shards(group.key, wanted)
        holders = sorted({fence.holders.get(s, "") for s in wanted} - {"", fence.me})
        return (
            f"it would fit with node shard(s) {', '.join(map(str, sorted(wanted)))} of "
            f"other Shoal replicas ({', '.join(holders) or 'nobody'}): waiting for them to be "
            "lent to this replica"
        )

    def _stop_borrowing(self, key: str) -> None:
        if self._borrowing.pop(key, None) is not None and self.borrow_shards is not None:
            self.borrow_shards(key, frozenset())

    def end_loans(self) -> None:
        """A gang that borrowed shards gives them up once it is placed and its binds
        answered (or it is gone)."""
        for key in [k for k in self._no_borrow if k not in self.gangs.groups]:
            del self._no_borrow[key]
        for key in list(self._borrowing):
            group = self.gangs.groups.get(key)
            if group is None or (
                group.needed() <= 0 and not any(uid in self.bindings.binding for uid in group.bound)
            ):
                self._stop_borrowing(key)
