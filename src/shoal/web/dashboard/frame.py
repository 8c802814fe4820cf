"""What the dashboard shows, read from the scheduler's cache in one pass.

`DashboardSource.build()` returns a `Frame`: the queue tree with allocation, guarantee and
fair share; the pod groups with their phase and member counts; the pending pods grouped by
why they wait; and per node its GPU use and fragmentation, as numpy columns so that a page
of 100 nodes out of 5000 is a slice, not a walk. The builder only reads: it runs on the
scheduler's event loop between driver passes (the state is consistent there), and its cost
is what the scheduling loop waits (`bench/dashboard_snapshot.py` measures it at 5000
nodes and 10000 pending pods).

Why a pod waits is the last explanation the scheduler gave for it (the message of its
last Unschedulable effect, kept on its queue entry): pods are grouped by kind (gated by a
PreEnqueue plugin, rejected by plugins, failed with an error, not tried yet) and by the
plugins that rejected them, with a few example pods and messages per group.

GPU fragmentation of a node is F_n(M) of `shoal.gpu.fragmentation` (the FGD measure): the
free milli-GPU on the node that the target workload M could not use. M is the mix of GPU
shapes the scheduler currently holds, pending and placed, weighted by count (the shapes
covering 95 % of them); with no GPU pod at all, one whole GPU. So a node's fragment is
idle GPU that none of today's GPU jobs could take.
"""

from __future__ import annotations

import hashlib
import heapq
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import GPU_MILLI
from shoal.api.podinfo import PodInfo
from shoal.api.resources import CPU, MEMORY
from shoal.cache.gpu_devices import GpuDevices
from shoal.framework.status import Code
from shoal.gpu.fragmentation import TargetWorkload
from shoal.scheduler import Scheduler
from shoal.scheduling_queue.queue import QueuedPod
from shoal.tenancy.tree import UNLIMITED
from shoal.web.dashboard.history import queue_shares
from shoal.web.gpu_census import FragmentationGauge, ShapeTracker

__all__ = ["SECTIONS", "DashboardSource", "Frame", "NodeFrame", "QueueIndex", "reason_of"]

EXAMPLES = 5  # example pods per pending group
_PHASE_ORDER = {
    "Failed": 0,
    "Pending": 1,
    "Scheduling": 2,
    "Scheduled": 3,
    "Running": 4,
    "Finished": 5,
}
_ARRIVAL = attrgetter("pod.timestamp", "pod.key")
_MESSAGE = attrgetter("message")
# The parts of a frame whose changes are tracked apart (see `Frame.digests`).
SECTIONS = ("summary", "queues", "gangs", "pending", "nodes")


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


