"""One simulation run as the command line does it: inputs, config, progress, report, file."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from rich.console import Console

from shoal.config import KubeSchedulerConfiguration, default_config, load_config
from shoal.sim.engine import SimOptions, SimResult, Simulation, simulate
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
    serve: tuple[str, int] | None = None,
    serve_speed: float | None = None,
) -> tuple[Scenario, SimResult]:
    """Load `paths` (cluster files first; none: the bundled example), simulate, report.

    With `serve` (host, port), the web dashboard serves the simulation until Ctrl-C
    (`serve_speed`: while it runs, see `shoal.sim.serve`).

    Raises ValueError for an unusable results path before doing any work.
    """
    if out is not None:
        check_results_path(out)
    with _inputs(paths) as files:
        scenario = load_scenario(files, seed=options.seed)
    if not scenario.nodes and not any(c.node is not None for c in scenario.node_changes):
        console.print("[yellow]warning:[/] the scenario has no nodes; every pod stays pending")
    if serve is not None:
        result = _serve(scenario, options, console, serve, serve_speed, quiet, out, queue_metrics)
        return scenario, result
    with progress_bar(console, enabled=not quiet) as progress:
        result = simulate(scenario, options, progress)
    _report(console, scenario, result, out, queue_metrics, quiet)
    return scenario, result


def _serve(
    scenario: Scenario,
    options: SimOptions,
    console: Console,
    address: tuple[str, int],
    speed: float | None,
    quiet: bool,
    out: Path | None,
    queue_metrics: Path | None,
) -> SimResult:
    """Run with the dashboard (shoal.sim.serve) until Ctrl-C."""
    import asyncio

    from shoal.sim.serve import serve_simulation

    sim = Simulation(scenario, options)
    results: list[SimResult] = []

    def run_now() -> SimResult:
        with progress_bar(console, enabled=not quiet) as progress:
            sim.progress = progress
            return sim.run()

    def serving(url: str) -> None:
        live = "" if speed is None else f" (simulating at {speed:g}x)"
        console.print(f"Dashboard: {url}{live}; Ctrl-C to stop", markup=False, soft_wrap=True)
        console.file.flush()

    def report(result: SimResult) -> None:
        results.append(result)
        _report(console, scenario, result, out, queue_metrics, quiet)
        console.file.flush()

    host, port = address
    asyncio.run(
        serve_simulation(
            sim, host, port, speed=speed, run=run_now, on_serving=serving, on_result=report
        )
    )
    return results[-1]


def _report(
    console: Console,
    scenario: Scenario,
    result: SimResult,
    out: Path | None,
    queue_metrics: Path | None,
    quiet: bool,
) -> None:
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
