"""One simulation run as the command line does it: inputs, config, progress, report, file."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from rich.console import Console

from shoal.config import KubeSchedulerConfiguration, default_config, load_config
from shoal.sim.engine import SimOptions, SimResult, simulate
from shoal.sim.progress import progress_bar
from shoal.sim.report import RESULT_SUFFIXES, print_report, render_groups, write_results
from shoal.sim.scenario import Scenario, bundled_example, load_scenario

__all__ = ["check_results_path", "load_scheduler_config", "run"]


def load_scheduler_config(path: Path | None) -> KubeSchedulerConfiguration:
    """The default configuration, or `path` checked against the plugin registry.

    The default is `shoal run`'s profile ('shoal'), which also serves pods that name no
    scheduler: the simulated cluster has no stock kube-scheduler to take them. Raises
    `shoal.config.ConfigError` listing every problem; what will not take effect is in the
    result's `warnings`.
    """
    if path is None:
        return default_config(serve_unnamed_pods=True)
    from shoal.scheduler import default_registry

    return load_config(path, registry=default_registry())


def check_results_path(path: Path) -> None:
    if path.suffix not in RESULT_SUFFIXES:
        raise ValueError(f"{path}: the results file must end in {' or '.join(RESULT_SUFFIXES)}")


@contextlib.contextmanager
def _inputs(paths: Sequence[Path]) -> Iterator[Sequence[Path]]:
    if paths:
        yield paths
    else:
        with bundled_example() as example:
            yield example


def run(
    paths: Sequence[Path],
    options: SimOptions,
    console: Console,
    *,
    out: Path | None = None,
    queue_metrics: Path | None = None,
    quiet: bool = False,
) -> tuple[Scenario, SimResult]:
    """Load `paths` (cluster files first; none: the bundled example), simulate, report.

    Raises ValueError for an unusable results path before doing any work.
    """
    if out is not None:
        check_results_path(out)
    with _inputs(paths) as files:
        scenario = load_scenario(files, seed=options.seed)
    if not scenario.nodes and not any(c.node is not None for c in scenario.node_changes):
        console.print("[yellow]warning:[/] the scenario has no nodes; every pod stays pending")
    with progress_bar(console, enabled=not quiet) as progress:
        result = simulate(scenario, options, progress)
    print_report(
        console,
        result.summary,
        result.records,
        scenario.errors,
        result.warnings,
        show_pending=not quiet,
    )
    if result.groups:
        console.print(render_groups(result.groups))
    if result.queues is not None:
        console.print(result.queues.summary_table())
        if queue_metrics is not None:
            result.queues.write_csv(queue_metrics)
            console.print(f"Wrote queue metrics to {queue_metrics}", markup=False)
    if out is not None:
        write_results(out, result.records)
        console.print(f"Wrote {len(result.records)} pod record(s) to {out}", markup=False)
    return scenario, result
