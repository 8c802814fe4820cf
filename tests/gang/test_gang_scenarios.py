"""Scenario tests for gang scheduling (issue: all-or-nothing jobs, Spark, topology, deps)."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.api.objects import ObjectMeta
from shoal.api.podgroup import PodGroup, PodGroupSpec, VolcanoPodGroup
from shoal.cache.dra import DeviceCatalog
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import device_class, gpu_slice, resource_claim, with_claims

LIGHT_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LIGHT_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"


def gang_pod(group: str, i: int, size: int, ns: str = "ml", **req: object):
    requests = req or {"cpu": "1"}
    return (
        make_pod(f"{group}-{i}")
        .namespace(ns)
        .labels({LIGHT_NAME: group, LIGHT_MIN: str(size)})
        .req(dict(requests))  # type: ignore[arg-type]
    )


def gpu_nodes(count: int, gpus: int = 8, leaf_size: int | None = None):
    nodes = []
    for i in range(count):
        node = make_node(f"n{i}").capacity({"nvidia.com/gpu": gpus}, cpu="64", memory="256Gi")
        if leaf_size:
            node = node.labels(leaf=f"leaf-{i // leaf_size}", spine=f"spine-{i // (4 * leaf_size)}")
        nodes.append(node)
    return nodes


def bound_of(h: SchedulerHarness, prefix: str) -> int:
    return sum(1 for rec in h.scheduler.cluster.placed.values() if rec.pod.name.startswith(prefix))


def test_two_large_gangs_exactly_one_runs_other_holds_nothing() -> None:
    h = SchedulerHarness()
    h.add_nodes(*gpu_nodes(150))  # 1200 GPUs: one 100 x 8-GPU gang fits, not two
    for g in ("a", "b"):
        h.add_pods(*(gang_pod(g, i, 100, **{"nvidia.com/gpu": 8}) for i in range(100)))
    h.run()
    a, b = bound_of(h, "a-"), bound_of(h, "b-")
    assert sorted((a, b)) == [0, 100]
    loser = "b" if a == 100 else "a"
    # The waiting gang holds nothing: requested GPUs are exactly the winner's.
    table = h.scheduler.cluster.table
    gpu = table.resource_index["nvidia.com/gpu"]
    assert int(table.requested[: table.n, gpu].sum()) == 800
    message = h.scheduler.explain(f"ml/{loser}-0")
    assert message.startswith(
        f"gang ml/{loser}: 50/100 members placeable, needs 400 nvidia.com/gpu more"
    )
    # When the first finishes, the second runs.
    winner = "a" if loser == "b" else "b"
    for uid, rec in list(h.scheduler.cluster.placed.items()):
        if rec.pod.name.startswith(f"{winner}-"):
            h.scheduler.finish_pod(uid)
    h.advance(30)
    assert bound_of(h, f"{loser}-") == 100


def test_gang_larger_than_cluster_never_holds_resources() -> None:
    h = SchedulerHarness()
    h.add_nodes(*gpu_nodes(4))
    h.add_pods(*(gang_pod("huge", i, 10, **{"nvidia.com/gpu": 8}) for i in range(10)))
    for _ in range(5):
        h.advance(15)
        assert not h.scheduler.cluster.placed
        table = h.scheduler.cluster.table
        assert (
            int(table.requested[: table.n].sum(axis=0)[table.resource_index["nvidia.com/gpu"]]) == 0
        )
    assert "gang ml/huge: 4/10 members placeable" in h.scheduler.explain("ml/huge-0")
    # Other work still runs next to the stuck gang.
    h.add_pods(make_pod("small").req({"nvidia.com/gpu": 8}))
    h.run()
    assert h.node_of("small") is not None


def test_gang_waits_for_members_that_do_not_exist_yet() -> None:
    h = SchedulerHarness()
    h.add_nodes(*gpu_nodes(4))
    h.add_pods(*(gang_pod("late", i, 4) for i in range(3)))
    h.run()
    assert bound_of(h, "late-") == 0
    assert "3/4 members exist, waiting for 1 more" in h.scheduler.explain("ml/late-0")
    h.add_pods(gang_pod("late", 3, 4))
    h.run()
    assert bound_of(h, "late-") == 4


@pytest.fixture
def spark_cluster() -> SchedulerHarness:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="4", memory="16Gi") for i in range(6)))
    return h


def spark_pods(executors: int, minimum: int) -> list:
    labels = {LIGHT_NAME: "job", LIGHT_MIN: str(1 + minimum)}
    pods = [
        make_pod("driver").namespace("etl").labels(labels, **{"spark-role": "driver"}).req(cpu="4")
    ]
    pods += [
        make_pod(f"exec-{i}")
        .namespace("etl")
        .labels(labels, **{"spark-role": "executor"})
        .req(cpu="4")
        for i in range(executors)
    ]
    return pods


def test_spark_starts_with_minimum_and_grows_as_capacity_frees(
    spark_cluster: SchedulerHarness,
) -> None:
    h = spark_cluster
    h.add_pods(make_pod("other").req(cpu="4"))
    h.run()  # 5 nodes left: driver + 4 executors (the minimum), 2 executors wait
    h.add_pods(*spark_pods(executors=6, minimum=4))
    h.run()
    assert h.node_of("etl/driver") is not None
    assert bound_of(h, "exec-") == 4
    assert h.scheduler.gangs.groups["etl/job"].phase == "Running"
    h.delete_pod("other")
    h.advance(20)
    assert bound_of(h, "exec-") == 5  # grew by one when capacity freed


def test_spark_below_minimum_holds_nothing(spark_cluster: SchedulerHarness) -> None:
    h = spark_cluster
    h.add_pods(*(make_pod(f"other-{i}").req(cpu="4") for i in range(3)))
    h.run()  # 3 nodes left < driver + 4 executors
    h.add_pods(*spark_pods(executors=6, minimum=4))
    h.run()
    assert h.node_of("etl/driver") is None
    assert bound_of(h, "exec-") == 0


def test_spark_driver_first_checks_executors_would_fit() -> None:
    def run(nodes: int) -> SchedulerHarness:
        h = SchedulerHarness()
        h.add_nodes(*(make_node(f"n{i}").capacity(cpu="5", memory="16Gi") for i in range(nodes)))
        driver = (
            make_pod("driver")
            .namespace("etl")
            .labels({LIGHT_NAME: "job", LIGHT_MIN: "1", "spark-role": "driver"})
            .annotations({"shoal.dev/min-executors": "3"})
            .req(cpu="2")
        )
        h.add_pods(driver)
        group = h.scheduler.gangs.groups["etl/job"]
        group.min_resources = {"cpu": 2000 + 3 * 4000}  # driver + 3 executors of 4 cpu
        h.run()
        return h

    small = run(3)  # 15 cpu >= 14, but the driver's node has 3 left: 2 executors fit
    assert small.node_of("etl/driver") is None
    assert "the driver fits but only 2/3 minimum executors would fit" in small.scheduler.explain(
        "etl/driver"
    )
    assert not small.scheduler.cluster.placed  # phantoms and driver rolled back
    big = run(4)
    assert big.node_of("etl/driver") is not None
    assert len(big.scheduler.cluster.placed) == 1  # only the real driver


def test_dependent_job_waits_for_its_dependency() -> None:
    h = SchedulerHarness()
    h.add_nodes(*gpu_nodes(4))
    prep = [gang_pod("prep", i, 2) for i in range(2)]
    train = [
        gang_pod("train", i, 2).annotations({"shoal.dev/depends-on": "prep"}) for i in range(2)
    ]
    h.add_pods(*train, *prep)
    h.run()
    assert bound_of(h, "prep-") == 2
    assert bound_of(h, "train-") == 0
    assert "waits for gang ml/prep to succeed" in h.scheduler.explain("ml/train-0")
    for uid in list(h.scheduler.cluster.placed):
        h.scheduler.finish_pod(uid, succeeded=True)
    assert h.scheduler.gangs.groups["ml/prep"].phase == "Finished"
    h.run()
    assert bound_of(h, "train-") == 2


@pytest.mark.parametrize("mode", ["shoal.dev/topology-preferred", "shoal.dev/topology-required"])
def test_topology_gang_lands_in_minimum_number_of_leaves(mode: str) -> None:
    h = SchedulerHarness()
    h.add_nodes(*gpu_nodes(64, gpus=8, leaf_size=8))
    # Each member needs 2 GPUs: 4 per node, 32 per 8-node leaf -> exactly one leaf.
    h.add_pods(
        *(
            gang_pod("t", i, 32, **{"nvidia.com/gpu": 2}).annotations({mode: "leaf"})
            for i in range(32)
        )
    )
    h.run()
    nodes = {rec.node for rec in h.scheduler.cluster.placed.values()}
    leaves = {int(n[1:]) // 8 for n in nodes}
    assert bound_of(h, "t-") == 32
    assert len(leaves) == 1


def test_topology_preferred_spans_fewest_leaves_and_required_refuses() -> None:
    for mode, expect in (("shoal.dev/topology-preferred", 4), ("shoal.dev/topology-required", 0)):
        h = SchedulerHarness()
        h.add_nodes(*gpu_nodes(64, gpus=8, leaf_size=8))
        # Whole-node members: 32 nodes -> 4 leaves at best.
        h.add_pods(
            *(
                gang_pod("w", i, 32, **{"nvidia.com/gpu": 8}).annotations({mode: "leaf"})
                for i in range(32)
            )
        )
        h.run()
        nodes = {rec.node for rec in h.scheduler.cluster.placed.values()}
        assert len({int(n[1:]) // 8 for n in nodes}) == expect
        if expect == 0:
            assert "no single leaf domain can hold 32 members (the largest holds 8)" in (
                h.scheduler.explain("ml/w-0")
            )


def test_malformed_group_key_is_reported_and_others_keep_running() -> None:
    h = SchedulerHarness()
    h.add_nodes(*gpu_nodes(2))
    bad = make_pod("bad").labels({LIGHT_NAME: "g", LIGHT_MIN: "lots"}).req(cpu="1")
    h.add_pods(bad, make_pod("fine").req(cpu="1"))
    h.run()
    assert h.node_of("fine") is not None
    assert h.node_of("bad") is None
    message = h.scheduler.explain("default/bad")
    assert "pod-group.scheduling.sigs.k8s.io/min-available" in message
    assert "'lots' is not an integer" in message


def test_podgroup_objects_from_scheduler_plugins_and_volcano() -> None:
    h = SchedulerHarness()
    h.add_nodes(*gpu_nodes(4))
    pods = [
        make_pod(f"sp-{i}")
        .namespace("ml")
        .labels({"scheduling.x-k8s.io/pod-group": "sp"})
        .req(cpu="1")
        for i in range(3)
    ]
    pods += [
        make_pod(f"vc-{i}")
        .namespace("ml")
        .annotations({"scheduling.k8s.io/group-name": "vc"})
        .req(cpu="1")
        for i in range(2)
    ]
    h.add_pods(*pods)
    h.run()
    assert not h.scheduler.cluster.placed
    assert "waiting for its PodGroup object" in h.scheduler.explain("ml/sp-0")
    h.scheduler.add_pod_group(
        PodGroup(metadata=ObjectMeta(name="sp", namespace="ml"), spec=PodGroupSpec(min_member=3))
    )
    h.scheduler.add_pod_group(VolcanoPodGroup(metadata=ObjectMeta(name="vc", namespace="ml")))
    h.run()
    assert bound_of(h, "sp-") == 3 and bound_of(h, "vc-") == 2
    assert h.scheduler.gangs.groups["ml/sp"].phase == "Running"


def test_min_resources_precheck_rejects_early() -> None:
    h = SchedulerHarness()
    h.add_nodes(*gpu_nodes(1))
    h.add_pods(
        *(
            make_pod(f"m-{i}")
            .namespace("ml")
            .labels({"scheduling.x-k8s.io/pod-group": "m"})
            .req(cpu="1")
            for i in range(2)
        )
    )
    h.scheduler.add_pod_group(
        PodGroup(
            metadata=ObjectMeta(name="m", namespace="ml"),
            spec=PodGroupSpec(min_member=2, min_resources={"nvidia.com/gpu": 16}),
        )
    )
    h.run()
    assert not h.scheduler.cluster.placed
    assert "minResources 16 nvidia.com/gpu exceed the cluster's free 8 nvidia.com/gpu" in (
        h.scheduler.explain("ml/m-0")
    )


RESERVING = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "default-scheduler",
            "pluginConfig": [
                {
                    "name": "Coscheduling",
                    "args": {"reservationAfterSeconds": 10, "reservationMaxSeconds": 60},
                }
            ],
        }
    ],
}


def test_head_of_line_reservation_holds_small_pods_then_releases() -> None:
    h = SchedulerHarness(RESERVING)
    h.add_nodes(*gpu_nodes(2))
    h.add_pods(make_pod("running").req({"nvidia.com/gpu": 8}))
    h.run()
    h.add_pods(*(gang_pod("big", i, 2, **{"nvidia.com/gpu": 8}) for i in range(2)))
    h.advance(30)  # the gang fails for > 10 s and takes the reservation
    assert h.scheduler.gangs.blocking == "ml/big"
    assert h.scheduler.gangs.groups["ml/big"].impossible == ""  # fits once others finish
    h.add_pods(make_pod("small").req({"nvidia.com/gpu": 1}))
    h.run()
    assert h.node_of("small") is None
    assert h.scheduler.explain("default/small") == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "1 node(s) were reserved for gang ml/big."
        " preemption: 0/2 nodes are available: 2 No preemption victims found for "
        "incoming pod."
    )
    h.delete_pod("running")  # capacity frees: the gang goes first
    h.advance(15)
    assert bound_of(h, "big-") == 2
    assert np.all(h.scheduler.cluster.table.free[: h.scheduler.cluster.table.n] >= 0)


def test_a_gang_larger_than_the_cluster_reserves_nothing_and_says_why() -> None:
    """A gang that could not start even on an empty cluster used to take the head-of-line
    reservation: small pods on an idle cluster waited for it (issue "Jobs at scale")."""
    h = SchedulerHarness(RESERVING)
    h.add_nodes(*gpu_nodes(2))  # 16 GPUs in all
    h.add_pods(*(gang_pod("huge", i, 3, **{"nvidia.com/gpu": 8}) for i in range(3)))
    h.advance(30)  # failing for > 10 s: a possible gang would reserve by now
    assert h.scheduler.gangs.blocking is None
    h.add_pods(make_pod("small").req({"nvidia.com/gpu": 1}))
    h.run()
    assert h.node_of("small") is not None  # at once, on an idle cluster
    h.advance(30)
    assert "needs 3 more member(s) asking 24 nvidia.com/gpu in all, more than the 2 " in (
        h.scheduler.gangs.groups["ml/huge"].reason
    )


def test_a_gang_of_one_shape_that_fits_no_packing_reserves_nothing() -> None:
    h = SchedulerHarness(RESERVING)
    h.add_nodes(*gpu_nodes(2))  # 8 GPUs each: two 5-GPU members never share a node
    h.add_pods(*(gang_pod("odd", i, 3, **{"nvidia.com/gpu": 5}) for i in range(3)))
    h.advance(30)
    assert h.scheduler.gangs.blocking is None
    assert "fit only 2 of them" in h.scheduler.gangs.groups["ml/odd"].reason


def test_a_gang_beyond_its_queues_max_reserves_nothing() -> None:
    from shoal.api.manifests import decode
    from shoal.api.queue import Queue

    h = SchedulerHarness(RESERVING)
    h.add_nodes(*gpu_nodes(2))
    team = decode({"metadata": {"name": "team"}, "spec": {"max": {"nvidia.com/gpu": 8}}}, Queue)
    assert h.scheduler.apply_queues([team]) == []
    h.add_pods(
        *(
            gang_pod("over", i, 2, **{"nvidia.com/gpu": 8}).labels({"shoal.dev/queue": "team"})
            for i in range(2)
        )
    )
    h.advance(30)
    assert h.scheduler.gangs.blocking is None
    assert "asks 16 nvidia.com/gpu in queue team, more than its max 8" in (
        h.scheduler.gangs.groups["ml/over"].reason
    )


@pytest.mark.parametrize("seed", range(6))
def test_required_spine_and_preferred_leaf_keep_the_gang_in_one_leaf(seed: int) -> None:
    """Required spine plus preferred leaf on one gang: the leaf preference used to be
    dropped (members split across leaves in 4 of 6 seeds)."""
    rng = np.random.default_rng(seed)
    h = SchedulerHarness(seed=seed)
    h.add_nodes(*gpu_nodes(64, gpus=8, leaf_size=8))  # 8 leaves of 8 nodes, 2 spines
    # Busy nodes everywhere except one random leaf, which keeps room for the gang.
    free_leaf = int(rng.integers(8))
    busy = [i for i in range(64) if i // 8 != free_leaf and rng.random() < 0.5]
    h.add_pods(*(make_pod(f"busy-{i}").req({"nvidia.com/gpu": 6}).node(f"n{i}") for i in busy))
    annotations = {"shoal.dev/topology-required": "spine", "shoal.dev/topology-preferred": "leaf"}
    h.add_pods(
        *(gang_pod("t", i, 16, **{"nvidia.com/gpu": 4}).annotations(annotations) for i in range(16))
    )
    h.run()
    assert bound_of(h, "t-") == 16
    nodes = {h.node_of(f"ml/t-{i}") for i in range(16)}
    assert {int(str(n)[1:]) // 8 for n in nodes} == {free_leaf}


def test_required_spine_and_preferred_leaf_span_fewest_leaves_of_one_spine() -> None:
    h = SchedulerHarness()
    h.add_nodes(*gpu_nodes(64, gpus=8, leaf_size=8))
    annotations = {"shoal.dev/topology-required": "spine", "shoal.dev/topology-preferred": "leaf"}
    # 24 whole-node members: no leaf (8 nodes) holds them, a spine (32) does.
    h.add_pods(
        *(gang_pod("w", i, 24, **{"nvidia.com/gpu": 8}).annotations(annotations) for i in range(24))
    )
    h.run()
    assert bound_of(h, "w-") == 24
    nodes = [int(str(h.node_of(f"ml/w-{i}"))[1:]) for i in range(24)]
    assert len({n // 32 for n in nodes}) == 1  # one spine
    assert len({n // 8 for n in nodes}) == 3  # the fewest leaves


@pytest.mark.parametrize("label", ["no-such-label", "leaf"])
def test_a_topology_preference_never_blocks(label: str) -> None:
    """A preference on a label no node carries left the gang pending forever; so did one
    whose domains together could not hold it (unlabelled nodes could)."""
    h = SchedulerHarness()
    nodes = gpu_nodes(4, gpus=8, leaf_size=2 if label == "leaf" else None)
    h.add_nodes(*nodes[:2], *(make_node(f"u{i}").capacity({"nvidia.com/gpu": 8}) for i in range(4)))
    h.add_pods(
        *(
            gang_pod("p", i, 6, **{"nvidia.com/gpu": 8}).annotations(
                {"shoal.dev/topology-preferred": label}
            )
            for i in range(6)
        )
    )
    h.run()
    assert bound_of(h, "p-") == 6


@pytest.mark.parametrize(
    ("group", "finished"),
    [
        (PodGroup(metadata=ObjectMeta(name="prep", namespace="ml")), "Finished"),
        (VolcanoPodGroup(metadata=ObjectMeta(name="prep", namespace="ml")), "Completed"),
    ],
)
def test_a_dependency_finished_before_a_restart_is_read_from_its_status(
    group: PodGroup | VolcanoPodGroup, finished: str
) -> None:
    """Dependencies lived only in memory: after a restart the succeeded pods of `prep`
    are gone from the informer, and `train` waited forever. The PodGroup's status (which
    Shoal writes) says it finished."""
    import msgspec

    h = SchedulerHarness()
    h.add_nodes(*gpu_nodes(2))
    waiting = msgspec.structs.replace(group)
    h.scheduler.add_pod_group(waiting)  # no status yet: not finished
    train = [
        gang_pod("train", i, 2).annotations({"shoal.dev/depends-on": "prep"}) for i in range(2)
    ]
    h.add_pods(*train)
    h.run()
    assert bound_of(h, "train-") == 0
    assert "waits for gang ml/prep to succeed" in h.scheduler.explain("ml/train-0")
    done = msgspec.structs.replace(group, status=type(group.status)(phase=finished))
    h.scheduler.add_pod_group(done)  # the informer delivers the status Shoal wrote
    h.advance(1)
    assert h.scheduler.gangs.groups["ml/prep"].phase == "Finished"
    assert bound_of(h, "train-") == 2


def test_spark_driver_first_phantoms_do_not_ask_for_the_drivers_claims() -> None:
    """The phantom executors are minResources' shape: a driver holding a claim for the
    node's only GPU still goes when its executors fit (before, every phantom asked for
    the driver's claim too, found its device taken and the driver never started), and
    no DRA plan is left behind for the phantoms' made-up uids."""
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="5", memory="16Gi") for i in range(4)))
    h.add_dra(device_class(), gpu_slice("n0", count=1), resource_claim("driver-gpu"))
    driver = (
        make_pod("driver")
        .namespace("default")
        .labels({LIGHT_NAME: "job", LIGHT_MIN: "1", "spark-role": "driver"})
        .annotations({"shoal.dev/min-executors": "3"})
        .req(cpu="2")
    )
    h.add_pods(with_claims(driver, gpu="driver-gpu"))
    h.scheduler.gangs.groups["default/job"].min_resources = {"cpu": 2000 + 3 * 4000}
    h.run()
    assert h.node_of("default/driver") == "n0"
    plans = DeviceCatalog.of(h.scheduler.handle).plans
    assert not [uid for uid in plans if uid.startswith("shoal-phantom/")]
