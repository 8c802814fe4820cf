"""/metrics is rendered at most once per TTL and never once per concurrent scraper."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

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


def _server(clock: list[float]) -> tuple[HealthServer, _Counting]:
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
