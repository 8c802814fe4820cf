"""Status writers keep up when each write waits behind other requests: several objects
are written at once, never two writes of one object together, and requests still start
at most `qps` per second."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from itertools import pairwise
from typing import Any, cast

from kubehelpers import async_test

from shoal.drivers.kube.client import KubeClient
from shoal.drivers.kube.status import EventRecorder, QueueStatusWriter
from shoal.framework.effects import QueueStatus
from shoal.web.metrics import SchedulerMetrics


class SlowClient:
    """Answers every request after `latency` seconds, recording starts and overlap."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.starts: list[tuple[float, str]] = []
        self.active: dict[str, int] = {}
        self.max_active = 0
        self.max_active_per_object = 0

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        self.starts.append((loop.time(), path))
        self.active[path] = self.active.get(path, 0) + 1
        self.max_active = max(self.max_active, sum(self.active.values()))
        self.max_active_per_object = max(self.max_active_per_object, self.active[path])
        await asyncio.sleep(self.latency)
        self.active[path] -= 1
        return {}


def queue_object(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1"}, "status": {}}


@async_test(timeout=20)
async def test_writes_overlap_under_latency_but_keep_the_rate() -> None:
    client = SlowClient(latency=0.5)
    writer = QueueStatusWriter(cast(KubeClient, client), queue_object, qps=20.0)
    task = asyncio.create_task(writer.run())
    for i in range(12):
        writer.update(QueueStatus(name=f"q{i}", running_pods=1))
    while not writer.idle:
        await asyncio.sleep(0.02)
    task.cancel()

    assert writer.written == 12
    # Four objects in flight at once (one at a time, each write would wait 0.5 s).
    assert client.max_active == 4
    times = sorted(t for t, _ in client.starts)
    # At most qps: consecutive starts at least 1/qps apart (a little slack for timers).
    assert all(b - a >= 0.05 - 0.01 for a, b in pairwise(times))


@async_test(timeout=20)
async def test_an_object_updated_while_being_written_is_written_again_after() -> None:
    client = SlowClient(latency=0.3)
    writer = QueueStatusWriter(cast(KubeClient, client), queue_object, qps=0)
    task = asyncio.create_task(writer.run())
    writer.update(QueueStatus(name="q", running_pods=1))
    await asyncio.sleep(0.1)  # the first write is in flight
    writer.update(QueueStatus(name="q", running_pods=2))
    writer.update(QueueStatus(name="q", running_pods=3))  # coalesces with the second
    while not writer.idle:
        await asyncio.sleep(0.02)
    task.cancel()

    assert client.max_active_per_object == 1
    assert writer.written == 2
    assert [p for _, p in client.starts] == [client.starts[0][1]] * 2


@async_test(timeout=20)
async def test_writes_go_at_the_idle_rate_once_no_bind_is_in_flight() -> None:
    client = SlowClient(latency=0.0)
    binding = [True]
    writer = QueueStatusWriter(
        cast(KubeClient, client), queue_object, qps=5.0, idle_qps=100.0, busy=lambda: binding[0]
    )
    task = asyncio.create_task(writer.run())
    for i in range(30):
        writer.update(QueueStatus(name=f"q{i}", running_pods=1))
    await asyncio.sleep(0.5)
    binding[0] = False
    switched = asyncio.get_running_loop().time()
    while not writer.idle:
        await asyncio.sleep(0.02)
    task.cancel()

    assert writer.written == 30
    times = sorted(t for t, _ in client.starts)
    busy = [t for t in times if t < switched]
    idle = [t for t in times if t >= switched]
    # At most 5/s while binds are in flight (a little slack for timers)...
    assert all(b - a >= 0.2 - 0.02 for a, b in pairwise(busy))
    # ...and the rest at up to 100/s: far less than the seconds 5/s would take.
    assert len(idle) >= 20
    # (Writes already waiting for their slot at the slower rate keep it: no gap check.)
    assert idle[-1] - switched < 0.25 + 0.01 * len(idle) + 1.0


def test_no_idle_rate_keeps_the_rate_when_idle() -> None:
    client = cast(KubeClient, SlowClient(latency=0.0))
    kept = QueueStatusWriter(client, queue_object, qps=5.0, idle_qps=0.0, busy=lambda: False)
    assert kept.idle_interval == kept.interval == 0.2
    slower = QueueStatusWriter(client, queue_object, qps=5.0, idle_qps=1.0, busy=lambda: False)
    assert slower.idle_interval == 0.2  # never slower than qps when idle
    unlimited = QueueStatusWriter(client, queue_object, qps=0.0, idle_qps=50.0)
    assert unlimited.idle_interval == unlimited.interval == 0.0


def event_recorder(client: SlowClient, busy: Callable[[], bool], **limits: int) -> EventRecorder:
    """A recorder with 16 writers, 2 while `busy`, writing to `client`."""
    return EventRecorder(
        cast(KubeClient, client),
        "shoal-0",
        SchedulerMetrics(),
        workers=16,
        busy_workers=2,
        busy=busy,
        **limits,
    )


def record_scheduled(recorder: EventRecorder, pods: int) -> None:
    for i in range(pods):
        pod = {"kind": "Pod", "namespace": "default", "name": f"p{i}", "uid": f"u{i}"}
        recorder.record(pod, "Normal", "Scheduled", "Binding", "assigned", "shoal")


async def drained(recorder: EventRecorder, task: asyncio.Task[None]) -> None:
    while recorder.backlog:
        await asyncio.sleep(0.02)
    task.cancel()


@async_test(timeout=20)
async def test_events_give_way_to_binds_then_catch_up_and_none_is_dropped() -> None:
    """While binds are in flight the recorder keeps to `busy_workers` writes at once;
    once they are done it writes with `workers`. A burst of events larger than the
    old 5000-event queue is written whole (it dropped 43 % of a 10000-pod burst)."""
    client = SlowClient(latency=0.01)
    binding = True
    recorder = event_recorder(client, lambda: binding)
    task = asyncio.create_task(recorder.run())
    record_scheduled(recorder, 6000)
    await asyncio.sleep(0.3)
    assert client.max_active == 2  # binds in flight: two event writes at most
    written_while_busy = recorder.written
    binding = False
    await drained(recorder, task)
    assert client.max_active == 16
    assert recorder.written == 6000 and recorder.dropped == 0
    assert written_while_busy < 6000


@async_test(timeout=20)
async def test_events_keep_up_with_binds_that_never_stop_once_half_the_queue_is_used() -> None:
    client = SlowClient(latency=0.01)
    recorder = event_recorder(client, lambda: True, max_pending=1000)
    task = asyncio.create_task(recorder.run())
    record_scheduled(recorder, 900)
    await drained(recorder, task)
    assert client.max_active == 16  # past half the queue: every writer, binds or not
    assert recorder.written == 900 and recorder.dropped == 0
