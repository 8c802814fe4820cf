"""Each queue's allocation, guarantee and fair share over time, in a bounded ring buffer.

The driver loop calls `maybe_sample(now)` on every pass with its own clock (virtual in the
simulator, monotonic wall time in `shoal run`); a sample is taken when `interval` seconds
have passed since the last one, so the core is never asked for the time and the buffer
holds at most `capacity` samples whatever the run's length (the oldest are dropped).

A sample is, per queue and per resource of the tree (plus "dominant", the largest over
resources), the share of the cluster's allocatable that the queue holds, is guaranteed
and should hold by HDRF (`shoal.tenancy.fairshare.hdrf_fair_share`, what a Queue's status
shows). Shares, not amounts, so queues and resources can be drawn on one axis.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shoal.cache.node_table import NodeTable
from shoal.tenancy.fairshare import hdrf_fair_share
from shoal.tenancy.manager import QueueManager

__all__ = ["DOMINANT", "QueueHistory", "QueueSample", "queue_shares"]

DOMINANT = "dominant"
SERIES = ("allocated", "guaranteed", "fairShare")


@dataclass(frozen=True, slots=True)
class QueueSample:
    time: float
    names: tuple[str, ...]  # queues (the root left out), the tree's order
    resources: tuple[str, ...]  # DOMINANT first, then the tree's resources
    shares: NDArray[np.float32]  # [queue, resource, series]


def queue_shares(
    manager: QueueManager, table: NodeTable
) -> tuple[tuple[str, ...], tuple[str, ...], NDArray[np.float64]]:
    """(queue names, resources, shares[queue, resource, series]) now; see the module
    docstring. Resources the cluster has none of give share 0."""
    tree = manager.tree
    capacity = manager.capacity(table)
    fair = hdrf_fair_share(tree, manager.usage + manager.pending_sum, capacity)
    amounts = np.stack([manager.usage[1:], tree.guaranteed[1:], fair[1:]], axis=2).astype(
        np.float64
    )  # [q, r, s]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(capacity[None, :, None] > 0, amounts / capacity[None, :, None], 0.0)
    dominant = share.max(axis=1, keepdims=True) if share.shape[1] else share[:, :1]
    shares = np.concatenate([dominant, share], axis=1)
    return tuple(tree.names[1:]), (DOMINANT, *tree.resources), shares


class QueueHistory:
    """A ring buffer of `QueueSample`s (see the module docstring)."""

    def __init__(
        self,
        manager: QueueManager,
        table: NodeTable,
        interval: float = 10.0,
        capacity: int = 1440,
    ) -> None:
        if interval <= 0:
            raise ValueError("the sampling interval must be > 0 seconds")
        if capacity < 1:
            raise ValueError("the history must hold at least one sample")
        self.manager = manager
        self.table = table
        self.interval = interval
        self.samples: deque[QueueSample] = deque(maxlen=capacity)
        self.version = 0  # counts samples taken: a client that saw this one has them all
        self._due: float | None = None

    def maybe_sample(self, now: float) -> None:
        """Called by the driver loop on every pass: sample if one is due."""
        if self._due is None or now >= self._due:
            self.sample(now)

    def sample(self, now: float) -> None:
        if self.samples and self.samples[-1].time == now:
            self.samples.pop()  # the state at this instant supersedes the earlier sample
        names, resources, shares = queue_shares(self.manager, self.table)
        self.samples.append(QueueSample(now, names, resources, shares.astype(np.float32)))
        self.version += 1
        self._due = now + self.interval

    def series(
        self,
        resource: str = DOMINANT,
        queues: set[str] | None = None,
        start: float | None = None,
    ) -> dict[str, Any]:
        """The buffer as JSON-ready columns for one resource: `times`, and per queue its
        `allocated`, `guaranteed` and `fairShare` shares (None where the queue did not
        exist at that sample, or the resource was not tracked). `queues`: only those;
        `start`: only the samples taken at that time or later (a client that has the
        earlier ones appends these, replacing its own from `start` on)."""
        samples = list(self.samples)
        resources = sorted({r for s in samples for r in s.resources} - {DOMINANT})
        if start is not None:
            samples = [s for s in samples if s.time >= start]
        out: dict[str, dict[str, list[float | None]]] = {}
        names: tuple[str, ...] = ()
        rows: list[int] = []
        for t, sample in enumerate(samples):
            if resource not in sample.resources:
                continue
            k = sample.resources.index(resource)
            if sample.names != names:  # the tree changed (or the first sample)
                names = sample.names
                rows = [i for i, n in enumerate(names) if queues is None or n in queues]
            values = np.round(sample.shares[rows, k, :].astype(np.float64), 6).tolist()
            for row, value in zip(rows, values, strict=True):
                series = out.get(names[row])
                if series is None:
                    series = out[names[row]] = {s: [None] * len(samples) for s in SERIES}
                for s, v in zip(SERIES, value, strict=True):
                    series[s][t] = v
        return {
            "resource": resource,
            "resources": [DOMINANT, *resources],
            "interval": self.interval,
            "capacity": self.samples.maxlen,
            "start": start,
            "times": [s.time for s in samples],
            "queues": out,
        }
