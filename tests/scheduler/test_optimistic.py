"""Optimistic workers (`shoal.drivers.optimistic`, `shoal.scheduler.optimistic`): worker
processes decide on replicas, the committer checks row generations; conflicts are
decided again, and the outcome is the one a single scheduler could have reached."""

from __future__ import annotations

from collections import Counter

import pytest

from shoal.api.podgroup import LIGHT_MIN, LIGHT_NAME
from shoal.api.podinfo import PodInfo
from shoal.config import KubeSchedulerConfiguration, parse_config
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.drivers.optimistic import OptimisticDriver
from shoal.framework import CycleState, NodeView, Status, per_node_filter
from shoal.framework.effects import Bind, Effect, Unschedulable
from shoal.scheduler import default_registry, new_scheduler
from shoal.scheduler.optimistic import row_local
from shoal.scheduler.scheduler import Scheduler
from shoal.testing import SchedulerHarness, make_node, make_pod


class Recorded:
    def __init__(self) -> None:
        self.binds: Counter[str] = Counter()
        self.unschedulable: dict[str, str] = {}

    def __call__(self, effect: Effect) -> None:
        if isinstance(effect, Bind):
            self.binds[effect.pod.key] += 1
        elif isinstance(effect, Unschedulable):
            self.unschedulable[effect.pod.key] = effect.message


def scheduler(seed: int = 0) -> tuple[Scheduler, MemoryEffects, Recorded]:
    effects = MemoryEffects()
    recorded = Recorded()
    effects.listeners.append(recorded)
    sched = new_scheduler(
        KubeSchedulerConfiguration(), clock=ManualClock(), effects=effects, seed=seed
    )
    return sched, effects, recorded


def test_two_workers_conflict_and_place_everything_once() -> None:
    """Both workers decide a batch of three on the same empty view: the second one's
    proposals find rows the first one's commits changed, are decided again on the
    refreshed replica, and every node ends with exactly the two pods it holds."""
    sched, effects, recorded = scheduler()
    for name in ("a", "b", "c"):
        sched.add_node(make_node(name).capacity(cpu="2", memory="4Gi").obj())
    for i in range(6):
        sched.add_pod(make_pod(f"p{i}").req(cpu="1").obj())
    with OptimisticDriver(sched, effects, workers=2, batch=3, depth=1) as driver:
        assert driver.run()
        stats = driver.stats()
    assert stats["conflicts"] >= 1
    assert stats["committed"] == 6
    assert stats["proposed"] == stats["committed"] + stats["conflicts"]
    assert sorted(recorded.binds.values()) == [1] * 6
    per_node = Counter(effects.bound.values())
    assert per_node == {"a": 2, "b": 2, "c": 2}
    table = sched.cluster.table
    assert (table.free[: table.n] >= 0).all()


def test_pods_that_fit_nowhere_get_the_serial_cycles_answer() -> None:
    sched, effects, recorded = scheduler()
    sched.add_node(make_node("a").capacity(cpu="2", memory="4Gi").obj())
    for i in range(3):
        sched.add_pod(make_pod(f"p{i}").req(cpu="1").obj())
    with OptimisticDriver(sched, effects, workers=2, batch=2) as driver:
        assert driver.run()
        stats = driver.stats()
    assert sum(recorded.binds.values()) == 2
    (pending,) = recorded.unschedulable
    assert recorded.unschedulable[pending] == (
        "0/1 nodes are available: 1 Insufficient cpu."
        " preemption: 0/1 nodes are available: 1 No preemption victims found for "
        "incoming pod."
    )
    assert stats["serial"] >= 1


def test_pods_added_while_the_workers_run_reach_them() -> None:
    """After the fork, nodes and pods go through the driver, which forwards them."""
    sched, effects, recorded = scheduler()
    sched.add_node(make_node("a").capacity(cpu="2", memory="4Gi").obj())
    with OptimisticDriver(sched, effects, workers=2, batch=2) as driver:
        assert driver.run()
        driver.add_node(make_node("b").capacity(cpu="3", memory="4Gi").obj())
        # Bound by someone else: the replicas count it on b.
        driver.add_pod(make_pod("theirs").node("b").req(cpu="1").obj())
        for i in range(4):
            driver.add_pod(make_pod(f"p{i}").req(cpu="1").obj())
        assert driver.run()
        assert driver.stats()["committed"] >= 1
        # Pods deleted or changed while queued are let go of, or decided again.
        for i in range(4, 8):
            driver.add_pod(make_pod(f"p{i}").req(cpu="1").obj())
        driver.delete_pod("default/p4")
        driver.update_pod(make_pod("p5").req(cpu="1").label("changed", "yes").obj())
        assert driver.run()
    assert Counter(effects.bound.values()) == {"a": 2, "b": 2}  # and theirs
    assert sorted(recorded.binds.values()) == [1] * 4
    assert set(recorded.unschedulable) == {"default/p5", "default/p6", "default/p7"}
    table = sched.cluster.table
    assert int(table.requested[table.row_of["b"], table.resource_index["cpu"]]) == 3000


def test_pods_deleted_or_changed_while_a_worker_decides() -> None:
    """The committer places the pod as it is now: one deleted while in flight is never
    bound, one changed is decided again (here: it asks for more than fits)."""
    sched, effects, recorded = scheduler()
    sched.add_node(make_node("a").capacity(cpu="8", memory="8Gi").obj())
    for i in range(8):
        sched.add_pod(make_pod(f"p{i}").req(cpu="1").obj())
    driver = OptimisticDriver(sched, effects, workers=2, batch=2, depth=2)
    changed: list[str] = []

    def first(result: object) -> None:
        if not changed:  # p6 and p7 are in the last batch sent, still in flight
            changed.append("done")
            driver.delete_pod("default/p6")
            driver.update_pod(make_pod("p7").req(cpu="9").obj())

    driver.on_cycle = first
    with driver:
        assert driver.run()
    assert changed
    assert "default/p6" not in recorded.binds
    assert "default/p7" not in recorded.binds
    assert recorded.unschedulable["default/p7"].startswith(
        "0/1 nodes are available: 1 Insufficient cpu."
    )
    assert sorted(recorded.binds.values()) == [1] * 6


