"""The openb trace-family generator and the sweep over generated traces.

Most tests use a small synthetic default trace in the openb format; one reads the real
default trace from ../shared/traces/openb/ and skips cleanly without it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from shoal.cli import app
from shoal.experiments.openb.family import (
    FAMILY_RANGES,
    FamilyParams,
    generate,
    grid,
    measure,
    write_family,
)
from shoal.experiments.openb.runner import RunResult
from shoal.experiments.openb.sweep import (
    format_sweep_table,
    read_runs_csv,
    resolve_traces,
    sweep,
    sweep_cells,
    verdicts,
    write_runs_csv,
)
from shoal.experiments.openb.trace import (
    PodRow,
    TraceError,
    find_trace_dir,
    load_nodes,
    load_pods,
)

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A default trace with every category: shares, whole GPUs, 2/4/8-GPU, CPU-only."""
    folder = tmp_path / "source"
    folder.mkdir()
    nodes = [f"a{i},96000,393216,8,A100" for i in range(4)]
    nodes += [f"t{i},32000,131072,2,T4" for i in range(6)]
    nodes += ["s0,16000,65536,1,SMALL"]
    (folder / "openb_node_list_gpu_node.csv").write_text(NODE_HEADER + "\n".join(nodes) + "\n")
    shapes = [
        (4000, 8192, 1, 250),
        (6000, 12288, 1, 500),
        (8000, 16384, 1, 1000),
        (12000, 32768, 2, 1000),
        (24000, 65536, 4, 1000),
        (64000, 131072, 8, 1000),
        (2000, 4096, 0, 0),
    ]
    rng = np.random.default_rng(0)
    pods = []
    for i in range(60):
        c, m, g, gm = shapes[i % len(shapes)] if i < 14 else shapes[int(rng.integers(3))]
        pods.append(f"p{i:03d},{c},{m},{g},{gm},,LS,Running,{i},{i + 100},{i}")
    (folder / "openb_pod_list_default.csv").write_text(POD_HEADER + "\n".join(pods) + "\n")
    return folder


def _generate(source: Path, params: FamilyParams) -> list[PodRow]:
    return generate(
        load_pods(source / "openb_pod_list_default.csv"),
        load_nodes(source / "openb_node_list_gpu_node.csv"),
        params,
    )


@pytest.mark.parametrize(
    ("share", "multi", "spec", "cpu"),
    [(20, 50, 5, 0), (60, 30, 20, 100), (80, 20, 33, 300), (100, 0, 10, 50)],
)
def test_generated_shares_are_what_was_asked(
    source: Path, share: float, multi: float, spec: float, cpu: float
) -> None:
    pods = _generate(source, FamilyParams(share, multi, spec, cpu, seed=3))
    stats = measure(pods)
    # Demand shares are met to within one task of the largest kind (8 GPUs here, of a
    # demand of ~50 GPUs); counts to within rounding.
    assert stats.gpu_share == pytest.approx(share, abs=17)
    assert stats.multi_gpu == pytest.approx(multi, abs=17)
    gpu_tasks = sum(1 for p in pods if p.num_gpu)
    assert stats.constrained == pytest.approx(spec, abs=100 / gpu_tasks)
    assert stats.cpu_only == pytest.approx(cpu, abs=1000 / len(pods))
    # Every task is a real task shape of the default trace.
    real = {
        (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli)
        for p in load_pods(source / "openb_pod_list_default.csv")
    }
    assert {(p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli) for p in pods} <= real


def test_constraints_only_name_models_that_can_host_the_task(source: Path) -> None:
    pods = _generate(source, FamilyParams(20, 50, 33, 0, seed=1))
    constrained = [p for p in pods if p.gpu_spec]
    assert constrained
    for pod in constrained:
        if pod.num_gpu >= 4:  # only the A100 nodes have 4+ GPUs
            assert pod.gpu_spec == "A100"
        assert "SMALL" not in pod.gpu_spec or pod.num_gpu == 1


def test_written_members_keep_the_drawn_tasks_qos(source: Path, tmp_path: Path) -> None:
    write_family(source, tmp_path / "f", [FamilyParams(40, 30, 10, 100, seed=2)])
    (written,) = (tmp_path / "f").glob("openb_pod_list_*.csv")
    assert {p.qos for p in load_pods(written)} == {"LS"}


def test_generation_is_deterministic_per_seed(source: Path) -> None:
    params = FamilyParams(40, 30, 20, 100, seed=7)
    assert _generate(source, params) == _generate(source, params)
    other = FamilyParams(40, 30, 20, 100, seed=8)
    assert _generate(source, params) != _generate(source, other)


def test_bad_parameters_say_what_to_fix() -> None:
    with pytest.raises(ValueError, match="gpu_share \\+ multi_gpu"):
        FamilyParams(80, 40, 10, 0, seed=1)
    with pytest.raises(ValueError, match="constrained"):
        FamilyParams(20, 20, 120, 0, seed=1)
    with pytest.raises(ValueError, match="cpu_only"):
        FamilyParams(20, 20, 10, 1000, seed=1)


def test_grid_spreads_over_the_family_ranges() -> None:
    members = grid(seed=1, size=24)
    assert len({m.name for m in members}) == 24
    for m in members:
        for field, (lo, hi) in FAMILY_RANGES.items():
            value = getattr(m, field)
            if field == "multi_gpu":
                hi = min(hi, 100 - m.gpu_share)
                lo = min(lo, hi)
            assert lo <= value <= hi, (field, value)
    shares = sorted(m.gpu_share for m in members)
    assert shares[0] < 30 and shares[-1] > 90  # a Latin hypercube covers each range
    assert grid(seed=1) == grid(seed=1) and grid(seed=1) != grid(seed=2)


