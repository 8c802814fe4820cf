"""openb-replay: waits by task size, seed ranges and the +reservation/+protect variants,
on a small synthetic trace."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shoal.experiments.openb.replay import (
    ReplayResult,
    format_replay_summary,
    replay,
    size_class,
    summarize_replays,
)
from shoal.experiments.openb.runner import experiment_config
from shoal.experiments.openb.trace import PodRow, load_trace
from shoal.experiments.openb.variants import split_policy, variant_config

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,8,V100\n"
# One node of 8 GPUs. Small pods arrive first; an 8-GPU pod arrives at 30 and waits until
# the last GPU pod leaves (a1, deleted at 200 s).
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
    "a0,2000,4096,1,1000,,LS,Running,0,100,0\n"
    "a1,2000,4096,1,1000,,LS,Running,1,200,1\n"
    "a2,2000,4096,2,1000,,LS,Running,2,150,2\n"
    "s0,1000,2048,1,500,,LS,Running,3,120,3\n"
    "c0,4000,4096,0,0,,LS,Running,4,60,4\n"
    "big,8000,16384,8,1000,,LS,Running,30,500,30\n"
)


@pytest.fixture
def small(tmp_path: Path) -> Path:
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(NODES)
    (tmp_path / "openb_pod_list_small.csv").write_text(PODS)
    return tmp_path


def test_size_classes() -> None:
    def row(num_gpu: int, milli: int) -> PodRow:
        return PodRow("p", 1000, 1024, num_gpu, milli)

    assert [size_class(row(g, m)) for g, m in [(0, 0), (1, 500), (1, 1000), (8, 1000)]] == [
        "0",
        "share",
        "1",
        "8",
    ]


def test_replay_reports_wait_by_size(small: Path) -> None:
    result = replay(load_trace(small, "small"), "BestFit")
    sizes = result.waits_by_size
    assert list(sizes) == ["0", "share", "1", "2", "8"]
    assert {k: v["pods"] for k, v in sizes.items()} == {
        "0": 1,
        "share": 1,
        "1": 2,
        "2": 1,
        "8": 1,
    }
    # The 8-GPU pod waits from 30 to 200 s; the others are placed on arrival.
    assert sizes["8"]["max"] == pytest.approx(170.0) and sizes["8"]["p99"] == sizes["8"]["max"]
    assert sizes["1"]["max"] == 0.0 and sizes["0"]["mean"] == 0.0
    assert all(v["never_placed"] == 0 for v in sizes.values())


def test_policy_variants_parse_and_enable_the_plugin() -> None:
    assert split_policy("fgd+Reservation+protect") == ("FGD", ("reservation", "protect"))
    assert split_policy("BestFit") == ("BestFit", ())
    with pytest.raises(ValueError, match=r"unknown policy option 'aging'.*known: \+reservation"):
        split_policy("FGD+aging")
    with pytest.raises(ValueError, match="unknown policy"):
        split_policy("Nope+reservation")
    config = variant_config(experiment_config("FGD", None), ("reservation", "protect"))
    profile = config.profiles[0]
    assert [p.name for p in profile.plugins.multi_point.enabled][-2:] == [
        "LargeJobReservation",
        "DefaultBinder",
    ]
    args = next(c.args for c in profile.plugin_config if c.name == "LargeJobReservation")
    assert args["protectIdle"] is True and args["maxReservations"] == 4


def test_variants_replay_and_summaries_over_seeds(small: Path) -> None:
    trace = load_trace(small, "small")
    runs: list[ReplayResult] = [
        replay(trace, policy, seed=seed)
        for policy in ("FGD", "FGD+reservation+protect")
        for seed in (1, 2)
    ]
    assert [r.policy for r in runs] == ["FGD"] * 2 + ["FGD+reservation+protect"] * 2
    assert all(r.never_scheduled == 0 for r in runs)
    summaries = summarize_replays(runs)
    assert [(s.policy, s.seeds) for s in summaries] == [
        ("FGD", [1, 2]),
        ("FGD+reservation+protect", [1, 2]),
    ]
    mean, sd = summaries[0].waits_by_size["8"]["max"]
    values = [r.waits_by_size["8"]["max"] for r in runs[:2]]
    assert mean == pytest.approx(sum(values) / 2)
    assert sd == pytest.approx(abs(values[0] - values[1]) / math.sqrt(2))
    table = format_replay_summary(summaries)
    assert "p99 wait 8-GPU" in table and "| FGD+reservation+protect | 2 |" in table


def test_cli_seeds_summary_csv_and_json(small: Path, tmp_path: Path) -> None:
    from shoal.cli import app

    out = tmp_path / "out"
    base = ["experiment", "openb-replay", "--trace-dir", str(small), "--trace", "small"]
    base += ["--policy", "FGD,BestFit+protect", "--workers", "1", "--seeds", "1-2"]
    result = CliRunner().invoke(app, [*base, "--out-dir", str(out)])
    assert result.exit_code == 0, result.output
    assert "mean (sd) over seeds 1-2" in result.output and "4 runs in" in result.output
    waits = (out / "replay-waits.csv").read_text().splitlines()
    assert waits[0] == "policy,seed,size,pods,never_placed,mean_s,p50_s,p99_s,max_s"
    assert sum(1 for line in waits if line.startswith("BestFit+protect,2,8,")) == 1
    result = CliRunner().invoke(app, [*base, "--json"])
    data = json.loads(result.output)
    assert [s["policy"] for s in data["summaries"]] == ["FGD", "BestFit+protect"]
    assert [(r["policy"], r["seed"]) for r in data["runs"]][:2] == [("FGD", 1), ("FGD", 2)]
    assert "8" in data["runs"][0]["waits_by_size"]


def test_cli_rejects_unknown_variant(small: Path) -> None:
    from shoal.cli import app

    args = ["experiment", "openb-replay", "--trace-dir", str(small), "--trace", "small"]
    result = CliRunner().invoke(app, [*args, "--policy", "FGD+reserve", "--workers", "1"])
    assert result.exit_code == 2
    assert "unknown policy option 'reserve'" in result.output
