"""The `shoal` command line through typer's CliRunner."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from simhelpers import docs, node_yaml, pod_yaml
from typer.testing import CliRunner

from shoal import __version__
from shoal.cli import app
from shoal.sim import bundled_example, load_scenario

runner = CliRunner()


def test_simulate_bundled_example(tmp_path: Path):
    out = tmp_path / "results.jsonl"
    result = runner.invoke(app, ["simulate", "--quiet", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Simulation summary" in result.output
    assert "time to schedule: p99" in result.output
    assert "nvidia.com/gpu" in result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    with bundled_example() as paths:
        assert len(rows) == len(load_scenario(paths).pods)
    assert set(rows[0]) == {
        "pod",
        "namespace",
        "status",
        "node",
        "arrival",
        "bound_at",
        "finished_at",
        "attempts",
        "message",
        "origin",
    }
    assert {row["origin"] for row in rows} == {"workload"}


def test_simulate_shows_pending_explanations_and_skipped_inputs(tmp_path: Path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(node_yaml("n1", cpu="2"))
    workload = tmp_path / "workload.yaml"
    workload.write_text(
        docs(pod_yaml("fits"), pod_yaml("too-big", cpu="8"), "kind: Pod\nmetadata: {name: 5}\n")
    )
    result = runner.invoke(
        app, ["simulate", "-c", str(cluster), "-w", str(workload), "--out", str(tmp_path / "r.csv")]
    )
    assert result.exit_code == 0, result.output
    assert "0/1 nodes are available: 1 Insufficient cpu." in result.output
    assert "Skipped 1 input(s)" in result.output
    assert "workload.yaml#2: Pod 5:" in result.output
    assert (tmp_path / "r.csv").read_text().count("\n") == 3  # header + 2 pods


def test_simulate_rejects_a_bad_results_suffix(tmp_path: Path):
    result = runner.invoke(app, ["simulate", "--out", str(tmp_path / "r.txt")])
    assert result.exit_code == 2
    assert ".jsonl or .csv" in result.output


def test_simulate_with_a_broken_config_exits_2(tmp_path: Path):
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nparallelizm: 4\n")
    result = runner.invoke(app, ["simulate", "--config", str(config)])
    assert result.exit_code == 2
    assert "parallelizm" in result.output


TWO_TYPOS = """\
    apiVersion: kubescheduler.config.k8s.io/v1
    kind: KubeSchedulerConfiguration
    profiles:
    - schedulerName: default-scheduler
      plugins:
        score:
          enabled:
          - name: NodeResourcesFitt
      pluginConfig:
      - name: NodeResourcesFit
        args:
          scoreingStrategy: {type: MostAllocated}
    """


def test_validate_config_reports_every_problem(tmp_path: Path):
    config = tmp_path / "config.yaml"
    config.write_text(textwrap.dedent(TWO_TYPOS))
    result = runner.invoke(app, ["validate-config", str(config)])
    assert result.exit_code == 1
    assert "2 problem(s)" in result.output
    assert "profiles[0].plugins.score.enabled[0].name: unknown plugin 'NodeResourcesFitt'" in (
        result.output
    )
    assert "did you mean 'NodeResourcesFit'?" in result.output
    assert "profiles[0].pluginConfig[0].args.scoreingStrategy" in result.output


def test_validate_config_ok(tmp_path: Path):
    config = tmp_path / "config.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            apiVersion: kubescheduler.config.k8s.io/v1
            kind: KubeSchedulerConfiguration
            profiles:
            - schedulerName: default-scheduler
            - schedulerName: bin-packing
              pluginConfig:
              - name: NodeResourcesFit
                args:
                  scoringStrategy: {type: MostAllocated}
            """
        )
    )
    result = runner.invoke(app, ["validate-config", str(config)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        f"{config}: 1 warning(s):\n"
        "  - profiles[0].schedulerName: 'default-scheduler' is the stock kube-scheduler's "
        "name: in a cluster, Shoal would compete with kube-scheduler for every pod that sets "
        "no schedulerName; name the profile e.g. 'shoal' unless Shoal replaces kube-scheduler\n"
        "OK: 2 profile(s): default-scheduler, bin-packing"
    )


def test_simulate_uses_the_config_profiles(tmp_path: Path):
    config = tmp_path / "config.yaml"
    config.write_text("profiles:\n- schedulerName: custom\n")
    workload = tmp_path / "w.yaml"
    pod = "kind: Pod\nmetadata: {name: p}\nspec: {schedulerName: custom, containers: [{name: c}]}\n"
    workload.write_text(docs(node_yaml("n1"), pod))
    out = tmp_path / "r.jsonl"
    args = ["simulate", "--config", str(config), "-w", str(workload), "--out", str(out), "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["node"] == "n1"


def test_version():
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"shoal {__version__}"
