"""LargeJobReservation: reservations for waiting large pods, backfill, expiry, release,
idle-node protection, and its args (hand-built clusters, scheduled by the real scheduler)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.config.load import ConfigError
from shoal.gang.large_jobs import STALE_SECONDS
from shoal.plugins.large_job_reservation import LargeJobReservation, LargeJobReservationArgs
from shoal.testing import SchedulerHarness, make_node, make_pod

GPU = "nvidia.com/gpu"
HOST = "example.com/host"


def config(**args: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "plugins": {"multiPoint": {"enabled": [{"name": "LargeJobReservation"}]}},
                "pluginConfig": [{"name": "LargeJobReservation", "args": args}],
            }
        ],
    }


def plugin_of(h: SchedulerHarness) -> LargeJobReservation:
    fwk = h.scheduler.profiles["default-scheduler"]
    return next(p for p in fwk.plugins.filter if isinstance(p, LargeJobReservation))


def gpu_pod(name: str, gpus: int, cpu: str = "1", node: str | None = None):
    pod = make_pod(name).req({GPU: gpus, "cpu": cpu, "memory": "1Gi"})
    return pod.node(node) if node else pod


def cluster(**args: Any) -> SchedulerHarness:
    """n0, n1, n2: 8 GPUs and 32 cpu each. 1-GPU pods already run there: three on n0,
    one on n1, five on n2, so n1 is the node closest to fitting an 8-GPU pod. An 8-GPU
    pod `large` arrives at t = 0 and fits nowhere."""
    h = SchedulerHarness(config(**args))
    h.add_nodes(
        *(
            make_node(f"n{i}").capacity({GPU: 8}, cpu="32", memory="128Gi").labels({HOST: f"n{i}"})
            for i in range(3)
        )
    )
    for node, count in (("n0", 3), ("n1", 1), ("n2", 5)):
        h.add_pods(*(gpu_pod(f"{node}-run-{k}", 1, node=node) for k in range(count)))
    h.add_pods(gpu_pod("large", 8, cpu="8"))
    h.run()
    assert h.node_of("large") is None
    return h


def pinned(name: str, node: str, **requests: Any):
    return make_pod(name).req(requests).node_selector({HOST: node})


RESERVE = {"reservationAfterSeconds": 30, "nodesPerReservation": 1}


def test_waiting_large_pod_reserves_the_closest_node_and_small_pods_go_elsewhere() -> None:
    h = cluster(**RESERVE)
    assert not plugin_of(h).jobs.reservations  # it has not waited 30 s yet
    h.advance(40)
    h.delete_pod("n0-run-0")  # an event: the large pod is tried again, still fits nowhere
    h.run()
    held = plugin_of(h).jobs.reservations
    assert [r.nodes for r in held.values()] == [("n1",)]
    assert "node(s) n1 reserved for it" in h.message("large")
    # A 1-GPU pod would prefer n1 (least allocated) but is kept off it; it lands elsewhere.
    h.add_pods(gpu_pod("small", 1))
    h.run()
    assert h.node_of("small") in ("n0", "n2")
    # Pinned to n1, it waits and says why.
    h.add_pods(pinned("pinned-gpu", "n1", **{GPU: 1, "cpu": "1"}))
    h.run()
    assert h.node_of("pinned-gpu") is None
    assert "reserved for a waiting large pod" in h.message("pinned-gpu")


def test_backfill_only_when_it_does_not_delay_the_reservation() -> None:
    h = cluster(**RESERVE)
    h.advance(40)
    h.delete_pod("n0-run-0")
    h.run()
    # cpu-only pods fit next to the large pod (8 of 32 cpu): they backfill n1, until the
    # backfilled cpu and the large pod's 8 would exceed the node.
    h.add_pods(pinned("backfill-a", "n1", cpu="12"), pinned("backfill-b", "n1", cpu="12"))
    h.run()
    assert h.node_of("backfill-a") == "n1" and h.node_of("backfill-b") == "n1"
    h.add_pods(pinned("too-big", "n1", cpu="2"))  # 12 + 12 + 2 + 8 > 32
    h.run()
    assert h.node_of("too-big") is None
    assert "reserved for a waiting large pod" in h.message("too-big")
    # When the incumbent leaves, the large pod lands on its reserved node, beside the
    # backfilled pods, and the reservation ends.
    h.delete_pod("n1-run-0")
    h.advance(15)  # the large pod's backoff
    assert h.node_of("large") == "n1"
    assert not plugin_of(h).jobs.reservations


def test_release_on_placement_lets_small_pods_back() -> None:
    h = cluster(**{**RESERVE, "nodesPerReservation": 2})
    h.advance(40)
    h.delete_pod("n0-run-0")
    h.run()
    (held,) = plugin_of(h).jobs.reservations.values()
    assert held.nodes == ("n1", "n0")  # n1 misses 1 of 8 GPUs, n0 now 2 of 8
    h.add_pods(pinned("wait-n0", "n0", **{GPU: 1, "cpu": "1"}))
    h.run()
    assert h.node_of("wait-n0") is None
    h.delete_pod("n1-run-0")  # n1 drains first: the large pod takes it
    h.advance(15)
    assert h.node_of("large") == "n1"
    assert not plugin_of(h).jobs.reservations
    # n0 is free for small work again (the pod kept off it is retried on the event).
    h.advance(15)
    assert h.node_of("wait-n0") == "n0"


def test_reservation_expires_and_the_pod_waits_out_a_cooldown() -> None:
    h = cluster(**RESERVE, reservationMaxSeconds=60)
    h.advance(40)
    h.delete_pod("n0-run-0")
    h.run()
    assert plugin_of(h).jobs.reservations
    h.advance(61)  # the reservation is over at t = 100
    h.add_pods(pinned("after-expiry", "n1", **{GPU: 1, "cpu": "1"}))
    h.run()
    assert h.node_of("after-expiry") == "n1"
    assert not plugin_of(h).jobs.reservations
    h.delete_pod("n2-run-0")  # the large pod fails again: no new reservation for 60 s
    h.run()
    assert not plugin_of(h).jobs.reservations
    h.advance(61)
    h.delete_pod("n2-run-1")
    h.run()
    assert plugin_of(h).jobs.reservations


def test_higher_priority_pods_are_not_kept_off_a_reservation() -> None:
    h = cluster(**RESERVE)
    h.advance(40)
    h.delete_pod("n0-run-0")
    h.run()
    h.add_pods(pinned("urgent", "n1", **{GPU: 1, "cpu": "1"}).priority(1000))
    h.run()
    assert h.node_of("urgent") == "n1"


def test_small_pods_do_not_reserve() -> None:
    h = cluster(**RESERVE, minGpus=16)  # nothing here is large
    h.advance(40)
    h.delete_pod("n0-run-0")
    h.run()
    assert not plugin_of(h).jobs.reservations
    assert "reserved" not in h.message("large")


def test_protect_idle_keeps_small_pods_off_nodes_a_large_pod_could_use() -> None:
    def run(protect: bool) -> str | None:
        args: dict[str, Any] = {"protectIdle": True, "maxReservations": 0} if protect else {}
        h = SchedulerHarness(config(**args)) if protect else SchedulerHarness()
        h.add_nodes(
            *(make_node(f"n{i}").capacity({GPU: 8}, cpu="32", memory="128Gi") for i in range(3))
        )
        h.add_pods(gpu_pod("busy", 4, node="n1"))
        h.add_pods(gpu_pod("large", 8))  # placed on an idle node: its shape is remembered
        h.run()
        assert h.node_of("large") in ("n0", "n2")
        h.add_pods(gpu_pod("small", 1))
        h.run()
        return h.node_of("small")

    # Without protection the default profile spreads the small pod to the idle node.
    assert run(protect=False) != "n1"
    # With it, the last idle node stays whole for the next large pod.
    assert run(protect=True) == "n1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"minGpus": None}, "set minGpus or minMilliCpu"),
        ({"maxReservations": 0}, "the plugin would do nothing"),
        ({"nodesPerReservation": 0}, "greater than or equal to 1"),
        ({"reservationMaxSeconds": 0}, "greater than 0"),
        ({"reservationAfterSeconds": -1}, "greater than or equal to 0"),
        ({"minGpus": 0}, "greater than 0"),
        ({"maxReservation": 2}, "args.maxReservation: unknown field 'maxReservation'"),
    ],
)
def test_bad_args_are_reported_with_their_field(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        SchedulerHarness(config(**args))
    assert "profiles[0].pluginConfig[0].args" in str(err.value)
    assert message in str(err.value)


def test_args_defaults_and_cpu_threshold() -> None:
    args = LargeJobReservationArgs()
    assert (args.min_gpus, args.max_reservations, args.nodes_per_reservation) == (8.0, 1, 2)
    cpu_only = LargeJobReservationArgs.model_validate({"minGpus": None, "minMilliCpu": 64000})
    assert cpu_only.settings().min_milli_cpu == 64000


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(1, 20), st.integers(0, 2), st.booleans()),
        min_size=1,
        max_size=10,
    )
)
def test_backfill_never_takes_what_the_reserved_pod_needs(
    pods: list[tuple[int, int, bool]],
) -> None:
    """Whatever small pods arrive (pinned to the reserved node or free to go anywhere),
    the pods placed on the reserved node after the reservation began leave room for the
    large pod: once the incumbents go, it fits."""
    h = cluster(**RESERVE)
    h.advance(40)
    h.delete_pod("n0-run-0")
    h.run()
    (held,) = plugin_of(h).jobs.reservations.values()
    (node,) = held.nodes
    for i, (cpu, gpus, pin) in enumerate(pods):
        requests: dict[str, Any] = {"cpu": str(cpu), "memory": "1Gi"}
        if gpus:
            requests[GPU] = gpus
        h.add_pods(pinned(f"p{i}", node, **requests) if pin else make_pod(f"p{i}").req(requests))
    h.run()
    assert plugin_of(h).jobs.reservations  # still held: nothing here ends it
    incumbents = held.incumbents[node]
    later = [p for p in h.scheduler.cluster.pods_on(node) if p.uid not in incumbents]
    cpu_used = sum(p.requests.get("cpu", 0) for p in later)
    gpus_used = sum(p.requests.get(GPU, 0) for p in later)
    assert cpu_used + 8000 <= 32000 and gpus_used + 8 <= 8


def test_preemption_still_works_next_to_a_reservation() -> None:
    """A high-priority pod pinned to a reserved node, with no room there, preempts the
    low-priority incumbent (DefaultPreemption runs before the reservation's PostFilter)."""
    h = cluster(**RESERVE)
    h.advance(40)
    h.delete_pod("n0-run-0")
    h.run()
    h.add_pods(pinned("vip", "n1", **{GPU: 8, "cpu": "1"}).priority(1000))
    h.advance(15)
    assert "default/n1-run-0" in h.evicted


def test_reservation_of_a_deleted_pod_ends() -> None:
    h = cluster(**RESERVE, reservationMaxSeconds=7200)
    h.advance(40)
    h.delete_pod("n0-run-0")
    h.run()
    assert plugin_of(h).jobs.reservations
    h.delete_pod("large")
    h.advance(STALE_SECONDS + 1)
    h.add_pods(pinned("after-delete", "n1", **{GPU: 1, "cpu": "1"}))
    h.run()
    assert h.node_of("after-delete") == "n1"
    assert not plugin_of(h).jobs.reservations
