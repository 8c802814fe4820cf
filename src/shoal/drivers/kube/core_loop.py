"""The scheduling loop on the core's thread, and the events that wake it.

`SchedulingLoop.run` is the one driver loop (`shoal.drivers.loop.Driver`) in slices: it
yields to the core loop's inbox (informer updates, bind outcomes) at least every
`yield_every_seconds` while busy, and sleeps until the core's next wakeup or a new event
when idle. Bind outcomes and failed evictions reach the core through the inbox
(`CoreThread.post`) as events; so do informer updates (`Intake`), which wake the loop
the same way. Everything here except `bind_outcome` and `eviction_failed` (called on
the I/O loop) runs on the core's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from shoal.api.podinfo import PodInfo
from shoal.drivers.kube.core import CoreThread
from shoal.drivers.loop import Driver
from shoal.framework.effects import BindOutcome
from shoal.scheduler import CycleResult, Scheduler
from shoal.web.metrics import SchedulerMetrics

__all__ = ["LoopPacing", "SchedulingLoop"]

log = logging.getLogger("shoal.kube")


@dataclass(frozen=True)
class LoopPacing:
    max_idle_seconds: float  # tick at least this often when idle
    yield_every_seconds: float  # let the inbox run at least this often while busy
    retry_period: float  # how long to wait while the lease is past its renew deadline


class SchedulingLoop:
    """The driver loop, its wakeups and what it counts (attempt metrics, binds)."""

    def __init__(
        self,
        scheduler: Scheduler,
        core: CoreThread,
        metrics: SchedulerMetrics,
        pacing: LoopPacing,
        *,
        now: Callable[[], float],
        lease_valid: Callable[[], bool] = lambda: True,
    ) -> None:
        self.scheduler = scheduler
        self.core = core
        self.metrics = metrics
        self.pacing = pacing
        self.now = now  # the scheduler's clock (next wakeups are on it)
        self.lease_valid = lease_valid
        self.driver = Driver(scheduler, on_cycle=self._cycle_done)
        self.wake = asyncio.Event()  # replaced on the core loop when `run` starts
        self.beat = time.monotonic()  # when the loop last began a pass (/healthz)
        self.cycles = 0  # scheduling cycles run
        self.bound = 0  # pods this replica bound
        self._cycle_started = time.perf_counter()

    async def run(self) -> None:
        pacing = self.pacing
        self.wake = asyncio.Event()  # of the loop this runs on (the core's)
        while True:
            self.beat = time.monotonic()
            if not self.lease_valid():
                # Past the renew deadline (the lease thread is about to say so): no pass.
                await asyncio.sleep(pacing.retry_period)
                continue
            self.wake.clear()
            self._cycle_started = time.perf_counter()
            try:
                idle = self.driver.run(
                    timer=time.perf_counter, slice_seconds=pacing.yield_every_seconds
                )
            except Exception:
                log.exception("a scheduling pass failed")
                self.metrics.schedule_attempts.labels("error", "").inc()
                idle = True
            if not idle:
                await asyncio.sleep(0)
                continue
            wake = self.driver.next_wakeup()
            delay = pacing.max_idle_seconds
            if wake is not None:
                delay = min(delay, max(0.0, wake - self.now()))
            if delay > 0 and not self.wake.is_set():
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                # cancel that lands as the event is set, and a cancelled loop would go on.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self.wake.wait()
            else:
                await asyncio.sleep(0)

    # ---- events (posted to the core's inbox) -------------------------------------------

    def eviction_failed(self, pod: PodInfo) -> None:
        """An eviction the core asked for failed (on the I/O loop)."""
        self.core.post(self._eviction_failed_on_core, pod)

    def bind_outcome(self, outcome: BindOutcome) -> None:
        """A bind's outcome (on the I/O loop): an event for the core's inbox."""
        self.core.post(self._bind_outcome_on_core, outcome)

    def _eviction_failed_on_core(self, pod: PodInfo) -> None:
        self.scheduler.eviction_failed(pod.uid)
        self.wake.set()

    def _bind_outcome_on_core(self, outcome: BindOutcome) -> None:
        task = self.scheduler.binding.get(outcome.uid)
        before = self.scheduler.bound
        self.scheduler.bind_outcome(outcome)
        if task is not None and self.scheduler.bound > before:
            self.bound += 1
            log.info(
                "bound pod %s to %s",
                task.pod.key,
                task.node,
                extra={"pod": task.pod.key, "node": task.node},
            )
        self.wake.set()

    # ---- attempts ---------------------------------------------------------------------

    def _cycle_done(self, result: CycleResult) -> None:
        now = time.perf_counter()
        self.cycles += 1
        self._record_attempt(result, now - self._cycle_started)
        self._cycle_started = now

    def _record_attempt(self, result: CycleResult, seconds: float) -> None:
        if result.node is not None:
            outcome = "scheduled"
        elif result.status.rejected:
            outcome = "unschedulable"
        else:
            outcome = "error"
        profile = result.pod.scheduler_name
        self.metrics.schedule_attempts.labels(outcome, profile).inc()
        self.metrics.attempt_duration.labels(outcome, profile).observe(seconds)
        if result.node is None:
            log.debug(
                "pod %s not scheduled: %s",
                result.pod.key,
                result.message,
                extra={"pod": result.pod.key, "reason": result.message},
            )
