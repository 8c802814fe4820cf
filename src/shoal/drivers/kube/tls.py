"""TLS for the /metrics, /healthz and /readyz server: a given certificate, or a
self-signed one made at start, as kube-scheduler does when it is given none. And for the
admission webhooks: a generated CA and serving certificate, reloaded when renewed."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path

__all__ = [
    "WEBHOOK_NAMES",
    "ReloadingContext",
    "TlsError",
    "generate_webhook_certs",
    "server_context",
]


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


# ---- certificates for the admission webhooks ----------------------------------------------

WEBHOOK_NAMES = (
    "shoal-webhook",
    "shoal-webhook.shoal-system",
    "shoal-webhook.shoal-system.svc",
    "localhost",
)


def generate_webhook_certs(
    directory: Path, names: tuple[str, ...] = WEBHOOK_NAMES, days: int = 365
) -> bool:
    """Make a CA (`ca.crt`, `ca.key`) and a serving certificate it signs (`tls.crt`,
    `tls.key`, for DNS `names` and 127.0.0.1) in `directory`, as cert-manager's Secret
    would hold them; nothing is made when `tls.crt` and `tls.key` are already there.
    The API server is given `ca.crt` (base64) as the webhooks' caBundle. Returns
    whether the files were made."""
    cert, key = directory / "tls.crt", directory / "tls.key"
    if cert.exists() and key.exists():
        return False
    openssl = shutil.which("openssl")
    if openssl is None:
        raise TlsError(
            "cannot make the webhook certificates: the openssl tool is not installed; "
            "use cert-manager (deploy/webhook/cert-manager.yaml) or put tls.crt and tls.key "
            f"in {directory}"
        )
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key, csr = directory / "ca.crt", directory / "ca.key", directory / "tls.csr"
    sans = ",".join([*(f"DNS:{n}" for n in names), "IP:127.0.0.1"])
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    with tempfile.NamedTemporaryFile("w", suffix=".ext") as ext:
        ext.write(
            f"subjectAltName={sans}\nbasicConstraints=CA:FALSE\n"
            "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        )
        ext.flush()
        steps = [
            [openssl, "req", "-x509", *ec, "-days", str(days * 10), "-subj",
             "/CN=shoal-webhook-ca", "-keyout", str(ca_key), "-out", str(ca)],
            [openssl, "req", *ec, "-subj", f"/CN={names[0] if names else 'localhost'}",
             "-keyout", str(key), "-out", str(csr)],
            [openssl, "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-days", str(days), "-extfile", ext.name, "-out", str(cert)],
        ]  # fmt: skip
        for command in steps:
            try:
                subprocess.run(command, check=True, capture_output=True, timeout=30)
            except (OSError, subprocess.SubprocessError) as err:
                detail = getattr(err, "stderr", b"") or b""
                raise TlsError(
                    f"cannot make the webhook certificates with openssl: {err} "
                    f"{detail.decode(errors='replace').strip()}"
                ) from None
    csr.unlink(missing_ok=True)
    (directory / "ca.srl").unlink(missing_ok=True)
    for private in (key, ca_key):
        private.chmod(0o600)
    return True


class ReloadingContext:
    """A server TLS context over `tls.crt`/`tls.key` files that picks up new versions
    (cert-manager renewing the Secret, a rotated mount): `check()` reloads the chain
    when either file changed; connections made afterwards use the new certificate."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.reloads = 0
        self._stamp: tuple[float, float] = (-1.0, -1.0)
        if not self.check():
            raise TlsError(f"cannot load {cert_file} with {key_file}")

    def _mtimes(self) -> tuple[float, float]:
        return (self.cert_file.stat().st_mtime, self.key_file.stat().st_mtime)

    def check(self) -> bool:
        """Reload when the files changed; False when they cannot be read or loaded (the
        certificate in use stays)."""
        try:
            stamp = self._mtimes()
            if stamp == self._stamp:
                return True
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError):
            return False
        self._stamp = stamp
        self.reloads += 1
        return True