def test_generate_and_sweep_from_the_command_line(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "family"
    runner = CliRunner()
    made = runner.invoke(
        app,
        [
            "experiment",
            "openb-generate",
            "--trace-dir",
            str(source),
            "--out",
            str(out),
            "--grid",
            "2",
            "--seed",
            "5",
        ],
    )
    assert made.exit_code == 0, made.output
    assert "wrote 2 trace(s)" in made.output
    assert len(resolve_traces(str(out))) == 2
    csv_path = tmp_path / "runs.csv"
    swept = runner.invoke(
        app,
        [
            "experiment",
            "openb-sweep",
            "--traces",
            str(out / "openb_pod_list_*.csv"),
            "--policy",
            "FGD,FragBlend",
            "--seeds",
            "1-2",
            "--workers",
            "1",
            "--out",
            str(csv_path),
        ],
    )
    assert swept.exit_code == 0, swept.output
    assert "FragBlend vs FGD" in swept.output
    assert "8 runs over 2 trace(s) in" in swept.output
    assert len(csv_path.read_text().splitlines()) == 9
    # --resume keeps those runs and runs only what is missing (a third seed here).
    before = {tuple(line.split(",")[:4]) for line in csv_path.read_text().splitlines()[1:]}
    resumed = runner.invoke(
        app,
        [
            "experiment",
            "openb-sweep",
            "--traces",
            str(out),
            "--policy",
            "FGD,FragBlend",
            "--seeds",
            "1-3",
            "--workers",
            "1",
            "--out",
            str(csv_path),
            "--resume",
        ],
    )
    assert resumed.exit_code == 0, resumed.output
    assert f"12 runs over 2 trace(s) (8 reused from {csv_path})" in resumed.output
    rows = csv_path.read_text().splitlines()[1:]
    assert len(rows) == 12
    assert before <= {tuple(line.split(",")[:4]) for line in rows}
    assert sorted({line.split(",")[2] for line in rows}) == ["1", "2", "3"]


def test_a_malformed_runs_csv_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("trace,policy,seed,unallocated,first_drop,seconds\nt,FGD,42,oops,,1.0\n")
    with pytest.raises(TraceError, match=r"runs\.csv:2: bad 'unallocated' value"):
        read_runs_csv(path)
    path.write_text("a,b\n")
    with pytest.raises(TraceError, match="not a runs CSV"):
        read_runs_csv(path)


def test_sweep_cells_and_verdicts(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "family"
    write_family(source, out, [FamilyParams(40, 30, 10, 100, seed=2)])
    results = sweep(resolve_traces(str(out)), ["FGD", "BestFit"], [1, 2], workers=1)
    cells = sweep_cells(results)
    assert {(c.policy, c.seeds) for c in cells} == {("FGD", 2), ("BestFit", 2)}
    for c in cells:
        assert 0 <= c.unallocated <= 100 and 0 <= c.first_drop <= 130
    (verdict,) = verdicts(cells)
    assert verdict.policy == "BestFit" and verdict.traces == 1
    for c in cells:
        assert c.leftover is not None and c.idle is not None
    table = format_sweep_table(cells)
    assert "FGD: free GPU at arrived 100 % over 1 traces: share leftovers" in table
    assert "leftovers alone:" in table.split("BestFit: free GPU")[1]


def test_runs_csv_keeps_the_free_gpu_split_and_reads_files_without_it(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    run = RunResult("t", "FGD", 42, 0, 0, 0, 5.0, [], 90.0, 1.0, leftover=4.5, idle=0.5)
    write_runs_csv([run], path)
    (back,) = read_runs_csv(path)
    assert (back.unallocated, back.leftover, back.idle) == (5.0, 4.5, 0.5)
    path.write_text("trace,policy,seed,unallocated,first_drop,seconds\nt,FGD,42,5.0,,1.0\n")
    (old,) = read_runs_csv(path)
    assert old.leftover is None and old.idle is None
    assert "free GPU at arrived" not in format_sweep_table(sweep_cells([old]))


def test_two_traces_of_one_name_are_refused(source: Path, tmp_path: Path) -> None:
    for folder in ("a", "b"):
        write_family(source, tmp_path / folder, [FamilyParams(40, 30, 10, 100, seed=2)])
    with pytest.raises(TraceError, match="two traces named"):
        resolve_traces(str(tmp_path / "*" / "openb_pod_list_*.csv"))


def test_missing_traces_are_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no openb_pod_list_"):
        resolve_traces(str(tmp_path))
    (tmp_path / "openb_pod_list_x.csv").write_text(POD_HEADER)
    with pytest.raises(TraceError, match=r"openb_node_list_gpu_node\.csv is missing"):
        resolve_traces(str(tmp_path))


def test_a_member_of_the_real_family_has_the_asked_shares(tmp_path: Path) -> None:
    folder = find_trace_dir()
    if folder is None:
        pytest.skip("openb trace not found (../shared/traces/openb)")
    ((_params, stats),) = write_family(folder, tmp_path, [FamilyParams(60, 30, 25, 200, 11)])
    assert stats.gpu_share == pytest.approx(60, abs=0.5)
    assert stats.multi_gpu == pytest.approx(30, abs=0.5)
    assert stats.constrained == pytest.approx(25, abs=0.1)
    assert stats.cpu_only == pytest.approx(200, abs=0.5)
    assert stats.gpu_milli == pytest.approx(6_086_800, abs=8000)
