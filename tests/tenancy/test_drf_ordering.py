"""Ordering DRF inside a leaf queue: the job using the smallest dominant share goes first."""

from __future__ import annotations

from shoal.testing import make_node, make_pod

from .helpers import harness, queue

LIGHT = "pod-group.scheduling.sigs.k8s.io/"


def member(name: str, group: str, min_available: int):
    return (
        make_pod(name)
        .labels(
            {
                "shoal.dev/queue": "drf",
                LIGHT + "name": group,
                LIGHT + "min-available": str(min_available),
            }
        )
        .req(cpu="1")
    )


def test_job_with_smaller_dominant_share_goes_first() -> None:
    h = harness()
    h.add_nodes(make_node("n0").capacity(cpu="5", memory="64Gi"))
    assert h.scheduler.apply_queues([queue("drf", ordering="DRF")]) == []
    # Job a runs 3 CPUs (3/5 of the cluster), job b runs 1 (1/5).
    h.add_pods(*(member(f"a-{i}", "a", 3) for i in range(3)))
    h.add_pods(member("b-0", "b", 1))
    h.run()
    assert len([n for n in h.result().placements.values() if n]) == 4
    # One CPU is left. Job a asks first, and its gang is older, but b uses less.
    h.add_pods(member("a-3", "a", 3), member("b-1", "b", 1))
    h.run()
    assert h.node_of("b-1") == "n0"
    assert h.node_of("a-3") is None


def test_drf_share_follows_placements_and_removals() -> None:
    h = harness()
    h.add_nodes(make_node("n0").capacity(cpu="8", memory="64Gi"))
    assert h.scheduler.apply_queues([queue("drf", ordering="DRF")]) == []
    h.add_pods(*(member(f"a-{i}", "a", 2) for i in range(2)))
    h.add_pods(member("b-0", "b", 1))
    h.run()
    queues = h.scheduler.tenant_queues
    assert queues.job_share("default/a") == 2 / 8  # cpu is the dominant resource
    assert queues.job_share("default/b") == 1 / 8
    h.delete_pod("a-0")
    assert queues.job_share("default/a") == 1 / 8
    h.delete_pod("a-1")
    assert queues.job_share("default/a") == 0.0
