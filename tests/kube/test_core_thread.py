"""The core off the event loop (issue "Core v3", defect 4): a slow HTTP extender delays
decisions, never /healthz, the watches, or the binds already decided.

The extender's filter answers after 3 s for one pod. While the core waits for it (on its
own thread), the test probes /healthz with kube's default probe timeout (1 s), creates a
node and watches the binds of pods decided before: before the core had a thread of its
own every probe timed out, the node was seen only after the call, and no bind went out
during it (the fake API server shares the test's loop, so nothing moved at all).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kubehelpers import (
    SCHEDULER,
    async_test,
    backend,
    bound_pods,
    eventually,
    fast_options,
    node,
    pod,
)
from slowextender import SLOW_LABEL, probe_during_slow_call, slow_extender

from shoal.api.podinfo import PodInfo
from shoal.config import parse_config
from shoal.drivers.kube.core import CoreThread
from shoal.testing.fake_apiserver import FakeApiServer, Fault
from shoal.web.server import HealthServer


@async_test(timeout=60)
async def test_a_slow_extender_delays_decisions_only(tmp_path: Path) -> None:
    with slow_extender(3.0) as ext:
        config = parse_config(
            {"profiles": [{"schedulerName": SCHEDULER}], "extenders": [ext.config()]}
        )
        async with FakeApiServer() as api:
            api.create("v1", "nodes", node("n1", cpu="8"))
            api.create("v1", "nodes", node("n2", cpu="8"))
            # Binds take 1.5 s to answer: those of the pods decided first are still in
            # flight while the core waits for the extender.
            api.inject(Fault(method="POST", path="/binding$", status=0, delay=1.5, times=None))
            async with backend(api, tmp_path, fast_options(), config) as (kube, _):
                server = HealthServer(
                    kube.metrics.registry, kube.healthz, kube.readyz, port=0, render_on=kube.on_core
                )
                await server.start()
                try:
                    for i in range(5):
                        api.create("v1", "pods", pod(f"fast-{i}", cpu="100m"))
                    await eventually(lambda: kube.binder.in_flight == 5, what="5 binds sent")
                    api.create("v1", "pods", pod("slow", cpu="100m", labels={SLOW_LABEL: "1"}))
                    await eventually(ext.started.is_set, what="the slow filter call")
                    api.create("v1", "nodes", node("n3"))
                    seen: list[float] = []

                    def watch() -> None:
                        if not seen and "n3" in kube.informers["nodes"].store:
                            seen.append(time.monotonic())

                    probes = await probe_during_slow_call(ext, server.port, watch)
                    node_seen = seen[0] if seen else 0.0
                    _, started, ended = ext.calls[0]
                    binds_during = sum(started < b.at < ended for b in api.bindings)
                    assert len(probes) >= 5 and all(s == 200 for s in probes), probes
                    assert 0 < node_seen < ended, "the node watch waited for the extender"
                    assert binds_during == 5, f"{binds_during} of 5 binds landed during the call"
                    assert ended - started >= 2.9
                    # The decision itself comes after the call, with the new node known.
                    await eventually(lambda: "default/slow" in bound_pods(api), timeout=15)
                    await eventually(lambda: len(bound_pods(api)) == 6, timeout=15)
                    # The core's own state is read on its thread.
                    nodes = await kube.on_core(lambda: len(kube.scheduler.cluster.table.row_of))
                    assert nodes == 3
                    metrics = (await server.exposition()).decode()
                    assert "scheduler_schedule_attempts_total" in metrics
                finally:
                    await server.stop()


@async_test(timeout=20)
async def test_posts_run_in_order_on_the_core_thread_and_inline_when_stopped() -> None:
    import threading

    core = CoreThread("test-core")
    seen: list[tuple[int, str]] = []

    def note(i: int) -> None:
        seen.append((i, threading.current_thread().name))

    note(0)  # not started: inline
    core.post(note, 1)
    core.start()
    for i in range(2, 200):
        core.post(note, i)
    threads = await core.call(lambda: {name for _, name in seen[2:]})
    assert [i for i, _ in seen] == list(range(200))
    assert threads == {"test-core"}
    assert seen[1][1] != "test-core"  # posted before the start: ran inline

    async def on_core() -> str:
        await asyncio.sleep(0)
        return threading.current_thread().name

    assert await core.run(on_core()) == "test-core"

    def boom() -> None:
        raise ValueError("a bad update")

    core.post(boom)  # logged; the inbox goes on
    core.post(note, 200)
    assert await core.call(lambda: seen[-1][0]) == 200
    await core.stop()
    core.post(note, 201)
    assert seen[-1][1] != "test-core"


@async_test(timeout=20)
async def test_threaded_effects_keep_order_deliver_outcomes_and_cancel_binds() -> None:
    """Effects reach the I/O loop in the order the core produced them (a `Bind` after
    the effect it depends on); KubeEffects carries each `Bind` out as a task there and
    its outcome (success, error) comes back into the core's inbox as an event; a bind
    cancelled at shutdown gives no outcome. Effects cross in batches, which must change
    none of that."""
    import threading

    from shoal.drivers.kube.core import IoPort, ThreadedEffects
    from shoal.drivers.kube.effects import KubeEffects
    from shoal.framework.effects import Bind, BindError, Nominate
    from shoal.testing import make_pod

    io_thread = threading.current_thread().name
    log: list[tuple[str, str]] = []  # (what, thread) on the I/O side
    release = asyncio.Event()  # the bind of "slow" waits for it

    class Binder:
        async def bind(self, pod: Any, node: str, annotations: Any) -> None:
            log.append((f"bind {pod.name}", threading.current_thread().name))
            if pod.name == "bad":
                raise BindError("conflict")
            if pod.name == "slow":
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    log.append(("cancelled slow", threading.current_thread().name))
                    raise

    kube = KubeEffects(Binder(), None, None, None, None)  # type: ignore[arg-type]

    class Port:
        def emit(self, effect: Any) -> None:
            what = f"{type(effect).__name__} {effect.pod.name}"
            log.append((what, threading.current_thread().name))
            kube.emit(effect)

    io = IoPort()
    io.attach(asyncio.get_running_loop())
    effects = ThreadedEffects(Port(), io)  # type: ignore[arg-type]
    core = CoreThread("test-core")
    outcomes: list[tuple[str, str]] = []  # (outcome, thread) on the core
    kube.on_bind_outcome = lambda outcome: core.post(
        lambda: outcomes.append((f"{outcome.uid}: {outcome.error or 'ok'}", core.name))
    )
    core.start()
    try:
        pods = {name: PodInfo(make_pod(name).obj()) for name in ("a", "b", "bad", "slow")}

        def on_core() -> None:
            for name in ("a", "b"):
                effects.emit(Nominate(pods[name], "n1"))
                effects.emit(Bind(pods[name], "n1"))
            effects.emit(Bind(pods["bad"], "n1"))
            effects.emit(Bind(pods["slow"], "n1"))

        await core.call(on_core)
        await eventually(lambda: len(outcomes) == 3, what="three outcomes on the core")
        await eventually(lambda: ("bind slow", io_thread) in log, what="slow in flight")
        for task in list(kube.binds):  # shutdown: in-flight binds are cancelled
            task.cancel()
        await eventually(lambda: ("cancelled slow", io_thread) in log, what="slow cancelled")
        await asyncio.sleep(0.05)
    finally:
        await core.stop()
    uid = {name: pod.uid for name, pod in pods.items()}
    assert outcomes == [
        (f"{uid['a']}: ok", "test-core"),
        (f"{uid['b']}: ok", "test-core"),
        (f"{uid['bad']}: conflict", "test-core"),
    ]
    emitted = [what for what, _ in log if not what.startswith(("bind ", "cancelled"))]
    assert emitted == ["Nominate a", "Bind a", "Nominate b", "Bind b", "Bind bad", "Bind slow"]
    assert {thread for _, thread in log} == {io_thread}
