"""The dashboard page in headless Chromium, over `shoal simulate --serve`.

The page is plain static files whose JavaScript fetches the API and renders tables and
Chart.js charts; this test checks that what the JavaScript rendered is in the DOM
(queues, gangs, pending groups, GPU nodes) and saves a screenshot. Set
SHOAL_DASHBOARD_SCREENSHOT=docs/img/dashboard.png to refresh the one in the docs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
CHROMIUM = next(
    (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None
)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium is not installed (Debian: apt-get install chromium; .ci/run "
    "installs it)",
)


def serve(*args: str) -> tuple[subprocess.Popen[str], str]:
    """Start `shoal simulate ... --serve` on a free port; (process, dashboard URL)."""
    command = [sys.executable, "-m", "shoal.cli", "simulate", "-q", *args]
    command += ["--serve", "--serve-address", "127.0.0.1:0"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert process.stdout is not None
    deadline = time.monotonic() + 120
    output = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        output.append(line)
        found = re.search(r"Dashboard: (http://\S+/dashboard/)", line)
        if found:
            return process, found.group(1)
    process.kill()
    raise AssertionError("no dashboard address printed:\n" + "".join(output))


def stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGINT)
    try:
        return process.wait(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()


def chromium(url: str, profile: Path, *args: str) -> str:
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--window-size=1400,2100",
        # Let the page's fetches and a few polling rounds complete before the dump.
        "--virtual-time-budget=8000",
        *args,
        url,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture(scope="module")
def dashboard() -> Iterator[str]:
    process, url = serve(
        "-c",
        str(EXAMPLES / "dashboard-cluster.yaml"),
        "-w",
        str(EXAMPLES / "dashboard-workload.yaml"),
        "--until",
        "900",
    )
    try:
        yield url
    finally:
        assert stop(process) == 0


def api(url: str, path: str) -> Any:
    with urllib.request.urlopen(url.removesuffix("/dashboard/") + path, timeout=30) as response:
        return json.load(response)


def test_page_renders_queues_gangs_pending_and_gpu_nodes(dashboard: str, tmp_path: Path) -> None:
    dom = chromium(dashboard, tmp_path / "profile", "--dump-dom")
    loaded = re.search(r'<body data-loaded="(\d+)"', dom)
    assert loaded is not None and int(loaded.group(1)) >= 1, dom[:2000]
    assert "cannot refresh" not in dom
    # The simulation has ended: the page shows what the API says, frozen at t=900.
    assert "t = 900 s (simulated)" in dom
    queues = re.findall(r'data-queue="([^"]+)"', dom)
    assert queues == ["batch", "default", "org", "prod", "research"]  # parents first
    assert queues == [q["name"] for q in api(dashboard, "/dashboard/api/queues")["queues"]]
    gangs = dict(re.findall(r'data-gang="([^"]+)".*?class="phase phase-(\w+)"', dom))
    assert gangs == {g["key"]: g["phase"] for g in api(dashboard, "/dashboard/api/gangs")["items"]}
    # The gang that can never fit (40 GPUs asked, 32 exist) timed out.
    assert gangs["research/train-huge"] == "Failed"
    assert set(gangs) == {"research/train-a", "research/train-b", "research/train-huge"}
    reasons = re.findall(r'data-reason="([^"]+)"', dom)
    assert reasons == [g["reason"] for g in api(dashboard, "/dashboard/api/pending")["groups"]]
    assert "Gated by SchedulingGates" in reasons
    assert "Unschedulable: NodeAffinity, TaintToleration" in reasons
    assert 'data-pod="prod/held-0"' in dom and 'data-pod="batch/lost-0"' in dom
    assert "Insufficient nvidia.com/gpu" in dom
    nodes = re.findall(r'data-node="([^"]+)"', dom)
    assert sorted(nodes) == [f"gpu-{i}" for i in range(8)]
    assert nodes == [
        n["name"] for n in api(dashboard, "/dashboard/api/nodes")["items"]
    ]  # by fragment
    # Chart.js drew into the canvases (it sizes them itself).
    for canvas in ("queue-history", "queue-now", "pending-chart", "gpu-histogram"):
        assert re.search(rf'<canvas id="{canvas}" width="\d+" height="\d+" style=', dom), canvas


def test_screenshot(dashboard: str, tmp_path: Path) -> None:
    shot = tmp_path / "dashboard.png"
    chromium(dashboard, tmp_path / "profile", f"--screenshot={shot}")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    target = os.environ.get("SHOAL_DASHBOARD_SCREENSHOT")
    if target:
        shutil.copyfile(shot, ROOT / target)
