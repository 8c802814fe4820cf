"""Calling an extender over HTTPS as kube-scheduler's makeTransport would: enableHTTPS
without a CA skips verification; caFile/caData are the trusted roots; serverName is the
name checked."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal.testing import SchedulerHarness, make_node, make_pod

SERVER = Path(__file__).with_name("fake_extender.py")

pytestmark = pytest.mark.skipif(not shutil.which("openssl"), reason="needs openssl")


def _self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.pem", folder / f"{name}-key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="module")
def https(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path, Path]]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = _self_signed(folder, "server")
    other, _ = _self_signed(folder, "other")
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), str(cert), str(key)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline().split()[1])
    yield port, cert, other
    proc.terminate()
    proc.wait(timeout=5)


def place(port: int, host: str = "127.0.0.1", **settings: Any) -> tuple[str | None, str]:
    h = SchedulerHarness(
        {
            "profiles": [{"schedulerName": "default-scheduler"}],
            "extenders": [
                {"urlPrefix": f"https://{host}:{port}/ext", "filterVerb": "filter", **settings}
            ],
        }
    )
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(make_pod("a").req(cpu="1"))
    placements, messages = h.run()
    return placements["default/a"], messages.get("default/a", "")


def test_enable_https_without_a_ca_does_not_verify(https: tuple[int, Path, Path]) -> None:
    port, _, _ = https
    assert place(port, enableHTTPS=True) == ("n1", "")


def test_the_server_certificate_is_verified_against_the_ca(https: tuple[int, Path, Path]) -> None:
    port, cert, other = https
    assert place(port, tlsConfig={"caFile": str(cert)}) == ("n1", "")
    data = base64.b64encode(cert.read_bytes()).decode()
    assert place(port, enableHTTPS=True, tlsConfig={"caData": data}) == ("n1", "")
    wrong = base64.b64encode(other.read_bytes()).decode()
    node, message = place(port, enableHTTPS=True, tlsConfig={"caData": wrong})
    assert node is None
    assert "CERTIFICATE_VERIFY_FAILED" in message, message


def test_without_any_tls_settings_the_system_roots_are_used(https: tuple[int, Path, Path]) -> None:
    port, _, _ = https
    node, message = place(port)
    assert node is None and "CERTIFICATE_VERIFY_FAILED" in message


def test_server_name_is_the_name_checked(https: tuple[int, Path, Path]) -> None:
    port, cert, _ = https
    assert place(port, tlsConfig={"caFile": str(cert), "serverName": "localhost"}) == ("n1", "")
    node, message = place(port, tlsConfig={"caFile": str(cert), "serverName": "elsewhere"})
    assert node is None and "elsewhere" in message, message
