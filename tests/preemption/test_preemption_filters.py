"""Preemption re-runs every filter of the pod's profile with the victims removed (kube's
SelectVictimsOnNode), not just the resource check.

Before core v2 victims were chosen by resources alone, so a pod whose required
anti-affinity to a pod that may not be preempted could never be satisfied on a node
still evicted that node's low-priority pods for nothing; and a GPU-share pod could not
preempt at all, because device-level room (GpuShare's filter) was never re-checked.
"""

from __future__ import annotations

from typing import Any

from shoal.api.gpu import ANNOTATION_GPU_COUNT, ANNOTATION_GPU_INDEX, ANNOTATION_GPU_MILLI
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import NodeBuilder, PodBuilder

HOSTNAME = "kubernetes.io/hostname"


def node(name: str) -> NodeBuilder:
    return make_node(name).hostname_label().capacity(cpu="4", memory="8Gi")


def web() -> PodBuilder:
    """Priority 500, needs 2 cpu, must not share a node with an app=db pod."""
    return make_pod("web").req(cpu="2").priority(500).pod_anti_affinity_in("app", ["db"], HOSTNAME)


def test_anti_affinity_to_a_pod_that_may_not_be_preempted_evicts_nothing() -> None:
    h = SchedulerHarness()
    h.add_nodes(node("n1"))
    h.add_pods(
        make_pod("db").labels(app="db").req(cpu="1").priority(1000).node("n1"),
        make_pod("batch").req(cpu="3").priority(0).node("n1"),
    )
    h.add_pods(web())
    placements, messages = h.advance(60)
    # Evicting "batch" would free the cpu, but "db" (priority 1000) stays and web's
    # anti-affinity to it can never be met on n1: no eviction for nothing.
    assert h.evicted == {}
    assert placements == {"default/db": "n1", "default/batch": "n1", "default/web": None}
    assert messages["default/web"].startswith("0/1 nodes are available: 1 Insufficient cpu.")


def test_pending_message_says_why_preemption_did_not_help() -> None:
    h = SchedulerHarness()
    h.add_nodes(node("n1"))
    h.add_pods(
        make_pod("db").labels(app="db").req(cpu="1").priority(1000).node("n1"),
        make_pod("batch").req(cpu="3").priority(0).node("n1"),
    )
    h.add_pods(web())
    _, messages = h.advance(60)
    assert messages["default/web"].startswith(
        "0/1 nodes are available: 1 Insufficient cpu. preemption: "
    )


def test_anti_affine_pod_of_lower_priority_is_evicted_with_what_the_pod_needs() -> None:
    h = SchedulerHarness()
    h.add_nodes(node("n1"), node("n2"))
    h.add_pods(
        make_pod("db").labels(app="db").req(cpu="1").priority(1000).node("n1"),
        make_pod("batch").req(cpu="3").priority(0).node("n1"),
        make_pod("db-low").labels(app="db").req(cpu="1").priority(0).node("n2"),
        make_pod("batch-2").req(cpu="3").priority(0).node("n2"),
    )
    h.add_pods(web())
    placements, messages = h.advance(60)
    # On n2 both go: db-low because of the anti-affinity, batch-2 for the cpu. On n1
    # nothing is touched.
    assert h.evicted == {
        "default/db-low": "preempted by default/web (priority 500 > 0) on node n2",
        "default/batch-2": "preempted by default/web (priority 500 > 0) on node n2",
    }
    assert placements == {"default/db": "n1", "default/batch": "n1", "default/web": "n2"}
    assert messages == {}


def test_anti_affine_pod_alone_is_evicted_when_resources_are_free() -> None:
    """The filter that rejects is the anti-affinity only: the one victim is the pod it
    names, although evicting it frees no resource the preemptor needs."""
    h = SchedulerHarness()
    h.add_nodes(node("n1"))
    h.add_pods(
        make_pod("db-low").labels(app="db").req(cpu="1").priority(0).node("n1"),
        make_pod("batch").req(cpu="1").priority(0).node("n1"),
    )
    h.add_pods(web())
    placements, _ = h.advance(60)
    assert h.evicted == {"default/db-low": "preempted by default/web (priority 500 > 0) on node n1"}
    assert placements["default/web"] == "n1" and placements["default/batch"] == "n1"


