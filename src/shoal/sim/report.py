"""Show and save a simulation's results: a rich summary, and per-pod CSV or JSON Lines."""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from shoal.api.errors import ManifestError
from shoal.sim.results import PodRecord, PodState, Summary

__all__ = [
    "RESULT_COLUMNS",
    "RESULT_SUFFIXES",
    "format_seconds",
    "print_errors",
    "print_report",
    "record_row",
    "render_groups",
    "render_pending",
    "render_summary",
    "write_results",
]

RESULT_COLUMNS = (
    "pod",
    "namespace",
    "status",
    "node",
    "arrival",
    "bound_at",
    "finished_at",
    "attempts",
    "message",
)
RESULT_SUFFIXES = (".jsonl", ".csv")


def _time(value: float | None) -> float | None:
    # Microsecond resolution keeps files readable; rounding is deterministic.
    return None if value is None else round(value, 6)


def record_row(record: PodRecord) -> dict[str, Any]:
    return {
        "pod": record.name,
        "namespace": record.namespace,
        "status": str(record.state),
        "node": record.node,
        "arrival": _time(record.arrival),
        "bound_at": _time(record.bound_at),
        "finished_at": _time(record.finished_at),
        "attempts": record.attempts,
        "message": record.message,
    }


def write_results(path: Path, records: Iterable[PodRecord]) -> None:
    """One row per pod, in arrival order: `.jsonl` (JSON Lines) or `.csv`."""
    rows = [record_row(r) for r in records]
    if path.suffix == ".jsonl":
        with path.open("w", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif path.suffix == ".csv":
        with path.open("w", encoding="utf-8", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=RESULT_COLUMNS, lineterminator="\n")
            writer.writeheader()
            for row in rows:
                writer.writerow({k: "" if v is None else v for k, v in row.items()})
    else:
        raise ValueError(f"{path}: results are written as {' or '.join(RESULT_SUFFIXES)}")


def format_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.2f}s"
    if value < 3600:
        return f"{value / 60:.1f}m ({value:.0f}s)"
    return f"{value / 3600:.2f}h ({value:.0f}s)"


def _title(text: str) -> Text:
    # A line of its own: a table title would be padded with trailing spaces.
    return Text(text, style="bold")


def render_summary(summary: Summary) -> RenderableType:
    table = Table(show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    table.add_row(
        "virtual time", Text(f"{format_seconds(summary.end_time)} ({summary.stop_reason})")
    )
    table.add_row("scheduling cycles", str(summary.cycles))
    table.add_row("pods arrived", str(summary.arrived))
    table.add_row("  scheduled", f"[green]{summary.scheduled}[/]")
    table.add_row("    running at end", str(summary.running))
    table.add_row("    finished", str(summary.finished))
    table.add_row("    evicted", str(summary.evicted))  # preempted, moved or node removed
    pending_style = "yellow" if summary.pending else "green"
    table.add_row("  pending at end", f"[{pending_style}]{summary.pending}[/]")
    if summary.not_arrived:
        table.add_row("pods not yet arrived", str(summary.not_arrived))
    rejected_style = "red" if summary.rejected else "green"
    table.add_row("inputs rejected (bad manifest)", f"[{rejected_style}]{summary.rejected}[/]")
    table.add_row("time to schedule: mean", format_seconds(summary.tts_mean))
    table.add_row("time to schedule: p50", format_seconds(summary.tts_p50))
    table.add_row("time to schedule: p99", format_seconds(summary.tts_p99))
    table.add_row("time to schedule: max", format_seconds(summary.tts_max))

    usage = Table()
    usage.add_column("resource")
    usage.add_column("time-weighted mean", justify="right")
    usage.add_column("at end", justify="right")
    for name, mean in summary.utilisation_mean.items():
        usage.add_row(name, f"{mean:.1%}", f"{summary.utilisation_end.get(name, 0.0):.1%}")
    return Group(
        _title("Simulation summary"), table, _title("Utilisation (requested / allocatable)"), usage
    )


def render_pending(records: Sequence[PodRecord], limit: int = 10) -> RenderableType | None:
    """Pending pods grouped by the scheduler's explanation (most common first)."""
    pending = [r for r in records if r.state is PodState.PENDING]
    if not pending:
        return None
    by_message: Counter[str] = Counter(r.message for r in pending)
    examples: dict[str, str] = {}
    for r in pending:
        examples.setdefault(r.message, f"{r.namespace}/{r.name}")
    table = Table()
    table.add_column("pods", justify="right")
    table.add_column("example")
    table.add_column("why (scheduler's explanation)", overflow="fold")
    for message, count in by_message.most_common(limit):
        table.add_row(str(count), Text(examples[message]), Text(message))
    parts: list[RenderableType] = [_title(f"Pending pods ({len(pending)})"), table]
    if len(by_message) > limit:
        parts.append(Text(f"{len(by_message) - limit} more distinct reason(s) in the results file"))
    return Group(*parts)


def print_errors(console: Console, errors: Sequence[ManifestError]) -> None:
    """One line per skipped input (not wrapped, so they can be grepped and copied)."""
    if not errors:
        return
    console.print(f"[bold red]Skipped {len(errors)} input(s); fix them and re-run:[/]")
    for err in errors:
        console.print(f"  - {err}", markup=False, highlight=False, soft_wrap=True)


def print_report(
    console: Console,
    summary: Summary,
    records: Sequence[PodRecord],
    errors: Sequence[ManifestError],
    warnings: Sequence[str] = (),
    *,
    show_pending: bool = True,
) -> None:
    print_errors(console, errors)
    pending = render_pending(records) if show_pending else None
    if pending is not None:
        console.print(pending)
    for warning in warnings:
        console.print(Text.assemble(("warning: ", "yellow"), warning))
    console.print(render_summary(summary))


def render_groups(groups: dict[str, dict[str, object]]) -> Table:
    """Pod groups (gangs) at the end of the run, with the reason for any not running."""
    table = Table(title="Pod groups")
    for column in ("group", "phase", "min", "members", "running", "succeeded", "reason"):
        table.add_column(column, overflow="fold")
    for key, g in sorted(groups.items()):
        table.add_row(
            key,
            str(g["phase"]),
            str(g["minMember"]),
            str(g["members"]),
            str(g["running"]),
            str(g["succeeded"]),
            str(g["reason"]),
        )
    return table
