"""Sweep policies over many openb-format traces (e.g. a generated family grid) and judge
them against FGD per trace.

Per trace and policy: the mean and sd over seeds of the unallocated GPU % at arrived =
100 % and of the first-dropped-pod point (arrived % when the first GPU pod was dropped; a
run that drops none counts as 130, the end of the protocol). For every policy other than
FGD the table also says whether it meets the bar of issue 12 on that trace: unallocated
<= FGD's and first drop >= FGD's - 2 points.

Each run also records where its free GPU is when arrived reaches 100 % (share leftovers
on partly used devices, whole idle devices; `runner.stranded`); the table ends with
those means per policy and, for each policy, its share leftovers as a ratio to FGD's
unallocated: what its ratio would be if it kept no whole device idle at all.
"""

from __future__ import annotations

import csv
import glob
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shoal.experiments.openb.protocol import MAX_BIN
from shoal.experiments.openb.runner import RunResult, policy_name, run_tasks
from shoal.experiments.openb.trace import DEFAULT_NODE_FILE, POD_FILE_PREFIX, TraceError

__all__ = [
    "BASELINE",
    "FIRST_DROP_SLACK",
    "Cell",
    "Verdict",
    "append_run_csv",
    "format_sweep_table",
    "read_runs_csv",
    "resolve_traces",
    "sweep",
    "sweep_cells",
    "verdicts",
    "write_runs_csv",
]

BASELINE = "FGD"
FIRST_DROP_SLACK = 2.0
"""A policy's first drop may come at most this many arrived-% points before FGD's."""


def resolve_traces(spec: str) -> list[tuple[Path, str]]:
    """(folder, trace name) for a folder of openb pod lists or a glob of pod list files
    (`DIR/openb_pod_list_share*.csv`); every folder must hold the node list."""
    path = Path(spec)
    files = sorted(path.glob(POD_FILE_PREFIX + "*.csv")) if path.is_dir() else None
    if files is None:
        files = sorted(Path(p) for p in glob.glob(spec))
    files = [f for f in files if f.name.startswith(POD_FILE_PREFIX) and f.suffix == ".csv"]
    if not files:
        raise TraceError(
            f"{spec}: no {POD_FILE_PREFIX}*.csv files (pass a folder of openb pod lists or a "
            "glob of them, e.g. out/family/openb_pod_list_*.csv)"
        )
    out = []
    seen: dict[str, Path] = {}
    for f in files:
        if not (f.parent / DEFAULT_NODE_FILE).is_file():
            raise TraceError(f"{f.parent}: {DEFAULT_NODE_FILE} is missing next to {f.name}")
        name = f.name[len(POD_FILE_PREFIX) : -4]
        if name in seen and seen[name] != f.parent:
            # Results are keyed by trace name: two files of one name would be averaged.
            raise TraceError(
                f"two traces named {name!r} ({seen[name]} and {f.parent}): sweep the folders "
                "separately or rename one of the files"
            )
        seen[name] = f.parent
        out.append((f.parent, name))
    return out


def sweep(
    traces: Sequence[tuple[Path, str]],
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    workers: int | None = None,
    ray_address: str | None = None,
    progress: Callable[[RunResult], None] | None = None,
    done: Sequence[RunResult] = (),
) -> list[RunResult]:
    """Every (trace, policy, seed) once, on local processes or a Ray cluster; runs in
    `done` (e.g. read back from an earlier sweep's CSV) are kept instead of run again."""
    wanted = [(str(d), t, policy_name(p), s) for d, t in traces for p in policies for s in seeds]
    have = {(r.trace, policy_name(r.policy), r.seed): r for r in done}
    kept = [have[(t, p, s)] for _, t, p, s in wanted if (t, p, s) in have]
    tasks = [task for task in wanted if task[1:] not in have]
    if not tasks:
        return kept
    return kept + run_tasks(tasks, workers=workers, ray_address=ray_address, progress=progress)


