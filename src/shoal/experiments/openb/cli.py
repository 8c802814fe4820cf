"""`shoal experiment openb` and `shoal experiment download-openb`: thin command-line
wrappers over the runner and the report (the logic lives there)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["experiment_app"]

experiment_app = typer.Typer(
    help="Reproducible studies on the real scheduler.", no_args_is_help=True
)

ALL_POLICIES = "Random,DotProd,GpuClustering,GpuPacking,BestFit,FGD"


@experiment_app.command("openb")
def openb(
    trace: Annotated[
        str, typer.Option(help="Trace name(s), comma-separated, or 'all'.")
    ] = "default",
    trace_dir: Annotated[
        Path | None,
        typer.Option(
            "--trace-dir",
            file_okay=False,
            help="Folder of openb-format CSVs (default: ../shared/traces/openb).",
        ),
    ] = None,
    policy: Annotated[str, typer.Option(help="Policies, comma-separated.")] = ALL_POLICIES,
    seeds: Annotated[str, typer.Option(help="Seeds: 42-51 or 42,43.")] = "42-51",
    workers: Annotated[int | None, typer.Option(help="Local worker processes.")] = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Run the sweep on this Ray cluster (shoal[ray]).")
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(file_okay=False, help="Write curves.csv and curves.svg here."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print results as JSON.")] = False,
) -> None:
    """The published static-packing protocol: unallocated GPU % per policy and seed."""
    from shoal.experiments.openb.report import (
        format_table,
        summarize,
        write_curves_csv,
        write_svg,
    )
    from shoal.experiments.openb.runner import parse_seeds, run_sweep
    from shoal.experiments.openb.trace import TraceError, find_trace_dir, list_traces

    folder = find_trace_dir(trace_dir)
    if folder is None:
        typer.echo(
            "error: no openb trace found; pass --trace-dir or run "
            "`shoal experiment download-openb DIR`",
            err=True,
        )
        raise typer.Exit(2)
    try:
        names = list_traces(folder) if trace == "all" else [t.strip() for t in trace.split(",")]
        results = run_sweep(
            folder,
            names,
            [p.strip() for p in policy.split(",") if p.strip()],
            parse_seeds(seeds),
            workers=workers,
            ray_address=ray_address,
        )
    except (TraceError, ValueError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    summaries = summarize(results)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "summaries": [
                        {k: v for k, v in vars(s).items() if k != "curve"} for s in summaries
                    ],
                    "runs": [r.to_dict() for r in results],
                },
                indent=2,
            )
        )
    else:
        typer.echo(format_table(summaries))
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_curves_csv(summaries, out_dir / "curves.csv")
        write_svg(summaries, out_dir / "curves.svg", title=", ".join(names))


@experiment_app.command("download-openb")
def download_openb(
    dest: Annotated[Path, typer.Argument(file_okay=False, help="Folder to download into.")],
) -> None:
    """Download the openb CSVs (pinned commit, sha256 checked). Needs internet."""
    from shoal.experiments.openb.download import download

    try:
        download(dest, log=typer.echo)
    except (RuntimeError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
