"""`shoal run` as a real process against the fake API server: killed with SIGKILL
mid-run and restarted, it loses no pod and binds none twice; it serves /metrics,
/healthz and /readyz and logs JSON lines; it takes kube-scheduler's flags, and refuses
what `shoal validate-config` refuses."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import typer
import yaml
from kubehelpers import async_test, bound_pods, eventually, node, pod
from typer.testing import CliRunner

from shoal.commands.run import Serving, normalize_flags, serving
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


# ---- kube-scheduler's flags and configuration checks -----------------------------------


@pytest.fixture
def cli() -> Iterator[CliRunner]:
    # `shoal run` points the root logger at the runner's stderr; put it back afterwards.
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield CliRunner()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_kube_scheduler_boolean_and_verbosity_spellings_are_normalized() -> None:
    assert normalize_flags(
        ["--leader-elect=false", "--leader-elect=true", "--profiling=0", "-v=4", "--v=2"]
    ) == ["--no-leader-elect", "--leader-elect", "--no-profiling", "-v", "4", "--v=2"]
    # Not a boolean value: left for click to report; nothing after "--" is touched.
    assert normalize_flags(["--leader-elect=maybe", "--", "-v=1"]) == [
        "--leader-elect=maybe",
        "--",
        "-v=1",
    ]


def test_serving_addresses() -> None:
    # Loopback unless asked otherwise (the deploy manifests bind 0.0.0.0 explicitly).
    assert serving(None, None) == Serving("127.0.0.1", 10251, tls=False)
    assert serving("127.0.0.1:0", None) == Serving("127.0.0.1", 0, tls=False)
    assert serving("", None) is None
    # kube-scheduler's form: an IP, HTTPS on --secure-port (10259 by default, 0: off).
    assert serving("127.0.0.1", None) == Serving("127.0.0.1", 10259, tls=True)
    assert serving("::1", 8443) == Serving("::1", 8443, tls=True)
    assert serving(None, 8443) == Serving("127.0.0.1", 8443, tls=True)
    assert serving("0.0.0.0", 0) is None
    # A certificate makes Shoal's form HTTPS too.
    assert serving("127.0.0.1:9000", None, tls_files=True) == Serving("127.0.0.1", 9000, True)
    with pytest.raises(typer.BadParameter, match="give --bind-address as an IP"):
        serving("127.0.0.1:9000", 8443)
    with pytest.raises(typer.BadParameter, match="neither HOST:PORT nor an IP"):
        serving("localhost", None)


@pytest.mark.parametrize(
    ("config", "flags", "expected"),
    [
        (
            "clientConnection: {qps: abc}\n",
            [],
            "clientConnection.qps: 'abc' is not a number",
        ),
        (
            "leaderElection: {leaseDuration: abc}\n",
            [],
            "leaderElection.leaseDuration: 'abc' is not a duration",
        ),
        (
            "leaderElection: {leaseDuration: 10s, renewDeadline: 10s}\n",
            [],
            "leaderElection.leaseDuration: must be greater than renewDeadline (10s <= 10s)",
        ),
        (
            # The flag overrides the file, then the result is checked, as in kube-scheduler.
            "leaderElection: {leaseDuration: 15s}\n",
            ["--leader-elect-renew-deadline", "20s"],
            "leaderElection.leaseDuration: must be greater than renewDeadline (15s <= 20s)",
        ),
    ],
)
def test_run_refuses_what_validate_config_refuses(
    cli: CliRunner, tmp_path: Path, config: str, flags: list[str], expected: str
) -> None:
    from shoal.cli import app

    path = tmp_path / "config.yaml"
    path.write_text(config + "profiles: [{schedulerName: shoal}]\n")
    kubeconfig = str(tmp_path / "missing")
    result = cli.invoke(app, ["run", "--kubeconfig", kubeconfig, "--config", str(path), *flags])
    assert result.exit_code == 2, result.output
    assert expected in result.output
    if not flags:
        checked = cli.invoke(app, ["validate-config", str(path)])
        assert checked.exit_code == 1 and expected in checked.output


def test_a_bad_duration_flag_is_named(cli: CliRunner, tmp_path: Path) -> None:
    from shoal.cli import app

    result = cli.invoke(app, ["run", "--leader-elect-lease-duration", "abc"])
    assert result.exit_code == 2
    assert "--leader-elect-lease-duration" in result.output
    assert "'abc' is not a duration" in result.output
    result = cli.invoke(app, ["run", "--leader-elect-resource-lock", "endpoints"])
    assert result.exit_code == 2 and "only 'leases'" in result.output


def test_validate_config_prints_warnings_and_exits_0(cli: CliRunner, tmp_path: Path) -> None:
    from shoal.cli import app

    path = tmp_path / "stock.yaml"
    path.write_text(
        "profiles:\n- schedulerName: shoal\n  plugins:\n"
        "    multiPoint: {disabled: [{name: EBSLimits}]}\n"
        "  pluginConfig:\n  - {name: VolumeBinding, args: {shape: []}}\n"
    )
    result = cli.invoke(app, ["validate-config", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"{path}: 2 warning(s):",
        "  - profiles[0].plugins.multiPoint.disabled[0].name: EBSLimits is not in Shoal "
        "(NodeVolumeLimits replaced it); disabling it in profile 'shoal' changes nothing",
        "  - profiles[0].pluginConfig[0].args: VolumeBinding's shape is not used: Shoal does "
        "not score nodes by storage capacity",
        "OK: 1 profile(s): shoal",
    ]


def test_simulate_prints_warnings_and_serves_shoal_pods_by_default(
    cli: CliRunner, tmp_path: Path
) -> None:
    from shoal.cli import app

    named = pod("named", cpu="1", scheduler="shoal")
    unnamed = pod("unnamed", cpu="1")
    del unnamed["spec"]["schedulerName"]
    workload = tmp_path / "w.yaml"
    workload.write_text(yaml.safe_dump_all([node("n1"), named, unnamed]))
    out = tmp_path / "r.jsonl"
    # Without --config: run's profile 'shoal', and pods that name no scheduler.
    result = cli.invoke(app, ["simulate", "-w", str(workload), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    records = {r["pod"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert {name: r["node"] for name, r in records.items()} == {"named": "n1", "unnamed": "n1"}
    config = tmp_path / "c.yaml"
    unused = "profiles: [{pluginConfig: [{name: VolumeBinding, args: {shape: []}}]}]\n"
    config.write_text(unused)
    result = cli.invoke(app, ["simulate", "--config", str(config), "-w", str(workload), "-q"])
    assert result.exit_code == 0, result.output
    assert f"{config}: 2 warning(s):" in result.output
    assert "VolumeBinding's shape is not used" in result.output
    assert "'default-scheduler' is the stock kube-scheduler's name" in result.output


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@async_test(timeout=90)
async def test_shoal_run_takes_kube_scheduler_flags(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "leaderElection": {
                    "leaderElect": False,
                    "resourceName": "from-file",
                    "leaseDuration": "2s",
                    "renewDeadline": "1s",
                    "retryPeriod": "200ms",
                },
                "profiles": [
                    {
                        "schedulerName": "shoal",
                        "pluginConfig": [{"name": "VolumeBinding", "args": {"shape": []}}],
                    }
                ],
            }
        )
    )
    port = free_port()
    async with FakeApiServer() as api:
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        api.create("v1", "nodes", node("n1", cpu="4"))
        for i in range(3):
            api.create("v1", "pods", pod(f"p{i}", cpu="1"))
        args = ["--kubeconfig", str(kubeconfig), "--config", str(config)]
        # Flags override the file: leader election on, under the flag's lease name.
        args += ["--leader-elect=true", "--leader-elect-resource-name=from-flag"]
        args += ["--leader-elect-resource-namespace", "kube-system"]
        args += ["--kube-api-qps", "0", "--kube-api-burst", "5", "--v=4"]
        args += ["--bind-address", "127.0.0.1", "--secure-port", str(port)]
        # Delegated authentication (TokenReviews through this kubeconfig); probes are
        # always allowed. Front-proxy authentication is accepted and ignored.
        args += ["--authentication-kubeconfig", str(kubeconfig)]
        args += ["--requestheader-client-ca-file", "/etc/kubernetes/front-proxy-ca.crt"]
        async with shoal_run(*args) as proc:
            await eventually(lambda: len(bound_pods(api)) == 3, timeout=30, what="all bound")
            async with aiohttp.ClientSession() as http:
                url = f"https://127.0.0.1:{port}/healthz"
                async with http.get(url, ssl=False) as r:
                    assert r.status == 200 and await r.text() == "ok"
            proc.proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 15) == 0
        assert api.get("coordination.k8s.io", "leases", "kube-system", "from-flag") is not None
        assert api.get("coordination.k8s.io", "leases", "kube-system", "from-file") is None
    warnings = [e for e in proc.logs if e.get("level") == "warning"]
    assert any(
        e.get("field") == "profiles[0].pluginConfig[0].args"
        and "VolumeBinding's shape is not used" in e["msg"]
        for e in warnings
    ), proc.raw[:10]
    assert any(e.get("flag") == "--requestheader-client-ca-file" for e in warnings)
    assert not any(e.get("flag") == "--authentication-kubeconfig" for e in warnings)
    assert any(e.get("scheme") == "https" for e in proc.logs)
    assert any(e.get("level") == "debug" for e in proc.logs)  # --v=4


def test_authentication_needs_the_https_port(tmp_path: Path) -> None:
    """Tokens and client certificates must not cross the network in clear text: the
    auth flags with the plain-HTTP port are a usage error naming what to do."""
    from typer.testing import CliRunner

    from shoal.cli import app

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    result = CliRunner().invoke(
        app,
        [
            *("run", "--kubeconfig", str(kubeconfig), "--bind-address", "127.0.0.1:0"),
            *("--authorization-kubeconfig", str(kubeconfig)),
        ],
    )
    assert result.exit_code == 2
    assert "need the HTTPS port" in result.output and "--secure-port" in result.output


def test_tls_certificate_given_or_made(tmp_path: Path) -> None:
    from shoal.drivers.kube.tls import TlsError, _self_signed, server_context

    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    _self_signed(cert, key)
    assert server_context(cert, key) is not None
    assert server_context() is not None  # self-signed, made in memory
    with pytest.raises(TlsError, match="give both --tls-cert-file and --tls-private-key-file"):
        server_context(cert, None)
    with pytest.raises(TlsError, match="cannot load"):
        server_context(key, cert)
