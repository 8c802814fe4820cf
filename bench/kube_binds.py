"""Binds per second through the Kubernetes backend at a given client QPS.

Runs Shoal's KubeBackend in this process against the fake API server (started in a
separate process, so it does not share this interpreter) or, with --kubeconfig, a real
cluster. For each QPS it creates nodes and pending pods, starts the backend with that
client QPS (and --burst), and times the binds. It reports:

* steady binds/s: the rate of the binds after the first `burst` ones (the saved-up
  burst would flatter it), as the least-squares slope of bind count over completion
  time; this is what the QPS limit governs;
* overall binds/s: all binds over the time from the backend's start to the last bind;
* the share of the QPS reached (steady / QPS).

Events ("Scheduled") go through the event client's own rate limiter, as in
kube-scheduler, so they do not eat into the binding budget.

Usage:
  python bench/kube_binds.py [--qps 50,100,200,500,1000,0] [--burst 100]
      [--pods N] [--nodes 50] [--kubeconfig PATH]
QPS 0 means unlimited. With --kubeconfig, plain Node objects (tainted, so nothing else
lands on them) and a namespace are created and deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal.config import parse_config
from shoal.drivers.kube.backend import KubeBackend, KubeOptions
from shoal.drivers.kube.client import ApiError, ClientSettings, KubeClient, connect
from shoal.drivers.kube.informer import InformerSettings
from shoal.drivers.kube.resources import NAMESPACES, NODES, PODS
from shoal.framework.effects import Bound

RUN = uuid.uuid4().hex[:6]
LABEL = "shoal.dev/bench"
TOLERATIONS = [
    {"key": LABEL, "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},
]


@dataclass
class Result:
    qps: float
    burst: int
    pods: int
    steady: float
    overall: float
    seconds: float


@contextlib.asynccontextmanager
async def fake_cluster() -> AsyncIterator[str]:
    """A fake API server in a child process; yields its kubeconfig path."""
    directory = tempfile.mkdtemp(prefix="shoal-bench-")
    kubeconfig = Path(directory) / "kubeconfig"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "shoal.testing.fake_apiserver",
        "--kubeconfig",
        str(kubeconfig),
        "--bookmark-interval",
        "5",
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    await proc.stdout.readline()  # the URL: it is serving
    try:
        yield str(kubeconfig)
    finally:
        proc.terminate()
        await proc.wait()


async def populate(
    client: KubeClient, namespace: str, scheduler: str, nodes: int, pods: int
) -> None:
    with contextlib.suppress(ApiError):
        await client.request("POST", NAMESPACES.path(), body={"metadata": {"name": namespace}})
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "1000"}

    async def node(i: int) -> None:
        name = f"bench-{RUN}-{i}"
        body = {
            "metadata": {"name": name, "labels": {LABEL: RUN, "kubernetes.io/hostname": name}},
            "spec": {"taints": [{"key": LABEL, "value": RUN, "effect": "NoSchedule"}]},
            "status": {"capacity": capacity, "allocatable": capacity},
        }
        with contextlib.suppress(ApiError):
            await client.request("POST", NODES.path(), body=body)
        await client.request(
            "PATCH",
            NODES.path(name=name, subresource="status"),
            body={"status": {"capacity": capacity, "allocatable": capacity}},
            content_type="application/merge-patch+json",
        )

    async def pod(i: int) -> None:
        body = bench_pod(f"p{i:05d}", namespace, scheduler, RUN)
        await client.request("POST", PODS.path(namespace), body=body)

    await gather_limited([node(i) for i in range(nodes)])
    await gather_limited([pod(i) for i in range(pods)])


def bench_pod(
    name: str, namespace: str, scheduler: str, run: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A small pause pod for `scheduler`, kept on this run's tainted bench nodes."""
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": {LABEL: run},
            "tolerations": TOLERATIONS,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }


async def gather_limited(coros: list[Any], limit: int = 32) -> None:
    slots = asyncio.Semaphore(limit)

    async def run(coro: Any) -> None:
        async with slots:
            await coro

    await asyncio.gather(*(run(c) for c in coros))


