"""A small typed client over kubernetes_asyncio: raw JSON in and out, rate limited.

kubernetes_asyncio gives us what is hard to get right (kubeconfig and in-cluster
loading, every auth provider: certificates, tokens, exec plugins, OIDC, token refresh;
TLS; proxies) and an aiohttp transport. Its generated models are not used: objects
travel as JSON and are decoded by Shoal's own msgspec models (`shoal.api`), which is
much faster and keeps the scheduler free of the client library. This module is the only
one that imports kubernetes_asyncio; everything above it sees `KubeClient`, `ApiError`
and plain dicts.

Each `KubeClient` has its own connection pool and its own client-side rate limiter
(client-go's token bucket: `qps` tokens per second, at most `burst` saved up), so the
scheduler's binds, the event recorder and leader election do not starve each other, as
in kube-scheduler, which uses separate clients for the three.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
import msgspec
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration

__all__ = [
    "ApiError",
    "ClientSettings",
    "Connection",
    "KubeClient",
    "RateLimiter",
    "RequestObserver",
    "TransportError",
    "connect",
]

JSON = dict[str, Any]
# The API server accepts JSON nested far deeper than Python's recursion limit lets us
# decode; such an object cannot be read at all (not even its name), so the error says
# what to look for.
_TOO_DEEP = (
    "a response of {} bytes is nested too deeply to decode (an object with JSON nested "
    "about a thousand levels or more, e.g. in annotations or spec): find and fix or delete it"
)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """The API server answered with an error status (a `Status` object)."""

    def __init__(
        self, status: int, reason: str, message: str, *, method: str = "", path: str = ""
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.method = method
        self.path = path
        where = f"{method} {path}: " if method else ""
        super().__init__(f"{where}{status} {reason}: {message}")

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def ambiguous(self) -> bool:
        """The request may or may not have taken effect: no answer (reset, timeout) or
        a server error. Only reading the object back tells."""
        return self.status == 0 or self.status >= 500

    @property
    def retryable(self) -> bool:
        """Worth another try later: throttling, server errors, timeouts, transport."""
        return self.status in (0, 429) or self.status >= 500


class TransportError(ApiError):
    """No answer: connection refused or reset, or the request timed out."""

    def __init__(self, reason: str, message: str, *, method: str = "", path: str = "") -> None:
        super().__init__(0, reason, message, method=method, path=path)


class RateLimiter:
    """client-go's token bucket: `qps` per second, bursts up to `burst`.

    Callers reserve a token and sleep until it is theirs, so waiters are served in
    arrival order and the long-run rate never exceeds `qps`. `qps <= 0` disables it.
    """

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._tokens = float(self.burst)
        self._last = clock()

    def reserve(self) -> float:
        """Take a token; return how long to wait before using it."""
        if self.qps <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def wait(self) -> float:
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)
        return delay


class RequestObserver(Protocol):
    """Told about every request (for the rest_client_* metrics)."""

    def request_done(self, client: str, method: str, code: int, seconds: float) -> None: ...

    def rate_limited(self, client: str, seconds: float) -> None: ...


@dataclass(frozen=True)
class ClientSettings:
    """Per-client connection settings (kube's clientConnection: qps, burst)."""

    qps: float = 50.0
    burst: int = 100
    timeout: float = 10.0  # seconds for one ordinary request
    user_agent: str = "shoal"


@dataclass
class Connection:
    """Where the API server is and how to authenticate: one per process."""

    configuration: Configuration
    observer: RequestObserver | None = None
    clients: list[KubeClient] = field(default_factory=list)

    @property
    def host(self) -> str:
        return str(self.configuration.host)

    def client(self, name: str, settings: ClientSettings) -> KubeClient:
        client = KubeClient(self, name, settings)
        self.clients.append(client)
        return client

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        self.clients.clear()


async def connect(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    observer: RequestObserver | None = None,
) -> Connection:
    """From a kubeconfig file, or the pod's service account when `kubeconfig` is None."""
    configuration = Configuration()
    if kubeconfig:
        await kube_config.load_kube_config(
            config_file=kubeconfig,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    else:
        kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    return Connection(configuration, observer)


_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def _skip_env_lookups(api: ApiClient) -> None:
    """kubernetes_asyncio opens its aiohttp session with trust_env=True, which makes
    aiohttp look up ~/.netrc and proxy variables in a worker thread on every request
    (two thread hops per bind). Without proxy variables there is nothing to find, so
    turn the lookups off; with them, keep aiohttp's behaviour."""
    if any(v in os.environ or v.upper() in os.environ for v in _PROXY_VARIABLES):
        return
    session = getattr(api.rest_client, "pool_manager", None)
    if isinstance(session, aiohttp.ClientSession) and hasattr(session, "_trust_env"):
        session._trust_env = False


def _status_error(code: int, body: bytes, method: str, path: str) -> ApiError:
    reason, message = "", body.decode("utf-8", "replace")[:1000]
    try:
        status = msgspec.json.decode(body)
    except msgspec.DecodeError:
        status = None
    if isinstance(status, dict):
        reason = str(status.get("reason", ""))
        message = str(status.get("message", message))
    return ApiError(code, reason or _REASONS.get(code, "Error"), message, method=method, path=path)


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class KubeClient:
    """JSON requests to the API server through one kubernetes_asyncio ApiClient."""

    def __init__(self, connection: Connection, name: str, settings: ClientSettings) -> None:
        self.name = name
        self.settings = settings
        self.limiter = RateLimiter(settings.qps, settings.burst)
        self._observer = connection.observer
        self._api = ApiClient(connection.configuration)
        self._api.user_agent = settings.user_agent
        _skip_env_lookups(self._api)
        self.host = urlsplit(connection.host).netloc

    async def close(self) -> None:
        await self._api.close()

    async def _throttle(self) -> None:
        waited = await self.limiter.wait()
        if self._observer is not None and waited > 0:
            self._observer.rate_limited(self.name, waited)

    def _observe(self, method: str, code: int, started: float) -> None:
        if self._observer is not None:
            self._observer.request_done(self.name, method, code, time.monotonic() - started)

    async def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """Issue the request; the caller owns (and must release) the response."""
        try:
            response: aiohttp.ClientResponse = await self._api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except TimeoutError:
            raise TransportError("Timeout", "request timed out", method=method, path=path) from None
        except aiohttp.ClientError as err:
            raise TransportError(
                "ConnectionError", f"{type(err).__name__}: {err}", method=method, path=path
            ) from None
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        before_send: Callable[[], None] | None = None,
    ) -> JSON:
        """One request; returns the decoded JSON body or raises ApiError. `before_send`
        runs after the rate limiter let the request go and just before it is sent: a
        check against the latest truth that may raise to withdraw it (a bind whose node
        vanished while it waited)."""
        await self._throttle()
        if before_send is not None:
            before_send()
        started = time.monotonic()
        seconds = self.settings.timeout if timeout is None else timeout
        total = aiohttp.ClientTimeout(total=seconds)
        code = 0
        try:
            response = await self._send(method, path, query, body, content_type, total)
            try:
                code = response.status
                data = await response.read()
            except TimeoutError:
                raise TransportError(
                    "Timeout", "reading the response timed out", method=method, path=path
                ) from None
            except aiohttp.ClientError as err:
                raise TransportError(
                    "ConnectionError", f"{type(err).__name__}: {err}", method=method, path=path
                ) from None
            finally:
                response.release()
        finally:
            self._observe(method, code, started)
        if not 200 <= code < 300:
            raise _status_error(code, data, method, path)
        if not data:
            return {}
        try:
            decoded = msgspec.json.decode(data)
        except msgspec.DecodeError as err:
            raise ApiError(
                code, "BadResponse", f"invalid JSON: {err}", method=method, path=path
            ) from None
        except RecursionError:
            raise ApiError(
                code, "BadResponse", _TOO_DEEP.format(len(data)), method=method, path=path
            ) from None
        return decoded if isinstance(decoded, dict) else {"value": decoded}

    @asynccontextmanager
    async def stream(
        self,
        path: str,
        query: Mapping[str, str],
        *,
        read_timeout: float,
    ) -> AsyncIterator[AsyncGenerator[JSON, None]]:
        """A watch: yields an iterator of decoded JSON lines (watch events).

        `read_timeout` bounds the silence between two lines: a dead connection is noticed
        even when no TCP reset arrives (the server sends bookmarks periodically).
        """
        await self._throttle()
        started = time.monotonic()
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.settings.timeout, sock_read=read_timeout
        )
        response = await self._send("GET", path, query, None, "application/json", timeout)
        self._observe("WATCH", response.status, started)
        try:
            if response.status != 200:
                try:
                    data = await response.read()
                except (aiohttp.ClientError, TimeoutError):
                    data = b""
                raise _status_error(response.status, data, "GET", path)
            yield self._lines(response, path)
        finally:
            response.close()

    async def _lines(
        self, response: aiohttp.ClientResponse, path: str
    ) -> AsyncGenerator[JSON, None]:
        while True:
            try:
                line = await response.content.readline()
            except TimeoutError:
                raise TransportError(
                    "Timeout", "watch stream went silent", method="WATCH", path=path
                ) from None
            except (aiohttp.ClientError, ValueError) as err:
                raise TransportError(
                    "ConnectionError",
                    f"watch stream broke: {type(err).__name__}: {err}",
                    method="WATCH",
                    path=path,
                ) from None
            if not line:
                return
            if not line.strip():
                continue
            try:
                event = msgspec.json.decode(line)
            except msgspec.DecodeError as err:
                raise TransportError(
                    "BadResponse", f"invalid watch event: {err}", method="WATCH", path=path
                ) from None
            except RecursionError:
                raise TransportError(
                    "BadResponse", _TOO_DEEP.format(len(line)), method="WATCH", path=path
                ) from None
            if isinstance(event, dict):
                yield event
