"""Queue fairness over time: each queue's allocation against its fair share.

Sampled on the virtual clock every `interval` seconds while the simulation runs: per
queue, its dominant share of the cluster (allocation) and its HDRF fair share as a
dominant share (`shoal.tenancy.fairshare.fair_shares`: the number Queue status, the CLI
and the dashboard give), and over the leaf queues with demand, Jain's
fairness index of allocation / fair share (1.0 = every queue exactly at its fair share).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from shoal.cache.node_table import NodeTable
from shoal.tenancy.fairshare import dominant_shares, fair_shares, jain_index
from shoal.tenancy.manager import QueueManager

__all__ = ["QueueMonitor", "QueueSample"]


@dataclass(frozen=True)
class QueueSample:
    time: float
    queue: str
    allocated: float  # dominant share of the cluster, 0..1
    fair_share: float
    pending: int


@dataclass
class QueueMonitor:
    manager: QueueManager
    table: NodeTable
    interval: float = 60.0
    samples: list[QueueSample] = field(default_factory=list)
    jain: list[tuple[float, float]] = field(default_factory=list)  # (time, index)
    _next: float = 0.0

    @property
    def active(self) -> bool:
        return len(self.manager.tree.leaves) > 1

    def maybe_sample(self, now: float) -> None:
        while self.active and now >= self._next:
            self.sample(self._next)
            self._next += self.interval

    def sample(self, at: float) -> None:
        manager, tree = self.manager, self.manager.tree
        capacity = manager.capacity(self.table)
        fair = fair_shares(manager, capacity)
        shares = dominant_shares(manager.usage, capacity)
        ratios = []
        for name, i in tree.index.items():
            if i == 0:
                continue
            pending = sum(manager.pending[j] for j in manager._leaves_under(i))
            sample = QueueSample(at, name, float(shares[i]), fair.get(name, 0.0), pending)
            self.samples.append(sample)
            if i in tree.leaves and sample.fair_share > 1e-9:
                ratios.append(sample.allocated / sample.fair_share)
        if ratios:
            self.jain.append((at, jain_index(ratios)))

    def summary_table(self) -> Table:
        table = Table(title="Queues: allocation vs HDRF fair share (dominant share)")
        for column in ("queue", "final alloc", "final fair", "mean |alloc - fair|"):
            table.add_column(column, justify="right" if column != "queue" else "left")
        by_queue: dict[str, list[QueueSample]] = {}
        for s in self.samples:
            by_queue.setdefault(s.queue, []).append(s)
        for name, series in sorted(by_queue.items()):
            last = series[-1]
            gap = sum(abs(s.allocated - s.fair_share) for s in series) / len(series)
            table.add_row(name, f"{last.allocated:.1%}", f"{last.fair_share:.1%}", f"{gap:.1%}")
        if self.jain:
            mean = sum(j for _, j in self.jain) / len(self.jain)
            table.caption = f"Jain's index: last {self.jain[-1][1]:.3f}, mean {mean:.3f}"
        return table

    def write_csv(self, path: Path) -> None:
        jain = dict(self.jain)
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["time", "queue", "allocated", "fair_share", "pending", "jain"])
            for s in self.samples:
                writer.writerow(
                    [
                        f"{s.time:g}",
                        s.queue,
                        f"{s.allocated:.6f}",
                        f"{s.fair_share:.6f}",
                        s.pending,
                        f"{jain.get(s.time, float('nan')):.6f}",
                    ]
                )
