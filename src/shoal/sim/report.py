"""Show and save a simulation's results: a rich summary, and per-pod CSV or JSON Lines."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from shoal.api.errors import ManifestError
from shoal.sim.results import PodRecord, PodState, Summary
from shoal.sim.scenario import Scenario

__all__ = [
    "RESULT_COLUMNS",
    "RESULT_SUFFIXES",
    "fold_lines",
    "format_seconds",
    "input_lines",
    "print_errors",
    "print_report",
    "record_row",
    "render_groups",
    "render_pending",
    "render_summary",
    "result_document",
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
    "origin",
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
        "origin": record.origin or "workload",
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
    if summary.refused:
        table.add_row("  refused by the node (spec.nodeName)", f"[red]{summary.refused}[/]")
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


# ---- folding repeated lines -----------------------------------------------------------

FOLD_KEEP = 3  # lines of one shape shown before "... and N more like this"
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`")
_NAMED = re.compile(r"\b([A-Z][A-Za-z]*) [a-z0-9][-a-z0-9.]*(?:/[a-z0-9][-a-z0-9.]*)?:")
_NUMBERED = re.compile(r"\S*\d\S*")


def _shape(line: str) -> str:
    """The line with what varies between objects blanked out: quoted values, the name
    after a kind (`Queue q7:`), and every word with a digit in it (sizes, times, file
    positions)."""
    line = _QUOTED.sub("'*'", line)
    line = _NAMED.sub(r"\1 *:", line)
    return _NUMBERED.sub("#", line)


def fold_lines(lines: Iterable[str], keep: int = FOLD_KEEP) -> list[str]:
    """Lines of the same shape (the same message about other objects) folded: the
    first `keep` of each shape, then `... and N more like this`, in order of first
    appearance. A generated input with hundreds of like objects gives a few lines, not
    hundreds."""
    groups: dict[str, list[str]] = {}
    for line in lines:
        groups.setdefault(_shape(line), []).append(line)
    out: list[str] = []
    for group in groups.values():
        shown = group if len(group) <= keep + 1 else group[:keep]
        out.extend(shown)
        if len(shown) < len(group):
            out.append(f"... and {len(group) - len(shown)} more like this")
    return out


def print_errors(console: Console, errors: Sequence[ManifestError]) -> None:
    """One line per skipped input (not wrapped, so they can be grepped and copied);
    many of one shape are folded (`fold_lines`)."""
    if not errors:
        return
    console.print(f"[bold red]Skipped {len(errors)} input(s); fix them and re-run:[/]")
    for line in fold_lines(str(err) for err in errors):
        console.print(f"  - {line}", markup=False, highlight=False, soft_wrap=True)


def print_warnings(console: Console, warnings: Sequence[str]) -> None:
    """`warning:` lines, not wrapped, many of one shape folded."""
    for line in fold_lines(warnings):
        if line.startswith("... and "):
            console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
        else:
            console.print(Text.assemble(("warning: ", "yellow"), line), soft_wrap=True)


# ---- where the pods came from ----------------------------------------------------------


def input_lines(scenario: Scenario) -> list[str]:
    """What came from a cluster's current state and what is proposed (the workload), when
    the scenario holds a cluster's state (`shoal snapshot`, `--from-cluster`)."""
    origin = scenario.cluster
    if not origin.sources:
        return []
    c = scenario.origin_counts()
    lines = [
        f"from cluster: {_count(c['nodes'], 'node')}, {_count(c['pods'], 'pod')} "
        f"({c['bound']} bound, {c['pending']} pending, {c['finished']} finished), read from "
        + "; ".join(origin.sources),
        f"proposed: {_count(c['proposedPods'], 'pod')}, {_count(c['proposedNodes'], 'node')}",
    ]
    if origin.replaced:
        lines.append("replaced by a proposed object: " + ", ".join(origin.replaced))
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def result_document(
    scenario: Scenario,
    summary: Summary,
    records: Sequence[PodRecord],
    warnings: Sequence[str] = (),
    groups: dict[str, dict[str, object]] | None = None,
) -> dict[str, Any]:
    """`shoal simulate -o json|yaml`: everything the tables show, and every pod."""
    doc: dict[str, Any] = {"summary": dataclasses.asdict(summary)}
    doc["summary"]["utilisation_mean"] = dict(summary.utilisation_mean)
    doc["summary"]["utilisation_end"] = dict(summary.utilisation_end)
    if scenario.cluster.sources:
        doc["fromCluster"] = {
            "sources": list(scenario.cluster.sources),
            **scenario.origin_counts(),
            "replaced": list(scenario.cluster.replaced),
        }
    doc["skipped"] = [str(err) for err in scenario.errors]
    doc["warnings"] = list(warnings)
    if groups:
        doc["groups"] = groups
    doc["pods"] = [record_row(r) for r in records]
    return doc


def print_report(
    console: Console,
    summary: Summary,
    records: Sequence[PodRecord],
    errors: Sequence[ManifestError],
    warnings: Sequence[str] = (),
    *,
    show_pending: bool = True,
    inputs: Sequence[str] = (),
) -> None:
    print_errors(console, errors)
    pending = render_pending(records) if show_pending else None
    if pending is not None:
        console.print(pending)
    print_warnings(console, warnings)
    if inputs:
        console.print(_title("Inputs"))
        for line in inputs:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
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
