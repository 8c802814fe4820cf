"""One simulation run as the command line does it: inputs, config, progress, report, file."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

from rich.console import Console

from shoal.config import KubeSchedulerConfiguration, default_config, load_config
from shoal.sim.engine import SimOptions, SimResult, Simulation, simulate
from shoal.sim.progress import progress_bar
from shoal.sim.report import (
    RESULT_SUFFIXES,
    input_lines,
    print_errors,
    print_report,
    print_warnings,
    render_groups,
    result_document,
    write_results,
)
from shoal.sim.scenario import Documents, Scenario, bundled_example, load_scenario

__all__ = ["FORMATS", "Format", "check_results_path", "load_scheduler_config", "run"]

Format = Literal["table", "json", "yaml"]
FORMATS: tuple[Format, ...] = ("table", "json", "yaml")


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
def _inputs(paths: Sequence[Path], documents: Sequence[Documents]) -> Iterator[Sequence[Path]]:
    if paths or documents:
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
    serve: tuple[str, int] | socket.socket | None = None,
    serve_speed: float | None = None,
    documents: Sequence[Documents] = (),
    output: Format = "table",
    stderr: Console | None = None,
) -> tuple[Scenario, SimResult]:
    """Load `documents` and `paths` (cluster files first; none: the bundled example),
    simulate, report.

    With `serve` ((host, port), or a socket bound to it: `shoal.sim.serve.bind`), the web
    dashboard serves the simulation until Ctrl-C (`serve_speed`: while it runs, see
    `shoal.sim.serve`). `output` json or yaml: the report is one document on `console`
    (`result_document`), skipped inputs, warnings, progress and notices go to `stderr`.

    Raises ValueError for an unusable results path before doing any work.
    """
    if out is not None:
        check_results_path(out)
    notices = console if output == "table" else (stderr or Console(stderr=True))
    with _inputs(paths, documents) as files:
        scenario = load_scenario(files, seed=options.seed, documents=documents)
    if not scenario.nodes and not any(c.node is not None for c in scenario.node_changes):
        notices.print("[yellow]warning:[/] the scenario has no nodes; every pod stays pending")
    report = _Report(console, notices, scenario, out, queue_metrics, quiet, output)
    if serve is not None:
        result = _serve(scenario, options, notices, serve, serve_speed, quiet, report)
        return scenario, result
    with progress_bar(notices, enabled=not quiet) as progress:
        result = simulate(scenario, options, progress)
    report(result)
    return scenario, result


def _serve(
    scenario: Scenario,
    options: SimOptions,
    console: Console,
    address: tuple[str, int] | socket.socket,
    speed: float | None,
    quiet: bool,
    report: _Report,
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

    def reported(result: SimResult) -> None:
        results.append(result)
        report(result)

    if isinstance(address, socket.socket):
        host, port = address.getsockname()[:2]
        sock: socket.socket | None = address
    else:
        (host, port), sock = address, None
    asyncio.run(
        serve_simulation(
            sim,
            host,
            port,
            speed=speed,
            run=run_now,
            on_serving=serving,
            on_result=reported,
            sock=sock,
        )
    )
    return results[-1]


class _Report:
    """Shows a result: tables (or one JSON/YAML document), the results file, the queue
    metrics file."""

    def __init__(
        self,
        console: Console,
        notices: Console,
        scenario: Scenario,
        out: Path | None,
        queue_metrics: Path | None,
        quiet: bool,
        output: Format,
    ) -> None:
        self.console = console
        self.notices = notices
        self.scenario = scenario
        self.out = out
        self.queue_metrics = queue_metrics
        self.quiet = quiet
        self.output = output

    def __call__(self, result: SimResult) -> None:
        console, notices, scenario = self.console, self.notices, self.scenario
        if self.output == "table":
            print_report(
                console,
                result.summary,
                result.records,
                scenario.errors,
                result.warnings,
                show_pending=not self.quiet,
                inputs=input_lines(scenario),
            )
            if result.groups:
                console.print(render_groups(result.groups))
            if result.queues is not None:
                console.print(result.queues.summary_table())
        else:
            print_errors(notices, scenario.errors)
            print_warnings(notices, result.warnings)
            doc = result_document(
                scenario, result.summary, result.records, result.warnings, result.groups
            )
            console.file.write(_dump(doc, self.output))
        if result.queues is not None and self.queue_metrics is not None:
            result.queues.write_csv(self.queue_metrics)
            notices.print(f"Wrote queue metrics to {self.queue_metrics}", markup=False)
        if self.out is not None:
            write_results(self.out, result.records)
            n = len(result.records)
            notices.print(f"Wrote {n} pod record(s) to {self.out}", markup=False)
        console.file.flush()


def _dump(doc: object, output: Format) -> str:
    if output == "json":
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    import yaml

    return str(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
