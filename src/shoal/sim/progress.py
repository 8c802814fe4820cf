"""A rich progress bar for long simulations (virtual time and events handled)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from shoal.sim.engine import ProgressCallback

__all__ = ["progress_bar"]


@contextmanager
def progress_bar(console: Console, enabled: bool = True) -> Iterator[ProgressCallback | None]:
    """Yield a progress callback for the engine, or None when disabled or not a TTY.

    The total grows as the run schedules new events (pods finishing), so the bar shows
    events handled out of events known so far.
    """
    if not enabled or not console.is_terminal:
        yield None
        return
    columns = (
        TextColumn("[bold]simulating[/]"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[virtual]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("simulate", total=None, virtual="t=0s")

        def update(now: float, handled: int, scheduled: int) -> None:
            progress.update(
                task, completed=handled, total=max(scheduled, 1), virtual=f"t={now:,.0f}s"
            )

        yield update
