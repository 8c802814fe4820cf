"""Dynamic replay, the trace download and the summary outputs, on small synthetic data."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from shoal.experiments.openb import download as dl
from shoal.experiments.openb.replay import _stranded_while_pending, replay
from shoal.experiments.openb.report import summarize, write_curves_csv, write_svg
from shoal.experiments.openb.runner import run_one, run_sweep
from shoal.experiments.openb.trace import load_trace

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,2,V100\nn1,16000,65536,1,T4\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
    "p0,4000,8192,1,1000,,LS,Running,0,100,0\n"
    "p1,4000,8192,1,1000,,LS,Running,10,50,10\n"
    "p2,4000,8192,1,600,,LS,Running,20,200,20\n"
    "p3,4000,8192,1,1000,T4,LS,Running,30,90,30\n"
    "p4,2000,4096,0,0,,LS,Running,30,40,30\n"
)


@pytest.fixture
def small(tmp_path: Path) -> Path:
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(NODES)
    (tmp_path / "openb_pod_list_small.csv").write_text(PODS)
    return tmp_path


def test_replay_waits_for_capacity_instead_of_dropping(small: Path) -> None:
    trace = load_trace(small, "small")
    result = replay(trace, "FGD")
    assert result.pods == 5 and result.never_scheduled == 0
    # p3 needs the T4, which p1 does not free... p0 and p1 hold both V100s and p2's share
    # needs a device: p2 waits until p1 leaves at 10 + 40 = 50 s.
    assert result.waited >= 1 and result.max_pending_seconds > 0
    assert 0.0 <= result.min_unallocated <= result.mean_unallocated <= 100.0
    assert result.samples and all(0 <= pending <= 5 for _, _, pending, _ in result.samples)
    assert max(wait for *_, wait in result.samples) > 0  # p2's wait shows up over time
    # p2 is a GPU pod: some time was spent with it pending and GPUs idle around it.
    assert result.pending_seconds > 0 and 0.0 <= result.stranded_while_pending <= 100.0
    faster = replay(trace, "FGD", speedup=10)
    assert faster.max_pending_seconds >= result.max_pending_seconds


def test_stranded_while_pending_is_time_weighted_over_pending_intervals() -> None:
    # Unallocated: 80 % from t=0, 50 % from t=10, 20 % from t=30, 60 % from t=40.
    times = np.array([0.0, 10.0, 30.0, 40.0])
    unalloc = np.array([80.0, 50.0, 20.0, 60.0])
    # Pending 5-15 and 12-35 (merged: 5-35), and 38-42; a pod placed on arrival is ignored.
    seconds, stranded = _stranded_while_pending(
        [(5.0, 15.0), (12.0, 35.0), (38.0, 42.0), (20.0, 20.0)], times, unalloc
    )
    assert seconds == 34.0
    # 5-10 at 80, 10-30 at 50, 30-35 at 20, 38-40 at 20, 40-42 at 60.
    expected = (5 * 80 + 20 * 50 + 5 * 20 + 2 * 20 + 2 * 60) / 34
    assert abs(stranded - expected) < 1e-9
    # A pod never placed stays pending until the last change.
    seconds, _ = _stranded_while_pending([(35.0, None)], times, unalloc)
    assert seconds == 5.0
    assert np.isnan(_stranded_while_pending([], times, unalloc)[1])


def test_sweep_summary_csv_and_svg(small: Path, tmp_path: Path) -> None:
    results = run_sweep(small, ["small"], ["FGD", "FragBlend"], [1, 2], workers=1)
    assert [(r.policy, r.seed) for r in results] == [
        ("FGD", 1),
        ("FGD", 2),
        ("FragBlend", 1),
        ("FragBlend", 2),
    ]
    summaries = summarize(results)
    csv_path = write_curves_csv(summaries, tmp_path / "out" / "curves.csv")
    svg_path = write_svg(summaries, tmp_path / "out" / "curves.svg", title="small")
    assert csv_path.read_text().startswith("trace,policy,arrived_pct,unallocated_pct")
    svg = svg_path.read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and "FragBlend" in svg


def test_new_policy_runs_deterministically(small: Path) -> None:
    trace = load_trace(small, "small")
    assert run_one(trace, "FragBlend", 7).curve == run_one(trace, "FragBlend", 7).curve


def test_download_checks_sha256(tmp_path: Path) -> None:
    payload = {name: f"content of {name}\n".encode() for name in dl.expected_sums()}
    sums = "".join(
        f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in payload.items()
    )
    urls: list[str] = []

    def opener(url: str) -> bytes:
        urls.append(url)
        return payload[url.rsplit("/", 1)[1]]

    original = dl.SHA256SUMS
    try:
        dl.SHA256SUMS = sums
        dl.download(tmp_path, opener=opener, log=lambda _: None)
        assert dl.verify(tmp_path, dl.expected_sums(sums)) == []
        assert all(dl.COMMIT in u and "cluster-trace-gpu-v2023/csv/" in u for u in urls)
        # A tampered file is refused and not written.
        payload["openb_pod_list_default.csv"] = b"tampered"
        (tmp_path / "openb_pod_list_default.csv").unlink()
        with pytest.raises(RuntimeError, match="does not match"):
            dl.download(tmp_path, opener=opener, log=lambda _: None)
        assert not (tmp_path / "openb_pod_list_default.csv").exists()
    finally:
        dl.SHA256SUMS = original


def test_cli_replay_json(small: Path) -> None:
    from shoal.cli import app

    result = CliRunner().invoke(
        app,
        [
            "experiment",
            "openb-replay",
            "--trace-dir",
            str(small),
            "--trace",
            "small",
            "--policy",
            "FGD,GpuPacking",
            "--workers",
            "1",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [r["policy"] for r in data] == ["FGD", "GpuPacking"]


def test_cli_replay_writes_csv_and_plots(small: Path, tmp_path: Path) -> None:
    from shoal.cli import app

    out = tmp_path / "replay-out"
    args = ["experiment", "openb-replay", "--trace-dir", str(small), "--trace", "small"]
    args += ["--policy", "FGD,FragBlend", "--workers", "1", "--out-dir", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "unallocated % while pending" in result.output
    assert (
        (out / "replay.csv")
        .read_text()
        .startswith("policy,time_s,unallocated_pct,pending_pods,mean_wait_s")
    )
    for name in ("replay-unallocated.svg", "replay-pending.svg"):
        svg = (out / name).read_text()
        assert svg.startswith("<svg") and svg.count("<polyline") == 2
