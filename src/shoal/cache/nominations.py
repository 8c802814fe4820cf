"""Nominated pods as columns: node row, priority and request vector of each preemptor
waiting for the room it freed.

Lower- or equal-priority pods leave that room free (kube's nominator), so Filter and
preemption read these on every attempt, while every preemption adds one and every bind
of a preemptor takes one away. A preemption wave leaves hundreds waiting at once: the
columns change by one entry per nomination (the last entry fills a gap), instead of
being gathered again from all nominations after every change. Rows and vectors are
recomputed only when nodes change (rows move) or the table gains a resource column.
"""

from __future__ import annotations

import numpy as np

from shoal.api.podinfo import PodInfo
from shoal.cache.node_table import NodeTable

__all__ = ["NominatedColumns"]


class NominatedColumns:
    """Entries 0..size-1: `uids[i]` nominated to node `nodes[i]`, which is table row
    `row[i]` (-1 while the node is unknown), with `priority[i]` and `vector[i]`."""

    def __init__(self) -> None:
        self.size = 0
        self.uids: list[str] = []
        self.nodes: list[str] = []
        self.pods: list[PodInfo] = []
        self.index: dict[str, int] = {}
        self.row = np.zeros(0, dtype=np.intp)
        self.priority = np.zeros(0, dtype=np.int64)
        self.vector = np.zeros((0, 0), dtype=np.int64)
        self._layout = (-1, -1)  # (nodes_version, resource columns) rows/vectors follow

    def set(self, table: NodeTable, pod: PodInfo, node: str) -> None:
        """Nominate `pod` to `node` (again, or elsewhere)."""
        self.sync(table)
        vector = table.pod_vector(pod)  # may add a resource column: re-sync after
        self.sync(table)
        i = self.index.get(pod.uid)
        if i is None:
            i = self.size
            self._reserve(i + 1)
            self.size += 1
            self.index[pod.uid] = i
            self.uids.append(pod.uid)
            self.nodes.append(node)
            self.pods.append(pod)
        else:
            self.nodes[i] = node
            self.pods[i] = pod
        self.row[i] = table.row_of.get(node, -1)
        self.priority[i] = pod.priority
        self.vector[i] = vector

    def remove(self, uid: str) -> None:
        i = self.index.pop(uid, None)
        if i is None:
            return
        last = self.size - 1
        if i != last:
            self.uids[i] = self.uids[last]
            self.nodes[i] = self.nodes[last]
            self.pods[i] = self.pods[last]
            self.row[i] = self.row[last]
            self.priority[i] = self.priority[last]
            self.vector[i] = self.vector[last]
            self.index[self.uids[i]] = i
        self.uids.pop()
        self.nodes.pop()
        self.pods.pop()
        self.size = last

    def sync(self, table: NodeTable) -> None:
        """Follow the table: rows again after nodes changed, wider vectors after a
        resource column was added."""
        layout = (table.nodes_version, len(table.resources))
        if layout == self._layout:
            return
        if layout[1] != self._layout[1]:
            vector = np.zeros((self.row.size, layout[1]), dtype=np.int64)
            for i, pod in enumerate(self.pods):
                vector[i] = table.pod_vector(pod)
            self.vector = vector
        row_of = table.row_of
        self.row[: self.size] = [row_of.get(node, -1) for node in self.nodes]
        self._layout = (table.nodes_version, len(table.resources))

    def _reserve(self, count: int) -> None:
        if count <= self.row.size:
            return
        cap = max(16, 2 * self.row.size, count)
        row = np.full(cap, -1, dtype=np.intp)
        row[: self.size] = self.row[: self.size]
        priority = np.zeros(cap, dtype=np.int64)
        priority[: self.size] = self.priority[: self.size]
        vector = np.zeros((cap, self.vector.shape[1]), dtype=np.int64)
        vector[: self.size] = self.vector[: self.size]
        self.row, self.priority, self.vector = row, priority, vector
