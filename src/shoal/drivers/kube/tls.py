"""TLS for the /metrics, /healthz and /readyz server: a given certificate, or a
self-signed one made at start, as kube-scheduler does when it is given none."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path

__all__ = ["TlsError", "server_context"]


class TlsError(RuntimeError):
    """The certificate cannot be loaded or made; the message says what to give instead."""


def server_context(cert_file: Path | None = None, key_file: Path | None = None) -> ssl.SSLContext:
    """A server-side context with `cert_file`/`key_file`, or with a fresh self-signed
    certificate for localhost and 127.0.0.1 (kept in memory only) when neither is given."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    if cert_file is not None and key_file is not None:
        try:
            context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as err:
            raise TlsError(f"cannot load {cert_file} with {key_file}: {err}") from None
        return context
    if cert_file is not None or key_file is not None:
        raise TlsError("give both --tls-cert-file and --tls-private-key-file, or neither")
    with tempfile.TemporaryDirectory(prefix="shoal-tls-") as tmp:
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        _self_signed(cert, key)
        context.load_cert_chain(cert, key)
    return context


def _self_signed(cert: Path, key: Path) -> None:
    # Python's standard library cannot make a certificate; the openssl tool can, and
    # comes with every system that has Python's ssl module built against OpenSSL.
    openssl = shutil.which("openssl")
    if openssl is None:
        raise TlsError(
            "cannot make a self-signed certificate: the openssl tool is not installed; "
            "give --tls-cert-file and --tls-private-key-file"
        )
    command = [
        openssl,
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "365",
        "-subj",
        "/CN=shoal@localhost",
        "-addext",
        "subjectAltName=DNS:localhost,IP:127.0.0.1",
        "-keyout",
        str(key),
        "-out",
        str(cert),
    ]
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        detail = getattr(err, "stderr", b"") or b""
        raise TlsError(
            f"cannot make a self-signed certificate with openssl: {err} "
            f"{detail.decode(errors='replace').strip()}; give --tls-cert-file and "
            "--tls-private-key-file"
        ) from None
