"""The dashboard's HTTP side: a read-only JSON API and the static page that polls it.

Every route is GET (aiohttp answers HEAD too, and 405 Method Not Allowed to anything else):
the dashboard shows what the scheduler decided and never changes it. The JSON is cut from
one `Frame` built at most once per `ttl` seconds, however many browsers poll, so the
scheduling loop pays for one snapshot per `ttl` at most (see `shoal.web.dashboard.frame`).

    GET /dashboard/api                    the endpoints below, with their parameters
    GET /dashboard/api/summary            clock, counts, snapshot cost
    GET /dashboard/api/queues             the queue tree: allocation, guarantee, fair share,
                                maximum (?q=&parent=&offset=&limit=: a page of matches or
                                of one parent's children)
    GET /dashboard/api/queues/top         the leaf queues with the largest share, the rest
                                summed (?n=&by=&resource=)
    GET /dashboard/api/queues/history     shares over time (?resource=dominant|cpu|memory|...
                                &queue=&from=)
    GET /dashboard/api/gangs              pod groups (?phase=&queue=&q=&offset=&limit=)
    GET /dashboard/api/pods               the pods of a gang or the pending pods of a queue,
                                with why they wait (?gang=|queue= &offset=&limit=)
    GET /dashboard/api/pending            pending pods grouped by reason
    GET /dashboard/api/nodes              GPU use and fragmentation (?sort=frag|used|free|name
                                &gpu=only|all &offset= &limit=<=500), with aggregates
    GET /dashboard/api/nodes/heat         GPU use and fragmentation of every GPU node, compact
                                (?limit=<=20000 &format=arrays|packed &names=1|0)
    GET /dashboard/             the page (static files under /dashboard/static/)

Incremental polling: every answer of the API (but the list of endpoints) carries a
`version` and the weak ETag `W/"<version>"`. The version changes when what the answer
is cut from changes: a section of the frame (`shoal.web.dashboard.frame.SECTIONS`; a
rebuilt frame keeps the version of each section whose content hashes the same), or the
queue history (a sample taken). A client that sends `?since=<version>` of its last
answer to the same query gets `{"unchanged": true, "version": ...}` while it is current,
and one that sends `If-None-Match` gets 304 Not Modified. Versions are strings, unique to
a server process.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import msgspec
import numpy as np
from aiohttp import web

from shoal.scheduler import Scheduler
from shoal.web.dashboard.frame import SECTIONS, DashboardSource, Frame
from shoal.web.dashboard.history import DOMINANT, QueueHistory

# Runs a read of the scheduler where the scheduler runs and awaits it (a cluster's core
# thread, `KubeBackend.on_core`).
RunOn = Callable[[Callable[[], Any]], Awaitable[Any]]
T = TypeVar("T")

__all__ = ["STATIC", "Dashboard", "attach_dashboard"]

STATIC = Path(__file__).parent / "static"
MAX_PAGE = 500
MAX_QUEUE_PAGE = 1000
MAX_TOP = 100
MAX_HEAT = 20_000
SORTS = ("frag", "used", "free", "name")
RANKS = ("allocated", "fairShare", "guaranteed", "pending", "running")
SHARES = ("allocated", "guaranteed", "fairShare")
# The packed heat map: a percentage rounded to 2 % is one character, its index here.
PACKED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_PACKED = np.frombuffer(PACKED.encode(), dtype=np.uint8)

ENDPOINTS = {
    "/dashboard/api/summary": "clock, counts and the cost of the last snapshot",
    "/dashboard/api/queues": "?q=&parent=&offset=&limit=: queue tree with allocation, "
    "guarantee, fair share and maximum (all of it, a search, or one parent's children)",
    "/dashboard/api/queues/top": "?n=15&by=allocated|fairShare|guaranteed|pending|running"
    "&resource=dominant|<resource>: the leaf queues that rank first, the rest summed",
    "/dashboard/api/queues/history": "?resource=dominant|<resource>&queue=&from=: shares over time",
    "/dashboard/api/gangs": "?phase=&queue=&q=&offset=&limit=: pod groups with phase and "
    "member counts",
    "/dashboard/api/pods": "?gang=<namespace/name>|queue=<queue>&offset=&limit=: the pods of "
    "a gang, or the pending pods of a queue, with why they wait",
    "/dashboard/api/pending": "pending pods grouped by why they wait",
    "/dashboard/api/nodes": "?sort=frag|used|free|name&gpu=only|all&offset=&limit=: GPU nodes",
    "/dashboard/api/nodes/heat": "?limit=&format=arrays|packed&names=1|0: GPU use and "
    "fragmentation of every GPU node",
}


class BadQuery(web.HTTPBadRequest):
    def __init__(self, message: str) -> None:
        super().__init__(
            text=msgspec.json.encode({"error": message}).decode(), content_type="application/json"
        )


def _json(data: Any, version: str | None = None) -> web.Response:
    if version is None:
        headers = {"Cache-Control": "no-store"}
    else:
        # Stored only to be revalidated (If-None-Match): the ETag names the version.
        headers = {"Cache-Control": "no-cache", "ETag": f'W/"{version}"'}
    return web.Response(
        body=msgspec.json.encode(data), content_type="application/json", headers=headers
    )


def _unchanged(request: web.Request, version: str) -> web.Response | None:
    """The short answer to a client that has `version` already (?since= or
    If-None-Match), else None."""
    if request.query.get("since") == version:
        return _json({"unchanged": True, "version": version}, version)
    match = request.headers.get("If-None-Match", "")
    if match and any(
        tag.strip().removeprefix("W/") in ("*", f'"{version}"') for tag in match.split(",")
    ):
        return web.Response(
            status=304, headers={"Cache-Control": "no-cache", "ETag": f'W/"{version}"'}
        )
    return None


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


def _float(request: web.Request, name: str) -> float | None:
    text = request.query.get(name)
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise BadQuery(f"query parameter {name}={text!r} is not a number") from None


def _names(request: web.Request, name: str) -> set[str] | None:
    """A parameter given as a comma-separated list, repeated or both; None if absent."""
    values = request.query.getall(name, [])
    if not values:
        return None
    return {n for v in values for n in v.split(",") if n}


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
        # Versions: this process's token and a counter, so that a client polling a
        # restarted server never takes a new frame for the one it has.
        self._token = secrets.token_hex(3)
        self._serial = 0
        self._digests: dict[str, bytes] = {}
        self._versions: dict[str, str] = {}

    def _version(self, serial: int) -> str:
        return f"{self._token}-{serial}"

    def _install_frame(self, frame: Frame) -> Frame:
        """Keep `frame` as the latest, its sections versioned: a section whose digest is
        that of the frame before keeps its version."""
        digests = frame.digests()
        for section in SECTIONS:
            if section not in self._versions or digests[section] != self._digests.get(section):
                self._serial += 1
                self._versions[section] = self._version(self._serial)
        self._digests = digests
        frame.versions = dict(self._versions)
        self._frame = frame
        self.builds += 1
        return frame

    def frame(self) -> Frame:
        """The latest snapshot, at most `ttl` seconds old (of the server's clock)."""
        now = self._clock()
        if self._frame is None or now - self._built_at >= self.ttl:
            self._install_frame(self.source.build())
            self._built_at = now
        assert self._frame is not None
        return self._frame

    async def current(self) -> Frame:
        """`frame()`, built where the scheduler runs (`build_on`)."""
        if self.build_on is None:
            return self.frame()
        now = self._clock()
        if self._frame is None or now - self._built_at >= self.ttl:
            frame: Frame = await self.build_on(self.source.build)
            self._install_frame(frame)
            self._built_at = now
        assert self._frame is not None
        return self._frame

    async def _read(self, read: Callable[[], T]) -> T:
        """`read()` where the scheduler runs."""
        if self.build_on is None:
            return read()
        result: T = await self.build_on(read)
        return result

    @staticmethod
    def frame_version(frame: Frame, *sections: str) -> str:
        """The version of what is cut from these sections of `frame` (all: any)."""
        versions = [frame.versions[s] for s in sections or SECTIONS]
        # Within one process the counters grow: the largest is the latest change.
        return max(versions, key=lambda v: int(v.rsplit("-", 1)[1]))

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
        get("/dashboard/api/queues/top", self._top)
        get("/dashboard/api/queues/history", self._history)
        get("/dashboard/api/gangs", self._gangs)
        get("/dashboard/api/pods", self._pods)
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
        version = frame.versions["summary"]
        if (short := _unchanged(request, version)) is not None:
            return short
        body = {**frame.summary, "refreshSeconds": self.refresh_seconds, "version": version}
        return _json(body, version)

    async def _queues(self, request: web.Request) -> web.Response:
        frame = await self.current()
        query = request.query.get("q", "").strip().lower()
        parent = request.query.get("parent")  # absent: the whole tree; "": the top level
        offset = _int(request, "offset", 0, 0, 10**9)
        limit = _int(request, "limit", MAX_QUEUE_PAGE, 1, MAX_QUEUE_PAGE)
        index = frame.queue_index
        if parent and parent not in index.rows:
            raise BadQuery(f"query parameter parent={parent!r} names no queue")
        version = frame.versions["queues"]
        if (short := _unchanged(request, version)) is not None:
            return short
        rows: list[dict[str, Any]] = frame.queues["queues"]
        if parent is not None:
            rows = [index.rows[n] for n in index.children.get(parent or None, ())]
        if query:
            rows = [q for q in rows if query in q["name"].lower()]
        body = {
            "time": frame.time,
            **frame.queues,
            "count": len(frame.queues["queues"]),  # queues in the tree
            "total": len(rows),  # queues that match
            "offset": offset,
            "queues": rows[offset : offset + limit],
            "version": version,
        }
        return _json(body, version)

    def _resource(self, request: web.Request, resources: list[str]) -> str:
        resource = request.query.get("resource", DOMINANT)
        known = {DOMINANT, *resources}
        if resource not in known:
            raise BadQuery(
                f"query parameter resource={resource!r} must be one of {', '.join(sorted(known))}"
            )
        return resource

    async def _top(self, request: web.Request) -> web.Response:
        frame = await self.current()
        n = _int(request, "n", 15, 1, MAX_TOP)
        by = _choice(request, "by", RANKS)
        resource = self._resource(request, frame.queues["resources"])
        version = frame.versions["queues"]
        if (short := _unchanged(request, version)) is not None:
            return short
        capacity = frame.queues["capacity"].get(resource, 0)

        def row(q: dict[str, Any]) -> dict[str, Any]:
            out: dict[str, Any] = {"name": q["name"], "parent": q["parent"]}
            for series in SHARES:
                if resource == DOMINANT:
                    out[series] = q["share"][series]
                else:
                    amount = q[series].get(resource, 0)  # the amounts, by the same names
                    out[series] = round(amount / capacity, 6) if capacity else 0.0
            out["pending"], out["running"] = q["pending"], q["running"]
            return out

        leaves = [row(q) for q in frame.queues["queues"] if q["leaf"]]
        leaves.sort(key=lambda r: (-r[by], r["name"]))
        top, rest = leaves[:n], leaves[n:]
        others: dict[str, Any] = {"count": len(rest)}
        for series in SHARES:
            others[series] = round(sum(r[series] for r in rest), 6)
        for count in ("pending", "running"):
            others[count] = sum(r[count] for r in rest)
        body = {
            "time": frame.time,
            "resource": resource,
            "by": by,
            "total": len(leaves),
            "items": top,
            "others": others,
            "version": version,
        }
        return _json(body, version)

    async def _history(self, request: web.Request) -> web.Response:
        if self.history is None:
            raise web.HTTPNotFound(text="no queue history is sampled by this server")
        history = self.history
        resource = self._resource(request, self.source.scheduler.tenant_queues.tree.resources)
        queues = _names(request, "queue")
        start = _float(request, "from")
        # Sampled by the driver loop: read where it runs.
        version = self._version(await self._read(lambda: history.version))
        if (short := _unchanged(request, version)) is not None:
            return short
        body = await self._read(lambda: history.series(resource, queues, start))
        body["version"] = version
        return _json(body, version)

    async def _gangs(self, request: web.Request) -> web.Response:
        frame = await self.current()
        phase = request.query.get("phase", "")
        queue = request.query.get("queue", "")
        query = request.query.get("q", "").strip().lower()
        offset = _int(request, "offset", 0, 0, 10**9)
        limit = _int(request, "limit", 100, 1, MAX_PAGE)
        version = frame.versions["gangs"]
        if (short := _unchanged(request, version)) is not None:
            return short
        gangs = frame.gangs
        if phase:
            gangs = [g for g in gangs if g["phase"] == phase]
        if queue:
            within = frame.queue_index.subtree(queue)
            gangs = [g for g in gangs if g["queue"] in within]
        if query:
            gangs = [g for g in gangs if query in g["key"].lower()]
        body = {
            "time": frame.time,
            "total": len(gangs),
            "phases": frame.summary["gangPhases"],
            "offset": offset,
            "items": gangs[offset : offset + limit],
            "version": version,
        }
        return _json(body, version)

    async def _pods(self, request: web.Request) -> web.Response:
        frame = await self.current()
        gang = request.query.get("gang")
        queue = request.query.get("queue")
        if (gang is None) == (queue is None):
            raise BadQuery("give one of the query parameters gang= and queue=")
        offset = _int(request, "offset", 0, 0, 10**9)
        limit = _int(request, "limit", 50, 1, MAX_PAGE)
        # Read when asked, versioned by the frame: a pod's state shows in the frame (its
        # queue's counts, its gang's, the pending groups, the clock) when it changes.
        version = self.frame_version(frame)
        if (short := _unchanged(request, version)) is not None:
            return short
        queues = frame.queue_index.subtree(queue) if queue is not None else None
        source = self.source
        body = await self._read(
            lambda: source.pods(gang=gang, queues=queues, offset=offset, limit=limit)
        )
        if body is None:
            raise web.HTTPNotFound(
                text=msgspec.json.encode({"error": f"no pod group {gang!r}"}).decode(),
                content_type="application/json",
            )
        body["queue"] = queue
        body["version"] = version
        return _json(body, version)

    async def _pending(self, request: web.Request) -> web.Response:
        frame = await self.current()
        version = frame.versions["pending"]
        if (short := _unchanged(request, version)) is not None:
            return short
        return _json({"time": frame.time, **frame.pending, "version": version}, version)

    async def _nodes(self, request: web.Request) -> web.Response:
        frame = await self.current()
        sort = _choice(request, "sort", SORTS)
        gpu_only = _choice(request, "gpu", ("only", "all")) == "only"
        offset = _int(request, "offset", 0, 0, 10**9)
        limit = _int(request, "limit", 50, 1, MAX_PAGE)
        version = frame.versions["nodes"]
        if (short := _unchanged(request, version)) is not None:
            return short
        nodes = frame.nodes
        rows = nodes.order(sort, gpu_only)
        page = rows[offset : offset + limit].tolist()
        body = {
            "time": frame.time,
            "summary": frame.node_summary,
            "targetWorkload": frame.target,
            "sort": sort,
            "total": len(rows),
            "offset": offset,
            "items": [nodes.item(r) for r in page],
            "version": version,
        }
        return _json(body, version)

    async def _heat(self, request: web.Request) -> web.Response:
        frame = await self.current()
        limit = _int(request, "limit", 5000, 1, MAX_HEAT)
        packed = _choice(request, "format", ("arrays", "packed")) == "packed"
        with_names = _choice(request, "names", ("1", "0")) == "1"
        version = frame.versions["nodes"]
        if (short := _unchanged(request, version)) is not None:
            return short
        nodes = frame.nodes
        rows = frame.heat_rows
        shown = rows[:limit]
        capacity = nodes.gpus[shown] * 1000
        use = nodes.gpu_used[shown] * 100 // capacity.clip(min=1)
        free = nodes.gpu_free[shown]
        frag = (nodes.frag[shown] * 100 // free.clip(min=1)).astype(np.int64)
        body: dict[str, Any] = {
            "time": frame.time,
            "total": len(rows),
            "shown": len(shown),
            "namesVersion": frame.heat_names_version,
        }
        if with_names:
            body["names"] = [nodes.names[r] for r in shown.tolist()]
        if packed:
            # One character per node and value: PACKED[round(percent / 2)].
            body["encoding"] = PACKED
            body["use"] = _pack(use)
            body["frag"] = _pack(frag)
        else:
            body["gpus"] = nodes.gpus[shown].tolist()
            body["usePercent"] = use.tolist()
            body["fragPercentOfFree"] = frag.tolist()
        body["version"] = version
        return _json(body, version)


def _pack(percent: Any) -> str:
    """Percentages 0..100 as one character each (PACKED[round(percent / 2)])."""
    codes = (np.clip(np.asarray(percent, dtype=np.int64), 0, 100) + 1) // 2
    return bytes(_PACKED[codes]).decode("ascii")


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
