"""`shoal snapshot` and `shoal simulate --from-cluster` against a real kube-apiserver: the
live state is read (read-only) and replayed, with a proposed workload and a proposed
Queue on top. Bound pods stay where they are, finished pods are finished and hold
nothing, proposed pods get only the room that is free, and the proposed Queue replaces
the live one."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from apihelpers import MERGE, Space, space
from kubehelpers import async_test

from shoal.drivers.kube.resources import PODS, QUEUES

SHOAL = [sys.executable, "-c", "from shoal.cli import app; app()"]

pytestmark = pytest.mark.apiserver


async def _shoal(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *SHOAL, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _queue(name: str, max_cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": QUEUES.api_version,
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"max": {"cpu": max_cpu}},
    }


async def _live_state(s: Space) -> tuple[str, str, str]:
    """Two 4-cpu nodes; `a` (2 cpu) bound to n1 by spec.nodeName, `b` (1 cpu) bound to
    n2 through a Binding, `done` (3 cpu) on n2 and Succeeded, `waiting` (1 cpu) pending;
    a Queue with a 1-cpu maximum. Returns (n1, n2, queue)."""
    n1 = await s.add_node("n1", cpu="4")
    n2 = await s.add_node("n2", cpu="4")
    await s.create_pod("a", "2", node_name=n1)
    await s.create_pod("b", "1")
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "b", "namespace": s.name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": n2},
    }
    await s.create(PODS.path(s.name, "b", "binding"), binding)
    await s.create_pod("done", "3", node_name=n2)
    await s.client.request(
        "PATCH",
        PODS.path(s.name, "done", "status"),
        body={"status": {"phase": "Succeeded"}},
        content_type=MERGE,
    )
    await s.create_pod("waiting", "1")
    queue = f"{s.name}-team"
    await s.create(QUEUES.path(), _queue(queue, "1"))
    s.cluster_objects.append(QUEUES.path(name=queue))
    return n1, n2, queue


def _files(s: Space, tmp_path: Path, queue: str) -> tuple[Path, Path]:
    """The scheduler configuration (the space's scheduler name) and the proposed change:
    three pods in the team queue and the team queue with an 8-cpu maximum."""
    config = tmp_path / "scheduler.yaml"
    config.write_text(yaml.safe_dump({"profiles": [{"schedulerName": s.scheduler}]}))
    labels = {"shoal.dev/queue": queue}
    proposed = [
        _queue(queue, "8"),
        s.pod("p1", "2", labels=labels),
        s.pod("p2", "1", labels=labels),
        s.pod("p3", "4", labels=labels),  # no node has 4 cpu free
    ]
    workload = tmp_path / "proposed.yaml"
    workload.write_text(yaml.safe_dump_all(proposed))
    return config, workload


def _check_outcome(
    doc: dict[str, Any], s: Space, nodes: tuple[str, str], queue: str, workload: Path
) -> None:
    n1, n2 = nodes
    pods = {p["pod"]: p for p in doc["pods"] if p["namespace"] == s.name}
    assert set(pods) == {"a", "b", "done", "waiting", "p1", "p2", "p3"}
    origin = {name: p["origin"] for name, p in pods.items()}
    assert origin == {
        **dict.fromkeys(("a", "b", "done", "waiting"), "cluster"),
        **dict.fromkeys(("p1", "p2", "p3"), "workload"),
    }
    # Bound pods stay where they are, from t=0.
    assert (pods["a"]["status"], pods["a"]["node"], pods["a"]["bound_at"]) == ("running", n1, 0)
    assert (pods["b"]["status"], pods["b"]["node"]) == ("running", n2)
    # The finished pod is finished and holds nothing: without its 3 cpu, the pending
    # pod and the proposed p1 and p2 (4 cpu) fit in the 5 cpu left.
    assert pods["done"]["status"] == "finished"
    for name in ("waiting", "p1", "p2"):
        assert pods[name]["status"] == "running", pods[name]
    # Under the live queue's 1-cpu maximum p1 would wait: the proposed queue replaced it.
    assert pods["p3"]["status"] == "pending"
    assert "Insufficient cpu" in pods["p3"]["message"]
    requested = {"a": 2, "b": 1, "waiting": 1, "p1": 2, "p2": 1}
    used = {n1: 0, n2: 0}
    for name, cpu in requested.items():
        used[pods[name]["node"]] += cpu
    assert max(used.values()) <= 4, used
    live = doc["fromCluster"]
    assert live["replaced"] == [f"Queue {queue} (by {workload}#0)"]
    assert live["nodes"] >= 2 and live["bound"] >= 2 and live["finished"] >= 1
    assert live["proposedPods"] == 3


@async_test(timeout=180)
async def test_snapshot_and_simulate_from_cluster_replay_a_proposed_change(
    control_plane: dict[str, str], tmp_path: Path
) -> None:
    async with space(control_plane["KUBECONFIG"], "snap") as s:
        n1, n2, queue = await _live_state(s)
        config, workload = _files(s, tmp_path, queue)
        kubeconfig = ["--kubeconfig", s.kubeconfig]

        # shoal snapshot: one multi-document YAML, the ClusterSnapshot first, no noise.
        snap = tmp_path / "snap.yaml"
        code, out, err = await _shoal("snapshot", *kubeconfig, "--out", str(snap))
        assert code == 0, err
        assert f"Wrote {snap}:" in out
        documents = list(yaml.safe_load_all(snap.read_text()))
        assert documents[0]["kind"] == "ClusterSnapshot"
        assert documents[0]["spec"]["server"]
        assert "managedFields" not in snap.read_text()
        mine = {
            d["metadata"]["name"]: d
            for d in documents
            if d["kind"] == "Pod" and d["metadata"].get("namespace") == s.name
        }
        assert mine["b"]["spec"]["nodeName"] == n2
        assert mine["done"]["status"] == {"phase": "Succeeded"}
        assert "nodeName" not in mine["waiting"]["spec"]
        kinds = {d["kind"] for d in documents}
        assert {"Node", "Pod", "Namespace", "PriorityClass", "Queue"} <= kinds

        # -o json to stdout: the same objects as a v1 List.
        code, out, err = await _shoal("snapshot", *kubeconfig, "-o", "json")
        assert code == 0, err
        listing = json.loads(out)
        assert listing["kind"] == "List" and listing["items"][0]["kind"] == "ClusterSnapshot"

        # The snapshot file as the current state, the proposed change on top.
        args = ["-w", str(workload), "--config", str(config), "-q", "-o", "json"]
        code, out, err = await _shoal("simulate", "-c", str(snap), *args)
        assert code == 0, err
        doc = json.loads(out)
        _check_outcome(doc, s, (n1, n2), queue, workload)

        # The same, read from the cluster in memory.
        code, out, err = await _shoal("simulate", "--from-cluster", *kubeconfig, *args)
        assert code == 0, err
        doc = json.loads(out)
        _check_outcome(doc, s, (n1, n2), queue, workload)
        assert doc["fromCluster"]["sources"][0].startswith("cluster (server ")

        # The table says which pods came from where.
        table = ["-w", str(workload), "--config", str(config), "-q"]
        code, out, err = await _shoal("simulate", "--from-cluster", *kubeconfig, *table)
        assert code == 0, err
        assert "from cluster: " in out and "proposed: 3 pods, 0 nodes" in out
        assert f"replaced by a proposed object: Queue {queue}" in out

        # Nothing was written to the cluster: the pending pod is still pending.
        assert (await s.placements())["waiting"] == ""
