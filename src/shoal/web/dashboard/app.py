"""The dashboard's HTTP side: a read-only JSON API and the static page that polls it.

Every route is GET (aiohttp answers HEAD too, and 405 Method Not Allowed to anything else):
the dashboard shows what the scheduler decided and never changes it. The JSON is cut from
one `Frame` built at most once per `ttl` seconds, however many browsers poll, so the
scheduling loop pays for one snapshot per `ttl` at most (see `shoal.web.dashboard.frame`).

    GET /dashboard/api                    the endpoints below, with their parameters
    GET /dashboard/api/summary            clock, counts, snapshot cost
    GET /dashboard/api/queues             the queue tree: allocation, guarantee, fair share, maximum
    GET /dashboard/api/queues/history     shares over time (?resource=dominant|cpu|memory|...)
    GET /dashboard/api/gangs              pod groups (?phase=&offset=&limit=)
    GET /dashboard/api/pending            pending pods grouped by reason
    GET /dashboard/api/nodes              GPU use and fragmentation (?sort=frag|used|free|name
                                &gpu=only|all &offset= &limit=<=500), with aggregates
    GET /dashboard/api/nodes/heat         GPU use and fragmentation of every GPU node, compact
                                (?limit=<=20000)
    GET /dashboard/             the page (static files under /dashboard/static/)
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import msgspec
from aiohttp import web

from shoal.scheduler import Scheduler
from shoal.web.dashboard.frame import DashboardSource, Frame
from shoal.web.dashboard.history import DOMINANT, QueueHistory

# Runs a read of the scheduler where the scheduler runs and awaits it (a cluster's core
# thread, `KubeBackend.on_core`).
RunOn = Callable[[Callable[[], Any]], Awaitable[Any]]

__all__ = ["STATIC", "Dashboard", "attach_dashboard"]

STATIC = Path(__file__).parent / "static"
MAX_PAGE = 500
MAX_HEAT = 20_000
SORTS = ("frag", "used", "free", "name")

ENDPOINTS = {
    "/dashboard/api/summary": "clock, counts and the cost of the last snapshot",
    "/dashboard/api/queues": "queue tree with allocation, guarantee, fair share and maximum",
    "/dashboard/api/queues/history": "?resource=dominant|<resource>: shares over time",
    "/dashboard/api/gangs": "?phase=&offset=&limit=: pod groups with phase and member counts",
    "/dashboard/api/pending": "pending pods grouped by why they wait",
    "/dashboard/api/nodes": "?sort=frag|used|free|name&gpu=only|all&offset=&limit=: GPU nodes",
    "/dashboard/api/nodes/heat": "?limit=: GPU use and fragmentation of every GPU node",
}


class BadQuery(web.HTTPBadRequest):
    def __init__(self, message: str) -> None:
        super().__init__(
            text=msgspec.json.encode({"error": message}).decode(), content_type="application/json"
        )


def _json(data: Any) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(data),
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadQuery(f"query parameter {name}={text!r} is not an integer") from None
    if not low <= value <= high:
        raise BadQuery(f"query parameter {name}={value} must be between {low} and {high}")
    return value


def _choice(request: web.Request, name: str, choices: tuple[str, ...]) -> str:
    value = request.query.get(name, choices[0])
    if value not in choices:
        raise BadQuery(f"query parameter {name}={value!r} must be one of {', '.join(choices)}")
    return value


class Dashboard:
    """The routes, over one `DashboardSource` (and the queue history, when sampled)."""

    def __init__(
        self,
        source: DashboardSource,
        history: QueueHistory | None = None,
        *,
        ttl: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        refresh_seconds: float = 2.0,
        build_on: RunOn | None = None,
    ) -> None:
        self.source = source
        # Where frames are built: the scheduler's own thread in a cluster (the server's
        # event loop waits for it without blocking); None: here.
        self.build_on = build_on
        self.history = history
        self.ttl = ttl
        self.refresh_seconds = refresh_seconds
        self.builds = 0
        self._clock = clock
        self._frame: Frame | None = None
        self._built_at = 0.0

    def frame(self) -> Frame:
        """The latest snapshot, at most `ttl` seconds old (of the server's clock)."""
        now = self._clock()
        if self._frame is None or now - self._built_at >= self.ttl:
            self._frame = self.source.build()
            self._built_at = now
            self.builds += 1
        return self._frame

    async def current(self) -> Frame:
        """`frame()`, built where the scheduler runs (`build_on`)."""
        if self.build_on is None:
            return self.frame()
        now = self._clock()
        if self._frame is None or now - self._built_at >= self.ttl:
            frame: Frame = await self.build_on(self.source.build)
            self._frame = frame
            self._built_at = now
            self.builds += 1
        return self._frame

    def install(self, app: web.Application) -> None:
        """Add the dashboard's routes to `app` (GET only)."""
        get = app.router.add_get
        get("/", self._root)
        get("/dashboard", self._root)
        get("/dashboard/", self._index)
        app.router.add_static("/dashboard/static/", STATIC, append_version=False)
        get("/dashboard/api", self._endpoints)
        get("/dashboard/api/", self._endpoints)
        get("/dashboard/api/summary", self._summary)
        get("/dashboard/api/queues", self._queues)
        get("/dashboard/api/queues/history", self._history)
        get("/dashboard/api/gangs", self._gangs)
        get("/dashboard/api/pending", self._pending)
        get("/dashboard/api/nodes", self._nodes)
        get("/dashboard/api/nodes/heat", self._heat)

    def application(self) -> web.Application:
        app = web.Application()
        self.install(app)
        return app

    # ---- handlers --------------------------------------------------------------------

    async def _root(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/dashboard/")

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def _endpoints(self, request: web.Request) -> web.Response:
        return _json({"endpoints": ENDPOINTS, "readOnly": True})

    async def _summary(self, request: web.Request) -> web.Response:
        frame = await self.current()
        return _json({**frame.summary, "refreshSeconds": self.refresh_seconds})

    async def _queues(self, request: web.Request) -> web.Response:
        frame = await self.current()
        return _json({"time": frame.time, **frame.queues})

    async def _history(self, request: web.Request) -> web.Response:
        if self.history is None:
            raise web.HTTPNotFound(text="no queue history is sampled by this server")
        resource = request.query.get("resource", DOMINANT)
        history = self.history
        known = {DOMINANT, *self.source.scheduler.tenant_queues.tree.resources}
        if resource not in known:
            raise BadQuery(
                f"query parameter resource={resource!r} must be one of {', '.join(sorted(known))}"
            )
        if self.build_on is None:
            return _json(history.series(resource))
        # Sampled by the driver loop: read where it runs.
        return _json(await self.build_on(lambda: history.series(resource)))

    async def _gangs(self, request: web.Request) -> web.Response:
        frame = await self.current()
        phase = request.query.get("phase", "")
        offset = _int(request, "offset", 0, 0, 10**9)
        limit = _int(request, "limit", 100, 1, MAX_PAGE)
        gangs = [g for g in frame.gangs if g["phase"] == phase] if phase else frame.gangs
        return _json(
            {
                "time": frame.time,
                "total": len(gangs),
                "phases": frame.summary["gangPhases"],
                "offset": offset,
                "items": gangs[offset : offset + limit],
            }
        )

    async def _pending(self, request: web.Request) -> web.Response:
        frame = await self.current()
        return _json({"time": frame.time, **frame.pending})

    async def _nodes(self, request: web.Request) -> web.Response:
        frame = await self.current()
        sort = _choice(request, "sort", SORTS)
        gpu_only = _choice(request, "gpu", ("only", "all")) == "only"
        offset = _int(request, "offset", 0, 0, 10**9)
        limit = _int(request, "limit", 50, 1, MAX_PAGE)
        nodes = frame.nodes
        rows = nodes.order(sort, gpu_only)
        page = rows[offset : offset + limit].tolist()
        return _json(
            {
                "time": frame.time,
                "summary": frame.node_summary,
                "targetWorkload": frame.target,
                "sort": sort,
                "total": len(rows),
                "offset": offset,
                "items": [nodes.item(r) for r in page],
            }
        )

    async def _heat(self, request: web.Request) -> web.Response:
        frame = await self.current()
        limit = _int(request, "limit", 5000, 1, MAX_HEAT)
        nodes = frame.nodes
        rows = nodes.order("name", True)
        shown = rows[:limit]
        capacity = nodes.gpus[shown] * 1000
        use = (nodes.gpu_used[shown] * 100 // capacity.clip(min=1)).tolist()
        free = nodes.gpu_free[shown]
        frag = (nodes.frag[shown] * 100 // free.clip(min=1)).astype(int).tolist()
        return _json(
            {
                "time": frame.time,
                "total": len(rows),
                "shown": len(shown),
                "names": [nodes.names[r] for r in shown.tolist()],
                "gpus": nodes.gpus[shown].tolist(),
                "usePercent": use,
                "fragPercentOfFree": frag,
            }
        )


class Sampled(Protocol):
    """A driver loop (`shoal.drivers.loop.Driver`): calls its samplers with its clock."""

    samplers: list[Callable[[float], None]]


def attach_dashboard(
    driver: Sampled,
    scheduler: Scheduler,
    *,
    clock_kind: str = "wall",
    interval: float = 10.0,
    capacity: int = 1440,
    ttl: float = 2.0,
    refresh_seconds: float = 5.0,
    build_on: RunOn | None = None,
) -> Dashboard:
    """A dashboard over `scheduler`, its queue history sampled by `driver` every
    `interval` seconds of the driver's clock (at most `capacity` samples kept)."""
    history = QueueHistory(scheduler.tenant_queues, scheduler.cluster.table, interval, capacity)
    driver.samplers.append(history.maybe_sample)
    source = DashboardSource(scheduler, clock_kind)
    return Dashboard(source, history, ttl=ttl, refresh_seconds=refresh_seconds, build_on=build_on)
