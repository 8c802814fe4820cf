"""The Rescheduler's replay plot: how long multi-GPU tasks waited, by arrival time,
without and with the Rescheduler (docs/rescheduler.md). Plain SVG, no plotting library."""

from __future__ import annotations

from pathlib import Path

from shoal.experiments.openb.replay import ReplayResult
from shoal.experiments.openb.report import Line, write_lines_svg

__all__ = ["write_multi_gpu_wait_svg"]


def write_multi_gpu_wait_svg(results: list[ReplayResult], out_dir: Path, title: str = "") -> Path:
    """replay-multi-gpu-wait.svg: per run, the wait (s) of each multi-GPU task against
    its arrival (minutes), with the run's mean / max in the legend."""
    lines = [
        Line(
            f"{r.policy} ({r.multi_gpu_wait_mean:.0f} / {r.multi_gpu_wait_max:.0f} s)",
            [(t / 60.0, wait) for t, wait in r.multi_gpu_waits],
        )
        for r in results
    ]
    return write_lines_svg(
        lines,
        out_dir / "replay-multi-gpu-wait.svg",
        title=f"{title} (legend: mean / max wait)",
        x_label="arrival, minutes since the first arrival",
        y_label="wait of multi-GPU tasks (s)",
    )
