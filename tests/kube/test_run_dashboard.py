"""`shoal run` serves the dashboard beside /metrics (a real process, the fake API server)."""

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
from kubehelpers import SCHEDULER, async_test, bound_pods, eventually, node, pod

from shoal.testing.fake_apiserver import FakeApiServer

SHOAL = [sys.executable, "-c", "from shoal.cli import app; app()"]


@contextlib.asynccontextmanager
async def shoal_run(*args: str) -> AsyncIterator[list[dict[str, Any]]]:
    """`shoal run ARGS`; yields its JSON log lines as they come."""
    proc = await asyncio.create_subprocess_exec(
        *SHOAL, "run", *args, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL
    )
    logs: list[dict[str, Any]] = []

    async def read() -> None:
        assert proc.stderr is not None
        async for line in proc.stderr:
            with contextlib.suppress(ValueError):
                logs.append(json.loads(line))

    reader = asyncio.create_task(read())
    try:
        yield logs
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
        await reader


def address(logs: list[dict[str, Any]]) -> str:
    return next((str(e["address"]) for e in logs if "address" in e), "")


@async_test(timeout=90)
async def test_shoal_run_serves_the_dashboard_and_its_read_only_api(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        for i in range(3):
            api.create("v1", "nodes", node(f"n{i}", cpu="4"))
        for i in range(4):
            api.create("v1", "pods", pod(f"p{i}", cpu="1"))
        api.create("v1", "pods", pod("lost", cpu="1", node_selector={"zone": "mars"}))
        args = ["--kubeconfig", str(kubeconfig), "--bind-address", "127.0.0.1:0"]
        args += ["--leader-elect=false"]
        async with shoal_run(*args) as logs, aiohttp.ClientSession() as http:
            await eventually(lambda: address(logs) != "", timeout=30, what="serving")
            assert any(
                "(and the dashboard: /dashboard/, /dashboard/api)" in e.get("msg", "") for e in logs
            )
            await eventually(lambda: len(bound_pods(api)) == 4, timeout=30, what="4 binds")
            base = f"http://{address(logs)}"

            async def get(path: str) -> Any:
                async with http.get(base + path) as response:
                    assert response.status == 200, path
                    return await response.json()

            async def explained() -> bool:
                pending = await get("/dashboard/api/pending")
                return any(g["plugins"] == ["NodeAffinity"] for g in pending["groups"])

            deadline = asyncio.get_running_loop().time() + 30
            while not await explained():
                assert asyncio.get_running_loop().time() < deadline, "lost is never explained"
                await asyncio.sleep(0.5)
            summary = await get("/dashboard/api/summary")
            assert summary["clock"] == "wall" and summary["nodes"] == 3
            assert summary["profiles"] == [SCHEDULER] and summary["placedPods"] == 4
            pending = await get("/dashboard/api/pending")
            (group,) = pending["groups"]
            assert group["examples"][0]["pod"] == "default/lost"
            assert "didn't match Pod's node affinity/selector" in group["topMessage"]
            history = await get("/dashboard/api/queues/history")
            assert history["interval"] == 10.0 and len(history["times"]) >= 1
            assert "default" in history["queues"]
            async with http.get(base + "/dashboard/") as response:
                assert response.status == 200 and "Shoal dashboard" in await response.text()
            async with http.get(base + "/metrics") as response:
                assert response.status == 200
            for method in ("POST", "PUT", "DELETE"):
                async with http.request(method, base + "/dashboard/api/pending") as response:
                    assert response.status == 405, method

        async with shoal_run(*args, "--no-dashboard") as logs, aiohttp.ClientSession() as http:
            await eventually(lambda: address(logs) != "", timeout=30, what="serving")
            async with http.get(f"http://{address(logs)}/dashboard/api/summary") as response:
                assert response.status == 404
            async with http.get(f"http://{address(logs)}/healthz") as response:
                assert response.status == 200
