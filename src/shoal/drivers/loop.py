"""The driver loop: the one way the scheduling core is run, everywhere.

The simulator, the test harness, the openb experiments and the Kubernetes backend all
run the core through `Driver`; they differ only in

* the clock (virtual, moved by the caller; or wall time),
* the effects port: in memory, effects are applied at once and what they produce (a
  bound pod, a bind's outcome, an evicted pod gone) is queued as events and drained by
  the driver, deterministically; in a cluster they become API calls whose results come
  back through the informers and the core's inbox.

Binding cycles are not coroutines: `start_bindings` runs PreBind and emits each pod's
`Bind` effect; the outcome comes back as an event (`Scheduler.bind_outcome`, or the
watch showing the pod bound), in memory as in a cluster.

One pass (`run`) does everything due now, in a fixed order: feed back what the effects
produced, let time pass in the core (`tick`: backoffs, Permit deadlines, reservations),
start the binding cycles that are ready, then run scheduling cycles while there is work,
starting binding cycles as they become ready. It returns when nothing is left to do at
this instant, or when its slice of wall time is used up (the Kubernetes backend yields
to its event loop between slices). `next_wakeup` says when the core next has something
to do on its own.

To plug in a new action (a rescheduler pass, a parallel worker), give it a place in this
pass and let it decide through a `Transaction` and act through the effects port, like
the scheduling cycle does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from shoal.scheduler.scheduler import CycleResult, Scheduler

__all__ = ["Driver", "Inbox"]


class Inbox(Protocol):
    """Objects produced by effects, waiting to be fed back into the core (in memory)."""

    @property
    def pending(self) -> bool: ...

    def drain(self, scheduler: Scheduler) -> bool: ...


class Driver:
    """Runs the core (see the module docstring)."""

    def __init__(
        self,
        scheduler: Scheduler,
        inbox: Inbox | None = None,
        on_cycle: Callable[[CycleResult], None] | None = None,
        hold_bindings: Callable[[], bool] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.inbox = inbox
        self.on_cycle = on_cycle
        # True while binding cycles must not start yet (the simulator's charged cycle
        # time: they start when the scheduling cycle that made them ready ends).
        self.hold_bindings = hold_bindings
        self.cycles = 0
        # Observers outside the core (the dashboard's queue history) called after every
        # tick with the scheduler's clock, so they never read a clock of their own.
        self.samplers: list[Callable[[float], None]] = []

    def intake(self) -> bool:
        """Feed back what the effects produced (in memory). True if anything came in."""
        inbox = self.inbox
        return inbox.drain(self.scheduler) if inbox is not None and inbox.pending else False

    def tick(self) -> None:
        """Let time pass in the core and start the binding cycles that became ready."""
        self.intake()
        self.scheduler.tick()
        self._bind()
        if self.samplers:
            now = self.scheduler.clock.now()
            for sample in self.samplers:
                sample(now)

    def cycle(self) -> CycleResult | None:
        """One scheduling cycle, then start whatever it made ready to bind."""
        result = self.scheduler.schedule_one()
        self._bind()
        if result is not None:
            self.cycles += 1
            if self.on_cycle is not None:
                self.on_cycle(result)
        return result

    def _bind(self) -> None:
        if self.hold_bindings is None or not self.hold_bindings():
            self.scheduler.start_bindings()
        self.intake()

    def start_bindings(self) -> None:
        """Start the binding cycles that are ready, and feed back what they produced."""
        self.scheduler.start_bindings()
        self.intake()

    def run(
        self,
        *,
        max_cycles: int | None = None,
        timer: Callable[[], float] | None = None,
        slice_seconds: float = 0.0,
    ) -> bool:
        """Do everything due now. Returns True when idle (nothing left at this instant),
        False when the wall-time slice (`timer`, `slice_seconds`) ran out first.
        `max_cycles` guards against a core that never settles (raises)."""
        sched = self.scheduler
        start = timer() if timer is not None else 0.0
        ran = 0
        while True:
            self.tick()
            while sched.has_work():
                if max_cycles is not None and ran >= max_cycles:
                    raise RuntimeError(f"still scheduling after {max_cycles} cycles")
                self.cycle()
                ran += 1
                if timer is not None and timer() - start >= slice_seconds:
                    sched.say_gated()
                    return False
            if not self.intake() and not sched.has_work():
                self._bind()
                if not sched.has_work() and not (self.inbox is not None and self.inbox.pending):
                    sched.say_gated()
                    return True

    def next_wakeup(self) -> float | None:
        """When the core next has something to do on its own (None: only an event)."""
        return self.scheduler.next_wakeup()
