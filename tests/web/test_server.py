"""/metrics is rendered at most once per TTL and never once per concurrent scraper."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from shoal.web.server import Check, HealthServer


class _Counting(Collector):
    """A collector that counts its collections (each walks the scheduler's queue)."""

    def __init__(self) -> None:
        self.collections = 0

    def collect(self) -> Iterable[Metric]:
        self.collections += 1
        gauge = GaugeMetricFamily("collections", "Times collected.")
        gauge.add_metric([], self.collections)
        yield gauge


def _server(clock: list[float], **options: Any) -> tuple[HealthServer, _Counting]:
    registry = CollectorRegistry()
    counting = _Counting()
    registry.register(counting)
    server = HealthServer(
        registry,
        lambda: [Check("ping", True)],
        lambda: [Check("ping", True)],
        port=0,
        metrics_ttl=1.0,
        clock=lambda: clock[0],
        **options,
    )
    return server, counting


def test_concurrent_scrapes_share_one_render_and_the_ttl_bounds_renders() -> None:
    async def main() -> None:
        clock = [100.0]
        server, counting = _server(clock)
        await server.start()
        try:
            assert server.host == "127.0.0.1"  # loopback unless told otherwise
            url = f"http://127.0.0.1:{server.port}/metrics"
            async with aiohttp.ClientSession() as session:

                async def scrape() -> str:
                    async with session.get(url) as response:
                        assert response.status == 200
                        return await response.text()

                bodies = await asyncio.gather(*(scrape() for _ in range(64)))
                assert counting.collections == 1 and server.renders == 1
                assert len(set(bodies)) == 1 and "collections 1.0" in bodies[0]
                clock[0] += 0.9  # still fresh
                assert "collections 1.0" in await scrape()
                clock[0] += 0.2  # stale: one more render
                bodies = await asyncio.gather(*(scrape() for _ in range(16)))
                assert counting.collections == 2
                assert all("collections 2.0" in b for b in bodies)
        finally:
            await server.stop()

    asyncio.run(main())


def test_a_failed_render_is_not_cached() -> None:
    async def main() -> None:
        clock = [0.0]
        server, _ = _server(clock)

        class Broken(Collector):
            fail = True

            def collect(self) -> Iterable[Metric]:
                if Broken.fail:
                    raise RuntimeError("collector bug")
                return iter(())

        server.registry.register(Broken())
        try:
            await server.exposition()
        except RuntimeError:
            pass
        else:
            raise AssertionError("the render error was swallowed")
        Broken.fail = False
        assert b"collections" in await server.exposition()

    asyncio.run(main())


def test_a_busy_core_gets_the_last_exposition_marked_stale_not_a_hung_scrape() -> None:
    """The core renders the metrics; while it is busy (a slow extender call) for longer
    than `busy_wait`, a scrape gets the last exposition with a comment line giving its
    age, and the render that waited serves the next scrape once the core is free."""

    async def main() -> None:
        clock = [0.0]
        core_free = asyncio.Event()
        core_free.set()

        async def on_core(render: Callable[[], bytes]) -> bytes:
            await core_free.wait()
            return render()

        server, _ = _server(clock, render_on=on_core, busy_wait=0.2)
        assert b"collections 1.0" in await server.exposition()
        core_free.clear()  # the core is in a long call
        clock[0] += 5.0
        started = time.monotonic()
        body = (await server.exposition()).decode()
        assert time.monotonic() - started < 1.0
        assert "collections 1.0" in body
        assert "# shoal: these metrics were rendered 5.0s ago" in body
        assert server.stale_served == 1
        core_free.set()
        for _ in range(100):  # the waiting render completes on the freed core
            if server.renders == 2:
                break
            await asyncio.sleep(0.01)
        body = (await server.exposition()).decode()
        assert "collections 2.0" in body and "# shoal" not in body

    asyncio.run(main())
