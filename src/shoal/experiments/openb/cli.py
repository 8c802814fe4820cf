"""`shoal experiment openb` and `shoal experiment download-openb`: thin command-line
wrappers over the runner and the report (the logic lives there)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["experiment_app"]

experiment_app = typer.Typer(
    help="Reproducible studies on the real scheduler.", no_args_is_help=True
)

ALL_POLICIES = "Random,DotProd,GpuClustering,GpuPacking,BestFit,FGD,FragBlend"

# Options shared by the experiment commands.
TraceDirOption = Annotated[
    Path | None,
    typer.Option(
        "--trace-dir",
        file_okay=False,
        help="Folder of openb-format CSVs (default: ../shared/traces/openb).",
    ),
]
PolicyOption = Annotated[str, typer.Option(help="Policies, comma-separated.")]
WorkersOption = Annotated[int | None, typer.Option(help="Local worker processes.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print results as JSON.")]


def _trace_folder(trace_dir: Path | None) -> Path:
    """The openb folder to read (--trace-dir or ../shared/traces/openb); exit 2 if none."""
    from shoal.experiments.openb.trace import find_trace_dir

    folder = find_trace_dir(trace_dir)
    if folder is None:
        typer.echo(
            "error: no openb trace found; pass --trace-dir or run "
            "`shoal experiment download-openb DIR`",
            err=True,
        )
        raise typer.Exit(2)
    return folder


def _warn(traces: list[tuple[Path, str]]) -> None:
    """Say what each trace's files had that is ignored or can never be placed (the run
    goes on); TraceError for a file that cannot be used."""
    from shoal.experiments.openb.trace import load_trace

    for folder, name in traces:
        for warning in load_trace(folder, name).warnings:
            typer.echo(f"warning: {warning}", err=True)


@experiment_app.command("openb")
def openb(
    trace: Annotated[
        str, typer.Option(help="Trace name(s), comma-separated, or 'all'.")
    ] = "default",
    trace_dir: TraceDirOption = None,
    policy: PolicyOption = ALL_POLICIES,
    seeds: Annotated[str, typer.Option(help="Seeds: 42-51 or 42,43.")] = "42-51",
    workers: WorkersOption = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Run the sweep on this Ray cluster (shoal[ray]).")
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(file_okay=False, help="Write curves.csv and curves.svg here."),
    ] = None,
    as_json: JsonOption = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="No progress on stderr (default: bars with ETAs on a terminal, else one "
            "line per finished run, none with --json).",
        ),
    ] = False,
    dra: Annotated[
        bool,
        typer.Option(
            "--dra",
            help="Publish the GPUs through Dynamic Resource Allocation (ResourceSlices, "
            "one claim per GPU pod, shares as consumable capacity) instead of listing "
            "them in the nodes' allocatable (docs/dra.md; several times slower).",
        ),
    ] = False,
) -> None:
    """The published static-packing protocol: unallocated GPU % per policy and seed."""
    from shoal.experiments.openb.progress import SweepProgress, progress_mode
    from shoal.experiments.openb.report import (
        format_table,
        summarize,
        write_curves_csv,
        write_svg,
    )
    from shoal.experiments.openb.runner import parse_seeds, policy_name, run_sweep
    from shoal.experiments.openb.trace import POD_FILE_PREFIX, TraceError, list_traces

    folder = _trace_folder(trace_dir)
    try:
        names = list_traces(folder) if trace == "all" else [t.strip() for t in trace.split(",")]
        if not names:
            raise TraceError(f"{folder}: no {POD_FILE_PREFIX}*.csv files: no trace to run")
        _warn([(folder, name) for name in names])
        policies = [p.strip() for p in policy.split(",") if p.strip()]
        seed_list = parse_seeds(seeds)
        units = [(t, policy_name(p), s) for t in names for p in policies for s in seed_list]
        with SweepProgress(units, progress_mode(quiet, as_json)) as progress:
            results = run_sweep(
                folder,
                names,
                policies,
                seed_list,
                workers=workers,
                ray_address=ray_address,
                progress=progress.done,
                started=progress.start,
                **({"dra": True} if dra else {}),
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


@experiment_app.command("openb-replay")
def openb_replay(
    trace: Annotated[str, typer.Option(help="Trace name.")] = "default",
    trace_dir: TraceDirOption = None,
    policy: PolicyOption = ALL_POLICIES,
    speedup: Annotated[
        float, typer.Option(help="Divide arrival times by this (1: the trace as recorded).")
    ] = 1.0,
    seed: Annotated[int, typer.Option(help="Scheduler seed.")] = 0,
    workers: WorkersOption = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            file_okay=False,
            help="Write replay.csv (samples over time) and replay-*.svg plots here.",
        ),
    ] = None,
    as_json: JsonOption = False,
    rescheduler: Annotated[
        bool,
        typer.Option(
            "--rescheduler",
            help="Replay each policy without and with the Rescheduler (docs/rescheduler.md).",
        ),
    ] = False,
    # Large jobs (issue 12): waits by task size, seed ranges, `+reservation`/`+protect`.
    seeds: Annotated[
        str | None,
        typer.Option(
            help="Seeds, e.g. 42-51 or 42,43 (overrides --seed); prints mean and sd over "
            "them. Policies may add +reservation and/or +protect (LargeJobReservation)."
        ),
    ] = None,
) -> None:
    """Dynamic replay: pods arrive at their creation time and leave after their lifetime;
    unallocated GPU % and pending time over time per policy, and waits by task size."""
    from shoal.experiments.openb.replay import (
        format_replay_summary,
        format_replay_table,
        format_rescheduler_table,
        format_wait_table,
        replay_policies,
        summarize_replays,
        write_replay_csv,
        write_replay_svgs,
        write_wait_csv,
    )
    from shoal.experiments.openb.runner import parse_seeds
    from shoal.experiments.openb.trace import TraceError

    folder = _trace_folder(trace_dir)
    started = time.perf_counter()
    try:
        seed_list = parse_seeds(seeds) if seeds is not None else None
        _warn([(folder, trace)])
        results = replay_policies(
            str(folder),
            trace,
            [p.strip() for p in policy.split(",") if p.strip()],
            seed=seed,
            speedup=speedup,
            workers=workers,
            rescheduler=rescheduler,
            seeds=seed_list,
        )
    except (TraceError, ValueError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    summaries = summarize_replays(results) if seed_list is not None else None
    if as_json and summaries is not None:
        typer.echo(
            json.dumps(
                {
                    "summaries": [s.to_dict() for s in summaries],
                    "runs": [r.to_dict() for r in results],
                },
                indent=2,
            )
        )
    elif as_json:
        typer.echo(json.dumps([r.to_dict() for r in results], indent=2))
    elif summaries is not None:
        typer.echo(format_replay_summary(summaries))
        typer.echo(f"\n{len(results)} runs in {time.perf_counter() - started:.0f} s")
    else:
        typer.echo(format_replay_table(results))
        if rescheduler:
            typer.echo("")
            typer.echo(format_rescheduler_table(results))
        typer.echo("\nWait (s) by task size:\n" + format_wait_table(results))
    if out_dir is not None:
        write_replay_csv(results, out_dir / "replay.csv")
        write_wait_csv(results, out_dir / "replay-waits.csv")
        first = [r for r in results if r.seed == results[0].seed]  # one line per policy
        write_replay_svgs(first, out_dir, title=f"{trace}, arrivals / {speedup:g}")
        if rescheduler:
            from shoal.experiments.openb.rescheduler_report import write_multi_gpu_wait_svg

            write_multi_gpu_wait_svg(first, out_dir, title=f"{trace}, arrivals / {speedup:g}")


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


# ---- trace family and sweeps over it (issue 12) --------------------------------------


@experiment_app.command("openb-generate")
def openb_generate(
    out: Annotated[Path, typer.Option(file_okay=False, help="Folder to write into.")],
    seed: Annotated[int, typer.Option(help="Seed of the trace (or of the grid).")] = 0,
    gpu_share: Annotated[
        float, typer.Option(help="% of GPU demand from GPU-sharing tasks (default trace: 28.5).")
    ] = 28.5,
    multi_gpu: Annotated[
        float, typer.Option(help="% of GPU demand from multi-GPU tasks (default trace: 7.3).")
    ] = 7.3,
    constrained: Annotated[
        float, typer.Option(help="% of GPU tasks constrained to GPU models.")
    ] = 0.0,
    cpu_only: Annotated[
        float,
        typer.Option(help="CPU-only tasks per mille of tasks, as in cpu050 (default: 133)."),
    ] = 133.0,
    grid: Annotated[
        int,
        typer.Option(
            help="Write a grid of this many traces spread over the family's ranges instead."
        ),
    ] = 0,
    trace_dir: TraceDirOption = None,
) -> None:
    """Generate openb-format traces of the family from the default trace (see
    docs/gpu-sharing.md)."""
    from shoal.experiments.openb import family
    from shoal.experiments.openb.trace import TraceError

    folder = _trace_folder(trace_dir)
    try:
        members = (
            family.grid(seed, grid)
            if grid
            else [family.FamilyParams(gpu_share, multi_gpu, constrained, cpu_only, seed)]
        )
        written = family.write_family(folder, out, members)
    except (TraceError, ValueError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo("| trace | pods | sharing % | multi-GPU % | constrained % | CPU-only per mille |")
    typer.echo("|---|---|---|---|---|---|")
    for params, stats in written:
        typer.echo(
            f"| {params.name} | {stats.pods} | {stats.gpu_share:.1f} | {stats.multi_gpu:.1f} "
            f"| {stats.constrained:.1f} | {stats.cpu_only:.0f} |"
        )
    typer.echo(f"wrote {len(written)} trace(s) to {out}")


@experiment_app.command("openb-sweep")
def openb_sweep(
    traces: Annotated[
        str, typer.Option(help="A folder of openb pod lists, or a glob of pod list files.")
    ],
    policy: PolicyOption = "FGD,FragBlend,FragGuard",
    seeds: Annotated[str, typer.Option(help="Seeds: 42-51 or 42,43.")] = "42-51",
    workers: WorkersOption = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Run on this Ray cluster (shoal[ray]).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(dir_okay=False, help="Also write every run as CSV here, as it finishes."),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            help="Keep the runs already in --out (same trace name, policy and seed) instead "
            "of running them again; drop a policy's rows there after changing its code."
        ),
    ] = False,
) -> None:
    """Run policies over many traces and compare them with FGD per trace: unallocated GPU
    % at arrived = 100 % and the first dropped pod, mean (sd) over seeds."""
    import time

    from shoal.experiments.openb.runner import RunResult, parse_seeds
    from shoal.experiments.openb.sweep import (
        append_run_csv,
        format_sweep_table,
        read_runs_csv,
        resolve_traces,
        sweep,
        sweep_cells,
        write_runs_csv,
    )
    from shoal.experiments.openb.trace import TraceError

    if resume and out is None:
        typer.echo("error: --resume needs --out (the runs CSV to resume from)", err=True)
        raise typer.Exit(2)
    start = time.perf_counter()
    done: list[RunResult] = []
    try:
        found = resolve_traces(traces)
        _warn(found)
        if out is not None and resume and out.exists():
            done = read_runs_csv(out)
        if out is not None:
            write_runs_csv(done, out)  # runs are appended below as they finish

        def record(run: RunResult) -> None:
            if out is not None:
                append_run_csv(run, out)

        results = sweep(
            found,
            [p.strip() for p in policy.split(",") if p.strip()],
            parse_seeds(seeds),
            workers=workers,
            ray_address=ray_address,
            progress=record,
            done=done,
        )
    except (TraceError, ValueError, OSError, RuntimeError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(format_sweep_table(sweep_cells(results)))
    reused_ids = {id(r) for r in done}
    reused = sum(id(r) in reused_ids for r in results)
    kept = f" ({reused} reused from {out})" if reused else ""
    typer.echo(
        f"{len(results)} runs over {len(found)} trace(s){kept} "
        f"in {time.perf_counter() - start:.1f} s"
    )
