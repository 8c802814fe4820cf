"""`shoal get queues` and `shoal explain` as processes against a real kube-apiserver:
after Shoal binds pods, the queue's usage reported by the CLI matches the pods bound."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from apihelpers import MERGE, space, wait_for
from kubehelpers import async_test

from shoal.api.resources import parse_resource_list
from shoal.commands.ctl import EXIT_BLOCKED, EXIT_NOT_FOUND
from shoal.drivers.kube.resources import NODES, QUEUES

SHOAL = [sys.executable, "-c", "from shoal.cli import app; app()"]


async def _shoal(kubeconfig: str, config: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *SHOAL,
        *args,
        "--kubeconfig",
        kubeconfig,
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _config(tmp_path: Path, scheduler_name: str) -> Path:
    """A configuration with one profile, for the space's schedulerName."""
    config = tmp_path / "scheduler.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "profiles": [{"schedulerName": scheduler_name}],
            }
        )
    )
    return config


@async_test(timeout=120)
async def test_get_queues_reports_the_usage_of_the_pods_bound(
    control_plane: dict[str, str], tmp_path: Path
) -> None:
    async with space(control_plane["KUBECONFIG"], "ctl") as s:
        await s.add_node("n1", cpu="4")
        queue = f"{s.name}-team"
        await s.create(
            QUEUES.path(),
            {
                "apiVersion": QUEUES.api_version,
                "kind": "Queue",
                "metadata": {"name": queue},
                "spec": {"guaranteed": {"cpu": "2"}},
            },
        )
        s.cluster_objects.append(QUEUES.path(name=queue))
        labels = {"shoal.dev/queue": queue}
        for i, cpu in enumerate(("1", "500m", "1500m")):
            await s.create_pod(f"p{i}", cpu, labels=labels)
        await s.create_pod("too-big", "9", labels=labels)  # never fits a 4-cpu node
        config = _config(tmp_path, s.scheduler)
        async with s.shoal(s.options("ctl")):

            async def three() -> bool:
                return len(await s.bound()) == 3

            await wait_for(three, what="three pods bound")

        pods = await s.pods()
        bound = [p for p in pods.values() if (p.get("spec") or {}).get("nodeName")]
        expected: dict[str, int] = {}
        for p in bound:
            for c in p["spec"]["containers"]:
                for resource, amount in parse_resource_list(c["resources"]["requests"]).items():
                    expected[resource] = expected.get(resource, 0) + amount

        code, out, err = await _shoal(s.kubeconfig, config, "get", "queues", "-o", "json")
        assert code == 0, err
        rows: dict[str, Any] = {q["name"]: q for q in json.loads(out)["queues"]}
        mine = rows[queue]
        assert mine["boundPods"] == len(bound) == 3  # bound; no kubelet starts them here
        assert mine["runningPods"] == 0
        assert mine["pendingPods"] == 1
        assert parse_resource_list(mine["allocated"]) == expected
        assert expected["cpu"] == 3000
        assert mine["guaranteed"] == {"cpu": "2"}

        code, out, err = await _shoal(s.kubeconfig, config, "get", "queues")
        assert code == 0, err
        assert queue in out

        code, out, _ = await _shoal(
            s.kubeconfig, config, "explain", f"{s.name}/too-big", "-o", "json"
        )
        assert code == EXIT_BLOCKED
        answer = json.loads(out)
        assert answer["queue"]["name"] == queue
        assert "Insufficient cpu" in answer["placement"]["message"]
        code, _, err = await _shoal(s.kubeconfig, config, "explain", f"{s.name}/nope")
        assert code == EXIT_NOT_FOUND and "not found" in err


def test_the_viewer_role_lets_a_user_list_what_the_commands_read_and_nothing_more(
    kubectl: Callable[..., str],
) -> None:
    role = Path(__file__).resolve().parents[2] / "deploy" / "operators" / "shoal-viewer.yaml"
    kubectl("apply", "-f", str(role))
    kubectl(
        "create",
        "clusterrolebinding",
        "ctl-test-viewer",
        "--clusterrole=shoal-viewer",
        "--user=ctl-test-viewer",
    )
    try:
        user = "--as=ctl-test-viewer"
        for resource in ("pods", "nodes", "queues.shoal.dev", "podgroups.scheduling.x-k8s.io"):
            for verb in ("list", "watch"):  # shoal get --watch
                assert kubectl("auth", "can-i", verb, resource, user).strip() == "yes", resource
        for verb, resource, subresource in (
            ("create", "pods", "binding"),
            ("patch", "queues.shoal.dev", "status"),
            ("patch", "queues.shoal.dev", ""),
        ):
            more = [f"--subresource={subresource}"] if subresource else []
            answer = kubectl("auth", "can-i", verb, resource, *more, user, check=False).strip()
            assert answer == "no", (verb, resource, subresource)
    finally:
        kubectl("delete", "clusterrolebinding", "ctl-test-viewer", check=False)
        kubectl("delete", "-f", str(role), check=False)


