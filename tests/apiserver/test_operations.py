"""Operator operations against a real kube-apiserver, through the `shoal` command a
platform engineer types: `shoal queue close|open` (a Queue's spec.state) and `shoal
suspend|resume podgroup` (a gang evicted and held as a whole), with what `kubectl get
queue` shows; and an invalid Queue whose status says why (STATE Invalid, the message in
`-o wide`)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from apihelpers import space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import QUEUE_BINDINGS, QUEUES

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


async def shoal_cli(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`shoal ARGS --kubeconfig K` as a user runs it (a subprocess)."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "shoal.cli", *args, "--kubeconfig", kubeconfig],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def make_queue(s: Any, name: str, **spec: Any) -> None:
    body = {"apiVersion": QUEUES.api_version, "kind": "Queue", "metadata": {"name": name}}
    await s.create(QUEUES.path(), {**body, "spec": spec})
    s.cluster_objects.append(QUEUES.path(name=name))


@async_test(timeout=120)
async def test_close_and_open_a_queue_with_the_cli(
    control_plane: dict[str, str], kubectl: Callable[..., str]
) -> None:
    config = control_plane["KUBECONFIG"]
    async with space(config, "qstate") as s:
        await s.add_node("n1", cpu="8")
        queue = f"{s.name}-team"
        await make_queue(s, queue)
        await s.create(
            QUEUE_BINDINGS.path(),
            {
                "apiVersion": QUEUE_BINDINGS.api_version,
                "kind": "QueueBinding",
                "metadata": {"name": s.name},
                "spec": {"queue": queue, "namespaces": [s.name]},
            },
        )
        s.cluster_objects.append(QUEUE_BINDINGS.path(name=s.name))
        await s.create_pod("first", "1")

        async def state() -> str:
            found = await s.get(QUEUES.path(name=queue)) or {}
            return str((found.get("status") or {}).get("state", ""))

        async with s.shoal(s.options("qstate")) as shoal:
            await wait_for(lambda: _has(s, "first"), what="first bound")
            closed = await shoal_cli(config, "queue", "close", queue)
            assert closed.returncode == 0, closed.stderr
            assert closed.stdout.strip() == f"queue.shoal.dev/{queue} closed"
            # It still runs `first`: Closing, as kubectl shows it.
            await wait_for(lambda: _equals(state, "Closing"), what="queue Closing")
            row = kubectl("get", "queue", queue, "--no-headers")
            assert row.split()[1] == "Closing", row
            await s.create_pod("second", "1")

            async def held() -> bool:
                pods = await s.pods()
                if "second" not in pods:
                    return False
                uid = pods["second"]["metadata"]["uid"]
                return f"queue {queue} is closed" in shoal.kube.scheduler.explain(uid)

            await wait_for(held, what="second held by the closed queue")
            assert "second" not in await s.bound()

            opened = await shoal_cli(config, "queue", "open", queue)
            assert opened.returncode == 0, opened.stderr
            await wait_for(lambda: _has(s, "second"), what="second bound once opened")
            await wait_for(lambda: _equals(state, "Open"), what="queue Open")

        missing = await shoal_cli(config, "queue", "close", f"{s.name}-nope")
        assert missing.returncode == 3
        assert "not found" in missing.stderr


@async_test(timeout=120)
async def test_an_invalid_queue_says_why_in_kubectl(
    control_plane: dict[str, str], kubectl: Callable[..., str]
) -> None:
    async with space(control_plane["KUBECONFIG"], "qbad") as s:
        await s.add_node("n1", cpu="4")
        queue = f"{s.name}-bad"
        await make_queue(s, queue, guaranteed={"cpu": "4"}, max={"cpu": "2"})

        async def invalid() -> bool:
            found = await s.get(QUEUES.path(name=queue)) or {}
            return (found.get("status") or {}).get("state") == "Invalid"

        async with s.shoal(s.options("qbad")):
            await wait_for(invalid, what="the queue's status Invalid")
        found = await s.get(QUEUES.path(name=queue)) or {}
        accepted = next(c for c in found["status"]["conditions"] if c["type"] == "Accepted")
        assert accepted["status"] == "False" and accepted["reason"] == "Invalid"
        assert "exceeds spec.max.cpu" in accepted["message"]
        assert accepted["lastTransitionTime"]
        wide = kubectl("get", "queue", queue, "-o", "wide")
        assert "Invalid" in wide and "exceeds spec.max.cpu" in wide, wide


@async_test(timeout=150)
async def test_suspend_and_resume_a_gang_with_the_cli(control_plane: dict[str, str]) -> None:
    config = control_plane["KUBECONFIG"]
    async with space(config, "suspend") as s:
        for i in range(2):
            await s.add_node(f"n{i}", cpu="4")
        await s.add_pod_group("train", 3)
        members = [f"train-{i}" for i in range(3)]
        for name in members:
            await s.create_pod(name, "2", labels={GROUP_LABEL: "train"})

        async def bound_all() -> bool:
            return set(await s.bound()) == set(members)

        async with s.shoal(s.options("suspend")):
            await wait_for(bound_all, what="the gang bound")
            done = await shoal_cli(config, "suspend", "podgroup", "train", "-n", s.name)
            assert done.returncode == 0, done.stderr
            assert "podgroup.scheduling.x-k8s.io/train suspended" in done.stdout

            async def all_evicted() -> bool:
                return not set(await s.pods()) & set(members)

            # No controller here: evicted members are gone, all of them.
            await wait_for(all_evicted, what="every member evicted")
            for name in members:  # what the job's controller would do
                await s.create_pod(name, "2", labels={GROUP_LABEL: "train"})
            await asyncio.sleep(2)
            assert await s.bound() == {}
            resumed = await shoal_cli(config, "resume", "podgroup/train", "-n", s.name)
            assert resumed.returncode == 0, resumed.stderr
            await wait_for(bound_all, what="the gang bound again after resume")

        missing = await shoal_cli(config, "suspend", "pg", "nope", "-n", s.name)
        assert missing.returncode == 3 and "not found" in missing.stderr


async def _has(s: Any, name: str) -> bool:
    return name in await s.bound()


async def _equals(read: Callable[[], Any], want: str) -> bool:
    return bool(await read() == want)


def test_the_operator_role_lets_a_user_open_queues_and_suspend_gangs_and_nothing_more(
    kubectl: Callable[..., str],
) -> None:
    from pathlib import Path

    role = Path(__file__).resolve().parents[2] / "deploy" / "operators" / "shoal-operator.yaml"
    kubectl("apply", "-f", str(role))
    kubectl(
        "create",
        "clusterrolebinding",
        "ops-test-operator",
        "--clusterrole=shoal-operator",
        "--user=ops-test-operator",
    )
    try:
        user = "--as=ops-test-operator"
        for verb, resource in (
            ("patch", "queues.shoal.dev"),
            ("get", "podgroups.scheduling.x-k8s.io"),
            ("patch", "podgroups.scheduling.x-k8s.io"),
        ):
            assert kubectl("auth", "can-i", verb, resource, user).strip() == "yes", resource
        for verb, resource, *more in (
            ("patch", "queues.shoal.dev", "--subresource=status"),
            ("delete", "queues.shoal.dev"),
            ("create", "pods", "--subresource=eviction"),
            ("patch", "pods"),
        ):
            answer = kubectl("auth", "can-i", verb, resource, *more, user, check=False).strip()
            assert answer == "no", (verb, resource, more)
    finally:
        kubectl("delete", "clusterrolebinding", "ops-test-operator", check=False)
        kubectl("delete", "-f", str(role), check=False)


def test_kubectl_finds_shoal_as_a_plugin(control_plane: dict[str, str]) -> None:
    # `pip install shoal` puts kubectl-shoal on PATH: `kubectl shoal get queues` works.
    import os
    import shutil
    from pathlib import Path

    plugin = shutil.which("kubectl-shoal", path=str(Path(sys.executable).parent))
    assert plugin is not None, "the kubectl-shoal entry point is not installed"
    env = {
        **os.environ,
        "KUBECONFIG": control_plane["KUBECONFIG"],
        "PATH": f"{Path(plugin).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    kubectl = str(Path(control_plane["K8S_BIN_DIR"]) / "kubectl")
    listed = subprocess.run(
        [kubectl, "plugin", "list"], env=env, capture_output=True, text=True, timeout=60
    )
    assert "kubectl-shoal" in listed.stdout, listed.stdout + listed.stderr
    done = subprocess.run(
        [kubectl, "shoal", "get", "queues", "-o", "name"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "queue.shoal.dev/default" in done.stdout or "queues.shoal.dev/default" in done.stdout
