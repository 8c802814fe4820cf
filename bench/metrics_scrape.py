"""Binds per second with and without concurrent /metrics scrapers.

The backend and its HealthServer share one event loop (as in `shoal run`): a scrape
that renders on the loop delays informers, binds and lease renewals. This runs the
KubeBackend against the fake API server (a child process), with `--pending` gated pods
that stay pending (the scrape walks them) and `--pods` schedulable ones that are timed, once without
scrapers and then with `--scrapers` clients (in a child process) fetching /metrics in
a tight loop, for each metrics cache TTL in `--ttl` (0: a render per scrape, as before
the cache).

Usage:
  python bench/metrics_scrape.py [--pending 4000] [--pods 600] [--scrapers 64] [--ttl 0,1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from typing import Any

from kube_binds import fake_cluster, gather_limited

from shoal.config import parse_config
from shoal.drivers.kube.backend import KubeBackend, KubeOptions
from shoal.drivers.kube.client import ClientSettings, connect
from shoal.drivers.kube.informer import InformerSettings
from shoal.drivers.kube.resources import NODES, PODS
from shoal.framework.effects import Bound
from shoal.web.server import HealthServer

SCHEDULER = "shoal-bench"


def _pod(name: str, gated: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "containers": [
            {"name": "c", "image": "x", "resources": {"requests": {"cpu": "10m"}}},
        ],
    }
    if gated:
        spec["schedulingGates"] = [{"name": "shoal.dev/bench"}]
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


_SCRAPER = """
import asyncio, sys, time
import aiohttp

async def main(url, n):
    done, longest = 0, 0.0
    stop = asyncio.Event()
    asyncio.get_running_loop().add_reader(sys.stdin, stop.set)

    async def scrape(session):
        nonlocal done, longest
        while not stop.is_set():
            started = time.monotonic()
            async with session.get(url) as response:
                await response.read()
            done += 1
            longest = max(longest, time.monotonic() - started)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(scrape(session) for _ in range(n)))
    print(done, longest, flush=True)

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


async def _scrapers(url: str, n: int) -> asyncio.subprocess.Process | None:
    """`n` concurrent scrapers in a child process (not on the backend's event loop)."""
    if n == 0:
        return None
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _SCRAPER,
        url,
        str(n),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )


async def _stop(proc: asyncio.subprocess.Process | None) -> tuple[int, float]:
    if proc is None:
        return 0, 0.0
    out, _ = await proc.communicate(b"stop\n")
    done, longest = out.split()
    return int(done), float(longest)


async def measure(
    pending: int, pods: int, scrapers: int, ttl: float
) -> tuple[float, int, float, float]:
    """(binds/s, scrapes done, the longest scrape in s, the longest loop stall in s)."""
    async with fake_cluster() as kubeconfig:
        setup = await connect(kubeconfig)
        admin = setup.client("bench-setup", ClientSettings(qps=0, timeout=60))
        capacity = {"cpu": "640", "memory": "2560Gi", "pods": "10000"}
        for i in range(10):
            body = {
                "metadata": {"name": f"n{i}", "labels": {"kubernetes.io/hostname": f"n{i}"}},
                "status": {"capacity": capacity, "allocatable": capacity},
            }
            await admin.request("POST", NODES.path(), body=body)
            await admin.request(
                "PATCH",
                NODES.path(name=f"n{i}", subresource="status"),
                body={"status": body["status"]},
                content_type="application/merge-patch+json",
            )
        await gather_limited(
            [
                admin.request("POST", PODS.path("default"), body=_pod(f"g{i:05d}", True))
                for i in range(pending)
            ]
        )
        connection = await connect(kubeconfig)
        options = KubeOptions(
            identity="bench",
            qps=0,
            leader_elect=False,
            informer=InformerSettings(watch_timeout=600),
        )
        kube = KubeBackend(
            parse_config({"profiles": [{"schedulerName": SCHEDULER}]}), connection, options
        )
        server = HealthServer(
            kube.metrics.registry, kube.healthz, kube.readyz, port=0, metrics_ttl=ttl
        )
        await server.start()
        reached: list[float] = []
        emit = kube.effects.emit

        def watch(effect: Any) -> None:
            if isinstance(effect, Bound):
                reached.append(time.monotonic())
            emit(effect)

        kube.effects.emit = watch  # type: ignore[method-assign]
        task = asyncio.create_task(kube.run())
        lags: list[float] = []

        async def heartbeat() -> None:  # how late the loop runs a 10 ms timer
            while True:
                started = time.monotonic()
                await asyncio.sleep(0.01)
                lags.append(time.monotonic() - started - 0.01)

        beat = asyncio.create_task(heartbeat())
        try:
            while sum(kube.scheduler.scheduling_queue.counts().values()) < pending:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
            lags.clear()
            url = f"http://127.0.0.1:{server.port}/metrics"
            scraping = await _scrapers(url, scrapers)
            try:
                await asyncio.sleep(1.0 if scrapers else 0)
                started = time.monotonic()
                await gather_limited(
                    [
                        admin.request("POST", PODS.path("default"), body=_pod(f"p{i:05d}", False))
                        for i in range(pods)
                    ]
                )
                while len(reached) < pods:
                    if task.done():
                        task.result()
                    await asyncio.sleep(0.02)
                elapsed = reached[-1] - started
                lag = max(lags, default=0.0)
            finally:
                scrapes, longest = await _stop(scraping)
        finally:
            beat.cancel()
            kube.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
            await server.stop()
            await connection.close()
            await setup.close()
        return pods / elapsed, scrapes, longest, lag


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pending", type=int, default=4000)
    parser.add_argument("--pods", type=int, default=600)
    parser.add_argument("--scrapers", type=int, default=64)
    parser.add_argument(
        "--ttl", default="0,1", help="metrics cache TTLs to try (0: render every scrape)"
    )
    args = parser.parse_args(argv)
    runs = [(0, 1.0)] + [(args.scrapers, float(t)) for t in args.ttl.split(",")]
    for scrapers, ttl in runs:
        rate, scrapes, longest, lag = await measure(args.pending, args.pods, scrapers, ttl)
        print(
            f"pending {args.pending}  scrapers {scrapers:3d}  ttl {ttl:3g} s  {rate:8.1f} binds/s  "
            f"scrapes {scrapes:6d}  longest scrape {longest:5.2f} s  loop stall {lag:5.3f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
