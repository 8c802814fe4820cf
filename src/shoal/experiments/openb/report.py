"""Summaries of openb runs: the headline table, JSON, curve CSV and an SVG plot.

The plot is written as plain SVG (no plotting library needed), together with the CSV of
the numbers it draws: unallocated GPU % (mean over seeds) against arrived workload %.
"""

from __future__ import annotations

import csv
import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np

from shoal.experiments.openb.protocol import MAX_BIN
from shoal.experiments.openb.runner import RunResult

__all__ = [
    "REFERENCE",
    "Line",
    "Summary",
    "format_table",
    "summarize",
    "write_curves_csv",
    "write_lines_svg",
    "write_svg",
]

# Unallocated GPU % at arrived = 100 % in the published artifact (mean of 10 seeds).
_POLICIES = ("Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD")
_REFERENCE_ROWS = {  # Random, DotProd, GpuClustering, GpuPacking, BestFit, FGD
    "default": (13.70, 9.38, 8.35, 8.22, 7.14, 4.77),
    "gpushare40": (15.14, 10.70, 10.24, 10.23, 8.56, 6.04),
    "gpushare60": (17.19, 13.18, 13.10, 12.85, 10.94, 8.75),
    "multigpu20": (13.08, 8.15, 6.66, 6.50, 6.27, 4.47),
    "multigpu30": (13.37, 6.89, 5.45, 5.30, 5.43, 3.64),
    "gpuspec10": (13.74, 9.83, 8.04, 7.76, 6.90, 5.34),
    "gpuspec20": (14.10, 11.71, 10.89, 10.72, 11.54, 5.34),
    "cpu050": (10.98, 6.97, 6.48, 6.54, 6.44, 5.00),
    "cpu100": (12.57, 8.27, 7.58, 7.50, 6.74, 4.79),
}
REFERENCE: dict[str, dict[str, float]] = {
    trace: dict(zip(_POLICIES, row, strict=True)) for trace, row in _REFERENCE_ROWS.items()
}


@dataclass
class Summary:
    trace: str
    policy: str
    seeds: int
    mean: float
    sd: float
    reference: float | None
    curve: list[float | None]  # mean unallocated % per arrived bin
    first_failure: float | None  # median over seeds
    seconds: float

    @property
    def diff(self) -> float | None:
        return None if self.reference is None else self.mean - self.reference


