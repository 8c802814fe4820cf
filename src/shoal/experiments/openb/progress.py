"""Progress of a sweep (`shoal experiment openb`): runs finished, per policy and in all,
with the time left, on stderr (stdout keeps the results).

* On a terminal: rich progress bars, one for all runs (with the time elapsed) and one
  per policy (its seeds over every trace), each with its ETA.
* Otherwise (a log, CI): one line per finished run, `[3/70] FGD seed 44 on default:
  4.29 % unallocated (12.3 s); 0:00:37 elapsed, ETA 0:13:30`; none with --json, whose
  output may be read as one document.
* `--quiet`: nothing.

The ETA is the wall time per finished run so far (runs in parallel share it), times the
runs still to finish: for a policy, those up to its last one in the order the runs are
started (trace, then policy, then seed), since the runs before it go first.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from types import TracebackType
from typing import IO, TYPE_CHECKING, Literal

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

if TYPE_CHECKING:
    from shoal.experiments.openb.runner import RunResult

__all__ = ["Mode", "SweepProgress", "progress_mode"]

Mode = Literal["bar", "lines", "off"]
Unit = tuple[str, str, int]  # trace, policy, seed


def progress_mode(quiet: bool, json_output: bool, stream: IO[str] | None = None) -> Mode:
    """Bars on a terminal, lines elsewhere (none with --json), nothing with --quiet."""
    if quiet:
        return "off"
    if Console(file=stream if stream is not None else sys.stderr).is_terminal:
        return "bar"
    return "off" if json_output else "lines"


def clock_text(seconds: float) -> str:
    """0:13:30."""
    return str(timedelta(seconds=max(0, round(seconds))))


class _Eta(ProgressColumn):
    """`ETA 0:13:30`, counting down to the task's `done_at` (none yet: `-:--:--`)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__()
        self.clock = clock

    def render(self, task: Task) -> Text:
        done_at = task.fields.get("done_at")
        if task.finished:
            return Text("done", style="progress.remaining")
        if done_at is None:
            return Text("ETA -:--:--", style="progress.remaining")
        return Text(f"ETA {clock_text(done_at - self.clock())}", style="progress.remaining")


class _Elapsed(TimeElapsedColumn):
    """The time elapsed, on the all-runs bar only (the policies' runs overlap)."""

    def render(self, task: Task) -> Text:
        return super().render(task) if task.fields.get("overall") else Text("")


class SweepProgress:
    """Call `start()` when the runs start, `done(run)` as each finishes; a context
    manager (the bars are taken down on exit). `units`: the runs, in the order they
    are started."""

    def __init__(
        self,
        units: Sequence[Unit],
        mode: Mode,
        *,
        stream: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mode = mode
        self.units = list(units)
        self.total = len(self.units)
        self.finished = 0
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.started_at = clock()
        self._done: set[Unit] = set()
        policies = list(dict.fromkeys(policy for _, policy, _ in self.units))
        self._last = {policy: i for i, (_, policy, _) in enumerate(self.units)}
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}  # "" for all runs, else per policy
        if mode == "bar":
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                _Elapsed(),
                _Eta(clock),
                console=Console(file=self.stream),
                get_time=clock,
            )
            width = max((len(p) for p in policies), default=0)
            self._tasks[""] = self._progress.add_task(
                f"{'all runs':<{width + 2}}", total=self.total, start=False, overall=True
            )
            for policy in policies:
                count = sum(1 for _, p, _ in self.units if p == policy)
                self._tasks[policy] = self._progress.add_task(
                    f"  {policy:<{width}}", total=count, start=False
                )

    def start(self) -> None:
        """The runs are under way: the clock starts (and the bars' display thread)."""
        self.started_at = self.clock()
        if self._progress is not None:
            for task in self._tasks.values():
                self._progress.start_task(task)
            self._progress.start()

    def eta(self, policy: str | None = None) -> float | None:
        """Seconds until every run (of `policy`, and those started before its last one)
        is done; None before any run finished."""
        if not self.finished:
            return None
        per_run = (self.clock() - self.started_at) / self.finished
        last = self._last.get(policy, -1) if policy is not None else self.total - 1
        return per_run * sum(1 for unit in self.units[: last + 1] if unit not in self._done)

    def done(self, run: RunResult) -> None:
        self.finished += 1
        self._done.add((run.trace, run.policy, run.seed))
        if self._progress is not None:
            now = self.clock()
            for policy, task in self._tasks.items():
                eta = self.eta(policy or None)
                advance = 1 if policy in ("", run.policy) else 0
                self._progress.update(
                    task, advance=advance, done_at=None if eta is None else now + eta
                )
        elif self.mode == "lines":
            elapsed = self.clock() - self.started_at
            line = (
                f"[{self.finished}/{self.total}] {run.policy} seed {run.seed} on {run.trace}: "
                f"{run.unallocated:.2f} % unallocated ({run.seconds:.1f} s); "
                f"{clock_text(elapsed)} elapsed, ETA {clock_text(self.eta() or 0.0)}"
            )
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __enter__(self) -> SweepProgress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
