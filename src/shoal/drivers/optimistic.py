"""Optimistic worker processes inside one replica (Omega), around the driver loop.

`OptimisticDriver` runs a scheduler (the *truth*: the only cache that binds) with N
worker processes. Each worker is forked from the scheduler once, so it starts with a
replica of the same objects (`shoal.scheduler.optimistic.Replica`); from then on it is
told, in order, what the truth did (pods assigned and released, the intake calls given
to this driver) and decides the pods it is handed against its replica, which may be a
batch or two behind. The committer (this process) validates every proposal against the
chosen row's generation (`Committer`), places it with the scheduling cycle's own code,
or counts a conflict and hands the pod to the same worker again with its next update.
Pods whose placement a row's generation cannot validate (`row_local`), pods no node
fits in a worker's view, and pods that conflicted `retries` times are decided by the
committer itself, with an ordinary scheduling cycle (their diagnosis, preemption and
requeueing are the usual ones).

Each worker keeps up to `depth` batches of `batch` pods in flight, so workers decide
while the committer commits. Bindings, ticks and the inbox are the plain driver loop's
(`Driver`). Pods and nodes must be fed through this driver's intake methods once it has
started (they are forwarded to the workers); before `start` (or the first `run`) the
scheduler may be fed directly, the fork copies it.

Workers are processes because the core holds the GIL for most of a cycle: threads would
decide one at a time (see docs/architecture.md, "Optimistic workers").
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import numpy as np

from shoal.api.objects import Node, Pod
from shoal.api.podinfo import PodInfo
from shoal.drivers.loop import Driver, Inbox
from shoal.scheduler.optimistic import Committer, PlacementLog, Proposal, Replica, Update, row_local
from shoal.scheduler.scheduler import CycleResult, Scheduler
from shoal.scheduling_queue.queue import QueuedPod

__all__ = ["OptimisticDriver"]

_TRIM_AT = 4096  # log entries every worker has been sent before they are dropped


class OptimisticDriver:
    """See the module docstring. `stats()` reports what was decided where."""

    def __init__(
        self,
        scheduler: Scheduler,
        inbox: Inbox | None = None,
        *,
        workers: int = 2,
        batch: int = 16,
        depth: int = 2,
        retries: int = 3,
        seed: int = 0,
        on_cycle: Callable[[CycleResult], None] | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("at least one worker")
        self.scheduler = scheduler
        self.driver = Driver(scheduler, inbox=inbox)
        self.workers = workers
        self.batch = batch
        self.depth = depth
        self.retries = retries
        self.seed = seed
        self.on_cycle = on_cycle
        self.log = PlacementLog()
        self.committer: Committer | None = None
        self.serial = 0  # pods the committer decided itself (row_local, no fit, retries)
        self._conns: list[Connection] = []
        self._procs: list[BaseProcess] = []
        self._cursor: list[int] = []
        self._conflicted: list[list[str]] = []
        self._again: list[deque[QueuedPod]] = []
        # Per worker, its batches in flight: each pod with the PodInfo it was sent as.
        self._in_flight: list[deque[list[tuple[QueuedPod, PodInfo]]]] = []
        self._order: deque[int] = deque()
        self._tries: dict[str, int] = {}
        self.worker_cpu: list[float] = []  # CPU seconds of each worker, once closed

    # ---- intake (forwarded to the workers once started) -----------------------------

    def add_node(self, node: Node) -> None:
        self._forward("add_node", node)
        self.scheduler.add_node(node)

    def update_node(self, node: Node) -> None:
        self._forward("update_node", node)
        self.scheduler.update_node(node)

    def delete_node(self, name: str) -> None:
        self._forward("delete_node", name)
        self.scheduler.delete_node(name)

    def add_pod(self, pod: Pod) -> None:
        self._forward("add_pod", pod)
        self.scheduler.add_pod(pod)

    def update_pod(self, pod: Pod) -> None:
        self._forward("update_pod", pod)
        self.scheduler.update_pod(pod)

    def delete_pod(self, uid: str) -> None:
        self._forward("delete_pod", uid)
        self.scheduler.delete_pod(uid)

    def _forward(self, method: str, obj: Node | Pod | str) -> None:
        """Log the call before the truth runs it: the placements it causes come after
        it in the log, so a replica knows the pod before it is told where it is."""
        if self.committer is not None:
            self.log.observed(method, obj)

    # ---- the workers ---------------------------------------------------------------

    def start(self) -> None:
        """Fork the workers (each a replica of the scheduler as it is now)."""
        if self.committer is not None:
            return
        ctx = multiprocessing.get_context("fork")
        n = self.scheduler.cluster.table.n
        for index in range(self.workers):
            parent, child = ctx.Pipe()
            start = index * n // self.workers
            proc = ctx.Process(
                target=_serve,
                args=(child, self.scheduler, self.seed, index, start),
                daemon=True,
                name=f"shoal-optimistic-{index}",
            )
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        self.committer = Committer(self.scheduler, self.workers)
        self.scheduler.cluster.assignment_observers.append(self.log)
        self._cursor = [0] * self.workers
        self._conflicted = [[] for _ in range(self.workers)]
        self._again = [deque() for _ in range(self.workers)]
        self._in_flight = [deque() for _ in range(self.workers)]

    def close(self) -> None:
        """Stop the workers (after `run` returned: nothing is in flight). Each reports
        the CPU seconds it used (`worker_cpu`)."""
        self.worker_cpu = []
        for conn in self._conns:
            try:
                conn.send(None)
                self.worker_cpu.append(float(conn.recv()))
            except (OSError, EOFError):  # it stopped on an error already reported
                self.worker_cpu.append(0.0)
            conn.close()
        for proc in self._procs:
            proc.join(timeout=10)
        if self.committer is not None:
            self.scheduler.cluster.assignment_observers.remove(self.log)
        self._conns.clear()
        self._procs.clear()
        self.committer = None

    def __enter__(self) -> OptimisticDriver:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        c = self.committer
        return {
            "proposed": c.proposed if c else 0,
            "committed": c.committed if c else 0,
            "conflicts": c.conflicts if c else 0,
            "serial": self.serial,
        }

    # ---- the loop ------------------------------------------------------------------

    def run(self) -> bool:
        """Schedule everything due now (as `Driver.run`); True when idle."""
        self.start()
        sched = self.scheduler
        driver = self.driver
        while True:
            driver.tick()
            self._fill()
            if self._order:
                worker = self._order.popleft()
                wire = self._conns[worker].recv()
                if isinstance(wire, str):
                    raise RuntimeError(f"optimistic worker {worker} failed:\n{wire}")
                self._commit(worker, self._in_flight[worker].popleft(), wire)
                driver.start_bindings()
                if min(self._cursor) > _TRIM_AT:
                    self._trim_log()
                continue
            if not driver.intake() and not sched.has_work() and not any(self._again):
                driver.start_bindings()
                inbox = driver.inbox
                if not sched.has_work() and not (inbox is not None and inbox.pending):
                    self._trim_log()
                    return True

    def _fill(self) -> None:
        """Hand every worker batches until each has `depth` in flight."""
        sched = self.scheduler
        committer = self.committer
        assert committer is not None
        for worker in range(self.workers):
            while len(self._in_flight[worker]) < self.depth:
                batch: list[QueuedPod] = []
                again = self._again[worker]
                while again and len(batch) < self.batch:
                    batch.append(again.popleft())
                while len(batch) < self.batch:
                    entry = sched.pop_pod()
                    if entry is None:
                        break
                    if row_local(sched, entry.pod):
                        self._serial(entry)
                    else:
                        batch.append(entry)
                if not batch:
                    break
                log = self.log.entries
                update = Update(
                    tuple(self._conflicted[worker]),
                    tuple(log[self._cursor[worker] :]),
                    committer.generations_for(worker),
                    tuple(e.pod.uid for e in batch),
                )
                self._cursor[worker] = len(log)
                self._conflicted[worker].clear()
                self._conns[worker].send(update)
                self._in_flight[worker].append([(e, e.pod) for e in batch])
                self._order.append(worker)

    def _commit(
        self,
        worker: int,
        batch: list[tuple[QueuedPod, PodInfo]],
        wire: list[tuple[str, str, int]],
    ) -> None:
        committer = self.committer
        assert committer is not None
        queue = self.scheduler.scheduling_queue
        for (entry, sent), (uid, node, seen) in zip(batch, wire, strict=True):
            if queue.get(uid) is not entry or entry.pod is not sent:
                # Deleted, bound by someone else or changed while the worker decided:
                # its replica lets go of the decision; a changed pod is decided again.
                if node:
                    self._conflicted[worker].append(uid)
                if queue.get(uid) is entry:
                    self._serial(entry)
                else:
                    self._tries.pop(uid, None)
                continue
            if not node:
                self._serial(entry)  # nothing fits in the worker's view: the truth decides
                continue
            result = committer.commit(worker, entry, Proposal(uid, node, seen))
            if result is None:
                self._conflicted[worker].append(uid)
                tries = self._tries[uid] = self._tries.get(uid, 0) + 1
                if tries > self.retries:
                    self._serial(entry)
                else:
                    self._again[worker].append(entry)
                continue
            self._tries.pop(uid, None)
            if self.on_cycle is not None:
                self.on_cycle(result)
        self.driver.cycles += len(batch)

    def _serial(self, entry: QueuedPod) -> None:
        self.serial += 1
        self._tries.pop(entry.pod.uid, None)
        result = self.scheduler.run_cycle(entry)
        self.driver.start_bindings()
        if self.on_cycle is not None:
            self.on_cycle(result)

    def _trim_log(self) -> None:
        """Forget the log every worker has been sent."""
        low = min(self._cursor, default=0)
        if low:
            del self.log.entries[:low]
            self._cursor = [c - low for c in self._cursor]


def _serve(conn: Connection, sched: Scheduler, seed: int, index: int, start: int) -> None:
    """A worker process: apply each update to the replica, decide its pods, answer."""
    rng = np.random.default_rng((seed, index + 1))
    sched.handle.rng = rng
    sched.algorithm.rng = rng
    sched.algorithm.rotate_to(start)
    replica = Replica(sched)
    while True:
        update: Update | None = conn.recv()
        if update is None:
            conn.send(time.process_time())
            break
        try:
            replica.apply(update)
            answer: list[tuple[str, str, int]] | str = [
                (p.uid, p.node, p.seen) for p in replica.decide(update.decide)
            ]
        except Exception:  # the replica cannot follow the truth: say why, and stop
            conn.send(traceback.format_exc())
            break
        conn.send(answer)
    conn.close()
