"""GPU shares are a resource every part of Shoal sees (issue 24, items 1-4):

* the default profile places shares only on devices with room (GpuShare is a default
  plugin); a profile that disables GpuShare refuses them with the fix;
* queues count a share's fraction of a GPU (usage, max, status, CLI units);
* a preemptor waiting for a device holds it at device level: the victim's re-created
  replacement cannot take it back (no eviction livelock).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.cache.gpu_devices import GpuDevices
from shoal.plugins.gpu_share import GpuShare
from shoal.testing import SchedulerHarness, make_handle, make_node, make_pod, run_filter
from shoal.testing.builders import PodBuilder

from .helpers import cpu_pod, gpu_node, gpu_pod

GPU = "nvidia.com/gpu"
QUEUE_LABEL = "shoal.dev/queue"


def run_until_bound(
    h: SchedulerHarness, key: str, replacement: Callable[[int, str], PodBuilder]
) -> None:
    """One scheduling cycle at a time, 0.1 s apart (at most ~200 s), until `key` is
    bound; a controller re-creates every evicted pod at once (`replacement(step, key)`)."""
    seen: set[str] = set()
    for step in range(2000):
        one_cycle(h)
        for evicted in list(h.evicted):
            if evicted not in seen:
                seen.add(evicted)
                h.add_pods(replacement(step, evicted))
        if h.node_of(key):
            return
        h.clock.advance_to(h.clock.now() + 0.1)


def one_cycle(h: SchedulerHarness) -> None:
    """At most one scheduling cycle (a wall-time slice that ends after the first)."""
    h.driver.run(timer=itertools.count().__next__, slice_seconds=1)


def queue(name: str, **spec: Any) -> Queue:
    return decode({"metadata": {"name": name}, "spec": spec}, Queue)


# ---- 1. the default profile places shares on devices -----------------------------------


def test_default_profile_puts_shares_only_on_devices_with_room() -> None:
    h = SchedulerHarness()  # no configuration: the default profile
    h.add_nodes(make_node("cpu-only").capacity(cpu="64", memory="256Gi"), gpu_node("one-gpu", 1))
    h.add_pods(gpu_pod("a", milli=600), gpu_pod("b", milli=600))
    placements, messages = h.run()
    placed = [k for k in ("default/a", "default/b") if placements[k]]
    waiting = [k for k in ("default/a", "default/b") if not placements[k]]
    assert len(placed) == 1 and placements[placed[0]] == "one-gpu"
    assert GpuDevices.of(h.scheduler.handle).devices_of(placed[0].split("/")[1]) == (0,)
    assert messages[waiting[0]] == (
        "0/2 nodes are available: 1 Insufficient GPU milli on any single device, "
        "1 node(s) didn't have any GPU."
        " preemption: 0/2 nodes are available: 1 No preemption victims found for "
        "incoming pod, 1 Preemption is not helpful for scheduling."
    )
    assert "Insufficient GPU milli" in h.scheduler.explain(waiting[0].split("/")[1])


def test_default_profile_on_a_cluster_without_gpus_refuses_shares() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n").capacity(cpu="64", memory="256Gi"))
    h.add_pods(gpu_pod("share", milli=500), cpu_pod("plain"))
    placements, messages = h.run()
    assert placements["default/plain"] == "n"
    assert placements["default/share"] is None
    assert messages["default/share"] == (
        "0/1 nodes are available: 1 node(s) didn't have any GPU."
        " preemption: 0/1 nodes are available: 1 Preemption is not helpful for "
        "scheduling."
    )


def test_profile_without_gpu_share_refuses_shares_with_the_fix() -> None:
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "plugins": {"multiPoint": {"disabled": [{"name": "GpuShare"}]}},
            }
        ],
    }
    h = SchedulerHarness(config)
    h.add_nodes(gpu_node("n", 2))
    h.add_pods(
        gpu_pod("share", milli=600),
        gpu_pod("by-annotation", count=2),  # 2 devices, no nvidia.com/gpu request
        make_pod("whole").uid("whole").req({GPU: 1}, cpu="1"),
    )
    placements, messages = h.run()
    assert placements["default/whole"] == "n"
    assert placements["default/share"] is None
    assert placements["default/by-annotation"] is None
    assert (
        "the pod asks for a GPU share (600 milli-GPU), but profile 'default-scheduler' does "
        "not enable GpuShare: enable it in the profile (multiPoint) or ask for whole GPUs "
        "with the nvidia.com/gpu request" in messages["default/share"]
    )
    assert "asks for 2 GPU device(s) by annotation" in messages["default/by-annotation"]


# ---- 2. queues count shares --------------------------------------------------------------


def test_a_queue_max_of_one_gpu_holds_two_400_milli_shares_not_four() -> None:
    h = SchedulerHarness()
    h.add_nodes(gpu_node("n0", 2), gpu_node("n1", 2))
    assert h.scheduler.apply_queues([queue("team", max={GPU: 1})]) == []
    h.add_pods(
        *(gpu_pod(f"s{i}", milli=400, cpu="1").labels({QUEUE_LABEL: "team"}) for i in range(4))
    )
    placements, messages = h.run()
    running = sorted(k for k, node in placements.items() if node)
    assert len(running) == 2, placements
    waiting = [k for k, node in placements.items() if not node]
    assert (
        "queue team would exceed its max nvidia.com/gpu: uses 0.8, pod asks 0.4, max 1"
        in messages[waiting[0]]
    )
    manager = h.scheduler.tenant_queues
    q, k = manager.tree.index["team"], manager.tree.resource_index[GPU]
    assert manager.usage[q, k] == 800
    h.advance(2)
    status = h.effects.queue_status["team"]
    assert status.allocated[GPU] == 800 and status.allocated["cpu"] == 2000


def test_queue_usage_counts_shares_per_device_and_whole_gpus() -> None:
    h = SchedulerHarness()
    h.add_nodes(gpu_node("n", 8))
    assert h.scheduler.apply_queues([queue("team")]) == []
    team = {QUEUE_LABEL: "team"}
    h.add_pods(
        gpu_pod("pair", milli=300, count=2, cpu="1").labels(team),  # 0.6 GPU
        make_pod("whole").uid("whole").labels(team).req({GPU: 2}, cpu="1"),  # 2 GPUs
        gpu_pod("one", cpu="1").labels(team),  # gpu-milli 1000: 1 GPU
    )
    h.run()
    manager = h.scheduler.tenant_queues
    q, k = manager.tree.index["team"], manager.tree.resource_index[GPU]
    assert manager.usage[q, k] == 3600
    h.delete_pod("pair")
    assert manager.usage[q, k] == 3000


def test_fractional_gpu_quota_is_accepted() -> None:
    h = SchedulerHarness()
    h.add_nodes(gpu_node("n", 4))
    assert h.scheduler.apply_queues([queue("team", max={GPU: "1.5"})]) == []
    h.add_pods(
        *(gpu_pod(f"s{i}", milli=500, cpu="1").labels({QUEUE_LABEL: "team"}) for i in range(4))
    )
    placements, _ = h.run()
    assert sum(1 for node in placements.values() if node) == 3


# ---- 4. preemption holds the device ----------------------------------------------------


def test_share_preemptor_keeps_the_device_its_victim_freed() -> None:
    """A priority-100 600-milli share must evict a priority-0 600-milli share on a one-GPU
    node. A controller re-creates every evicted pod at once; the re-created pod must not
    get the device back before the preemptor (before: it always did, forever)."""
    h = SchedulerHarness()
    h.add_nodes(gpu_node("n", 1, cpu="8"))
    h.add_pods(gpu_pod("low", milli=600, cpu="1").priority(0))
    h.run()
    h.add_pods(gpu_pod("high", milli=600, cpu="1").priority(100))
    run_until_bound(
        h, "high", lambda step, key: gpu_pod(f"low-r{step}", milli=600, cpu="1").priority(0)
    )
    assert h.node_of("high") == "n"
    assert list(h.evicted) == ["default/low"]  # one eviction, not a livelock
    devices = GpuDevices.of(h.scheduler.handle)
    assert devices.devices_of("high") == (0,)
    replacements = [k for k in h.result().placements if k.startswith("default/low-r")]
    assert len(replacements) == 1 and h.node_of(replacements[0]) is None


def test_whole_gpu_preemptor_keeps_its_device_from_shares() -> None:
    handle = make_handle(nodes=[gpu_node("n", 1)], pods=[])
    share = GpuShare.new(None, handle)
    handle.cluster.nominate(
        make_pod("preemptor").uid("preemptor").priority(10).req({GPU: 1}).info(), "n"
    )
    assert run_filter(share, gpu_pod("low", milli=100).priority(5), handle).passed == []
    assert run_filter(share, gpu_pod("higher", milli=100).priority(11), handle).passed == ["n"]


@pytest.mark.parametrize("seed", range(4))
def test_a_device_plan_of_a_gpu_policy_leaves_the_preemptors_devices(seed: int) -> None:
    """A preemptor asking 700 milli on two devices evicted the two pods that held them.
    A re-created 400-milli pod passes GpuShare because its tightest fit (the device that
    keeps 500 for a running pod) leaves the preemptor both free devices; a placement
    policy's device plan (GpuRandom's here) must not put it on one of those instead."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "plugins": {"multiPoint": {"enabled": [{"name": "GpuRandom"}]}},
            }
        ],
    }
    h = SchedulerHarness(config, seed=seed)
    # Two feasible nodes, so that scoring (and the policy's device plan) runs.
    h.add_nodes(gpu_node("n", 3, cpu="16"), gpu_node("m", 1, cpu="16"))
    h.add_pods(
        gpu_pod("keep", milli=500, cpu="1", node="n", devices="2").priority(50),
        gpu_pod("low-a", milli=700, cpu="1", node="n", devices="0").priority(0),
        gpu_pod("low-b", milli=700, cpu="1", node="n", devices="1").priority(0),
    )
    h.run()
    h.add_pods(gpu_pod("high", milli=700, count=2, cpu="1").priority(100))
    run_until_bound(
        h, "high", lambda step, key: gpu_pod(f"r{step}-{key[-1]}", milli=400, cpu="1").priority(0)
    )
    assert h.node_of("high") == "n"
    assert sorted(h.evicted) == ["default/low-a", "default/low-b"], h.evicted
