"""`shoal simulate --serve`: the web dashboard over a simulation.

By default the simulation runs to its end first (as fast as without a server), then the
dashboard serves its final state and its history until Ctrl-C. With `speed` (virtual
seconds per wall-clock second; `inf`: as fast as possible) the dashboard serves while the
simulation runs: the simulation is stepped on the server's event loop, so every request
sees the state between two steps, and it keeps serving after the end until Ctrl-C.

The queue history is sampled by the simulation's driver loop on the virtual clock, every
`SimOptions.queue_sample_seconds`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import socket
from collections.abc import Callable

from aiohttp import web

from shoal.sim.engine import SimResult, Simulation
from shoal.web.dashboard import Dashboard, attach_dashboard

__all__ = ["DashboardServer", "bind", "serve_simulation", "show_address"]

YIELD_SECONDS = 0.02  # at full speed, let the server answer at least this often


def show_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to HOST:PORT for the dashboard, taken before anything is simulated
    so that a busy port fails at once (the server listens on it later). Raises OSError
    naming the address and the way out."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as err:
        raise OSError(_cannot_serve(host, port, err)) from None
    try:
        # As asyncio's own servers do: a port left in TIME_WAIT is free, one another
        # process listens on is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as err:
        sock.close()
        raise OSError(_cannot_serve(host, port, err)) from None
    return sock


def _cannot_serve(host: str, port: int, err: OSError) -> str:
    why = (err.strerror or str(err)).lower()
    return (
        f"cannot serve the dashboard on {show_address(host, port)}: {why}; choose another "
        "address with --serve-address HOST:PORT (port 0 for any free port)"
    )


class DashboardServer:
    """The dashboard's aiohttp application on HOST:PORT (port 0: any free port), or on a
    socket already bound (`bind`)."""

    def __init__(
        self, dashboard: Dashboard, host: str, port: int, sock: socket.socket | None = None
    ) -> None:
        self.dashboard = dashboard
        self.host = host
        self.port = port
        self.sock = sock
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/dashboard/"

    async def start(self) -> None:
        runner = web.AppRunner(self.dashboard.application(), access_log=None, handle_signals=False)
        await runner.setup()
        site: web.BaseSite
        if self.sock is not None:
            site = web.SockSite(runner, self.sock)
        else:
            site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        for address in runner.addresses:
            if isinstance(address, tuple) and len(address) >= 2:
                self.port = int(address[1])
                break
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


async def _run_live(sim: Simulation, speed: float, stop: asyncio.Event) -> bool:
    """Step the simulation, paced to `speed`; False if stopped before the end."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    yielded = started
    sim.start()
    while sim.step():
        if stop.is_set():
            return False
        if math.isfinite(speed):
            delay = started + sim.clock.now() / speed - loop.time()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):  # not wait_for: it can eat a cancel
                        await stop.wait()
                yielded = loop.time()
                continue
        if loop.time() - yielded >= YIELD_SECONDS:
            await asyncio.sleep(0)
            yielded = loop.time()
    return True


async def serve_simulation(
    sim: Simulation,
    host: str,
    port: int,
    *,
    speed: float | None,
    run: Callable[[], SimResult],
    on_serving: Callable[[str], None],
    on_result: Callable[[SimResult], None],
    sock: socket.socket | None = None,
) -> None:
    """Serve the dashboard over `sim` until SIGINT/SIGTERM (see the module docstring);
    on `sock` when given (bound to host:port by `bind`).

    Without `speed`, `run()` runs the simulation first (the caller's progress display);
    `on_serving(url)` is called once the server listens, `on_result` with the result
    (also of a live run cut short by Ctrl-C)."""
    dashboard = attach_dashboard(
        sim.driver,
        sim.scheduler,
        clock_kind="virtual",
        interval=sim.options.queue_sample_seconds,
        ttl=0.5,
        refresh_seconds=2.0,
    )
    if speed is None:
        on_result(run())  # Ctrl-C here interrupts as without --serve
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    server = DashboardServer(dashboard, host, port, sock)
    await server.start()
    try:
        on_serving(server.url)
        if speed is not None:
            finished = await _run_live(sim, speed, stop)
            on_result(sim.finish(interrupted=not finished))
            if not finished:
                return
        if dashboard.history is not None:
            dashboard.history.sample(sim.clock.now())  # the final state, on the chart
        await stop.wait()
    finally:
        await server.stop()
