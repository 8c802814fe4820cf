"""GpuShare: device-level feasibility, device reservation and the bind annotation."""

from __future__ import annotations

from shoal.cache.gpu_devices import GpuDevices
from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.framework.status import Code
from shoal.plugins.gpu_share import (
    REASON_MODEL,
    REASON_NO_GPU,
    REASON_SHARE,
    REASON_WHOLE,
    GpuShare,
)
from shoal.scheduler import new_scheduler
from shoal.scheduler.scheduler import CycleResult
from shoal.testing.builders import make_node
from shoal.testing.plugin_env import make_handle, run_filter

from .helpers import cpu_pod, gpu_node, gpu_pod


def cluster():  # type: ignore[no-untyped-def]
    return make_handle(
        nodes=[
            gpu_node("v100", 2, model="V100"),
            gpu_node("t4", 1, model="T4"),
            make_node("cpu").capacity(cpu="64", memory="256Gi"),
        ],
        pods=[
            gpu_pod("half", milli=600, node="v100", devices="0"),
            gpu_pod("whole", milli=1000, node="t4", devices="0"),
        ],
    )


def test_device_state_follows_bound_pods() -> None:
    handle = cluster()
    devices = GpuDevices.of(handle)
    row = handle.snapshot.row("v100")
    assert row is not None
    assert list(devices.free[row, :2]) == [400, 1000]
    assert devices.allocated_milli == 1600 and devices.capacity_milli == 3000
    handle.cluster.remove_pod("half")
    assert list(devices.free[row, :2]) == [1000, 1000] and devices.allocated_milli == 1000


def test_filter_reasons() -> None:
    handle = cluster()
    plugin = GpuShare.new(None, handle)
    share = run_filter(plugin, gpu_pod("p", milli=500), handle)
    assert share.passed == ["v100"]
    assert share.failed == {"t4": (REASON_SHARE,), "cpu": (REASON_NO_GPU,)}
    assert share.codes["cpu"] == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    whole = run_filter(plugin, gpu_pod("w", count=2), handle)
    assert whole.failed["v100"] == (REASON_WHOLE,)
    model = run_filter(plugin, gpu_pod("m", milli=100, models="T4"), handle)
    assert model.failed["v100"] == (REASON_MODEL,) and model.failed["t4"] == (REASON_SHARE,)
    assert model.codes["v100"] == Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_cpu_pods_skip_the_filter_and_bad_requests_are_rejected() -> None:
    handle = cluster()
    plugin = GpuShare.new(None, handle)
    assert run_filter(plugin, cpu_pod("c"), handle).pre_filter.code == Code.SKIP
    bad = gpu_pod("b", milli=2000)
    report = run_filter(plugin, bad, handle)
    assert report.pre_filter.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "invalid GPU request" in report.pre_filter.message


def _scheduler(policy: str = "GpuPacking"):  # type: ignore[no-untyped-def]
    config = KubeSchedulerConfiguration.model_validate(
        {
            "percentageOfNodesToScore": 100,
            "profiles": [
                {
                    "plugins": {
                        "multiPoint": {
                            "disabled": [{"name": "*"}],
                            "enabled": [
                                {"name": "PrioritySort"},
                                {"name": "NodeResourcesFit"},
                                {"name": "GpuShare"},
                                {"name": policy},
                                {"name": "DefaultBinder"},
                            ],
                        },
                        "score": {"disabled": [{"name": "NodeResourcesFit"}]},
                    }
                }
            ],
        }
    )
    return new_scheduler(config, clock=ManualClock(), effects=MemoryEffects(), seed=1)


def _schedule(sched, pod):  # type: ignore[no-untyped-def]
    """Add the pod, run the driver loop; (the pod as the API echoes it, the cycle)."""
    info = sched.add_pod(pod.obj())
    cycles: list[CycleResult] = []
    Driver(sched, inbox=sched.handle.effects, on_cycle=cycles.append).run()
    return sched.known_pod(info.uid) or info, cycles[0]


def test_reserve_picks_devices_and_bind_records_them() -> None:
    sched = _scheduler()
    sched.add_node(gpu_node("n", 4).obj())
    _, _ = _schedule(sched, gpu_pod("w", count=2))
    share, result = _schedule(sched, gpu_pod("s", milli=300))
    assert result.node == "n"
    # The devices go out with the binding and come back on the pod, as from a watch.
    assert sched.handle.effects.annotations["w"] == {"shoal.dev/gpu-index": "0,1"}
    whole = sched.cluster.placed["w"].pod
    assert whole.pod.metadata.annotations["shoal.dev/gpu-index"] == "0,1"
    # The share goes to a free device (2): GpuPacking would rather share a used device,
    # but none is partly free.
    assert share.pod.metadata.annotations["shoal.dev/gpu-index"] == "2"
    devices = GpuDevices.of(sched.handle)
    assert list(devices.free[0, :4]) == [0, 0, 700, 1000]
    sched.delete_pod("s")
    assert list(devices.free[0, :4]) == [0, 0, 1000, 1000]


def test_a_pod_that_fits_no_device_is_unschedulable_with_the_reason() -> None:
    sched = _scheduler()
    sched.add_node(gpu_node("n", 1).obj())
    _schedule(sched, gpu_pod("a", milli=700))
    _, result = _schedule(sched, gpu_pod("b", milli=700))
    assert result.node is None
    assert REASON_SHARE in result.message


def test_node_removal_moves_rows() -> None:
    handle = make_handle(
        nodes=[gpu_node("a", 2), gpu_node("b", 4), gpu_node("c", 8)],
        pods=[gpu_pod("p", milli=250, node="c", devices="5")],
    )
    devices = GpuDevices.of(handle)
    handle.cluster.remove_node("a")  # "c" moves into row 0
    row = handle.snapshot.row("c")
    assert row == 0 and devices.count[row] == 8 and devices.free[row, 5] == 750
    assert devices.assigned["p"].row == 0
