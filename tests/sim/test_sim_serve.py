"""`shoal simulate --serve`: the dashboard over a simulation, after it or while it runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from shoal.cli import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
INPUTS = [
    "-c",
    str(EXAMPLES / "dashboard-cluster.yaml"),
    "-w",
    str(EXAMPLES / "dashboard-workload.yaml"),
]


def get(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=10) as response:
        return json.load(response)


def start(*args: str) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "shoal.cli", "simulate", "-q", *args]
    command += ["--serve", "--serve-address", "127.0.0.1:0"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("Dashboard: "):
            url = line.split()[1].removesuffix(";")
            return process, url.removesuffix("/dashboard/")
    process.kill()
    raise AssertionError("".join(lines))


def test_serves_while_simulating_then_after_the_end_until_ctrl_c() -> None:
    # 600 simulated seconds at 120x: about 5 s of wall time, long enough that a loaded
    # machine (CI with other jobs) still catches the run before its end (at 300x, 2 s,
    # it once did not).
    process, base = start(*INPUTS, "--until", "600", "--serve-speed", "120")
    assert process.stdout is not None
    try:
        first = get(base, "/dashboard/api/summary")
        assert first["clock"] == "virtual" and first["time"] < 600
        seen = [first["time"]]
        deadline = time.monotonic() + 60
        while seen[-1] < 600 and time.monotonic() < deadline:
            time.sleep(0.2)
            seen.append(get(base, "/dashboard/api/summary")["time"])
        assert seen[-1] == 600.0
        assert len(set(seen)) > 2  # it was seen moving
        # The last history sample is taken just after the clock reaches the end: the
        # summary can show 600 a moment before the history does.
        history = get(base, "/dashboard/api/queues/history")
        while history["times"][-1] < 600 and time.monotonic() < deadline:
            time.sleep(0.1)
            history = get(base, "/dashboard/api/queues/history")
        assert history["times"][-1] == 600.0 and history["interval"] == 60.0
        # Sampled on the virtual clock: at least one sample per simulated minute.
        assert len(history["times"]) >= 600 // 60
        assert history["queues"]["batch"]["allocated"][-1] > 0
    finally:
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    assert "Simulation summary" in out and "reached --until" in out
    try:
        get(base, "/dashboard/api/summary")
        raise AssertionError("still serving after Ctrl-C")
    except urllib.error.URLError:
        pass


def test_ctrl_c_during_a_live_run_reports_what_was_simulated() -> None:
    process, base = start(*INPUTS, "--until", "3600", "--serve-speed", "10")
    assert get(base, "/dashboard/api/summary")["time"] < 3600
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    assert "Simulation summary" in out and "interrupted" in out


def test_serve_options_are_checked() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["simulate", "-q", "--serve-speed", "2"])
    assert result.exit_code == 2 and "--serve-speed needs --serve" in result.output
    result = runner.invoke(app, ["simulate", "-q", "--serve", "--serve-address", "localhost"])
    assert result.exit_code == 2 and "'localhost' is not HOST:PORT" in result.output
    result = runner.invoke(app, ["simulate", "-q", "--serve", "--serve-speed", "0"])
    assert result.exit_code == 2 and "--serve-speed must be > 0" in result.output
