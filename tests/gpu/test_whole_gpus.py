"""Whole-GPU pods (`nvidia.com/gpu`) next to GPU-share pods, with and without GpuShare.

Share pods (`alibabacloud.com/gpu-milli`) do not charge the `nvidia.com/gpu` column, so
the column alone would hand a shared device to a whole-GPU pod. The device table is kept
by the cache whenever a node has GPUs, and NodeResourcesFit counts fully free devices
for whole GPUs in every profile (kube's message, "Insufficient nvidia.com/gpu").
"""

from __future__ import annotations

from typing import Any

from shoal.cache.gpu_devices import GpuDevices
from shoal.plugins.node_resources_fit import NodeResourcesFit
from shoal.testing import SchedulerHarness, make_handle, make_node, make_pod, run_filter
from shoal.testing.builders import PodBuilder

from .helpers import gpu_node, gpu_pod

GPU = "nvidia.com/gpu"
WITH_GPU_SHARE: dict[str, Any] = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "default-scheduler",
            "plugins": {"multiPoint": {"enabled": [{"name": "GpuShare"}]}},
        }
    ],
}


WITHOUT_GPU_SHARE: dict[str, Any] = {
    **WITH_GPU_SHARE,
    "profiles": [
        {
            "schedulerName": "default-scheduler",
            "plugins": {"multiPoint": {"disabled": [{"name": "GpuShare"}]}},
        }
    ],
}


def whole(name: str, gpus: int = 1) -> PodBuilder:
    return make_pod(name).uid(name).req({GPU: gpus}, cpu="1", memory="1Gi")


def test_kube_profile_keeps_a_whole_gpu_pod_off_a_shared_device() -> None:
    h = SchedulerHarness(WITHOUT_GPU_SHARE)  # kube's default plugins: no GpuShare
    profile = h.scheduler.profiles["default-scheduler"]
    assert "GpuShare" not in {plugin.name for plugin in profile.plugins.all()}
    h.add_nodes(gpu_node("n", 1))
    h.add_pods(gpu_pod("share", milli=500, node="n"))
    h.add_pods(whole("train"))
    placements, messages = h.run()
    assert placements["default/train"] is None
    assert messages["default/train"] == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
        " preemption: 0/1 nodes are available: 1 No preemption victims found for "
        "incoming pod."
    )


def test_kube_profile_sees_gpus_a_node_reports_after_it_joined() -> None:
    h = SchedulerHarness(WITHOUT_GPU_SHARE)
    h.add_nodes(make_node("n").capacity(cpu="64", memory="256Gi"))
    h.update_node(gpu_node("n", 1))  # the device plugin registered later
    h.add_pods(gpu_pod("share", milli=500, node="n"), whole("train"))
    placements, messages = h.run()
    assert placements["default/train"] is None
    assert messages["default/train"] == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
        " preemption: 0/1 nodes are available: 1 No preemption victims found for "
        "incoming pod."
    )


def test_kube_profile_gives_the_whole_gpu_pod_the_unshared_device() -> None:
    h = SchedulerHarness(WITHOUT_GPU_SHARE)
    h.add_nodes(gpu_node("n", 2))
    h.add_pods(gpu_pod("share", milli=500, node="n", devices="0"))
    h.add_pods(whole("first"))
    placements, _ = h.run()
    assert placements["default/first"] == "n"
    assert GpuDevices.of(h.scheduler.handle).devices_of("first") == (1,)
    h.add_pods(whole("second"))
    placements, messages = h.run()
    assert placements["default/second"] is None
    assert messages["default/second"] == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
        " preemption: 0/1 nodes are available: 1 No preemption victims found for "
        "incoming pod."
    )


def test_gpu_share_profile_still_separates_shares_and_whole_gpus() -> None:
    h = SchedulerHarness(WITH_GPU_SHARE)
    h.add_nodes(gpu_node("shared", 1), gpu_node("full", 1))
    h.add_pods(gpu_pod("running-share", milli=500, node="shared"), whole("whole"))
    placements, _ = h.run()
    assert placements["default/whole"] == "full"
    h.add_pods(gpu_pod("half", milli=500))
    placements, _ = h.run()
    assert placements["default/half"] == "shared"
    assert GpuDevices.of(h.scheduler.handle).devices_of("half") == (0,)
    h.add_pods(whole("late"), gpu_pod("more", milli=500))
    placements, messages = h.run()
    assert placements["default/late"] is None
    assert messages["default/late"] == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
        " preemption: 0/2 nodes are available: 2 No preemption victims found for "
        "incoming pod."
    )
    assert placements["default/more"] is None
    assert messages["default/more"] == (
        "0/2 nodes are available: 2 Insufficient GPU milli on any single device."
        " preemption: 0/2 nodes are available: 2 No preemption victims found for "
        "incoming pod."
    )


def test_fit_counts_fully_free_devices_and_leaves_them_to_nominated_pods() -> None:
    handle = make_handle(
        nodes=[gpu_node("n", 2), make_node("cpu").capacity(cpu="64", memory="256Gi")],
        pods=[gpu_pod("share", milli=500, node="n", devices="0")],
    )
    fit = NodeResourcesFit.new(None, handle)
    insufficient = ("Insufficient nvidia.com/gpu",)
    assert run_filter(fit, whole("one"), handle).passed == ["n"]
    two = run_filter(fit, whole("two", 2), handle)
    assert two.failed == {"n": insufficient, "cpu": insufficient}
    # A preemptor waiting for node n holds its one free device against pods of lower or
    # equal priority.
    handle.cluster.nominate(whole("preemptor").priority(10).info(), "n")
    assert run_filter(fit, whole("low").priority(10), handle).failed["n"] == insufficient
    assert run_filter(fit, whole("high").priority(11), handle).passed == ["n"]