def test_pods_whose_verdict_reads_other_rows_are_decided_serially() -> None:
    sched, effects, _ = scheduler()
    sched.add_node(make_node("a").capacity(cpu="4", memory="4Gi").hostname_label().obj())
    plain = sched.add_pod(make_pod("plain").req(cpu="1").obj())
    anti = sched.add_pod(
        make_pod("anti")
        .label("app", "x")
        .req(cpu="1")
        .pod_anti_affinity_exists("app", "kubernetes.io/hostname")
        .obj()
    )
    assert row_local(sched, plain) == ""
    assert row_local(sched, anti) == "required pod affinity"
    with OptimisticDriver(sched, effects, workers=2) as driver:
        assert driver.run()
        stats = driver.stats()
    assert set(effects.bound.values()) == {"a"}
    assert stats["serial"] >= 1
    # Once a placed pod carries required anti-affinity, every pod's verdict may depend
    # on its domain: all of them go serially.
    later = sched.add_pod(make_pod("later").req(cpu="1").obj())
    assert row_local(sched, later) == "placed pods with required anti-affinity"


def test_a_replica_that_cannot_follow_the_truth_stops_the_run_saying_why() -> None:
    """A pod bound in the truth behind the driver's back never reached the replicas:
    the worker says so and the run fails, rather than deciding on a wrong replica."""
    sched, effects, _ = scheduler()
    sched.add_node(make_node("a").capacity(cpu="4", memory="4Gi").obj())
    with OptimisticDriver(sched, effects, workers=1) as driver:
        assert driver.run()
        sched.add_pod(make_pod("behind").node("a").req(cpu="1").obj())  # not driver.add_pod
        driver.add_pod(make_pod("p").req(cpu="1").obj())
        with pytest.raises(RuntimeError, match="never reached this replica"):
            driver.run()


def test_pods_a_gang_reservation_holds_back_are_decided_serially() -> None:
    """A head-of-line gang reservation keeps lower-priority pods off its nodes. It is
    taken by the truth's gang cycle after the workers forked: their replicas do not hold
    it, and taking it changes no row's generation, so a worker placed such pods on the
    reserved nodes and the commit let them through (4 of 4 before the fix). While a
    reservation is held, pods are decided by the committer."""
    gpu = "nvidia.com/gpu"
    h = SchedulerHarness()
    for name in ("gpu-0", "gpu-1"):
        h.add_nodes(make_node(name).capacity({gpu: 8}, cpu="64", memory="256Gi"))
    recorded = Recorded()
    h.effects.listeners.append(recorded)
    with OptimisticDriver(h.scheduler, h.effects, workers=2, batch=2) as driver:
        assert driver.run()
        # One GPU of gpu-1 is taken: the gang of two whole nodes fits once it finishes.
        driver.add_pod(make_pod("blocker").req({gpu: 1}, cpu="1").node("gpu-1").obj())
        for i in range(2):
            driver.add_pod(
                make_pod(f"train-{i}")
                .namespace("ml")
                .labels({LIGHT_NAME: "train", LIGHT_MIN: "2"})
                .req({gpu: 8}, cpu="8")
                .obj()
            )
        for second in range(131):
            h.clock.advance_to(float(second))
            assert driver.run()
        assert h.scheduler.gangs.reservation is not None
        pods = [make_pod(f"infer-{i}").req({gpu: 1}, cpu="1").obj() for i in range(4)]
        assert row_local(h.scheduler, PodInfo(pods[0])) == "a gang reservation holds nodes"
        for pod in pods:
            driver.add_pod(pod)
        assert driver.run()
    assert not recorded.binds
    for i in range(4):
        assert recorded.unschedulable[f"default/infer-{i}"] == (
            "0/2 nodes are available: 2 node(s) were reserved for gang ml/train."
            " preemption: 0/2 nodes are available: 2 No preemption victims found for "
            "incoming pod."
        )


def test_a_filter_that_does_not_declare_row_local_makes_its_profile_serial() -> None:
    """Filters say themselves whether optimistic workers may decide with them
    (`row_local`); one that does not (a plugin of the user's) keeps its profile's pods
    with the committer. The default profile's filters all declare it."""

    @per_node_filter("ScratchDisk")
    def scratch_disk(state: CycleState, pod: PodInfo, node: NodeView) -> Status:
        return Status()

    registry = default_registry(include_entry_points=False)
    registry.register(scratch_disk.name, scratch_disk.spec())
    config = parse_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {"schedulerName": "default-scheduler"},
                {
                    "schedulerName": "scratch",
                    "plugins": {"multiPoint": {"enabled": [{"name": "ScratchDisk"}]}},
                },
            ],
        }
    )
    sched = new_scheduler(config, clock=ManualClock(), effects=MemoryEffects(), registry=registry)
    sched.add_node(make_node("a").capacity(cpu="4", memory="4Gi").obj())
    plain = sched.add_pod(make_pod("plain").req(cpu="1").obj())
    scratch = sched.add_pod(make_pod("scratch").scheduler_name("scratch").req(cpu="1").obj())
    assert row_local(sched, plain) == ""
    assert row_local(sched, scratch) == "a filter that reads more than the node's row"