# ---- GPU sharing -----------------------------------------------------------------------

GPU_SHARE_PROFILE: dict[str, Any] = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "default-scheduler",
            "plugins": {"multiPoint": {"enabled": [{"name": "GpuShare"}]}},
        }
    ],
}


def gpu_node(name: str, gpus: int) -> NodeBuilder:
    return make_node(name).capacity({"nvidia.com/gpu": gpus}, cpu="64", memory="256Gi")


def share(name: str, milli: int, priority: int, on: str = "", device: str = "") -> PodBuilder:
    annotations = {ANNOTATION_GPU_MILLI: str(milli), ANNOTATION_GPU_COUNT: "1"}
    if device:
        annotations[ANNOTATION_GPU_INDEX] = device
    pod = make_pod(name).req(cpu="1", memory="1Gi").annotations(annotations).priority(priority)
    return pod.node(on) if on else pod


def test_gpu_share_pod_preempts_the_lower_priority_share_on_the_device_that_helps() -> None:
    h = SchedulerHarness(GPU_SHARE_PROFILE)
    h.add_nodes(gpu_node("n", 2))
    h.add_pods(
        share("train", 600, priority=1000, on="n", device="0"),
        share("notebook-0", 300, priority=0, on="n", device="0"),
        share("notebook-1", 500, priority=0, on="n", device="1"),
    )
    # 600m fits on no device (free: 100m on 0, 500m on 1). Evicting notebook-0 would
    # leave 400m on device 0, not enough; evicting notebook-1 frees device 1 whole.
    h.add_pods(share("infer", 600, priority=500))
    placements, messages = h.advance(60)
    assert h.evicted == {
        "default/notebook-1": "preempted by default/infer (priority 500 > 0) on node n"
    }
    assert placements["default/infer"] == "n" and messages == {}
    assert placements["default/notebook-0"] == "n" and placements["default/train"] == "n"
    infer = next(r.pod for r in h.scheduler.cluster.placed.values() if r.pod.name == "infer")
    assert infer.pod.metadata.annotations[ANNOTATION_GPU_INDEX] == "1"


def test_gpu_share_pod_never_preempts_higher_priority_shares() -> None:
    h = SchedulerHarness(GPU_SHARE_PROFILE)
    h.add_nodes(gpu_node("n", 1))
    h.add_pods(
        share("train", 600, priority=1000, on="n", device="0"),
        share("notebook", 300, priority=0, on="n", device="0"),
    )
    # Even with the notebook gone only 400m would be free: nothing is evicted.
    h.add_pods(share("infer", 600, priority=500))
    placements, messages = h.advance(60)
    assert h.evicted == {}
    assert placements["default/infer"] is None
    assert "Insufficient GPU milli on any single device" in messages["default/infer"]


def test_a_preemptor_goes_to_the_node_it_made_room_on() -> None:
    """kube's evaluateNominatedNode: when the preemptor is retried it is placed on its
    nominated node if it fits there, even if another node now scores higher; otherwise
    the room its victims left would stay empty."""
    h = SchedulerHarness()
    h.add_nodes(
        make_node("n1").capacity(cpu="4", memory="16Gi"),
        make_node("n2").capacity(cpu="8", memory="16Gi"),
    )
    h.add_pods(
        make_pod("low").req(cpu="4").priority(1).node("n1"),
        make_pod("other").req(cpu="8").priority(5).node("n2"),
    )
    h.add_pods(make_pod("urgent").req(cpu="4").priority(10))
    h.run()
    assert h.evicted == {"default/low": "preempted by default/urgent (priority 10 > 1) on node n1"}
    h.delete_pod("other")  # n2 empties before the preemptor is retried
    placements, _ = h.advance(30)
    assert placements["default/urgent"] == "n1"
