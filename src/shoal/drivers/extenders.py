"""The HTTP side of the extender port: POST a verb's JSON to an extender and read back.

`http_extenders(config)` builds one `shoal.framework.extender.Extender` per entry of the
configuration's `extenders:`, each with an `HTTPTransport` set up as kube-scheduler's
makeTransport sets up its client:

* the URL is `urlPrefix` (trailing "/" trimmed) + "/" + verb, POSTed with
  `Content-Type: application/json`; anything but 200 is an error naming the verb, URL
  and code;
* `httpTimeout` (default 5 s) bounds each call: connecting, sending, and waiting for
  the answer;
* `tlsConfig`: `insecure` skips verification, `serverName` is the name checked and sent
  as SNI, `caFile`/`caData` the trusted roots, `certFile`/`keyFile` (or `certData`/
  `keyData`, which take precedence) the client certificate; with `enableHTTPS` and no
  CA, the server's certificate is not verified (kube's rule).

The standard library's http.client is used (no extra dependency), with a small pool of
kept-alive connections per extender so that binds running on worker threads
(`offload=True`, the Kubernetes backend) never share a connection with the scheduling
cycle's calls. In the simulator calls are made inline: the cycle waits, as
kube-scheduler's does.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from shoal.config.load import extender_timeout
from shoal.config.types import Extender as ExtenderConfig
from shoal.config.types import KubeSchedulerConfiguration
from shoal.framework.extender import Extender, ExtenderError

__all__ = ["ExtenderSetupError", "HTTPTransport", "http_extenders", "tls_context"]

_POOL_SIZE = 4


def tls_context(config: ExtenderConfig) -> ssl.SSLContext:
    """The TLS settings kube-scheduler's makeTransport derives from the config."""
    tls = config.tls_config
    has_ca = tls is not None and bool(tls.ca_file or tls.ca_data)
    insecure = (tls is not None and tls.insecure) or (config.enable_https and not has_ca)
    context = ssl.create_default_context()
    if tls is not None and tls.ca_data:
        context.load_verify_locations(cadata=base64.b64decode(tls.ca_data).decode())
    elif tls is not None and tls.ca_file:
        context.load_verify_locations(cafile=tls.ca_file)
    if tls is not None and (tls.cert_data or tls.cert_file):
        _load_client_cert(context, config)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _load_client_cert(context: ssl.SSLContext, config: ExtenderConfig) -> None:
    tls = config.tls_config
    assert tls is not None
    if not tls.cert_data and not tls.key_data:
        context.load_cert_chain(tls.cert_file, tls.key_file or None)
        return
    # ssl reads certificates only from files: the *Data fields go through private
    # temporary files that are removed at once.
    paths: list[str] = []
    try:
        for data, path in ((tls.cert_data, tls.cert_file), (tls.key_data, tls.key_file)):
            if data:
                fd, name = tempfile.mkstemp(prefix="shoal-extender-", suffix=".pem")
                with os.fdopen(fd, "wb") as out:
                    out.write(base64.b64decode(data))
                paths.append(name)
            else:
                paths.append(path)
        context.load_cert_chain(paths[0], paths[1] or None)
    finally:
        for data, name in zip((tls.cert_data, tls.key_data), paths, strict=False):
            if data:
                os.unlink(name)


