"""Scenario tests for the Coscheduling plugin: the head-of-line reservation holds only the
nodes the gang could use, and gang settings come from KubeSchedulerConfiguration
(issue: "An unplaceable gang's head-of-line reservation delays unrelated CPU pods on
nodes the gang cannot use by up to 220 s; its settings can only be changed from
Python")."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.api.objects import ObjectMeta
from shoal.api.podgroup import PodGroup, PodGroupSpec
from shoal.config import ConfigError, parse_config
from shoal.gang.reservation import reservation_due
from shoal.scheduler import default_registry
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import NodeBuilder, PodBuilder

LIGHT_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LIGHT_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"
GPU = "nvidia.com/gpu"


def config(*profiles: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": list(profiles) or [{"schedulerName": "default-scheduler"}],
    }


def coscheduling(name: str = "default-scheduler", **args: object) -> dict[str, Any]:
    return {"schedulerName": name, "pluginConfig": [{"name": "Coscheduling", "args": args}]}


def gpu_node(name: str) -> NodeBuilder:
    # GPU nodes are tainted so that only pods asking for GPUs land there (common practice).
    return make_node(name).capacity({GPU: 8}, cpu="64", memory="256Gi").taint(GPU)


def cpu_node(name: str) -> NodeBuilder:
    return make_node(name).capacity(cpu="16", memory="64Gi")


def train(i: int, size: int = 3) -> PodBuilder:
    """A member of gang ml/train: whole 8-GPU nodes."""
    return (
        make_pod(f"train-{i}")
        .namespace("ml")
        .labels({LIGHT_NAME: "train", LIGHT_MIN: str(size)})
        .req({GPU: 8}, cpu="8")
        .toleration(GPU)
    )


def blocker(node: str = "gpu-1") -> PodBuilder:
    """A running pod holding one GPU of `node`: the 2-member train gang fits the GPU
    nodes once it finishes, not before (a gang that could never fit reserves nothing)."""
    return make_pod("blocker").req({GPU: 1}, cpu="1").toleration(GPU).node(node)


def small_gpu(name: str) -> PodBuilder:
    return make_pod(name).req({GPU: 1}, cpu="1").toleration(GPU)


def cpu_pod(name: str) -> PodBuilder:
    return make_pod(name).req(cpu="4", memory="8Gi")


def bound_at(h: SchedulerHarness) -> dict[str, float]:
    return {e.pod: e.time for e in h.events if e.kind == "bound"}


def test_reservation_holds_only_the_nodes_the_gang_could_use() -> None:
    """The defect: 2 GPU nodes, 4 CPU-only nodes, a 2-node GPU gang that cannot fit while
    a pod holds a GPU. After 120 s of failing it takes the head-of-line reservation
    (default settings).
    CPU pods that can only run on CPU nodes were held back until the reservation ended
    (295 s here); now they are placed at once. Small GPU pods are still kept off the GPU
    nodes while the reservation lasts and get them as soon as it ends."""
    h = SchedulerHarness()
    h.add_nodes(*(cpu_node(f"cpu-{i}") for i in range(4)), gpu_node("gpu-0"), gpu_node("gpu-1"))
    h.add_pods(blocker(), *(train(i, size=2) for i in range(2)))
    h.advance(125)
    assert h.scheduler.gangs.blocking == "ml/train"
    start = h.clock.now()
    cpu_keys = [f"default/web-{i}" for i in range(4)]
    gpu_keys = ["default/infer-0", "default/infer-1"]
    h.add_pods(*(cpu_pod(f"web-{i}") for i in range(4)))
    h.add_pods(small_gpu("infer-0"), small_gpu("infer-1"))
    h.run()

    h.advance(400)  # well past the reservation's end (t=120+300)
    times = bound_at(h)
    cpu_delay = {key: times[key] - start for key in cpu_keys if key in times}
    assert cpu_delay == dict.fromkeys(cpu_keys, 0.0)  # before the fix: 295.0 each
    gpu_delay = {key: times[key] - start for key in gpu_keys if key in times}
    assert gpu_delay == dict.fromkeys(gpu_keys, 420.0 - start)  # when the reservation ended
    assert {h.node_of(k) for k in cpu_keys} <= {f"cpu-{i}" for i in range(4)}
    assert {h.node_of(k) for k in gpu_keys} <= {"gpu-0", "gpu-1"}
    assert not any(k.startswith("ml/train") and v for k, v in h.result().placements.items())


def test_pods_are_kept_off_reserved_nodes_with_a_kube_style_reason() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(cpu_node(f"cpu-{i}") for i in range(4)), gpu_node("gpu-0"), gpu_node("gpu-1"))
    h.add_pods(blocker(), *(train(i, size=2) for i in range(2)))
    h.advance(125)
    reservation = h.scheduler.gangs.reservation
    assert reservation is not None
    assert reservation.group == "ml/train"
    assert reservation.nodes == {"gpu-0", "gpu-1"}  # CPU nodes have no GPUs: not held
    assert reservation.until == 420.0
    h.add_pods(small_gpu("infer"), small_gpu("urgent").priority(1000), cpu_pod("web"))
    h.run()
    assert h.node_of("infer") is None
    assert h.message("infer") == (
        "0/6 nodes are available: 2 node(s) were reserved for gang ml/train, "
        "4 Insufficient nvidia.com/gpu."
        # The CPU nodes have no GPU at all: no eviction helps there.
        " preemption: 0/6 nodes are available: 2 No preemption victims found for "
        "incoming pod, 4 Preemption is not helpful for scheduling."
    )
    # Higher priority than the gang: not held. Unrelated CPU work: not held.
    assert h.node_of("urgent") in ("gpu-0", "gpu-1")
    assert h.node_of("web") is not None and h.node_of("web").startswith("cpu-")  # type: ignore[union-attr]


def test_reserved_nodes_follow_node_names_when_rows_move() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(cpu_node(f"cpu-{i}") for i in range(4)), gpu_node("gpu-0"), gpu_node("gpu-1"))
    h.add_pods(blocker(), *(train(i, size=2) for i in range(2)))
    h.advance(125)
    assert h.scheduler.gangs.blocking == "ml/train"
    h.add_pods(cpu_pod("web-0"))
    h.run()  # the reserved rows are in use now
    # Removing the first node moves the last one (gpu-1) into its row.
    h.delete_node("cpu-0" if h.node_of("web-0") != "cpu-0" else "cpu-1")
    assert h.scheduler.cluster.table.row_of["gpu-1"] < 4
    h.add_pods(small_gpu("infer"), cpu_pod("web-1"))
    h.run()
    assert h.node_of("infer") is None
    assert "2 node(s) were reserved for gang ml/train" in h.message("infer")
    assert h.node_of("web-1") is not None and h.node_of("web-1").startswith("cpu-")  # type: ignore[union-attr]


def test_a_gang_that_could_use_no_node_leaves_the_reservation_to_the_next() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(cpu_node(f"cpu-{i}") for i in range(2)))
    # GPU members on a cluster without GPUs: the gang has nothing to hold.
    h.add_pods(*(train(i, size=2) for i in range(2)))
    h.advance(1)
    # A CPU gang that needs both nodes whole, one of them busy, fails second.
    h.add_pods(make_pod("busy").req(cpu="1").node("cpu-0"))
    h.add_pods(
        *(
            make_pod(f"etl-{i}").labels({LIGHT_NAME: "etl", LIGHT_MIN: "2"}).req(cpu="16")
            for i in range(2)
        )
    )
    h.advance(130)
    reservation = h.scheduler.gangs.reservation
    assert reservation is not None
    assert (reservation.group, reservation.nodes) == ("default/etl", {"cpu-0", "cpu-1"})


def test_reservation_timing_from_plugin_config() -> None:
    h = SchedulerHarness(config(coscheduling(reservationAfterSeconds=30, reservationMaxSeconds=60)))
    h.add_nodes(gpu_node("gpu-0"), gpu_node("gpu-1"))
    h.add_pods(blocker(), *(train(i, size=2) for i in range(2)))
    h.advance(25)
    assert h.scheduler.gangs.reservation is None
    h.advance(10)  # t=35
    reservation = h.scheduler.gangs.reservation
    assert reservation is not None and reservation.until == 90.0
    h.add_pods(small_gpu("infer"))
    h.run()
    assert h.node_of("infer") is None
    h.advance(60)  # t=95: ended at 90
    assert h.scheduler.gangs.reservation is None
    assert bound_at(h)["default/infer"] == 90.0


def test_head_of_line_reservation_can_be_turned_off() -> None:
    h = SchedulerHarness(config(coscheduling(headOfLineReservation=False)))
    h.add_nodes(gpu_node("gpu-0"), gpu_node("gpu-1"))
    h.add_pods(*(train(i) for i in range(3)))
    h.advance(200)
    assert h.scheduler.gangs.reservation is None
    assert reservation_due(h.scheduler.gangs) is None  # none will ever start
    h.add_pods(small_gpu("infer"))
    h.run()
    assert h.node_of("infer") is not None


def test_schedule_timeout_default_comes_from_plugin_config() -> None:
    def phase_after_retry(h: SchedulerHarness, group: str) -> str:
        h.advance(25)
        h.add_nodes(cpu_node("late"))  # a node event: the gang is retried at t=25
        h.run()
        return h.scheduler.gangs.groups[group].phase

    short = SchedulerHarness(config(coscheduling(scheduleTimeoutSeconds=20)))
    short.add_nodes(gpu_node("gpu-0"))
    short.add_pods(*(train(i) for i in range(3)))
    assert phase_after_retry(short, "ml/train") == "Failed"

    default = SchedulerHarness()
    default.add_nodes(gpu_node("gpu-0"))
    default.add_pods(*(train(i) for i in range(3)))
    assert phase_after_retry(default, "ml/train") == "Scheduling"  # 60 s by default

    # A PodGroup's own scheduleTimeoutSeconds wins over the plugin's default.
    own = SchedulerHarness(config(coscheduling(scheduleTimeoutSeconds=20)))
    own.add_nodes(gpu_node("gpu-0"))
    own.add_pods(
        *(
            make_pod(f"pg-{i}")
            .namespace("ml")
            .labels({"scheduling.x-k8s.io/pod-group": "pg"})
            .req({GPU: 8})
            .toleration(GPU)
            for i in range(3)
        )
    )
    own.scheduler.add_pod_group(
        PodGroup(
            metadata=ObjectMeta(name="pg", namespace="ml"),
            spec=PodGroupSpec(min_member=3, schedule_timeout_seconds=100),
        )
    )
    assert phase_after_retry(own, "ml/pg") == "Scheduling"


def test_scheduler_plugins_spelling_permit_waiting_time_seconds_is_accepted() -> None:
    # A config written for scheduler-plugins' Coscheduling sets permitWaitingTimeSeconds.
    h = SchedulerHarness(config(coscheduling(permitWaitingTimeSeconds=20)))
    h.add_nodes(gpu_node("gpu-0"))
    h.add_pods(*(train(i) for i in range(3)))
    h.advance(25)
    h.add_nodes(cpu_node("late"))
    h.run()
    assert h.scheduler.gangs.groups["ml/train"].phase == "Failed"

    with pytest.raises(ConfigError) as err:
        parse_config(
            config(coscheduling(permitWaitingTimeSeconds=20, scheduleTimeoutSeconds=30)),
            source="cfg",
            registry=default_registry(),
        )
    assert "permitWaitingTimeSeconds" in str(err.value)


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (
            {"reservationAfterSeconds": -5},
            "profiles[0].pluginConfig[0].args.reservationAfterSeconds: "
            "Input should be greater than or equal to 0",
        ),
        (
            {"reservationMaxSeconds": 0},
            "profiles[0].pluginConfig[0].args.reservationMaxSeconds: "
            "Input should be greater than 0",
        ),
        (
            {"scheduleTimeoutSeconds": -1},
            "profiles[0].pluginConfig[0].args.scheduleTimeoutSeconds: "
            "Input should be greater than 0",
        ),
        (
            {"headOfLineReservation": "sometimes"},
            "profiles[0].pluginConfig[0].args.headOfLineReservation: "
            "Input should be a valid boolean, unable to interpret input",
        ),
        (
            {"reservationAfter": 10},
            "profiles[0].pluginConfig[0].args.reservationAfter: unknown field "
            "'reservationAfter': check the spelling against kubescheduler.config.k8s.io/v1",
        ),
    ],
)
def test_bad_args_are_rejected_naming_the_field(args: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(config(coscheduling(**args)), source="cfg", registry=default_registry())
    assert [str(p) for p in err.value.problems] == [problem]
    with pytest.raises(ConfigError):
        SchedulerHarness(config(coscheduling(**args)))


def test_profile_without_coscheduling_treats_group_labels_as_plain_pods() -> None:
    plain = {
        "schedulerName": "plain",
        "plugins": {"multiPoint": {"disabled": [{"name": "Coscheduling"}]}},
    }
    h = SchedulerHarness(config({"schedulerName": "default-scheduler"}, plain))
    h.add_nodes(*(cpu_node(f"cpu-{i}") for i in range(3)))

    def member(name: str, group: str, profile: str) -> PodBuilder:
        pod = make_pod(name).labels({LIGHT_NAME: group, LIGHT_MIN: "4"}).req(cpu="16")
        return pod.scheduler_name(profile)

    # Three of a four-member group exist, three nodes fit one pod each.
    h.add_pods(*(member(f"g-{i}", "g", "default-scheduler") for i in range(3)))
    h.add_pods(*(member(f"p-{i}", "p", "plain") for i in range(3)))
    placements, messages = h.run()
    assert all(placements[f"default/p-{i}"] for i in range(3))  # plain pods, one by one
    assert not any(placements[f"default/g-{i}"] for i in range(3))  # a gang waits
    assert "3/4 members exist, waiting for 1 more" in messages["default/g-0"]
    assert "default/p" not in h.scheduler.gangs.groups


def test_reservation_does_not_apply_to_profiles_without_coscheduling() -> None:
    plain = {
        "schedulerName": "plain",
        "plugins": {"multiPoint": {"disabled": [{"name": "Coscheduling"}]}},
    }
    h = SchedulerHarness(config({"schedulerName": "default-scheduler"}, plain))
    h.add_nodes(gpu_node("gpu-0"), gpu_node("gpu-1"))
    h.add_pods(blocker(), *(train(i, size=2) for i in range(2)))
    h.advance(125)
    assert h.scheduler.gangs.blocking == "ml/train"
    h.add_pods(small_gpu("held"), small_gpu("free").scheduler_name("plain"))
    h.run()
    assert h.node_of("held") is None
    assert h.node_of("free") in ("gpu-0", "gpu-1")


def test_gated_members_say_what_they_wait_for_through_the_effects_port() -> None:
    from shoal.framework.effects import Unschedulable
    from shoal.scheduler.gating import GATE_REPORT_GRACE_SECONDS

    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="16Gi"))
    seen: list[Unschedulable] = []
    h.effects.listeners.append(
        lambda e: seen.append(e) if isinstance(e, Unschedulable) and e.gated else None
    )
    labels = {
        "pod-group.scheduling.sigs.k8s.io/name": "g",
        "pod-group.scheduling.sigs.k8s.io/min-available": "3",
    }
    h.add_pods(*(make_pod(f"m{i}").labels(labels).req(cpu="1") for i in range(2)))
    h.run()
    assert seen == []  # said once they have waited GATE_REPORT_GRACE_SECONDS
    h.advance(GATE_REPORT_GRACE_SECONDS)
    assert {e.pod.key for e in seen} == {"default/m0", "default/m1"}
    assert seen[-1].message == (
        "pod is gated by Coscheduling: gang default/g: 2/3 members exist, waiting for 1 more"
    )


def test_a_member_of_another_scheduler_is_named_not_silently_missing() -> None:
    """A pod naming the gang but under a schedulerName this scheduler does not serve is
    not counted (a gang is placed by one scheduler); the members waiting say which pod
    and why, instead of "1/2 members exist" with both pods there."""
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="16Gi"))
    labels = {
        "pod-group.scheduling.sigs.k8s.io/name": "g",
        "pod-group.scheduling.sigs.k8s.io/min-available": "2",
    }
    h.add_pods(
        make_pod("m0").labels(labels).req(cpu="1"),
        make_pod("m1").labels(labels).req(cpu="1").scheduler_name("someone-else"),
    )
    h.run()
    message = h.message("default/m0")
    assert "gang default/g: 1/2 members exist, waiting for 1 more" in message
    assert "not counted: default/m1 (schedulerName someone-else, not served" in message
    assert h.node_of("m0") is None
    h.delete_pod("m1")
    h.add_pods(make_pod("m2").labels(labels).req(cpu="1"))
    h.run()
    assert h.node_of("m0") is not None and h.node_of("m2") is not None
