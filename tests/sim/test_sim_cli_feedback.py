"""`shoal simulate`'s feedback: a busy dashboard port fails before any work, repeated
warnings are folded, `-o` is a format (as in `shoal get`), and `--from-cluster` /
`shoal snapshot` arguments are checked before the cluster is read."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from simhelpers import docs, node_yaml, pod_yaml
from typer.testing import CliRunner

from shoal.cli import app

runner = CliRunner()


def test_a_busy_dashboard_port_fails_before_simulating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the scenario was loaded although the port is busy")

    monkeypatch.setattr("shoal.sim.runner.load_scenario", no_work)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = runner.invoke(app, ["simulate", "--serve", "--serve-address", f"127.0.0.1:{port}"])
    assert result.exit_code == 2, result.output
    assert f"cannot serve the dashboard on 127.0.0.1:{port}: address already in use" in (
        result.output
    )
    assert "--serve-address HOST:PORT (port 0 for any free port)" in result.output


def test_hundreds_of_like_warnings_are_folded(tmp_path: Path) -> None:
    queues = [
        {
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": f"q{i}"},
            "spec": {"parent": f"missing{i}", "guaranteed": {"cpu": "2"}, "max": {"cpu": "1"}},
        }
        for i in range(510)
    ]
    cluster = tmp_path / "queues.yaml"
    cluster.write_text(node_yaml("n1") + "---\n" + yaml.safe_dump_all(queues))
    result = runner.invoke(app, ["simulate", "-q", "-c", str(cluster)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 6  # 3 of each of the two messages
    assert result.output.count("... and 507 more like this") == 2
    assert "Queue q0: spec.parent 'missing0' does not exist" in result.output
    assert len(result.output.splitlines()) < 60


def test_repeated_config_warnings_are_folded(tmp_path: Path) -> None:
    unused = [{"name": "VolumeBinding", "args": {"shape": []}}]  # an arg Shoal does not use
    profiles = [{"schedulerName": f"p{i}", "pluginConfig": unused} for i in range(20)]
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"profiles": profiles}))
    result = runner.invoke(app, ["validate-config", str(config)])
    assert result.exit_code == 0, result.output
    assert f"{config}: 20 warning(s):" in result.output
    assert "profiles[2].pluginConfig[0].args: VolumeBinding's shape is not used" in result.output
    assert "profiles[3]." not in result.output
    assert "  - ... and 17 more like this" in result.output


def test_dash_o_is_a_format_not_a_file(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    result = runner.invoke(app, ["simulate", "-q", "-o", str(out)])
    assert result.exit_code == 2
    assert "use table, json or yaml" in result.output
    assert "write the per-pod results with --out FILE" in result.output
    assert not out.exists()


def test_dash_o_json_prints_one_document(tmp_path: Path) -> None:
    workload = tmp_path / "w.yaml"
    workload.write_text(docs(node_yaml("n1", cpu="2"), pod_yaml("a"), pod_yaml("b", cpu="8")))
    result = runner.invoke(app, ["simulate", "-w", str(workload), "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["summary"]["running"] == 1 and doc["summary"]["pending"] == 1
    assert {p["pod"]: p["status"] for p in doc["pods"]} == {"a": "running", "b": "pending"}
    assert "fromCluster" not in doc
    result = runner.invoke(app, ["simulate", "-w", str(workload), "-o=yaml", "-q"])
    assert yaml.safe_load(result.stdout)["summary"]["arrived"] == 2


def test_kubeconfig_without_from_cluster_is_refused() -> None:
    result = runner.invoke(app, ["simulate", "--context", "prod"])
    assert result.exit_code == 2
    assert "--kubeconfig and --context need --from-cluster" in result.output


def test_from_cluster_without_a_cluster_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = runner.invoke(app, ["simulate", "--from-cluster"])
    assert result.exit_code == 1
    assert "cannot read the cluster: no kubeconfig" in result.output
    result = runner.invoke(app, ["snapshot"])
    assert result.exit_code == 1
    assert "give --kubeconfig FILE or set $KUBECONFIG" in result.output


def test_snapshot_checks_its_output_arguments_first(tmp_path: Path) -> None:
    result = runner.invoke(app, ["snapshot", "-o", "table"])
    assert result.exit_code == 2 and "use yaml or json" in result.output
    result = runner.invoke(app, ["snapshot", "--out", str(tmp_path / "s.json"), "-o", "yaml"])
    assert result.exit_code == 2 and "a .json file is read as JSON" in result.output


def test_snapshot_strips_noise_and_its_files_load_as_the_clusters_state(tmp_path: Path) -> None:
    from shoal.commands.snapshot import _dump, clean, describe
    from shoal.sim import load_scenario

    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "resourceVersion": "7", "managedFields": [{"manager": "k"}]},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "images": [{"names": ["registry/x"], "sizeBytes": 1}],
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t"}],
        },
    }
    last_applied = {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "team": "a"}
    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "done", "namespace": "default", "annotations": last_applied},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": {"phase": "Succeeded", "podIP": "10.0.0.1", "containerStatuses": []},
    }
    queue = {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "team"},
        "spec": {},
        "status": {"allocated": {"cpu": "1"}},
    }
    cleaned = [clean(str(o["kind"]), o) for o in (node, pod, queue)]
    assert cleaned[0]["metadata"] == {"name": "n1"}
    assert cleaned[0]["status"] == {
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    assert list(cleaned[1])[:2] == ["apiVersion", "kind"]
    assert cleaned[1]["metadata"]["annotations"] == {"team": "a"}
    assert cleaned[1]["status"] == {"phase": "Succeeded"}
    assert "status" not in cleaned[2]
    header = {"apiVersion": "sim.shoal.dev/v1alpha1", "kind": "ClusterSnapshot", "spec": {}}
    documents = [header, *cleaned]
    assert describe(documents) == "1 node, 1 pod (0 bound, 0 pending, 1 finished); Queue 1"
    for fmt, name in (("yaml", "snap.yaml"), ("json", "snap.json")):
        path = tmp_path / name
        path.write_text(_dump(documents, fmt))
        sc = load_scenario([path])
        assert sc.errors == [], fmt
        assert sc.origin_counts()["finished"] == 1 and sc.cluster.sources == [str(path)]
