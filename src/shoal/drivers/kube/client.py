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
import json
import os
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
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
    "Page",
    "RateLimiter",
    "RequestObserver",
    "TransportError",
    "Undecodable",
    "WatchStalled",
    "connect",
    "decode_event",
    "decode_page",
]

JSON = dict[str, Any]
# The API server accepts JSON nested far deeper than Python's recursion limit lets us
# decode (kube allows 10000 levels); the error says what to look for.
_TOO_DEEP = (
    "a response of {} bytes is nested too deeply to decode (an object with JSON nested "
    "about a thousand levels or more, e.g. in annotations or spec): find and fix or delete it"
)
_ITEM_TOO_DEEP = (
    "nested too deeply to decode (JSON nested about a thousand levels or more, e.g. in "
    "annotations or spec); the object is skipped until it is fixed or deleted"
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


class WatchStalled(TransportError):
    """No line (event or bookmark) on a watch within its progress deadline: the
    connection may be half-open, or the watch merely idle (bookmarks come about once a
    minute); either way it is dropped and started again from the last resourceVersion."""


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


class ConnectionConfigError(Exception):
    """Where the API server is, and how to log in, is not known."""


async def connect(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    observer: RequestObserver | None = None,
) -> Connection:
    """From a kubeconfig file; when `kubeconfig` is None, the pod's service account in
    a pod, else ~/.kube/config (as kubectl). ConnectionConfigError says what to give
    when there is neither."""
    configuration = Configuration()
    in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if not kubeconfig and not in_pod:
        default = Path.home() / ".kube" / "config"
        if not default.is_file():
            raise ConnectionConfigError(
                "no kubeconfig: give --kubeconfig FILE or set KUBECONFIG (outside a pod "
                f"there is no service account, and {default} does not exist)"
            )
        kubeconfig = str(default)
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


# ---- decoding lists and watch events object by object ---------------------------------


@dataclass(frozen=True)
class Undecodable:
    """An object in a list page or a watch event that could not be decoded (JSON nested
    too deeply for the decoder, or invalid), while the rest of the response could.

    `metadata` holds what a shallow read recovered of its `metadata` (name, namespace,
    uid, resourceVersion, as strings; empty when even that could not be found), so the
    object can be reported by name and a watch can resume after it."""

    metadata: JSON
    error: str
    event: str = ""  # the watch event's type (ADDED, MODIFIED, DELETED); "" in a list


@dataclass
class Page:
    """One page of a list: its metadata (resourceVersion, continue), the decoded items and
    the items that could not be decoded."""

    metadata: JSON
    items: list[JSON]
    undecodable: list[Undecodable] = field(default_factory=list)


# The slow path, for a response that cannot be decoded whole: walk its outer levels with
# the stdlib decoder's raw_decode (which decodes one value and says where it ends), and
# step over a value that cannot be decoded with a loop over its strings and brackets.
_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]', re.DOTALL)
_META_FIELDS = ("name", "namespace", "uid", "resourceVersion")


