"""NodePools (Filter): keep a queue's pods on its node pools and off pools reserved for
other queues.

A NodePool selects nodes by labels; `exclusiveTo` reserves them for the listed queues
(tenant-owned hardware), otherwise the pool is shared. A queue with `pools` may only use
nodes of those pools. Masks are computed on the label columns and cached until node
labels, pools or the queue tree change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import NodeSelectorRequirement
from shoal.api.podinfo import PodInfo
from shoal.api.queue import NodePool
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    Failure,
    FilterResult,
    PreFilterResult,
)
from shoal.tenancy.manager import QueueManager

__all__ = ["NAME", "NodePools"]

NAME = "NodePools"


class NodePools:
    name = NAME
    # Optimistic workers may decide with it: its verdict reads only the node's row and
    # the pod (shoal.scheduler.optimistic).
    row_local = True
    # Its verdict on a node depends only on that node's pods and only improves as pods
    # leave: preemption may judge all candidate nodes at once (shoal.preemption).
    preemption_local = True
    # Its verdict does not depend on the pods on a node at all (labels, taints, the
    # node's own fields, reservations): preemption judges it once, with no victim gone.
    preemption_node_only = True

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.queues = QueueManager.of(handle)
        self._cache: dict[int, tuple[NDArray[np.bool_], NDArray[np.bool_], str, str]] = {}
        self._cache_key: tuple[int, int] = (-1, -1)
        self._named_at: tuple[int, bool] = (-1, False)  # (queues version, any pools named)

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if not self.queues.pools and not self._pools_named():
            return None, Status(Code.SKIP)  # no pool exists, and no queue asks for one
        return None, Status()

    def _pools_named(self) -> bool:
        """Does some queue name node pools? (Its pods wait while none of them exists.)"""
        version = self.queues.version
        if self._named_at[0] != version:
            named = any(d.pools for d in self.queues.tree.defs.values())
            self._named_at = (version, named)
        return self._named_at[1]

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        leaf, error = self.queues.queue_of(pod)
        if error:
            return FilterResult.all_pass(nodes.size)
        outside, reserved, outside_reason, reserved_reason = self._masks(leaf)
        passed = ~(outside[nodes.index] | reserved[nodes.index])
        if passed.all():
            return FilterResult(passed)
        failures = []
        out_c, res_c = outside[nodes.index], reserved[nodes.index]
        if out_c.any():
            failures.append(Failure(outside_reason, out_c, Code.UNSCHEDULABLE_AND_UNRESOLVABLE))
        if (res_c & ~out_c).any():
            failures.append(
                Failure(reserved_reason, res_c & ~out_c, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
            )
        return FilterResult(passed, failures)

    def _pool_mask(self, pool: NodePool) -> NDArray[np.bool_]:
        snap = self.handle.snapshot
        mask = np.ones(snap.n, dtype=bool)
        for key, value in pool.spec.node_selector.items():
            req = NodeSelectorRequirement(key=key, operator="In", values=[value])
            mask &= snap.labels.requirement_mask(req, slice(0, snap.n))
        return mask

    def _masks(self, leaf: int) -> tuple[NDArray[np.bool_], NDArray[np.bool_], str, str]:
        key = (self.handle.snapshot.nodes_version, self.queues.version)
        if key != self._cache_key:
            self._cache.clear()
            self._cache_key = key
        cached = self._cache.get(leaf)
        if cached is not None:
            return cached
        queues = self.queues
        name = queues.tree.names[leaf]
        allowed_pools = queues.tree.defs[name].pools
        n = self.handle.snapshot.n
        inside = np.zeros(n, dtype=bool)
        reserved = np.zeros(n, dtype=bool)
        reserved_by: list[str] = []
        for pool_name, pool in queues.pools.items():
            mask = self._pool_mask(pool)
            if pool_name in allowed_pools:
                inside |= mask
            if pool.spec.exclusive_to and name not in pool.spec.exclusive_to:
                reserved |= mask
                reserved_by.append(pool_name)
        outside = ~inside if allowed_pools else np.zeros(n, dtype=bool)
        result = (
            outside,
            reserved,
            f"node(s) are outside queue {name}'s node pools {list(allowed_pools)}",
            f"node(s) are in node pool(s) {sorted(reserved_by)} reserved for other queues",
        )
        self._cache[leaf] = result
        return result

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
            ClusterEvent(EventResource.QUEUE, ActionType.ALL),
        ]

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodePools:
        return cls(handle)
