"""`shoal run` as a real process against the fake API server: killed with SIGKILL
mid-run and restarted, it loses no pod and binds none twice; it serves /metrics,
/healthz and /readyz and logs JSON lines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubehelpers import async_test, bound_pods, eventually, node, pod

from shoal.testing.fake_apiserver import FakeApiServer, Fault

SHOAL = [sys.executable, "-c", "from shoal.cli import app; app()"]


class Process:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.logs: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for line in self.proc.stderr:
            text = line.decode().strip()
            self.raw.append(text)
            with contextlib.suppress(ValueError):
                self.logs.append(json.loads(text))

    def address(self) -> str:
        for entry in self.logs:
            if "address" in entry:
                return str(entry["address"])
        return ""

    async def wait(self) -> int:
        code = await self.proc.wait()
        await self._reader
        return code


@contextlib.asynccontextmanager
async def shoal_run(*args: str) -> AsyncIterator[Process]:
    proc = await asyncio.create_subprocess_exec(
        *SHOAL, "run", *args, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL
    )
    process = Process(proc)
    try:
        yield process
    finally:
        if proc.returncode is None:
            proc.kill()
        await process.wait()


@async_test(timeout=90)
async def test_shoal_run_killed_and_restarted(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "leaderElection": {
                    "leaderElect": True,
                    "leaseDuration": "2s",
                    "renewDeadline": "1s",
                    "retryPeriod": "200ms",
                    "resourceNamespace": "kube-system",
                },
                "profiles": [{"schedulerName": "shoal"}],
            }
        )
    )
    async with FakeApiServer() as api:
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        for i in range(6):
            api.create("v1", "nodes", node(f"n{i}", cpu="4"))
        for i in range(24):
            api.create("v1", "pods", pod(f"p{i:02d}", cpu="1"))
        api.inject(Fault(method="POST", path="/binding$", status=0, delay=0.05, times=None))
        common = ["--kubeconfig", str(kubeconfig), "--config", str(config)]
        common += ["--burst", "1", "--bind-address", "127.0.0.1:0"]
        # Slow enough (4 binds/s) to be killed with most pods still pending.
        async with shoal_run(*common, "--qps", "4", "--identity", "first") as first:
            await eventually(first.address, timeout=30, what="the first process to start")
            base = f"http://{first.address()}"
            async with aiohttp.ClientSession() as http:
                await eventually(lambda: len(api.bindings) >= 6, timeout=30, what="some binds")
                async with http.get(f"{base}/healthz") as r:
                    assert r.status == 200 and await r.text() == "ok"
                async with http.get(f"{base}/readyz?verbose") as r:
                    body = await r.text()
                    assert r.status == 200 and "[+]informerSync ok" in body
                async with http.get(f"{base}/metrics") as r:
                    metrics = await r.text()
            for name in (
                "scheduler_schedule_attempts_total",
                "scheduler_scheduling_attempt_duration_seconds",
                "scheduler_pending_pods",
                "leader_election_master_status",
                "rest_client_requests_total",
                "shoal_binds_total",
                "shoal_gang_groups",
                "shoal_queue_pending_pods",
            ):
                assert name in metrics, name
            first.proc.send_signal(signal.SIGKILL)
            assert await first.wait() == -signal.SIGKILL
        killed_at = len(api.bindings)
        assert 6 <= killed_at < 24, killed_at
        assert all(e.get("level") and e.get("msg") for e in first.logs), first.raw[:5]
        assert any(e.get("msg", "").startswith("bound pod") and e.get("node") for e in first.logs)

        async with shoal_run(*common, "--qps", "0", "--identity", "second") as second:
            await eventually(lambda: len(bound_pods(api)) == 24, timeout=30, what="all bound")
            assert len(api.bindings) == 24 and len({b.uid for b in api.bindings}) == 24
            second.proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(second.wait(), 15) == 0
        lease = api.get("coordination.k8s.io", "leases", "kube-system", "shoal")
        assert lease is not None and lease["spec"]["holderIdentity"] == ""  # released
        per_node: dict[str, int] = {}
        for name in bound_pods(api).values():
            per_node[name] = per_node.get(name, 0) + 1
        assert per_node == {f"n{i}": 4 for i in range(6)}


@async_test(timeout=60)
async def test_shoal_run_reports_a_bad_configuration(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "profiles:\n- schedulerName: shoal\n  plugins: {filter: {enabled: [{name: Nope}]}}\n"
    )
    async with shoal_run(
        "--kubeconfig", str(tmp_path / "missing"), "--config", str(config)
    ) as proc:
        assert await asyncio.wait_for(proc.wait(), 30) == 2
        assert any("Nope" in line for line in proc.raw)