@dataclass(frozen=True)
class Cell:
    """One policy on one trace, over its seeds."""

    trace: str
    policy: str
    seeds: int
    unallocated: float
    unallocated_sd: float
    first_drop: float
    first_drop_sd: float
    leftover: float | None = None  # mean share leftovers % (None: a run lacks it)
    idle: float | None = None  # mean whole idle GPUs %


def _mean_of(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present and len(present) == len(values) else None


def _first_drop(run: RunResult) -> float:
    return float(MAX_BIN) if run.first_failure is None else run.first_failure


def _sd(values: Sequence[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def sweep_cells(results: Sequence[RunResult]) -> list[Cell]:
    """Mean and sd over seeds per (trace, policy), in first-seen order."""
    groups: dict[tuple[str, str], list[RunResult]] = defaultdict(list)
    for run in results:
        groups[(run.trace, run.policy)].append(run)
    cells = []
    for (trace, policy), runs in groups.items():
        unalloc = [r.unallocated for r in runs]
        drops = [_first_drop(r) for r in runs]
        cells.append(
            Cell(
                trace,
                policy,
                len(runs),
                float(np.mean(unalloc)),
                _sd(unalloc),
                float(np.mean(drops)),
                _sd(drops),
                _mean_of([r.leftover for r in runs]),
                _mean_of([r.idle for r in runs]),
            )
        )
    return cells


@dataclass(frozen=True)
class Verdict:
    """A policy against FGD over all traces of a sweep."""

    policy: str
    traces: int
    not_worse: int  # traces with unallocated <= FGD's
    ratio: float  # mean unallocated / mean of FGD's, averaged over traces
    drop_ok: int  # traces with first drop >= FGD's - FIRST_DROP_SLACK

    @property
    def passes(self) -> bool:
        return self.not_worse == self.traces == self.drop_ok and self.ratio <= 0.90


def verdicts(cells: Sequence[Cell]) -> list[Verdict]:
    base = {c.trace: c for c in cells if c.policy == BASELINE}
    by_policy: dict[str, list[Cell]] = defaultdict(list)
    for c in cells:
        if c.policy != BASELINE and c.trace in base:
            by_policy[c.policy].append(c)
    out = []
    for policy, mine in by_policy.items():
        ratios = [c.unallocated / max(base[c.trace].unallocated, 1e-9) for c in mine]
        out.append(
            Verdict(
                policy,
                len(mine),
                sum(c.unallocated <= base[c.trace].unallocated for c in mine),
                float(np.mean(ratios)),
                sum(c.first_drop >= base[c.trace].first_drop - FIRST_DROP_SLACK for c in mine),
            )
        )
    return out


def format_sweep_table(cells: Sequence[Cell]) -> str:
    """Markdown: per trace, each policy's unallocated % and first drop, mean (sd)."""
    policies = list(dict.fromkeys(c.policy for c in cells))
    traces = list(dict.fromkeys(c.trace for c in cells))
    index = {(c.trace, c.policy): c for c in cells}
    header = ["trace"]
    for p in policies:
        header += [f"{p} unalloc %", f"{p} 1st drop"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for t in traces:
        row = [t]
        base = index.get((t, BASELINE))
        for p in policies:
            c = index.get((t, p))
            if c is None:
                row += ["", ""]
                continue
            worse = base is not None and p != BASELINE and c.unallocated > base.unallocated
            early = (
                base is not None
                and p != BASELINE
                and c.first_drop < base.first_drop - FIRST_DROP_SLACK
            )
            row.append(f"{c.unallocated:.2f} ({c.unallocated_sd:.2f}){' !' if worse else ''}")
            row.append(f"{c.first_drop:.0f} ({c.first_drop_sd:.0f}){' !' if early else ''}")
        lines.append("| " + " | ".join(row) + " |")
    for v in verdicts(cells):
        lines.append(
            f"\n{v.policy} vs {BASELINE}: unallocated <= {BASELINE} on {v.not_worse}/{v.traces} "
            f"traces, mean ratio {v.ratio:.3f}, first drop within {FIRST_DROP_SLACK:g} points "
            f"on {v.drop_ok}/{v.traces} ({'meets' if v.passes else 'misses'} the bar)"
        )
    lines += _stranded_lines(cells)
    return "\n".join(lines)


def _stranded_lines(cells: Sequence[Cell]) -> list[str]:
    """Per policy (traces where every run has the split): mean share leftovers and whole
    idle GPUs at arrived = 100 %, and the leftovers alone as a ratio to FGD's unallocated."""
    base = {c.trace: c for c in cells if c.policy == BASELINE}
    by_policy: dict[str, list[Cell]] = defaultdict(list)
    for c in cells:
        if c.leftover is not None and c.idle is not None:
            by_policy[c.policy].append(c)
    lines: list[str] = []
    for policy, mine in by_policy.items():
        leftover = float(np.mean([c.leftover or 0.0 for c in mine]))
        idle = float(np.mean([c.idle or 0.0 for c in mine]))
        text = (
            f"{policy}: free GPU at arrived 100 % over {len(mine)} traces: share leftovers "
            f"{leftover:.2f} %, whole idle GPUs {idle:.2f} %"
        )
        paired = [c for c in mine if c.trace in base]
        if policy != BASELINE and paired:
            floor = np.mean(
                [(c.leftover or 0.0) / max(base[c.trace].unallocated, 1e-9) for c in paired]
            )
            text += f"; leftovers alone: {floor:.3f} x {BASELINE} (mean ratio, {len(paired)})"
        lines.append(("\n" if not lines else "") + text)
    return lines


_CSV_HEADER = ("trace", "policy", "seed", "unallocated", "first_drop", "seconds")
_CSV_OPTIONAL = ("leftover", "idle")  # absent from files written before they existed


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def _csv_row(r: RunResult) -> tuple[str | int, ...]:
    return (
        r.trace,
        policy_name(r.policy),
        r.seed,
        f"{r.unallocated:.4f}",
        "" if r.first_failure is None else f"{r.first_failure:.2f}",
        f"{r.seconds:.2f}",
        _percent(r.leftover),
        _percent(r.idle),
    )


def write_runs_csv(results: Sequence[RunResult], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(_CSV_HEADER + _CSV_OPTIONAL)
        for r in results:
            writer.writerow(_csv_row(r))


def append_run_csv(result: RunResult, path: Path) -> None:
    """Add one run to a runs CSV as soon as it finishes (header first if the file is new),
    so that an interrupted sweep can be resumed from it."""
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(_CSV_HEADER + _CSV_OPTIONAL)
        writer.writerow(_csv_row(result))


def read_runs_csv(path: Path) -> list[RunResult]:
    """Runs written by `write_runs_csv`/`append_run_csv` (only the columns the sweep table
    needs come back: no curve); a malformed row names its line and column."""
    runs = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = set(_CSV_HEADER) - set(reader.fieldnames or ())
        if missing:
            raise TraceError(f"{path}: not a runs CSV (missing columns {sorted(missing)})")
        for line, row in enumerate(reader, start=2):
            column = ""
            try:
                column = "seed"
                seed = int(row["seed"])
                column = "unallocated"
                unallocated = float(row["unallocated"])
                column = "first_drop"
                drop = float(row["first_drop"]) if row["first_drop"] else None
                column = "seconds"
                seconds = float(row["seconds"])
                column = "policy"
                policy = policy_name(row["policy"])
                column = "leftover"
                leftover = float(row["leftover"]) if row.get("leftover") else None
                column = "idle"
                idle = float(row["idle"]) if row.get("idle") else None
            except (ValueError, KeyError, StopIteration) as err:
                raise TraceError(f"{path}:{line}: bad {column!r} value ({err})") from None
            runs.append(
                RunResult(
                    row["trace"],
                    policy,
                    seed,
                    0,
                    0,
                    0,
                    unallocated,
                    [],
                    drop,
                    seconds,
                    leftover,
                    idle,
                )
            )
    return runs