def _space(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return pos if match is None else match.end()


def _skip(text: str, pos: int) -> int:
    """Where the JSON value at `pos` ends, found without decoding it (at any depth)."""
    depth = 0
    for match in _TOKEN.finditer(text, pos):
        char = text[match.start()]
        if char == '"':
            if depth == 0:
                return match.end()
        elif char in "{[":
            depth += 1
        elif char in "}]":
            if depth == 0:
                return match.start()  # a number or literal, ended by its container
            depth -= 1
            if depth == 0:
                return match.end()
        elif depth == 0:
            return match.start()  # a number or literal, ended by a comma
    raise ValueError("unterminated JSON value")


def _read(text: str, pos: int) -> tuple[Any, int, str]:
    """(value, end, "") or (None, end, why it cannot be decoded)."""
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except RecursionError:
        return None, _skip(text, pos), _ITEM_TOO_DEEP
    except ValueError as err:
        return None, _skip(text, pos), f"invalid JSON: {err}"
    return value, end, ""


def _walk(text: str, pos: int, on_value: Callable[[str, int], int]) -> int:
    """Walk the object or array at `pos`: `on_value(key, start)` (key "" in an array)
    returns where each value ends. Returns where the container ends."""
    pos = _space(text, pos)
    opener = text[pos : pos + 1]
    if opener not in ("{", "["):
        raise ValueError(f"expected an object or an array at {pos}")
    close = "}" if opener == "{" else "]"
    pos = _space(text, pos + 1)
    if text.startswith(close, pos):
        return pos + 1
    while True:
        key = ""
        if opener == "{":
            name, pos = _DECODER.raw_decode(text, pos)
            if not isinstance(name, str):
                raise ValueError(f"expected a key at {pos}")
            key = name
            pos = _space(text, pos)
            if not text.startswith(":", pos):
                raise ValueError(f"expected ':' at {pos}")
            pos = _space(text, pos + 1)
        pos = _space(text, on_value(key, pos))
        if text.startswith(",", pos):
            pos = _space(text, pos + 1)
        elif text.startswith(close, pos):
            return pos + 1
        else:
            raise ValueError(f"expected ',' or {close!r} at {pos}")


def _shallow_metadata(text: str, pos: int) -> JSON:
    """name, namespace, uid and resourceVersion of the object at `pos`, read without
    decoding the rest of it ({} when they cannot be found)."""
    meta: JSON = {}

    def field_(key: str, start: int) -> int:
        if key in _META_FIELDS and text.startswith('"', start):
            value, end = _DECODER.raw_decode(text, start)
            meta[key] = value
            return int(end)
        return _skip(text, start)

    def member(key: str, start: int) -> int:
        if key == "metadata" and text.startswith("{", start):
            return _walk(text, start, field_)
        return _skip(text, start)

    with suppress(ValueError, RecursionError):
        _walk(text, pos, member)
    return meta


def decode_page(data: bytes) -> Page:
    """A list response. When it cannot be decoded whole (an object nested too deeply,
    invalid JSON), it is taken apart item by item: the items that decode are returned,
    the others are named in `undecodable`. Raises ValueError when not even that is
    possible."""
    try:
        decoded = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        decoded = None
    if decoded is not None:
        if not isinstance(decoded, dict):
            raise ValueError(f"a list response is not an object: {type(decoded).__name__}")
        items = decoded.get("items") or []
        return Page(decoded.get("metadata") or {}, [i for i in items if isinstance(i, dict)])
    text = data.decode("utf-8")
    page = Page({}, [])

    def item(key: str, start: int) -> int:
        value, end, error = _read(text, start)
        if error:
            page.undecodable.append(Undecodable(_shallow_metadata(text, start), error))
        elif isinstance(value, dict):
            page.items.append(value)
        return end

    def member(key: str, start: int) -> int:
        if key == "items" and text.startswith("[", start):
            return _walk(text, start, item)
        value, end, error = _read(text, start)
        if key == "metadata":
            if error or not isinstance(value, dict):
                raise ValueError(f"the list's metadata cannot be read: {error}")
            page.metadata = value
        return end

    _walk(text, 0, member)
    return page


def decode_event(line: bytes) -> JSON | Undecodable:
    """A watch event (one line). When it cannot be decoded whole because of its object,
    the event's type and the object's name are read shallowly and an `Undecodable` is
    returned. Raises ValueError when not even that is possible."""
    try:
        decoded = msgspec.json.decode(line)
    except (msgspec.DecodeError, RecursionError):
        decoded = None
    if decoded is not None:
        if not isinstance(decoded, dict):
            raise ValueError(f"a watch event is not an object: {type(decoded).__name__}")
        return decoded
    text = line.decode("utf-8")
    event: JSON = {}
    found: list[Undecodable] = []

    def member(key: str, start: int) -> int:
        value, end, error = _read(text, start)
        if not error:
            event[key] = value
        elif key == "object":
            found.append(Undecodable(_shallow_metadata(text, start), error))
        else:
            raise ValueError(f"the watch event's {key!r} cannot be read: {error}")
        return end

    _walk(text, 0, member)
    if found:
        return Undecodable(found[0].metadata, found[0].error, str(event.get("type", "")))
    if "object" not in event:
        raise ValueError("a watch event without an object")
    return event  # within reach of the stdlib decoder, if not of msgspec


class KubeClient:
    """JSON requests to the API server through one kubernetes_asyncio ApiClient."""

    def __init__(self, connection: Connection, name: str, settings: ClientSettings) -> None:
        self.name = name
        self.closed = False  # set by `close`: writes still in flight fail quietly
        self.settings = settings
        self.limiter = RateLimiter(settings.qps, settings.burst)
        self._observer = connection.observer
        self._configuration = connection.configuration
        self._api = self._api_client()
        self._watches: ApiClient | None = None  # opened with the first watch
        self.host = urlsplit(connection.host).netloc

    def _api_client(self) -> ApiClient:
        api = ApiClient(self._configuration)
        api.user_agent = self.settings.user_agent
        _skip_env_lookups(api)
        return api

    def _watch_api(self) -> ApiClient:
        """The ApiClient for watches: a connection per watch, never taken from (or given
        back to) a pool. After a watch went silent, the pool's idle connections may be
        as dead as its was (a half-open path); a new connection is not."""
        if self._watches is None:
            self._watches = self._api_client()
            session = getattr(self._watches.rest_client, "pool_manager", None)
            if isinstance(session, aiohttp.ClientSession):
                connector = session.connector
                if connector is not None and hasattr(connector, "_force_close"):
                    connector._force_close = True
        return self._watches

    async def close(self) -> None:
        self.closed = True
        await self._api.close()
        if self._watches is not None:
            await self._watches.close()
            self._watches = None

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
        api: ApiClient | None = None,
    ) -> aiohttp.ClientResponse:
        """Issue the request; the caller owns (and must release) the response."""
        try:
            response: aiohttp.ClientResponse = await (api or self._api).call_api(
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

    async def _fetch(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        timeout: float | None,
        before_send: Callable[[], None] | None = None,
    ) -> tuple[int, bytes]:
        """One request: the status code and the body of a 2xx answer, or ApiError.
        `before_send` runs after the rate limiter let the request go and just before it
        is sent: a check against the latest truth that may raise to withdraw it (a bind
        whose node vanished while it waited)."""
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
        return code, data

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
        """One request; returns the decoded JSON body or raises ApiError (see `_fetch`
        for `before_send`)."""
        code, data = await self._fetch(
            method, path, query, body, content_type, timeout, before_send
        )
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

    async def list(
        self, path: str, query: Mapping[str, str] | None = None, *, timeout: float | None = None
    ) -> Page:
        """One page of a list. Items that cannot be decoded (nested too deeply, invalid)
        are returned apart (`Page.undecodable`), named as far as a shallow read allows;
        the rest of the page is decoded as usual."""
        code, data = await self._fetch("GET", path, query, None, "application/json", timeout)
        try:
            return decode_page(data)
        except (ValueError, RecursionError) as err:
            message = _TOO_DEEP.format(len(data)) if isinstance(err, RecursionError) else str(err)
            raise ApiError(code, "BadResponse", message, method="GET", path=path) from None

    @asynccontextmanager
    async def stream(
        self,
        path: str,
        query: Mapping[str, str],
        *,
        read_timeout: float,
    ) -> AsyncIterator[AsyncGenerator[JSON | Undecodable, None]]:
        """A watch: yields an iterator of decoded JSON lines (watch events); an event whose
        object cannot be decoded comes as an `Undecodable` naming the object.

        `read_timeout` is a progress deadline: when no line arrives for that long, the
        iterator raises `WatchStalled` (the connection may be half-open; the server sends
        bookmarks only now and then, so a healthy idle watch may be silent too).
        Every watch has a connection of its own (never one from the pool, which may be
        dead if the network path was), closed when the watch ends.
        """
        await self._throttle()
        started = time.monotonic()
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.settings.timeout, sock_read=read_timeout
        )
        response = await self._send(
            "GET", path, query, None, "application/json", timeout, api=self._watch_api()
        )
        self._observe("WATCH", response.status, started)
        try:
            if response.status != 200:
                try:
                    data = await response.read()
                except (aiohttp.ClientError, TimeoutError):
                    data = b""
                raise _status_error(response.status, data, "GET", path)
            yield self._lines(response, path, read_timeout)
        finally:
            response.close()

    async def _lines(
        self, response: aiohttp.ClientResponse, path: str, read_timeout: float
    ) -> AsyncGenerator[JSON | Undecodable, None]:
        while True:
            try:
                async with asyncio.timeout(read_timeout):
                    line = await response.content.readline()
            except TimeoutError:
                raise WatchStalled(
                    "Timeout",
                    f"no watch event or bookmark for {read_timeout:g}s",
                    method="WATCH",
                    path=path,
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
                event = decode_event(line)
            except RecursionError:
                raise TransportError(
                    "BadResponse", _TOO_DEEP.format(len(line)), method="WATCH", path=path
                ) from None
            except ValueError as err:
                raise TransportError(
                    "BadResponse", f"invalid watch event: {err}", method="WATCH", path=path
                ) from None
            yield event