def summarize(results: Iterable[RunResult]) -> list[Summary]:
    groups: dict[tuple[str, str], list[RunResult]] = defaultdict(list)
    for r in results:
        groups[(r.trace, r.policy)].append(r)
    out = []
    for (trace, policy), runs in groups.items():
        values = np.array([r.unallocated for r in runs], dtype=float)
        curves = np.array(
            [[np.nan if v is None else 100.0 - v for v in r.curve] for r in runs], dtype=float
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # bins no pod fell into
            mean_curve = np.nanmean(curves, axis=0) if len(curves) else np.array([])
        failures = [r.first_failure for r in runs if r.first_failure is not None]
        out.append(
            Summary(
                trace=trace,
                policy=policy,
                seeds=len(runs),
                mean=float(values.mean()),
                sd=float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                reference=REFERENCE.get(trace, {}).get(policy),
                curve=[None if math.isnan(v) else round(float(v), 3) for v in mean_curve],
                first_failure=float(np.median(failures)) if failures else None,
                seconds=float(np.mean([r.seconds for r in runs])),
            )
        )
    return out


def format_table(summaries: Sequence[Summary]) -> str:
    """Unallocated GPU % at arrived = 100 %: mean and sd over seeds, vs the reference."""
    lines = [
        "| trace | policy | seeds | unallocated % (mean) | sd | reference | diff |",
        "|---|---|---|---|---|---|---|",
    ]
    undefined: list[str] = []
    for s in summaries:
        ref = "" if s.reference is None else f"{s.reference:.2f}"
        diff = "" if s.diff is None else f"{s.diff:+.2f}"
        if math.isnan(s.mean):
            undefined.append(s.trace)
            mean, sd = "n/a", "n/a"
        else:
            mean, sd = f"{s.mean:.2f}", f"{s.sd:.2f}"
        lines.append(f"| {s.trace} | {s.policy} | {s.seeds} | {mean} | {sd} | {ref} | {diff} |")
    for trace in dict.fromkeys(undefined):
        lines.append(
            f"\nn/a: the GPU demand of trace {trace} never reaches 100 % of the GPU capacity "
            "(no GPU pods, or no GPUs), so there is no point to read unallocated GPU at"
        )
    return "\n".join(lines)


def write_curves_csv(summaries: Sequence[Summary], path: Path) -> Path:
    """Columns: trace, policy, arrived_pct, unallocated_pct (mean over seeds)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trace", "policy", "arrived_pct", "unallocated_pct"])
        for s in summaries:
            for arrived, value in enumerate(s.curve):
                if value is not None:
                    writer.writerow([s.trace, s.policy, arrived, f"{value:.3f}"])
    return path


_COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f"]


def write_svg(summaries: Sequence[Summary], path: Path, title: str = "") -> Path:
    """Unallocated GPU % against arrived workload %, one line per policy."""
    lines = [
        Line(
            f"{s.policy} ({s.mean:.2f})",
            [(float(a), v) for a, v in enumerate(s.curve) if v is not None],
        )
        for s in summaries
    ]
    return write_lines_svg(
        lines,
        path,
        title=title,
        x_label="arrived workload (% of GPU capacity)",
        y_label="unallocated GPU (%)",
        x_max=float(MAX_BIN),
        x_step=10.0,
    )


@dataclass
class Line:
    label: str
    points: list[tuple[float, float]]


def write_lines_svg(
    lines: Sequence[Line],
    path: Path,
    *,
    title: str = "",
    x_label: str = "",
    y_label: str = "",
    x_max: float | None = None,
    x_step: float | None = None,
) -> Path:
    """A line plot (one line per entry, legend on the right) as a standalone SVG."""
    width, height = 760, 440
    left, right, top, bottom = 60, 190, 40, 50
    plot_w, plot_h = width - left - right, height - top - bottom
    xs = [x for line in lines for x, _ in line.points]
    ys = [y for line in lines for _, y in line.points]
    x_top = x_max if x_max is not None else max(max(xs, default=1.0), 1e-9)
    x_tick = x_step if x_step is not None else _nice_step(x_top)
    y_max = max(10.0, math.ceil(max(ys, default=100.0) / 10.0) * 10.0)

    def x(v: float) -> float:
        return left + v / x_top * plot_w

    def y(v: float) -> float:
        return top + (1.0 - v / y_max) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="22" font-size="14">{escape(title)}</text>',
    ]
    for tick in np.arange(0.0, x_top + x_tick / 2, x_tick).tolist():
        parts.append(
            f'<line x1="{x(tick):.1f}" y1="{top}" x2="{x(tick):.1f}" y2="{top + plot_h}" '
            'stroke="#eee"/>'
        )
        parts.append(
            f'<text x="{x(tick):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{tick:g}</text>'
        )
    step = 10 if y_max > 40 else 5
    for y_tick in np.arange(0, y_max + 0.1, step).tolist():
        parts.append(
            f'<line x1="{left}" y1="{y(y_tick):.1f}" x2="{left + plot_w}" y2="{y(y_tick):.1f}" '
            'stroke="#eee"/>'
        )
        parts.append(
            f'<text x="{left - 6}" y="{y(y_tick) + 4:.1f}" text-anchor="end">{y_tick:g}</text>'
        )
    parts.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>'
    )
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 12}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    parts.append(
        f'<text transform="translate(16,{top + plot_h / 2}) rotate(-90)" text-anchor="middle">'
        f"{escape(y_label)}</text>"
    )
    for i, line in enumerate(lines):
        color = _COLORS[i % len(_COLORS)]
        points = " ".join(f"{x(a):.1f},{y(v):.1f}" for a, v in line.points)
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{points}"/>'
        )
        ly = top + 14 + i * 18
        parts.append(
            f'<line x1="{left + plot_w + 12}" y1="{ly - 4}" x2="{left + plot_w + 36}" '
            f'y2="{ly - 4}" stroke="{color}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{left + plot_w + 42}" y="{ly}">{escape(line.label)}</text>')
    parts.append("</svg>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts) + "\n")
    return path


def _nice_step(span: float) -> float:
    """A 1/2/5 x 10^k tick step giving 5-10 ticks over `span`."""
    raw = span / 8.0
    magnitude = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for factor in (1.0, 2.0, 5.0, 10.0):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10.0 * magnitude