@dataclass
class NodeFrame:
    """Per-node columns, row-aligned, over all nodes (GPU or not)."""

    names: list[str]
    gpus: NDArray[np.int64]
    gpu_used: NDArray[np.int64]  # milli-GPU
    gpu_free: NDArray[np.int64]
    frag: NDArray[np.float64]  # milli-GPU, F_n(M)
    free_devices: NDArray[np.int64]  # fully free devices
    model: list[str]  # "" when unknown
    cpu: NDArray[np.int64]  # [allocatable, requested] milli
    memory: NDArray[np.int64]  # [allocatable, requested] bytes
    pods: NDArray[np.int64]
    unschedulable: NDArray[np.bool_]
    devices: NDArray[np.int32]  # free milli per device, [n, width] (0 past the last)

    def __len__(self) -> int:
        return len(self.names)

    def order(self, sort: str, gpu_only: bool) -> NDArray[np.intp]:
        """Row order of a listing: by fragmentation, GPU use, free GPU or name (the first
        three descending, ties by name)."""
        rows = np.flatnonzero(self.gpus > 0) if gpu_only else np.arange(len(self.names))
        by_name = np.argsort(np.asarray(self.names, dtype=object)[rows], kind="stable")
        rows = rows[by_name]
        if sort == "name":
            return rows
        keys = {"frag": self.frag, "used": self.gpu_used, "free": self.gpu_free}
        key = keys[sort][rows]
        return rows[np.argsort(-key, kind="stable")]

    def item(self, row: int) -> dict[str, Any]:
        gpus = int(self.gpus[row])
        return {
            "name": self.names[row],
            "model": self.model[row],
            "gpus": gpus,
            "gpuUsedMilli": int(self.gpu_used[row]),
            "gpuFreeMilli": int(self.gpu_free[row]),
            "fragMilli": round(float(self.frag[row]), 1),
            "freeDevices": int(self.free_devices[row]),
            "deviceFreeMilli": self.devices[row, :gpus].tolist(),
            "cpuMilli": {"allocatable": int(self.cpu[row, 0]), "requested": int(self.cpu[row, 1])},
            "memory": {
                "allocatable": int(self.memory[row, 0]),
                "requested": int(self.memory[row, 1]),
            },
            "pods": int(self.pods[row]),
            "unschedulable": bool(self.unschedulable[row]),
        }

    def digest(self) -> bytes:
        """A hash of every column (what a node listing or the heat map can show)."""
        columns = (
            self.gpus,
            self.gpu_used,
            self.gpu_free,
            self.frag,
            self.free_devices,
            self.cpu,
            self.memory,
            self.pods,
            self.unschedulable,
            self.devices,
        )
        return _digest(
            "\n".join(self.names).encode(),
            "\n".join(self.model).encode(),
            *(np.ascontiguousarray(c).tobytes() for c in columns),
        )


@dataclass
class QueueIndex:
    """The frame's queue rows by name, and each parent's children in the tree's order
    (key None: the top-level queues)."""

    rows: dict[str, dict[str, Any]]
    children: dict[str | None, list[str]]

    @classmethod
    def of(cls, queues: list[dict[str, Any]]) -> QueueIndex:
        rows = {q["name"]: q for q in queues}
        children: dict[str | None, list[str]] = {None: []}
        for q in queues:
            children.setdefault(q["parent"], []).append(q["name"])
        return cls(rows, children)

    def subtree(self, name: str) -> set[str]:
        """`name` and every queue under it (just `name` if no such queue exists: pods
        may name a queue that does not)."""
        out = {name}
        todo = list(self.children.get(name, ()))
        while todo:
            child = todo.pop()
            out.add(child)
            todo.extend(self.children.get(child, ()))
        return out


@dataclass
class Frame:
    time: float  # the scheduler's clock
    build_seconds: float
    summary: dict[str, Any]
    queues: dict[str, Any]
    gangs: list[dict[str, Any]]
    pending: dict[str, Any]
    nodes: NodeFrame
    node_summary: dict[str, Any]
    target: list[dict[str, Any]] = field(default_factory=list)  # the fragmentation workload
    # Per section (SECTIONS), the version the server gave it: kept from the frame before
    # when the section did not change (set by `shoal.web.dashboard.app.Dashboard`).
    versions: dict[str, str] = field(default_factory=dict)

    def digests(self) -> dict[str, bytes]:
        """Per section, a hash of what the API shows of it. The summary's build time is
        left out: a frame of an unchanged scheduler is unchanged however long it took."""
        encode = msgspec.json.encode
        summary = {k: v for k, v in self.summary.items() if k != "buildSeconds"}
        return {
            "summary": _digest(encode(summary)),
            "queues": _digest(encode(self.queues)),
            "gangs": _digest(encode(self.gangs)),
            "pending": _digest(encode(self.pending)),
            "nodes": _digest(self.nodes.digest(), encode([self.node_summary, self.target])),
        }

    @cached_property
    def queue_index(self) -> QueueIndex:
        return QueueIndex.of(self.queues["queues"])

    @cached_property
    def heat_rows(self) -> NDArray[np.intp]:
        """The GPU nodes by name: the heat map's order."""
        return self.nodes.order("name", True)

    @cached_property
    def heat_names_version(self) -> str:
        """A hash of the heat map's node names: a client that has them need not fetch
        them again while it is unchanged."""
        names = self.nodes.names
        return _digest("\n".join(names[r] for r in self.heat_rows.tolist()).encode()).hex()[:12]


