"""Queue status leaves the core as QueueStatus effects (what a Queue object's status
shows): allocation, guarantee, HDRF fair share, pending and running pods; published when
it changes, at most once a second of scheduler time."""

from __future__ import annotations

from shoal.framework.effects import QueueStatus
from shoal.testing.builders import make_node, make_pod
from shoal.testing.harness import SchedulerHarness

from .helpers import GPU, queue


def gpu_pod(name: str, q: str):  # type: ignore[no-untyped-def]
    return make_pod(name).labels({"shoal.dev/queue": q}).req({GPU: 1}, cpu="1")


def test_queue_status_effects_follow_usage() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity({GPU: 2}, cpu="16", memory="64Gi") for i in range(3)))
    assert h.scheduler.apply_queues([queue("a", guaranteed={GPU: 2}), queue("b")]) == []
    h.add_pods(*(gpu_pod(f"a-{i}", "a") for i in range(4)), gpu_pod("b-0", "b"))
    h.advance(2)
    status = h.effects.queue_status
    # Queues count nvidia.com/gpu in milli-GPU (quota units), so shares can count.
    assert status["a"].allocated.get(GPU) == 4000
    assert status["a"].guaranteed.get(GPU) == 2000
    assert status["a"].running_pods == 4 and status["a"].pending_pods == 0
    assert status["b"].allocated.get(GPU) == 1000
    # Demand 4 and 1 on 6 GPUs: both get what they ask for.
    assert status["a"].fair_share.get(GPU) == 4000 and status["b"].fair_share.get(GPU) == 1000
    emitted: list[QueueStatus] = []
    h.effects.listeners.append(lambda e: emitted.append(e) if isinstance(e, QueueStatus) else None)
    h.delete_pod("a-0")
    h.advance(2)
    # Only the queue that changed is published again.
    assert [(e.name, e.allocated.get(GPU)) for e in emitted] == [("a", 3000)]