@async_test(timeout=120)
async def test_get_queues_watch_prints_the_changed_row_and_ends_on_ctrl_c(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "ctlw") as s:
        await s.add_node("n1", cpu="4")
        queue = f"{s.name}-team"
        await s.create(
            QUEUES.path(),
            {
                "apiVersion": QUEUES.api_version,
                "kind": "Queue",
                "metadata": {"name": queue},
                "spec": {"guaranteed": {"cpu": "1"}},
            },
        )
        s.cluster_objects.append(QUEUES.path(name=queue))
        proc = await asyncio.create_subprocess_exec(
            *SHOAL,
            "get",
            "queues",
            queue,
            "--watch",
            "--kubeconfig",
            s.kubeconfig,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        lines: list[str] = []

        async def until(*words: str) -> str:
            while True:
                raw = await asyncio.wait_for(proc.stdout.readline(), 60)  # type: ignore[union-attr]
                assert raw, f"stdout closed before {words}: {lines}"
                lines.append(raw.decode())
                if all(w in lines[-1] for w in words):
                    return lines[-1]

        try:
            first = await until(queue)
            assert "cpu=1" in first and lines[0].split()[0] == "QUEUE"
            await until("cluster capacity")
            # Another client changes the Queue: its row is printed again, no header.
            await s.client.request(
                "PATCH",
                QUEUES.path(name=queue),
                body={"spec": {"max": {"cpu": "3"}}},
                content_type=MERGE,
            )
            changed = await until(queue, "cpu=3")
            assert changed.split()[0] == queue
            assert sum(line.split()[:1] == ["QUEUE"] for line in lines) == 1
            proc.send_signal(signal.SIGINT)
            code = await asyncio.wait_for(proc.wait(), 30)
            err = (await proc.stderr.read()).decode()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert code == 0, err
        assert "Traceback" not in err and "KeyboardInterrupt" not in err


@async_test(timeout=120)
async def test_explain_without_config_agrees_with_the_running_schedulers_verdict(
    control_plane: dict[str, str],
) -> None:
    """The running scheduler's configuration (here: NodeAffinity's addedAffinity, which
    only nodes labelled tier=gold satisfy) is what `shoal explain` judges with when no
    --config is given: it reads it from the replica's member Lease."""
    from shoal.config import parse_config

    async with space(control_plane["KUBECONFIG"], "ctlcfg") as s:
        await s.add_node("plain", cpu="4")
        await s.create_pod("p", "1")
        config = parse_config(
            {
                "profiles": [
                    {
                        "schedulerName": s.scheduler,
                        "pluginConfig": [
                            {
                                "name": "NodeAffinity",
                                "args": {
                                    "addedAffinity": {
                                        "requiredDuringSchedulingIgnoredDuringExecution": {
                                            "nodeSelectorTerms": [
                                                {
                                                    "matchExpressions": [
                                                        {
                                                            "key": "tier",
                                                            "operator": "In",
                                                            "values": ["gold"],
                                                        }
                                                    ]
                                                }
                                            ]
                                        }
                                    }
                                },
                            }
                        ],
                    }
                ]
            }
        )
        async with s.shoal(s.options("ctlcfg"), config):

            async def said_unschedulable() -> bool:
                conditions = ((await s.pods())["p"].get("status") or {}).get("conditions") or []
                return any(
                    c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                    for c in conditions
                )

            await wait_for(said_unschedulable, what="the running scheduler's verdict")
            proc = await asyncio.create_subprocess_exec(
                *SHOAL,
                "explain",
                f"{s.name}/p",
                "-o",
                "json",
                "--kubeconfig",
                s.kubeconfig,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await proc.communicate()
        assert proc.returncode == EXIT_BLOCKED, err.decode()
        answer = json.loads(out)
        assert "node affinity" in answer["summary"], answer["summary"]
        assert f"Lease {s.name}/shoal-member-" in answer["configSource"]


@async_test(timeout=120)
async def test_explain_names_the_taints_the_pods_status_leaves_out(
    control_plane: dict[str, str], tmp_path: Path
) -> None:
    """The pod's status says "untolerated taint(s)" without the taint, as kube-scheduler
    >= 1.34 (a taint's key and value may be sensitive, and anyone who reads pods in the
    namespace reads it); `shoal explain`, an operator's command that reads the nodes,
    names it."""
    async with space(control_plane["KUBECONFIG"], "ctltaint") as s:
        tainted = await s.add_node("t", cpu="4")
        await s.client.request(
            "PATCH",
            NODES.path(name=tainted),
            body={"spec": {"taints": [{"key": "secret", "value": s.name, "effect": "NoSchedule"}]}},
            content_type=MERGE,
        )
        await s.create_pod("p", "1")
        config = _config(tmp_path, s.scheduler)
        said: list[str] = []
        async with s.shoal(s.options("ctltaint")):

            async def unschedulable() -> bool:
                pod = (await s.pods())["p"]
                for cond in (pod.get("status") or {}).get("conditions") or ():
                    if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                        said[:] = [str(cond.get("message") or "")]
                        return True
                return False

            await wait_for(unschedulable, what="p's PodScheduled=False")
        assert "node(s) had untolerated taint(s)" in said[0], said
        assert s.name not in said[0] and "secret" not in said[0], said

        code, out, _ = await _shoal(s.kubeconfig, config, "explain", f"{s.name}/p", "-o", "json")
        assert code == EXIT_BLOCKED
        placement = json.loads(out)["placement"]
        assert placement["untoleratedTaints"][f"secret={s.name}:NoSchedule"] == 1
        code, out, _ = await _shoal(s.kubeconfig, config, "explain", f"{s.name}/p")
        assert code == EXIT_BLOCKED
        assert f"1 node(s) with the untolerated taint secret={s.name}:NoSchedule" in out
