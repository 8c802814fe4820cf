"""Helpers for the Kubernetes backend tests: objects, a running backend, waiting."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from shoal.config import KubeSchedulerConfiguration, parse_config
from shoal.drivers.kube.backend import KubeBackend, KubeOptions
from shoal.drivers.kube.client import connect
from shoal.drivers.kube.informer import InformerSettings
from shoal.drivers.kube.leader import LeaderSettings
from shoal.testing.fake_apiserver import FakeApiServer

P = ParamSpec("P")
T = TypeVar("T")

SCHEDULER = "shoal"


def async_test(timeout: float = 30.0) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, T]]:
    """Run an async test function in a fresh event loop, with an overall time limit."""

    def wrap(fn: Callable[P, Awaitable[T]]) -> Callable[P, T]:
        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> T:
            async def main() -> T:
                task = asyncio.ensure_future(fn(*args, **kwargs))  # type: ignore[arg-type]
                done, _ = await asyncio.wait({task}, timeout=timeout)
                if task in done:
                    return task.result()
                # A hang: say where every task and thread is before the test is cancelled
                # (the cancellation unwinds the stacks that would explain it).
                _dump_stacks(task)
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                raise AssertionError(
                    f"{fn.__name__} did not finish in {timeout:g} s (stacks on stderr)"
                )

            return asyncio.run(main())

        return run

    return wrap


def _dump_stacks(test: asyncio.Task[Any]) -> None:
    """Print the stack of every asyncio task of this loop and of every thread."""
    out = [f"--- asyncio tasks (the test: {test.get_name()}) ---"]
    for task in asyncio.all_tasks():
        frames = task.get_stack(limit=8)
        where = " <- ".join(
            f"{f.f_code.co_name} ({Path(f.f_code.co_filename).name}:{f.f_lineno})"
            for f in reversed(frames)
        )
        out.append(f"{task.get_name()}: {where or 'not started'}")
    out.append("--- threads ---")
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        stack = traceback.extract_stack(frame, limit=12)
        out.append(f"{names.get(ident, ident)}:")
        out.extend(f"    {s.name} ({Path(s.filename).name}:{s.lineno})" for s in stack)
    print("\n".join(out), file=sys.stderr)


def config(*names: str) -> KubeSchedulerConfiguration:
    return parse_config({"profiles": [{"schedulerName": n} for n in (names or (SCHEDULER,))]})


def node(name: str, cpu: str = "4", memory: str = "8Gi", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        },
    }


def pod(
    name: str,
    cpu: str = "500m",
    memory: str = "256Mi",
    *,
    scheduler: str = SCHEDULER,
    namespace: str = "default",
    node_selector: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node_name: str = "",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "c",
                "image": "busybox",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if node_name:
        spec["nodeName"] = node_name
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def fast_options(identity: str = "shoal-test", **overrides: Any) -> KubeOptions:
    values: dict[str, Any] = {
        "identity": identity,
        "qps": 0.0,  # unlimited unless a test sets it
        "burst": 1,
        "request_timeout": 2.0,
        "leader_elect": False,
        "leader": LeaderSettings(
            name="shoal",
            namespace="kube-system",
            identity=identity,
            lease_duration=1.2,
            renew_deadline=0.8,
            retry_period=0.15,
        ),
        "informer": InformerSettings(
            watch_timeout=30.0,
            read_timeout=5.0,
            list_timeout=5.0,
            backoff_initial=0.05,
            backoff_max=0.5,
            absent_retry=0.5,
        ),
        "max_idle_seconds": 0.1,
        "event_repeat_seconds": 60.0,
        "shutdown_grace_seconds": 1.0,
        "shard_handoff_seconds": 0.5,
    }
    values.update(overrides)
    return KubeOptions(**values)


@contextlib.asynccontextmanager
async def backend(
    api: FakeApiServer,
    tmp_path: Path,
    options: KubeOptions | None = None,
    scheduler_config: KubeSchedulerConfiguration | None = None,
    *,
    graceful: bool = True,
    seed: int = 0,
) -> AsyncIterator[tuple[KubeBackend, asyncio.Task[None]]]:
    """A running backend against `api`; stopped (or killed) on exit."""
    options = options or fast_options()
    kubeconfig = api.kubeconfig(tmp_path / f"kubeconfig-{options.identity}")
    connection = await connect(str(kubeconfig))
    kube = KubeBackend(scheduler_config or config(), connection, options, seed=seed)
    task = asyncio.create_task(kube.run())
    try:
        yield kube, task
    finally:
        if graceful and not task.done():
            kube.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 5)
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await connection.close()


async def eventually(
    check: Callable[[], bool], timeout: float = 30.0, interval: float = 0.02, what: str = ""
) -> None:
    """Wait until `check()` holds. The timeout is a bound on a hang, not a speed check:
    it returns as soon as the check holds; 30 s leaves room for a loaded CI machine
    (10 s failed now and then while other suites ran on the same two cores)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        await asyncio.sleep(interval)


def bound_pods(api: FakeApiServer) -> dict[str, str]:
    """namespace/name -> node, for every bound pod."""
    out = {}
    for p in api.pods():
        node_name = (p.get("spec") or {}).get("nodeName")
        if node_name:
            out[f"{p['metadata']['namespace']}/{p['metadata']['name']}"] = node_name
    return out


def events_for(api: FakeApiServer, name: str, reason: str = "") -> list[dict[str, Any]]:
    return [
        e
        for e in api.list_objects("events.k8s.io", "events")
        if e.get("regarding", {}).get("name") == name and (not reason or e.get("reason") == reason)
    ]


def condition(api_pod: dict[str, Any] | None, kind: str = "PodScheduled") -> dict[str, Any] | None:
    if api_pod is None:
        return None
    return next(
        (c for c in (api_pod.get("status") or {}).get("conditions") or [] if c.get("type") == kind),
        None,
    )


def pod_story(kube: KubeBackend, api: FakeApiServer, key: str) -> str:
    """Where a pod is on its way to a node, for a test's failure message: the API
    server's copy, the informer's, the intake's and the core's view, node shards."""
    namespace, name = key.split("/", 1)
    served = next(
        (
            p
            for p in api.pods()
            if p["metadata"].get("namespace") == namespace and p["metadata"].get("name") == name
        ),
        None,
    )
    informer = kube.informers["pods"]
    cached = informer.store.get(key)
    uid = str(((served or cached or {}).get("metadata") or {}).get("uid", ""))
    known = kube.scheduler.known_pod(uid) if uid else None
    parts = [
        f"server: {'absent' if served is None else served['metadata'].get('resourceVersion')}"
        f" node={((served or {}).get('spec') or {}).get('nodeName')}",
        f"informer: rv={informer.resource_version} watches={informer.watches}"
        f" lists={informer.lists} has it={cached is not None}",
        f"server watches open: {api.open_watches('pods')}",
        f"core: known={known is not None} binding={uid in kube.scheduler.binding}"
        f" pending={kube.scheduler.explain(uid)!r} backlog={kube.core.backlog}"
        f" cycles={kube.cycles} bound={kube.bound}",
        f"binder: in flight={kube.binder.in_flight}"
        f" pending nodes={dict(kube.binder.pending_nodes)}",
    ]
    if kube.shards is not None:
        state = kube.shards.state
        parts.append(
            f"shards: usable={len(state.usable)}/{state.slots} error={kube.shards.error!r}"
            f" renewed {time.monotonic() - state.last_renew:.2f}s ago"
        )
    return "; ".join(parts)
