"""The `shoal` command line: simulate, snapshot, validate-config, version.

Only argument parsing and exit codes live here; the work is done in `shoal.sim` and
`shoal.config`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from shoal import __version__
from shoal.config import ConfigError, Problem

if TYPE_CHECKING:
    from shoal.sim.runner import Format

app = typer.Typer(
    name="shoal",
    help="Shoal: a Kubernetes scheduler for AI, HPC and big-data workloads.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False)


def _print_problems(console: Console, err: ConfigError) -> None:
    """One line per problem (no wrapping), so they can be grepped."""
    console.print(f"[red]{escape(err.source)}: {len(err.problems)} problem(s):[/]", soft_wrap=True)
    for problem in err.problems:
        console.print(f"  - {problem}", markup=False, soft_wrap=True)


def _print_warnings(console: Console, source: object, warnings: Sequence[Problem]) -> None:
    """What is accepted but will not take effect (or may surprise), one line each; many
    of one shape are folded ("... and N more like this")."""
    if not warnings:
        return
    from shoal.sim.report import fold_lines

    console.print(f"[yellow]{escape(str(source))}: {len(warnings)} warning(s):[/]", soft_wrap=True)
    for line in fold_lines(str(w) for w in warnings):
        console.print(f"  - {line}", markup=False, soft_wrap=True)


@app.command()
def simulate(
    cluster: Annotated[
        list[Path] | None,
        typer.Option(
            "--cluster",
            "-c",
            exists=True,
            help="Node, PriorityClass, Queue, ... manifests, or a `shoal snapshot` file: "
            "YAML, JSON or a directory (repeatable).",
        ),
    ] = None,
    workload: Annotated[
        list[Path] | None,
        typer.Option(
            "--workload",
            "-w",
            exists=True,
            help="Pod manifests and Workload documents (repeatable).",
        ),
    ] = None,
    from_cluster: Annotated[
        bool,
        typer.Option(
            "--from-cluster",
            help="Start from a live cluster's current state, read (read-only) over a "
            "kubeconfig as `shoal snapshot` does; -c/-w/--config are the proposed change.",
        ),
    ] = False,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig",
            dir_okay=False,
            help="With --from-cluster: the kubeconfig (default: $KUBECONFIG, else the "
            "pod's service account).",
        ),
    ] = None,
    context: Annotated[
        str | None, typer.Option(help="With --from-cluster: the kubeconfig context to use.")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", exists=True, dir_okay=False, help="A KubeSchedulerConfiguration file."
        ),
    ] = None,
    seed: Annotated[
        int, typer.Option(min=0, help="Seed for workload draws and scheduler tie-breaks.")
    ] = 0,
    until: Annotated[
        float | None,
        typer.Option(min=0, help="Stop at this virtual time (seconds)."),
    ] = None,
    cycle_seconds: Annotated[
        float,
        typer.Option(min=0, help="Virtual seconds each scheduling cycle takes."),
    ] = 0.0,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", dir_okay=False, help="Write per-pod results to FILE: .jsonl or .csv."
        ),
    ] = None,
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            help="Output format: table, or json or yaml (one document: summary and every "
            "pod; messages go to stderr). For a results file use --out FILE.",
        ),
    ] = "table",
    queue_metrics: Annotated[
        Path | None,
        typer.Option(
            "--queue-metrics",
            dir_okay=False,
            help="CSV of each queue's allocation vs fair share over time (with queues).",
        ),
    ] = None,
    recreate_evicted: Annotated[
        bool,
        typer.Option(help="Re-create pods evicted by preemption/reclaim, as controllers do."),
    ] = True,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar, no pending-pod table.")
    ] = False,
    rescheduler: Annotated[
        bool,
        typer.Option(
            "--rescheduler",
            help="Enable the Rescheduler: move running pods to place waiting ones "
            "(docs/rescheduler.md).",
        ),
    ] = False,
    recreate_delay: Annotated[
        float,
        typer.Option(min=0, help="Seconds before an evicted pod's replacement arrives."),
    ] = 0.0,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="Serve the web dashboard (docs/dashboard.md) after the run, until Ctrl-C.",
        ),
    ] = False,
    serve_address: Annotated[
        str, typer.Option(help="HOST:PORT of the dashboard with --serve (port 0: any free).")
    ] = "127.0.0.1:8080",
    serve_speed: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="With --serve: serve while simulating, at this many simulated seconds per "
            "second ('inf': full speed); keeps serving after the end.",
        ),
    ] = None,
) -> None:
    """Simulate scheduling a workload on a cluster, in virtual time.

    Without --cluster/--workload/--from-cluster: the bundled example (12 nodes, CPU and
    GPU jobs). With --from-cluster: what-if on a live cluster (nothing is written to it).

    Malformed inputs are reported and skipped; the rest still runs.
    """
    from shoal.sim import SimOptions
    from shoal.sim.runner import check_results_path, load_scheduler_config, run

    console, errors = _console(), _console(stderr=True)

    def usage(message: str) -> typer.Exit:
        errors.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
        return typer.Exit(2)

    fmt = _simulate_output(output)
    if fmt is None:
        raise usage(
            f"-o/--output {output!r}: use table, json or yaml (-o is an output format, as in "
            "`shoal get` and kubectl); write the per-pod results with --out FILE "
            "(.jsonl or .csv)"
        )
    if not from_cluster and (kubeconfig is not None or context is not None):
        raise usage("--kubeconfig and --context need --from-cluster")
    try:
        scheduler_config = load_scheduler_config(config)
    except ConfigError as err:
        _print_problems(errors, err)
        raise typer.Exit(2) from None
    _print_warnings(errors, config, scheduler_config.warnings)
    if rescheduler:
        from shoal.plugins.rescheduler import with_rescheduler

        scheduler_config = with_rescheduler(scheduler_config)
    options = SimOptions(
        seed=seed,
        until=until,
        cycle_seconds=cycle_seconds,
        config=scheduler_config,
        recreate_evicted=recreate_evicted,
        recreate_delay=recreate_delay,
    )
    paths = [*(cluster or []), *(workload or [])]
    address = _serve_address(serve_address) if serve else None
    if serve_speed is not None and address is None:
        raise usage("--serve-speed needs --serve")
    if serve_speed == 0:
        raise usage("--serve-speed must be > 0 ('inf' for full speed)")
    with contextlib.ExitStack() as stack:
        try:
            if out is not None:
                check_results_path(out)
            # Take the dashboard's port now: a busy one fails before any work is done.
            sock = None
            if address is not None:
                from shoal.sim.serve import bind

                sock = bind(*address)
                stack.callback(sock.close)
        except (ValueError, OSError) as err:
            raise usage(str(err)) from None
        documents = []
        if from_cluster:
            from shoal.commands.snapshot import ClusterUnreadable, read_documents

            try:
                documents = [("cluster", read_documents(kubeconfig, context, errors))]
            except ClusterUnreadable as err:
                errors.print(f"[red]error:[/] {escape(str(err))}", soft_wrap=True)
                raise typer.Exit(1) from None
        try:
            run(
                paths,
                options,
                console,
                out=out,
                queue_metrics=queue_metrics,
                quiet=quiet,
                serve=sock,
                serve_speed=serve_speed,
                documents=documents,
                output=fmt,
                stderr=errors,
            )
        except (ValueError, OSError) as err:
            errors.print(f"[red]error:[/] {escape(str(err))}", soft_wrap=True)
            raise typer.Exit(2) from None


def _simulate_output(text: str) -> Format | None:
    from shoal.sim.runner import FORMATS

    fmt = text.removeprefix("=")  # `-o=json`, as kubectl takes it
    return next((known for known in FORMATS if known == fmt), None)


def _serve_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise typer.BadParameter(f"{text!r} is not HOST:PORT", param_hint="--serve-address")
    return host.strip("[]") or "127.0.0.1", int(port)


@app.command("validate-config")
def validate_config(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="A KubeSchedulerConfiguration.")
    ],
) -> None:
    """Check a scheduler configuration as `shoal run` and `shoal simulate` load it; print
    every problem (exit 1 if there are any) and every warning (exit 0 if only those)."""
    from shoal.sim.runner import load_scheduler_config

    console = _console()
    try:
        config = load_scheduler_config(file)
    except ConfigError as err:
        _print_problems(console, err)
        raise typer.Exit(1) from None
    _print_warnings(console, file, config.warnings)
    names = ", ".join(p.scheduler_name for p in config.profiles)
    console.print(f"OK: {len(config.profiles)} profile(s): {names}", markup=False)


@app.command()
def version() -> None:
    """Print Shoal's version."""
    typer.echo(f"shoal {__version__}")


# `shoal run` (the Kubernetes backend) lives in its own module.
from shoal.commands.run import register as _register_kube  # noqa: E402

_register_kube(app)

# `shoal get ...` and `shoal explain` (operator commands over a kubeconfig).
from shoal.commands.ctl import register as _register_ctl  # noqa: E402

_register_ctl(app)

# `shoal queue open|close` and `shoal suspend|resume` (operations over a kubeconfig).
from shoal.commands.operate import register as _register_operate  # noqa: E402

_register_operate(app)

from shoal.commands.webhook import register as _register_webhook  # noqa: E402

_register_webhook(app)

# `shoal snapshot`: a live cluster's state as a file `shoal simulate -c` reads.
from shoal.commands.snapshot import register as _register_snapshot  # noqa: E402

_register_snapshot(app)

from shoal.experiments.openb.cli import experiment_app  # noqa: E402

app.add_typer(experiment_app, name="experiment")

if __name__ == "__main__":
    app()