def reason_of(entry: QueuedPod) -> tuple[str, tuple[str, ...]]:
    """(kind, plugins) a pending pod is grouped under."""
    if entry.gated_by:
        return "gated", (entry.gated_by,)
    status = entry.last_status
    if status is None:
        return "waiting", ()
    if status.code == Code.ERROR:
        return "error", (status.plugin,) if status.plugin else ()
    plugins = tuple(sorted(p.removesuffix("/PostFilter") for p in entry.rejected_by))
    if not plugins and status.plugin:
        plugins = (status.plugin,)
    return "unschedulable", tuple(dict.fromkeys(plugins))


_KIND_TITLES = {
    "gated": "Gated by {}",
    "unschedulable": "Unschedulable: {}",
    "error": "Error: {}",
    "waiting": "Waiting for a first attempt",
}


def _title(kind: str, plugins: tuple[str, ...]) -> str:
    if kind == "waiting":
        return _KIND_TITLES[kind]
    return _KIND_TITLES[kind].format(", ".join(plugins) or "no plugin named")


class DashboardSource:
    """Builds `Frame`s from one scheduler (see the module docstring)."""

    def __init__(self, scheduler: Scheduler, clock_kind: str = "virtual") -> None:
        self.scheduler = scheduler
        self.clock_kind = clock_kind  # "virtual" (simulation) or "wall" (a cluster)
        self._shapes = ShapeTracker()
        self._frag = FragmentationGauge()

    def build(self) -> Frame:
        started = time.perf_counter()
        sched = self.scheduler
        now = sched.clock.now()
        entries = list(sched.scheduling_queue.pending())
        queues = self._queues()
        gangs = self._gangs(now)
        pending = self._pending(entries, now)
        nodes, node_summary, target = self._nodes(entries)
        summary = {
            "time": now,
            "clock": self.clock_kind,
            "nodes": len(nodes),
            "gpuNodes": int((nodes.gpus > 0).sum()),
            "placedPods": len(sched.cluster.placed),
            "pendingPods": len(entries),
            "queue": sched.scheduling_queue.counts(),
            "queues": len(queues["queues"]),
            "gangs": len(gangs),
            "gangPhases": dict(Counter(g["phase"] for g in gangs)),
            "profiles": sorted(sched.profiles),
        }
        frame = Frame(now, 0.0, summary, queues, gangs, pending, nodes, node_summary, target)
        frame.build_seconds = time.perf_counter() - started
        summary["buildSeconds"] = round(frame.build_seconds, 6)
        return frame

    # ---- queues --------------------------------------------------------------------

    def _queues(self) -> dict[str, Any]:
        manager = self.scheduler.tenant_queues
        tree, table = manager.tree, self.scheduler.cluster.table
        observed = {o[0]: o for o in manager.observed(table)}
        started = manager.started_pods()
        names, _, shares = queue_shares(manager, table)
        dominant = shares[:, 0, :]
        capacity = manager.capacity(table)
        out: list[dict[str, Any]] = []

        def walk(q: int, depth: int) -> None:
            for child in sorted(tree.children_list[q], key=lambda c: tree.names[c]):
                name = tree.names[child]
                _, allocated, guaranteed, fair, pending, bound = observed[name]
                d = tree.defs[name]
                maximum = {
                    r: int(v)
                    for r, v in zip(tree.resources, tree.maximum[child].tolist(), strict=True)
                    if v < UNLIMITED
                }
                alloc_share, guar_share, fair_share = dominant[child - 1].tolist()
                out.append(
                    {
                        "name": name,
                        "parent": tree.names[q] if q else None,
                        "depth": depth,
                        "leaf": child in tree.leaves,
                        "children": len(tree.children_list[child]),
                        "source": d.source,
                        "weight": float(tree.weight[child]),
                        "allocated": allocated,
                        "guaranteed": guaranteed,
                        "maximum": maximum,
                        "fairShare": fair,
                        "pending": pending,
                        "bound": bound,
                        "running": started[child],
                        "share": {
                            "allocated": round(alloc_share, 6),
                            "guaranteed": round(guar_share, 6),
                            "fairShare": round(fair_share, 6),
                        },
                    }
                )
                walk(child, depth + 1)

        walk(0, 0)
        assert len(out) == len(names)
        return {
            "resources": tree.resources,
            "capacity": {r: int(c) for r, c in zip(tree.resources, capacity.tolist(), strict=True)},
            "defaultQueue": tree.default_queue,
            "queues": out,
        }

    # ---- gangs ---------------------------------------------------------------------

    def _gangs(self, now: float) -> list[dict[str, Any]]:
        sched = self.scheduler
        manager = sched.tenant_queues
        out: list[dict[str, Any]] = []
        for key, g in sched.gangs.groups.items():
            done = len(g.bound) + len(g.succeeded) + len(g.failed)
            queue = manager.named_queue(next(iter(g.members.values()))) if g.members else ""
            out.append(
                {
                    "key": key,
                    "namespace": g.namespace,
                    "name": g.name,
                    "phase": sched.gangs.observed_phase(g),
                    "minMember": g.min_member,
                    "members": len(g.members),
                    "bound": len(g.bound),
                    "running": sched.gangs.started(g),
                    "succeeded": len(g.succeeded),
                    "failed": len(g.failed),
                    "waiting": max(len(g.members) - done, 0),
                    "attempts": g.attempts,
                    "queue": queue,
                    "source": g.source,
                    "age": round(max(now - g.created, 0.0), 3),
                    "reason": g.reason,
                }
            )
        out.sort(key=lambda g: (_PHASE_ORDER.get(g["phase"], 5), g["key"]))
        return out

    # ---- pending pods --------------------------------------------------------------

    def _pending(self, entries: list[QueuedPod], now: float) -> dict[str, Any]:
        explain = self.scheduler.explain
        groups: dict[tuple[str, tuple[str, ...]], list[QueuedPod]] = {}
        for entry in entries:
            groups.setdefault(reason_of(entry), []).append(entry)
        manager = self.scheduler.tenant_queues
        out: list[dict[str, Any]] = []
        for (kind, plugins), members in groups.items():
            # The longest waiting first: they are the ones an operator asks about.
            oldest = heapq.nsmallest(EXAMPLES, members, key=_ARRIVAL)
            examples = [
                {
                    "pod": e.pod.key,
                    "queue": manager.named_queue(e.pod),
                    "attempts": e.attempts,
                    "waiting": round(max(now - e.pod.timestamp, 0.0), 3),
                    "message": explain(e.pod.uid) or e.message,
                }
                for e in oldest
            ]
            messages = Counter(map(_MESSAGE, members))
            messages.pop("", None)
            out.append(
                {
                    "kind": kind,
                    "plugins": list(plugins),
                    "reason": _title(kind, plugins),
                    "count": len(members),
                    "distinctMessages": len(messages),
                    "topMessage": messages.most_common(1)[0][0] if messages else "",
                    "examples": examples,
                }
            )
        out.sort(key=lambda g: (-g["count"], g["reason"]))
        return {"total": len(entries), "groups": out}

    # ---- the pods of one gang or queue (read when asked) ----------------------------

    def pods(
        self,
        *,
        gang: str | None = None,
        queues: set[str] | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> dict[str, Any] | None:
        """The members of pod group `gang` (pending first, then by name), or the pending
        pods of `queues` (the longest waiting first): a page of them, each with where it
        is and, if pending, why (what `shoal explain` says). None: no such gang. Reads
        the scheduler: call it where the scheduler runs."""
        sched = self.scheduler
        now = sched.clock.now()
        if gang is not None:
            group = sched.gangs.groups.get(gang)
            if group is None:
                return None
            rows: list[tuple[PodInfo, str]] = []
            for uid, pod in group.members.items():
                if uid in group.succeeded:
                    state = "Succeeded"
                elif uid in group.failed:
                    state = "Failed"
                elif uid in group.bound:
                    state = "Running" if pod.pod.status.phase == "Running" else "Bound"
                else:
                    state = "Pending"
                rows.append((pod, state))
            rows.sort(key=lambda r: (r[1] != "Pending", r[0].key))
        else:
            named = sched.tenant_queues.named_queue
            wanted = queues or set()
            entries = [e for e in sched.scheduling_queue.pending() if named(e.pod) in wanted]
            entries.sort(key=_ARRIVAL)
            rows = [(e.pod, "Pending") for e in entries]
        page = rows[offset : offset + limit]
        return {
            "time": now,
            "gang": gang,
            "total": len(rows),
            "pending": sum(1 for _, state in rows if state == "Pending"),
            "offset": offset,
            "items": [self._pod(pod, state, now) for pod, state in page],
        }

    def _pod(self, pod: PodInfo, state: str, now: float) -> dict[str, Any]:
        sched = self.scheduler
        record = sched.cluster.placed.get(pod.uid)
        entry = sched.scheduling_queue.get(pod.uid) if state == "Pending" else None
        if state == "Pending" and record is not None:
            state = "Assumed"  # placed but not bound yet (a gang waiting at Permit)
        group = sched.gangs.group_of_uid(pod.uid)
        item: dict[str, Any] = {
            "pod": pod.key,
            "queue": sched.tenant_queues.named_queue(pod),
            "gang": group.key if group is not None else "",
            "state": state,
            "node": record.node if record is not None else "",
            "attempts": entry.attempts if entry is not None else 0,
            "waiting": round(max(now - pod.timestamp, 0.0), 3) if state == "Pending" else 0.0,
            "kind": "",
            "plugins": [],
            "reason": "",
            "message": "",
        }
        if entry is not None:
            kind, plugins = reason_of(entry)
            item["kind"], item["plugins"] = kind, list(plugins)
            item["reason"] = _title(kind, plugins)
            item["message"] = sched.explain(pod.uid) or entry.message
        return item

    # ---- nodes ---------------------------------------------------------------------

    def _target(self, entries: list[QueuedPod]) -> TargetWorkload:
        """The GPU shapes pending and placed now (see the module docstring)."""
        pending = {e.pod.uid: e.pod for e in entries}
        cluster = self.scheduler.cluster
        return self._shapes.target(pending, cluster.gpu_devices, cluster.table.pods)

    def _nodes(
        self, entries: list[QueuedPod]
    ) -> tuple[NodeFrame, dict[str, Any], list[dict[str, Any]]]:
        table = self.scheduler.cluster.table
        n = table.n
        cpu_c, mem_c = table.resource_index[CPU], table.resource_index[MEMORY]
        cpu = np.stack([table.allocatable[:n, cpu_c], table.requested[:n, cpu_c]], axis=1)
        memory = np.stack([table.allocatable[:n, mem_c], table.requested[:n, mem_c]], axis=1)
        pods = np.fromiter((len(p) for p in table.pods[:n]), dtype=np.int64, count=n)
        devices = self.scheduler.cluster.gpu_devices
        target: list[dict[str, Any]] = []
        if devices is None or n == 0:
            zeros = np.zeros(n, dtype=np.int64)
            frame = NodeFrame(
                list(table.names[:n]),
                zeros,
                zeros,
                zeros,
                np.zeros(n),
                zeros,
                [""] * n,
                cpu,
                memory,
                pods,
                table.unschedulable[:n].copy(),
                np.zeros((n, 0), dtype=np.int32),
            )
        else:
            frame, target = self._gpu_nodes(devices, entries, cpu, memory, pods)
        return frame, _node_summary(frame), target

    def _gpu_nodes(
        self,
        devices: GpuDevices,
        entries: list[QueuedPod],
        cpu: NDArray[np.int64],
        memory: NDArray[np.int64],
        pods: NDArray[np.int64],
    ) -> tuple[NodeFrame, list[dict[str, Any]]]:
        table = self.scheduler.cluster.table
        n = table.n
        count = devices.count[:n].astype(np.int64)
        free = devices.free[:n].astype(np.int64)
        width = int(count.max()) if n else 0
        free = free[:, :width]
        # Devices past a node's count hold 0 free milli, so sums need no mask.
        gpu_free = free.sum(axis=1)
        gpu_used = count * GPU_MILLI - gpu_free
        workload = self._target(entries)
        frag = self._frag.frag(devices, table, workload, width)
        models = devices.models
        model = [models[c] if c >= 0 else "" for c in devices.model[:n].tolist()]
        frame = NodeFrame(
            list(table.names[:n]),
            count,
            gpu_used,
            gpu_free,
            frag,
            (free == GPU_MILLI).sum(axis=1).astype(np.int64),
            model,
            cpu,
            memory,
            pods,
            table.unschedulable[:n].copy(),
            devices.free[:n, :width].copy(),
        )
        total = workload.total_weight or 1
        target = [
            {
                "cpuMilli": s.cpu_milli,
                "gpuMilli": s.gpu_milli,
                "gpuCount": s.gpu_count,
                "models": list(s.models),
                "popularity": round(w / total, 6),
            }
            for s, w in zip(workload.shapes, workload.weights, strict=True)
        ]
        return frame, target


def _node_summary(nodes: NodeFrame) -> dict[str, Any]:
    gpu_rows = nodes.gpus > 0
    capacity = int(nodes.gpus.sum()) * GPU_MILLI
    used = int(nodes.gpu_used.sum())
    free = capacity - used
    frag = float(nodes.frag[gpu_rows].sum())
    # Histograms over GPU nodes, in tenths: GPU use of the node, and the share of its free
    # GPU that is fragment.
    with np.errstate(divide="ignore", invalid="ignore"):
        use = np.where(gpu_rows, nodes.gpu_used / np.maximum(nodes.gpus * GPU_MILLI, 1), 0.0)
        frag_share = np.where(nodes.gpu_free > 0, nodes.frag / np.maximum(nodes.gpu_free, 1), 0.0)
    bins = np.linspace(0.0, 1.0, 11)
    use_hist = np.histogram(np.clip(use[gpu_rows], 0, 1), bins=bins)[0]
    frag_hist = np.histogram(np.clip(frag_share[gpu_rows], 0, 1), bins=bins)[0]
    models = Counter(m for m, g in zip(nodes.model, nodes.gpus.tolist(), strict=True) if g)
    return {
        "nodes": len(nodes),
        "gpuNodes": int(gpu_rows.sum()),
        "gpus": int(nodes.gpus.sum()),
        "gpuMilli": {"capacity": capacity, "used": used, "free": free},
        "fragMilli": round(frag, 1),
        "fragOfFree": round(frag / free, 6) if free else 0.0,
        "freeDevices": int(nodes.free_devices.sum()),
        "models": dict(sorted(models.items())),
        "cpuMilli": {
            "allocatable": int(nodes.cpu[:, 0].sum()),
            "requested": int(nodes.cpu[:, 1].sum()),
        },
        "unschedulableNodes": int(nodes.unschedulable.sum()),
        "histogram": {
            "bins": [round(b, 1) for b in bins.tolist()],
            "gpuUse": use_hist.tolist(),
            "fragOfFree": frag_hist.tolist(),
        },
    }
