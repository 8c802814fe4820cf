"""Status writes (PodGroup, Queue, QueueBinding) under load, and what they cost in pods/s.

Runs Shoal's KubeBackend in this process against the fake API server (a child process)
or, with --kubeconfig, a real cluster. Each round creates the same cluster from scratch:
nodes, Queues with a QueueBinding each, `--gangs` scheduler-plugins PodGroups of
`--pods / --gangs` members (all pending when the scheduler starts), and times the binds
of all pods with status writes

* off: the PodGroup, Queue and QueueBinding status writers disconnected from the
  effects port (the scheduler still computes and emits the statuses);
* on: the writers at the backend's default rates (PodGroups 10/s, Queues and
  QueueBindings 5/s while binds are in flight, 50/s each once none is), as `shoal run`
  does;
* no-catch-up: the default rates, never faster once the binds are done (not in the
  default --modes; the catch-up rate's baseline);
* unlimited: the writers with no rate limit (what the limits protect against).

It reports pods/s (all binds over the time from the backend's start to the last bind,
and the steady rate: the least-squares slope of bind count over completion time), the
status writes made per second while scheduling, the ratio of pods/s to the `off` round
of the same run, how many PodGroup statuses were still to be written when the last
pod was bound (with the default rates, a backlog the writer works off afterwards) and
how long after the last bind every status had been written. The
client QPS is unlimited by default (--qps), so the writes cost CPU, not API budget.

Each round runs in a fresh interpreter (with a fresh fake API server), `--repeat` times
per mode in alternating order (ABC, CBA, ...); the medians and their ratios to `off`
close the report.

Usage:
  python bench/status_writes.py [--pods 10000] [--gangs 1000] [--queues 20]
      [--nodes 100] [--modes off,on,unlimited] [--repeat 2] [--qps 0] [--kubeconfig PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kube_binds import LABEL, bench_pod, delete_namespace, fake_cluster, gather_limited

from shoal.config import parse_config
from shoal.drivers.kube.backend import KubeBackend, KubeOptions
from shoal.drivers.kube.client import ApiError, ClientSettings, KubeClient, connect
from shoal.drivers.kube.crds import render
from shoal.drivers.kube.informer import InformerSettings
from shoal.drivers.kube.resources import (
    NAMESPACES,
    NODES,
    PODGROUPS,
    PODS,
    QUEUE_BINDINGS,
    QUEUES,
    ResourceKind,
)
from shoal.framework.effects import Bound

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@dataclass
class Round:
    mode: str
    pods: int
    seconds: float
    overall: float
    steady: float
    group_writes: int
    queue_writes: int
    pod_condition_writes: int
    groups_left: int
    caught_up: float | None = None  # s after the last bind until every status was written

    @property
    def writes_per_second(self) -> float:
        return (self.group_writes + self.queue_writes) / self.seconds


def _type_of(kind: ResourceKind) -> dict[str, str]:
    """apiVersion and kind: a real API server refuses a custom object without them."""
    return {"apiVersion": kind.api_version, "kind": kind.kind}


async def populate(
    client: KubeClient, run: str, args: argparse.Namespace, scheduler: str
) -> tuple[list[str], list[str]]:
    """The cluster of one round; returns the namespaces and the cluster-scoped paths."""
    for text in render().values():
        with contextlib.suppress(ApiError):  # installed already (a real cluster)
            await client.request("POST", CRDS, body=yaml.safe_load(text))
    capacity = {"cpu": "256", "memory": "1Ti", "pods": "1000"}
    paths: list[str] = []

    async def node(i: int) -> None:
        name = f"bench-{run}-{i}"
        body = {
            "metadata": {"name": name, "labels": {LABEL: run, "kubernetes.io/hostname": name}},
            "spec": {"taints": [{"key": LABEL, "value": run, "effect": "NoSchedule"}]},
            "status": {"capacity": capacity, "allocatable": capacity},
        }
        await client.request("POST", NODES.path(), body=body)
        await client.request(
            "PATCH",
            NODES.path(name=name, subresource="status"),
            body={"status": {"capacity": capacity, "allocatable": capacity}},
            content_type="application/merge-patch+json",
        )
        paths.append(NODES.path(name=name))

    await gather_limited([node(i) for i in range(args.nodes)])
    namespaces = [f"bench-{run}-q{q}" for q in range(args.queues)]
    for q, namespace in enumerate(namespaces):
        await client.request("POST", NAMESPACES.path(), body={"metadata": {"name": namespace}})
        queue = f"bench-{run}-q{q}"
        await client.request(
            "POST",
            QUEUES.path(),
            body={
                **_type_of(QUEUES),
                "metadata": {"name": queue},
                "spec": {"guaranteed": {"cpu": "10"}},
            },
        )
        await client.request(
            "POST",
            QUEUE_BINDINGS.path(),
            body={
                **_type_of(QUEUE_BINDINGS),
                "metadata": {"name": queue},
                "spec": {"queue": queue, "namespaces": [namespace]},
            },
        )
        paths += [QUEUES.path(name=queue), QUEUE_BINDINGS.path(name=queue)]
    size = args.pods // args.gangs

    async def gang(g: int) -> None:
        namespace = namespaces[g % len(namespaces)]
        group = f"g{g:05d}"
        await client.request(
            "POST",
            PODGROUPS.path(namespace),
            body={
                **_type_of(PODGROUPS),
                "metadata": {"name": group, "namespace": namespace},
                "spec": {"minMember": size},
            },
        )
        for m in range(size):
            body = bench_pod(f"{group}-{m}", namespace, scheduler, run, {GROUP_LABEL: group})
            await client.request("POST", PODS.path(namespace), body=body)

    await gather_limited([gang(g) for g in range(args.gangs)], limit=16)
    return namespaces, paths


async def cleanup(client: KubeClient, namespaces: list[str], paths: list[str]) -> None:
    for namespace in namespaces:
        # Without a namespace controller (../shared/k8s runs none) a deleted namespace
        # keeps its objects: the next round's informers would list this round's groups.
        with contextlib.suppress(ApiError):
            listing = await client.request("GET", PODGROUPS.path(namespace))
            await gather_limited(
                [
                    client.request("DELETE", PODGROUPS.path(namespace, item["metadata"]["name"]))
                    for item in listing.get("items") or []
                ]
            )
        await delete_namespace(client, namespace)
    for path in paths:
        with contextlib.suppress(ApiError):
            await client.request("DELETE", path)


async def measure(kubeconfig: str, mode: str, args: argparse.Namespace) -> Round:
    run = uuid.uuid4().hex[:6]
    scheduler = f"shoal-bench-{run}"
    setup = await connect(kubeconfig)
    admin = setup.client("bench-setup", ClientSettings(qps=0, timeout=120))
    namespaces: list[str] = []
    paths: list[str] = []
    try:
        namespaces, paths = await populate(admin, run, args, scheduler)
        connection = await connect(kubeconfig)
        options = KubeOptions(
            identity=f"bench-{run}",
            qps=args.qps,
            burst=max(100, int(args.qps)),
            leader_elect=False,
            informer=InformerSettings(watch_timeout=600),
            bind_concurrency=64,
        )
        if mode == "unlimited":
            options = replace(options, group_status_qps=0.0, queue_status_qps=0.0)
        elif mode == "no-catch-up":  # default limits, never faster once the binds are done
            options = replace(options, status_idle_qps=0.0)
        kube = KubeBackend(
            parse_config({"profiles": [{"schedulerName": scheduler}]}), connection, options
        )
        if mode == "off":
            kube.effects.groups = None
            kube.effects.queues = None
            kube.effects.bindings = None
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
            while len(reached) < args.pods:
                if task.done():
                    task.result()
                if time.monotonic() - started > args.timeout:
                    raise TimeoutError(f"{mode}: {len(reached)} of {args.pods} bound")
                await asyncio.sleep(0.02)
            seconds = reached[-1] - started
            groups_left = len(kube.group_status._pending)
            group_writes = kube.group_status.written
            queue_writes = kube.queue_status.written + kube.binding_status.written
            pod_conditions = kube.status.written
            caught_up: float | None = None
            if mode != "off":
                writers = (kube.group_status, kube.queue_status, kube.binding_status)
                while not all(w.idle for w in writers):
                    if time.monotonic() - reached[-1] > args.timeout:
                        break
                    await asyncio.sleep(0.05)
                else:
                    caught_up = time.monotonic() - reached[-1]
        finally:
            kube.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
            await connection.close()
        return Round(
            mode,
            args.pods,
            seconds,
            args.pods / seconds,
            _slope(reached),
            group_writes,
            queue_writes,
            pod_conditions,
            groups_left,
            caught_up,
        )
    finally:
        await cleanup(admin, namespaces, paths)
        await setup.close()


def _slope(times: list[float]) -> float:
    n = len(times)
    mean_t = sum(times) / n
    mean_k = (n - 1) / 2
    cov = sum((t - mean_t) * (k - mean_k) for k, t in enumerate(times))
    var = sum((t - mean_t) ** 2 for t in times)
    return cov / var if var > 0 else float("inf")


async def child(args: argparse.Namespace) -> Round:
    if args.kubeconfig:
        return await measure(args.kubeconfig, args.child, args)
    async with fake_cluster() as kubeconfig:
        return await measure(kubeconfig, args.child, args)


def run_round(mode: str, argv: list[str]) -> Round:
    """One round in a fresh interpreter: rounds in one process were not independent (each
    later round ran slower, whatever its mode: the heap and garbage of earlier rounds)."""
    done = subprocess.run(
        [sys.executable, __file__, *argv, "--child", mode],
        check=True,
        capture_output=True,
        text=True,
    )
    return Round(**json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--gangs", type=int, default=1000)
    parser.add_argument("--queues", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--modes", default="off,on,unlimited")
    parser.add_argument("--repeat", type=int, default=2, help="rounds per mode (ABC, CBA, ...)")
    parser.add_argument("--qps", type=float, default=0.0, help="client QPS (0: unlimited)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per round")
    parser.add_argument("--kubeconfig", help="a real cluster (default: the fake API server)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.pods % args.gangs:
        parser.error("--pods must be a multiple of --gangs")
    if args.child:
        print(json.dumps(asdict(asyncio.run(child(args)))), flush=True)
        return 0
    modes = args.modes.split(",")
    rounds: dict[str, list[Round]] = {m: [] for m in modes}
    for r in range(args.repeat):
        # Alternating order, so that a drift in the machine's load hits every mode alike.
        for mode in modes if r % 2 == 0 else modes[::-1]:
            result = run_round(mode, argv)
            rounds[mode].append(result)
            print(
                f"{mode:9s}  pods {result.pods:5d} in {result.seconds:6.1f} s  "
                f"{result.overall:7.1f} pods/s (steady {result.steady:7.1f})  "
                f"status writes {result.writes_per_second:6.1f}/s (podgroups "
                f"{result.group_writes}, queues+bindings {result.queue_writes})  pod "
                f"conditions {result.pod_condition_writes}  podgroup statuses still queued "
                f"{result.groups_left}, all written "
                + ("-" if result.caught_up is None else f"{result.caught_up:.1f} s")
                + " after the last bind",
                flush=True,
            )
    base = statistics.median(r.overall for r in rounds.get("off", [])) if "off" in rounds else 0
    print("median over rounds:")
    for mode, results in rounds.items():
        pods = statistics.median(r.overall for r in results)
        writes = statistics.median(r.writes_per_second for r in results)
        ratio = f"{pods / base:5.2f}" if base else "    -"
        print(f"  {mode:9s}  {pods:7.1f} pods/s  vs off {ratio}  status writes {writes:6.1f}/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
