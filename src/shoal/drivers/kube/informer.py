"""List+watch informers with client-go's resourceVersion discipline.

An informer lists a resource (in pages), hands every object to its handler, then
watches from the list's resourceVersion with bookmarks on:

* every event and every BOOKMARK advances the resourceVersion it resumes from;
* a watch that ends (server timeout, dropped connection, API error) is resumed from
  that resourceVersion after an exponential backoff with jitter (none after a clean
  server-side timeout);
* a watch on which no line (event or bookmark) arrived within `read_timeout` (the
  progress deadline) is dropped and resumed at once from that resourceVersion: the
  connection may be half-open (a peer or middlebox gone without a reset), or the watch
  merely idle (the API server sends bookmarks about once a minute). Neither is a
  failure: no warning, no relist, readiness stays green; only if the new watch cannot
  be opened is that a failure, as any other;
* an object that cannot be decoded (JSON nested deeper than the decoder allows, which
  the API server accepts, or invalid) is skipped and handed to the handler's
  `on_undecodable` with what a shallow read found of its metadata, so it can be
  reported by name; everything else of its list page or watch is delivered, and the
  watch resumes after it. A last good copy of it stays in the store;
* `410 Gone` ("too old resource version", as an HTTP status or an ERROR event) means
  events were compacted away: the informer relists and diffs the new list against its
  store, so objects deleted while it was not looking are reported deleted;
* an optional kind (a CRD) that is not installed (404 on list) is marked absent and
  looked for again later, without holding up readiness; a kind with fallback versions
  is listed and watched in the first of its versions that is served (`served`). A 404
  on the watch of an optional kind (its CRD uninstalled, or no longer serving the
  version watched) relists: in the version served now, else the kind is absent and its
  objects are reported deleted;
* any other exception (a bug, a response that cannot be taken apart at all, ...) does
  not end the informer: it is logged, the informer is marked down (`down`, which fails
  /readyz naming the resource) and it relists after the same backoff, until a list or
  watch succeeds again.

Handlers run synchronously on the event loop; they must not block.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from shoal.drivers.kube.client import JSON, ApiError, KubeClient, Undecodable, WatchStalled
from shoal.drivers.kube.resources import ResourceKind, object_key

__all__ = ["Backoff", "Informer", "InformerHandler", "InformerSettings", "WatchExpired"]

log = logging.getLogger("shoal.kube.informer")


class InformerHandler(Protocol):
    def on_upsert(self, kind: ResourceKind, old: JSON | None, new: JSON) -> None: ...

    def on_delete(self, kind: ResourceKind, old: JSON) -> None: ...

    def on_undecodable(self, kind: ResourceKind, stub: JSON, error: str) -> None:
        """An object that could not be decoded: `stub` has its apiVersion, kind and what
        could be read of its metadata (name, namespace, uid, resourceVersion)."""


class InformerObserver(Protocol):
    def informer_event(self, resource: str, what: str) -> None:
        """`what`: list, relist, watch, watch_silent, watch_error, expired, bookmark."""


class WatchExpired(Exception):
    """The resourceVersion we resume from is older than the server keeps (410 Gone)."""


@dataclass(frozen=True)
class InformerSettings:
    page_size: int = 500
    watch_timeout: float = 300.0  # server-side timeoutSeconds, randomized up to 2x
    # The watch's progress deadline: after this long without a line (event or bookmark)
    # the watch is dropped and resumed from its resourceVersion (no relist, no failure).
    read_timeout: float = 15.0
    list_timeout: float = 60.0
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    absent_retry: float = 60.0  # how often to look again for an absent optional kind
    # A run of ordinary API failures (a dropped watch, a 500) marks the informer down
    # only once it has lasted this long, so one reconnect does not flap readiness; an
    # unexpected exception marks it down at once.
    down_after: float = 10.0


class Backoff:
    """Exponential backoff with jitter; `reset` after a success."""

    def __init__(self, initial: float, maximum: float, rng: random.Random | None = None) -> None:
        self.initial = initial
        self.maximum = maximum
        self.failures = 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        base = min(self.maximum, self.initial * float(2**self.failures))
        self.failures += 1
        return base * (1.0 + 0.2 * self._rng.random())

    def reset(self) -> None:
        self.failures = 0

    async def sleep(self) -> None:
        await asyncio.sleep(self.next())


class Informer:
    def __init__(
        self,
        client: KubeClient,
        kind: ResourceKind,
        handler: InformerHandler,
        settings: InformerSettings | None = None,
        observer: InformerObserver | None = None,
        namespace: str | None = None,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.kind = kind
        self.served = kind  # `kind` in the version listed last (see `fallback_versions`)
        self.handler = handler
        self.settings = settings or InformerSettings()
        self.observer = observer
        self.namespace = namespace
        self.store: dict[str, JSON] = {}
        # Objects that could not be decoded, by key: what is known of them (a stub).
        self.undecodable: dict[str, JSON] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()  # the first list was delivered (or the kind is absent)
        self.absent = False
        self.lists = 0
        self.watches = 0
        self.last_error = ""
        self.crashes = 0  # unexpected exceptions survived
        self._rng = rng or random.Random()
        self._clock = clock
        self._failing_since: float | None = None  # start of the current run of failures
        self._unexpected = False  # the current run includes an unexpected exception
        self._backoff = Backoff(self.settings.backoff_initial, self.settings.backoff_max, self._rng)

    @property
    def down(self) -> str:
        """Why this informer is not keeping its store current ("" when it is)."""
        if self._failing_since is None:
            return ""
        lasted = self._clock() - self._failing_since
        if not self._unexpected and lasted < self.settings.down_after:
            return ""
        return f"failing for {lasted:.0f}s: {self.last_error}"

    def _succeeded(self) -> None:
        self._failing_since = None
        self._unexpected = False

    def _note(self, what: str) -> None:
        if self.observer is not None:
            self.observer.informer_event(self.kind.name, what)

    # ---- the loop ------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch forever (until cancelled); never ends on an exception."""
        while True:
            try:
                await self._list_and_watch()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                # A bug or an object we cannot read must not stop the watch for good with
                # health still green: record it, back off, relist.
                self.crashes += 1
                self._failed("informer", err, unexpected=True)
                await self._backoff.sleep()

    async def _list_and_watch(self) -> None:
        while True:
            try:
                await self._list()
            except ApiError as err:
                if err.not_found and self.kind.optional:
                    if self.store or self.undecodable:
                        # Uninstalled: its objects went with it.
                        self._replace([])
                        self.resource_version = ""
                    if not self.absent:
                        log.info(
                            "resource %s is not served (CRD not installed); will look again",
                            self.kind.name,
                            extra={"resource": self.kind.name},
                        )
                    self.absent = True
                    self.synced.set()
                    await asyncio.sleep(self.settings.absent_retry)
                    continue
                self._failed("list", err, unexpected=_unreadable(err))
                await self._backoff.sleep()
                continue
            self.absent = False
            self._backoff.reset()
            await self._watch_until_expired()
            self._note("relist")

    async def list_once(self) -> None:
        """One list delivered to the handler, no watch (a command-line snapshot of the
        cluster). An optional kind that is not installed is marked `absent` (nothing
        delivered); any other API error is raised."""
        try:
            await self._list()
        except ApiError as err:
            if not (err.not_found and self.kind.optional):
                raise
            self.absent = True
            self.synced.set()

    def _failed(self, what: str, err: BaseException, unexpected: bool = False) -> None:
        self.last_error = f"{type(err).__name__}: {err}" if unexpected else str(err)
        if self._failing_since is None:
            self._failing_since = self._clock()
        self._unexpected = self._unexpected or unexpected
        self._note(f"{what}_error")
        extra = {"resource": self.kind.name, "error": self.last_error}
        if unexpected:
            log.error(
                "watching %s failed unexpectedly; relisting after a backoff",
                self.kind.name,
                exc_info=err,
                extra=extra,
            )
        else:
            log.warning("%s %s failed: %s", what, self.kind.name, err, extra=extra)

    async def _list(self) -> None:
        """List the kind in the version served (the one that was, first; then the
        kind's versions in order): 404 only when none is."""
        versions = self.kind.versions()
        if len(versions) > 1:
            versions.sort(key=lambda k: k.version != self.served.version)
        for i, served in enumerate(versions):
            try:
                await self._list_in(served)
            except ApiError as err:
                if err.not_found and i + 1 < len(versions):
                    continue
                raise
            return

    async def _list_in(self, served: ResourceKind) -> None:
        items: list[JSON] = []
        undecodable: list[Undecodable] = []
        query: dict[str, str] = {"limit": str(self.settings.page_size)}
        resource_version = ""
        path = served.path(self.namespace)
        while True:
            page = await self.client.list(path, query, timeout=self.settings.list_timeout)
            meta = page.metadata
            if not resource_version:
                resource_version = str(meta.get("resourceVersion", ""))
            items.extend(page.items)
            undecodable.extend(page.undecodable)
            token = meta.get("continue")
            if not token:
                break
            query = {"limit": str(self.settings.page_size), "continue": str(token)}
        if served.version != self.served.version:
            log.info(
                "reading %s in version %s",
                self.kind.name,
                served.version,
                extra={"resource": self.kind.name},
            )
        self.served = served
        self.lists += 1
        self._note("list")
        self._replace(items, undecodable)
        self.resource_version = resource_version
        self._succeeded()
        self.synced.set()

    def _replace(self, items: list[JSON], undecodable: list[Undecodable] | None = None) -> None:
        """Deliver a full list: deletions for what vanished, upserts for what changed.
        An object that could not be decoded is reported; its last good copy, if any,
        stays (it did not vanish)."""
        fresh: dict[str, JSON] = {}
        for item in items:
            item.setdefault("apiVersion", self.served.api_version)
            item.setdefault("kind", self.kind.kind)
            fresh[object_key(item)] = item
        old_store = self.store
        stubs = [self._stub(bad) for bad in undecodable or ()]
        old_undecodable = self.undecodable
        self.undecodable = {}
        for stub in stubs:
            key = object_key(stub)
            if key:
                self.undecodable[key] = stub
                if key in old_store and key not in fresh:
                    fresh[key] = old_store[key]
        self.store = fresh
        for key, gone in old_store.items():
            if key not in fresh:
                self._deliver(self.handler.on_delete, self.kind, gone)
        for key, stub in old_undecodable.items():
            if key not in fresh and key not in self.undecodable and key not in old_store:
                self._deliver(self.handler.on_delete, self.kind, stub)
        for key, obj in fresh.items():
            old = old_store.get(key)
            if old is None or _rv(old) != _rv(obj):
                self._deliver(self.handler.on_upsert, self.kind, old, obj)
        for stub, bad in zip(stubs, undecodable or (), strict=True):
            self._deliver(self.handler.on_undecodable, self.kind, stub, bad.error)

    def _stub(self, bad: Undecodable) -> JSON:
        """What is known of an object that could not be decoded."""
        return {
            "apiVersion": self.served.api_version,
            "kind": self.kind.kind,
            "metadata": dict(bad.metadata),
        }

    def _deliver(self, fn: Callable[..., None], *args: Any) -> None:
        """Call a handler; its bugs are logged, never allowed to stop the informer."""
        try:
            fn(*args)
        except Exception:
            log.exception(
                "handler for %s failed", self.kind.name, extra={"resource": self.kind.name}
            )

    async def _watch_until_expired(self) -> None:
        while True:
            started = time.monotonic()
            try:
                events = await self._watch_once()
            except WatchStalled as err:
                # Idle, or a half-open connection: either way the server accepted the
                # watch and nothing failed; resume at once from the resourceVersion.
                self._note("watch_silent")
                self._succeeded()
                self._backoff.reset()
                log.debug(
                    "watch of %s silent (%s); resuming from resourceVersion %s",
                    self.kind.name,
                    err.message,
                    self.resource_version,
                    extra={"resource": self.kind.name},
                )
                continue
            except WatchExpired:
                self._note("expired")
                log.info(
                    "watch of %s expired at resourceVersion %s; relisting",
                    self.kind.name,
                    self.resource_version,
                    extra={"resource": self.kind.name},
                )
                return
            except ApiError as err:
                if err.gone:
                    self._note("expired")
                    return
                if err.not_found and self.kind.optional:
                    # The CRD, or the version watched, is gone (uninstalled, or upgraded
                    # to serve other versions): a relist finds the version served, or
                    # marks the kind absent.
                    self._note("expired")
                    return
                self._failed("watch", err, unexpected=_unreadable(err))
                await self._backoff.sleep()
                if _unreadable(err):
                    # Resuming would replay the same unreadable event forever; a relist
                    # reads the current state (in which the object may be fixed).
                    return
                continue
            if events == 0 and time.monotonic() - started < 1.0:
                await self._backoff.sleep()  # a server that closes watches at once
            else:
                self._backoff.reset()

    async def _watch_once(self) -> int:
        timeout = self.settings.watch_timeout * (1.0 + self._rng.random())
        query = {
            "watch": "1",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(max(1, int(timeout))),
        }
        self.watches += 1
        self._note("watch")
        count = 0
        async with (
            self.client.stream(
                self.served.path(self.namespace), query, read_timeout=self.settings.read_timeout
            ) as lines,
            aclosing(lines),
        ):
            async for event in lines:
                self._apply(event)
                if count == 0:
                    self._succeeded()
                count += 1
        return count

    def _apply(self, event: JSON | Undecodable) -> None:
        if isinstance(event, Undecodable):
            self._skip(event)
            return
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        if kind == "ERROR":
            code = int(obj.get("code", 0) or 0)
            message = str(obj.get("message", ""))
            if code == 410:
                raise WatchExpired(message)
            raise ApiError(code, str(obj.get("reason", "")), message, method="WATCH")
        rv = _rv(obj)
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = rv
            self._note("bookmark")
            return
        key = object_key(obj)
        self.undecodable.pop(key, None)
        if kind in ("ADDED", "MODIFIED"):
            old = self.store.get(key)
            self.store[key] = obj
            self._deliver(self.handler.on_upsert, self.kind, old, obj)
        elif kind == "DELETED":
            old = self.store.pop(key, None)
            self._deliver(self.handler.on_delete, self.kind, old or obj)
        if rv:
            self.resource_version = rv

    def _skip(self, event: Undecodable) -> None:
        """A watch event whose object could not be decoded: report it (a deletion is
        delivered as one), and resume after it."""
        stub = self._stub(event)
        key = object_key(stub)
        if event.event == "DELETED":
            if key:
                self.undecodable.pop(key, None)
                old = self.store.pop(key, None)
                self._deliver(self.handler.on_delete, self.kind, old or stub)
        elif event.event in ("ADDED", "MODIFIED"):
            if key:
                self.undecodable[key] = stub
            self._deliver(self.handler.on_undecodable, self.kind, stub, event.error)
        rv = _rv(stub)
        if rv:
            self.resource_version = rv


def _unreadable(err: ApiError) -> bool:
    """A response we cannot decode: retrying will not help until the object is fixed."""
    return err.reason == "BadResponse"


def _rv(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("resourceVersion", ""))