async def delete_namespace(client: KubeClient, namespace: str) -> None:
    """Delete the namespace's pods at once (no grace period), then the namespace."""
    with contextlib.suppress(ApiError):
        listing = await client.request("GET", PODS.path(namespace))
        await gather_limited(
            [
                client.request(
                    "DELETE",
                    PODS.path(namespace, item["metadata"]["name"]),
                    body={"gracePeriodSeconds": 0},
                )
                for item in listing.get("items") or []
            ]
        )
        await client.request("DELETE", NAMESPACES.path(name=namespace))


async def cleanup(client: KubeClient, namespace: str, nodes: int) -> None:
    await delete_namespace(client, namespace)
    for i in range(nodes):
        with contextlib.suppress(ApiError):
            await client.request("DELETE", NODES.path(name=f"bench-{RUN}-{i}"))


async def measure(kubeconfig: str, qps: float, burst: int, pods: int, nodes: int) -> Result:
    scheduler = f"shoal-bench-{RUN}"
    namespace = f"shoal-bench-{RUN}-{int(qps)}"
    setup = await connect(kubeconfig)
    admin = setup.client("bench-setup", ClientSettings(qps=0, timeout=60))
    try:
        await populate(admin, namespace, scheduler, nodes, pods)
        connection = await connect(kubeconfig)
        options = KubeOptions(
            identity=f"bench-{RUN}",
            qps=qps,
            burst=burst,
            leader_elect=False,
            informer=InformerSettings(watch_timeout=600),
            bind_concurrency=64,
        )
        kube = KubeBackend(
            parse_config({"profiles": [{"schedulerName": scheduler}]}), connection, options
        )
        reached: list[float] = []
        emit = kube.effects.emit

        def watch(effect: Any) -> None:  # Bound: the moment a bind is accepted
            if isinstance(effect, Bound):
                reached.append(time.monotonic())
            emit(effect)

        kube.effects.emit = watch  # type: ignore[method-assign]
        started = time.monotonic()
        task = asyncio.create_task(kube.run())
        try:
            while len(reached) < pods:
                if task.done():
                    task.result()
                await asyncio.sleep(0.02)
        finally:
            kube.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
            await connection.close()
        skip = min(burst, pods // 2) if qps > 0 else 0
        steady = _slope(reached[skip:])
        overall = len(reached) / (reached[-1] - started)
        return Result(qps, burst, pods, steady, overall, reached[-1] - started)
    finally:
        if os.environ.get("SHOAL_BENCH_KEEP") is None:
            await cleanup(admin, namespace, nodes)
        await setup.close()


def _slope(times: list[float]) -> float:
    """Binds per second: the least-squares slope of bind count over completion time
    (robust to a few binds finishing late and catching up)."""
    n = len(times)
    mean_t = sum(times) / n
    mean_k = (n - 1) / 2
    cov = sum((t - mean_t) * (k - mean_k) for k, t in enumerate(times))
    var = sum((t - mean_t) ** 2 for t in times)
    return cov / var if var > 0 else float("inf")


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--qps", default="50,100,200,500,1000,0")
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--pods", type=int, default=0, help="default: 8 s worth at each QPS")
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--kubeconfig", help="a real cluster (default: the fake API server)")
    args = parser.parse_args(argv)
    results = []
    for raw in args.qps.split(","):
        qps = float(raw)
        pods = args.pods or (max(400, int(qps * 8) + args.burst) if qps > 0 else 4000)
        if args.kubeconfig:
            result = await measure(args.kubeconfig, qps, args.burst, pods, args.nodes)
        else:
            async with fake_cluster() as kubeconfig:
                result = await measure(kubeconfig, qps, args.burst, pods, args.nodes)
        results.append(result)
        target = f"{100 * result.steady / qps:5.1f}%" if qps > 0 else "    -"
        print(
            f"qps {qps:6g}  burst {result.burst:4d}  pods {result.pods:5d}  "
            f"steady {result.steady:8.1f} binds/s  overall {result.overall:8.1f} binds/s  "
            f"of qps {target}  ({result.seconds:.1f} s)",
            flush=True,
        )
    short = [r for r in results if r.qps == 50 and r.steady < 0.95 * 50]
    if short:
        print(f"FAIL: at QPS 50 only {short[0].steady:.1f} binds/s (< 95 %)", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
