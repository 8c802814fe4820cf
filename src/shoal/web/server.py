"""/metrics, /healthz and /readyz on one aiohttp server.

Health checks answer like kube-scheduler's: `ok` when every check passes, otherwise
HTTP 500 and one `[+]name ok` / `[-]name failed: reason` line per check (also shown for
a passing endpoint with `?verbose`).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["Check", "HealthServer"]


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    message: str = ""


Checks = Callable[[], list[Check]]


class HealthServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        healthz: Checks,
        readyz: Checks,
        host: str = "0.0.0.0",
        port: int = 10251,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.registry = registry
        self.healthz = healthz
        self.readyz = readyz
        self.host = host
        self.port = port
        self.ssl_context = ssl_context  # HTTPS when set
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._probe(self.healthz))
        app.router.add_get("/livez", self._probe(self.healthz))
        app.router.add_get("/readyz", self._probe(self.readyz))
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
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    @staticmethod
    def _probe(checks: Checks) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            results = checks()
            failed = [c for c in results if not c.ok]
            verbose = "verbose" in request.query
            if not failed and not verbose:
                return web.Response(text="ok")
            lines = [
                f"[+]{c.name} ok"
                if c.ok
                else f"[-]{c.name} failed: {c.message or 'reason withheld'}"
                for c in results
            ]
            lines.append("check passed" if not failed else "check failed")
            return web.Response(text="\n".join(lines) + "\n", status=500 if failed else 200)

        return handler
