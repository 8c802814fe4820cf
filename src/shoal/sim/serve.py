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
from collections.abc import Callable

from aiohttp import web

from shoal.sim.engine import SimResult, Simulation
from shoal.web.dashboard import Dashboard, attach_dashboard

__all__ = ["DashboardServer", "serve_simulation"]

YIELD_SECONDS = 0.02  # at full speed, let the server answer at least this often


class DashboardServer:
    """The dashboard's aiohttp application on HOST:PORT (port 0: any free port)."""

    def __init__(self, dashboard: Dashboard, host: str, port: int) -> None:
        self.dashboard = dashboard
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/dashboard/"

    async def start(self) -> None:
        runner = web.AppRunner(self.dashboard.application(), access_log=None, handle_signals=False)
        await runner.setup()
        await web.TCPSite(runner, self.host, self.port).start()
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
) -> None:
    """Serve the dashboard over `sim` until SIGINT/SIGTERM (see the module docstring).

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
    server = DashboardServer(dashboard, host, port)
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
