"""/metrics, /healthz and /readyz on one aiohttp server.

Health checks answer like kube-scheduler's: `ok` when every check passes, otherwise
HTTP 500 and one `[+]name ok` / `[-]name failed: reason` line per check (also shown for
a passing endpoint with `?verbose`). A passing check may carry a detail worth knowing
(`[+]name ok: detail`), e.g. objects skipped because they cannot be read.

Collecting the metrics walks the scheduler's state, so in a cluster the exposition is
rendered where the scheduler runs (`render_on`: the core's thread, see
`shoal.drivers.kube.core`; the event loop serving probes only waits for it), and at most
once per `metrics_ttl` seconds: every
scrape in that window (however many scrapers) gets the same bytes, and concurrent
scrapes of a stale exposition wait for one render instead of each rendering. When the
core is busy for more than `busy_wait` seconds (a slow extender call), a scrape gets
the last exposition with a comment line saying how old it is rather than waiting. The
server listens on loopback unless told otherwise (metrics and queue sizes are not for
everyone on the pod network); `middlewares` put authentication and authorization in
front of every route (`shoal.servers.auth`).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["Check", "HealthServer"]


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    message: str = ""  # why it fails
    detail: str = ""  # shown when it passes (verbose)


Checks = Callable[[], list[Check]]


class HealthServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        healthz: Checks,
        readyz: Checks,
        host: str = "127.0.0.1",
        port: int = 10251,
        ssl_context: ssl.SSLContext | None = None,
        *,
        metrics_ttl: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        routes: Callable[[web.Application], None] | None = None,
        render_on: Callable[[Callable[[], bytes]], Awaitable[bytes]] | None = None,
        busy_wait: float = 2.0,
        middlewares: Sequence[Any] = (),
    ) -> None:
        self.registry = registry
        self.healthz = healthz
        self.readyz = readyz
        self.host = host
        self.port = port
        self.ssl_context = ssl_context  # HTTPS when set
        self.metrics_ttl = metrics_ttl
        self.renders = 0
        self.routes = routes  # more routes on the same app (the dashboard's)
        self.render_on = render_on  # runs the render where the scheduler runs (None: here)
        self.busy_wait = busy_wait
        # aiohttp middlewares before every route (authentication and authorization).
        self.middlewares = tuple(middlewares)
        self.stale_served = 0  # scrapes answered with the last exposition (core busy)
        self._clock = clock
        self._exposition = b""
        self._rendered_at: float | None = None
        self._rendering: asyncio.Future[bytes] | None = None  # the render under way
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(middlewares=self.middlewares)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._probe(self.healthz))
        app.router.add_get("/livez", self._probe(self.healthz))
        app.router.add_get("/readyz", self._probe(self.readyz))
        if self.routes is not None:
            self.routes(app)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=0.1
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl_context)
        await site.start()
        for address in self._runner.addresses:
            if isinstance(address, tuple) and len(address) >= 2:
                self.port = int(address[1])
                break

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await self.exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def exposition(self) -> bytes:
        """The rendered metrics, at most `metrics_ttl` seconds old; or, while the core
        is busy for longer than `busy_wait` seconds (a slow extender call, a long
        preemption what-if), the last exposition with a comment saying how old it is, so
        a scrape does not hang or time out meanwhile. The render goes on and serves the
        next scrape."""
        now = self._clock()
        if self._rendered_at is not None and now - self._rendered_at < self.metrics_ttl:
            return self._exposition
        rendering = self._rendering
        if rendering is None:
            rendering = self._rendering = asyncio.ensure_future(self._render())
            rendering.add_done_callback(self._rendered)
        if self.render_on is None or self._rendered_at is None:
            return await asyncio.shield(rendering)
        done, _ = await asyncio.wait({rendering}, timeout=self.busy_wait)
        if rendering in done:
            return rendering.result()
        age = self._clock() - self._rendered_at
        note = (
            f"# shoal: these metrics were rendered {age:.1f}s ago; the scheduler core is "
            "busy (e.g. a slow extender call) and will render fresh ones when it is free\n"
        )
        self.stale_served += 1
        return self._exposition + note.encode()

    async def _render(self) -> bytes:
        # Let the loop run what is ready (binds, renewals) before the render.
        await asyncio.sleep(0)
        if self.render_on is not None:
            body = await self.render_on(lambda: generate_latest(self.registry))
        else:
            body = generate_latest(self.registry)
        self._exposition, self._rendered_at = body, self._clock()
        self.renders += 1
        return body

    def _rendered(self, task: asyncio.Future[bytes]) -> None:
        self._rendering = None
        if not task.cancelled():
            task.exception()  # marked retrieved: the scrapes waiting for it raise it

    @staticmethod
    def _probe(checks: Checks) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            results = checks()
            failed = [c for c in results if not c.ok]
            verbose = "verbose" in request.query
            if not failed and not verbose:
                return web.Response(text="ok")
            lines = [
                f"[+]{c.name} ok" + (f": {c.detail}" if c.detail else "")
                if c.ok
                else f"[-]{c.name} failed: {c.message or 'reason withheld'}"
                for c in results
            ]
            lines.append("check passed" if not failed else "check failed")
            return web.Response(text="\n".join(lines) + "\n", status=500 if failed else 200)

        return handler