class HTTPTransport:
    """POSTs verbs to one extender (see the module docstring)."""

    def __init__(self, config: ExtenderConfig, *, offload: bool = False) -> None:
        self.config = config
        self.prefix = config.url_prefix.rstrip("/")
        url = urlsplit(self.prefix)
        self.https = url.scheme == "https"
        self.host = url.hostname or "localhost"
        self.port = url.port or (443 if self.https else 80)
        self.path = url.path
        self.timeout = extender_timeout(config)
        self.offload = offload
        self._context = tls_context(config) if self.https else None
        self._server_name = (
            config.tls_config.server_name if config.tls_config is not None else ""
        ) or None
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connect(self) -> http.client.HTTPConnection:
        if self.https:
            assert self._context is not None
            conn: http.client.HTTPConnection = _TLSConnection(
                self.host, self.port, self.timeout, self._context, self._server_name
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return conn

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._connect(), False

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < _POOL_SIZE:
                self._idle.append(conn)
                return
        conn.close()

    def send(self, verb: str, body: bytes) -> bytes:
        url = f"{self.prefix}/{verb}"
        deadline = time.monotonic() + self.timeout
        conn, reused = self._take()
        try:
            try:
                return self._exchange(conn, verb, url, body, deadline)
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                if not reused:
                    raise
                # The server closed a kept-alive connection meanwhile: one fresh try.
                conn.close()
                conn = self._connect()
                return self._exchange(conn, verb, url, body, deadline)
        except ExtenderError:
            conn.close()
            raise
        except TimeoutError:
            conn.close()
            raise ExtenderError(
                f"{verb} with extender at URL {url}: no answer within the httpTimeout of "
                f"{self.timeout:g}s"
            ) from None
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            raise ExtenderError(f"{verb} with extender at URL {url}: {err}") from None

    def _exchange(
        self,
        conn: http.client.HTTPConnection,
        verb: str,
        url: str,
        body: bytes,
        deadline: float,
    ) -> bytes:
        conn.timeout = max(deadline - time.monotonic(), 0.001)
        if conn.sock is None:
            conn.connect()
            # One request is one write, but the extender's answer is awaited at once:
            # never let Nagle's algorithm hold a segment back.
            sock: socket.socket = conn.sock  # type: ignore[assignment]
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if conn.sock is not None:
            conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        conn.request(
            "POST",
            f"{self.path}/{verb}",
            body=body,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        if conn.sock is not None:
            conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise ExtenderError(f"failed {verb} with extender at URL {url}, code {response.status}")
        if response.will_close:
            conn.close()
        else:
            self._give_back(conn)
        return data

    async def send_async(self, verb: str, body: bytes) -> bytes:
        if self.offload:
            return await asyncio.to_thread(self.send, verb, body)
        return self.send(verb, body)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _TLSConnection(http.client.HTTPSConnection):
    """HTTPSConnection checking `server_name` (tlsConfig.serverName) instead of the
    URL's host when one is given."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout: float,
        context: ssl.SSLContext,
        server_name: str | None,
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._server_name = server_name

    def connect(self) -> None:
        if self._server_name is None:
            super().connect()
            return
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(  # type: ignore[attr-defined]
            self.sock, server_hostname=self._server_name
        )


class ExtenderSetupError(ValueError):
    """An extender's TLS settings cannot be used here (a file that cannot be read, data
    that is no certificate); the message names the entry and the field."""


def _tls_field(err: BaseException, tls: object) -> str:
    """Which tlsConfig field an error of building the TLS context is about: a configured
    file that cannot be read, else the *Data fields."""
    for name, field in (("ca_file", "caFile"), ("cert_file", "certFile"), ("key_file", "keyFile")):
        path = getattr(tls, name, "")
        if path and not os.access(path, os.R_OK):
            return f"{field} {path!r}"
    return "caData/certData/keyData" if not isinstance(err, OSError) else "files"


def http_extenders(
    config: KubeSchedulerConfiguration | Sequence[ExtenderConfig], *, offload: bool = False
) -> list[Extender]:
    """One Extender per configured entry, in the configured order. `offload`: run binds
    on worker threads (a cluster's binding cycles are concurrent asyncio tasks). TLS
    files are read here, where the scheduler runs: one that cannot be read (or data that
    is no certificate) raises `ExtenderSetupError` naming the entry and the field."""
    entries = config.extenders if isinstance(config, KubeSchedulerConfiguration) else config
    out: list[Extender] = []
    for i, entry in enumerate(entries):
        try:
            transport = HTTPTransport(entry, offload=offload)
        except (OSError, ssl.SSLError) as err:
            field = _tls_field(err, entry.tls_config)
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            raise ExtenderSetupError(
                f"extenders[{i}] ({entry.url_prefix}): tlsConfig.{field} cannot be used: {why}"
            ) from None
        out.append(Extender(entry, transport))
    return out
