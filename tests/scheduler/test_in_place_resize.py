"""In-place pod resize (InPlacePodVerticalScaling, GA in Kubernetes 1.35): a running
pod's spec may ask for other resources than the kubelet has given it yet. kube-scheduler
counts the most of what the spec asks, what the kubelet allocated and what it actuated
(component-helpers' PodRequests with status resources), so a pod resized down keeps its
old size on its node until the kubelet has made the change; a resize the kubelet marks
Infeasible counts what the pod really has. Shoal read the spec alone."""

from __future__ import annotations

from typing import Any

import msgspec

from shoal.api.manifests import decode
from shoal.api.objects import Pod, StatusResources
from shoal.api.podinfo import pod_requests
from shoal.testing import SchedulerHarness, make_node, make_pod

Gi = 2**30


def running(
    name: str,
    spec_cpu: str,
    allocated_cpu: str | None = None,
    actuated_cpu: str | None = None,
    infeasible: bool = False,
    node: str = "n0",
) -> Pod:
    status: dict[str, Any] = {"phase": "Running"}
    container: dict[str, Any] = {"name": "app"}
    if allocated_cpu is not None:
        container["allocatedResources"] = {"cpu": allocated_cpu, "memory": "1Gi"}
    if actuated_cpu is not None:
        container["resources"] = {"requests": {"cpu": actuated_cpu, "memory": "1Gi"}}
    status["containerStatuses"] = [container]
    if infeasible:
        status["conditions"] = [
            {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}
        ]
    raw = {
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": spec_cpu, "memory": "1Gi"}}}
            ],
        },
        "status": status,
    }
    return decode(raw, Pod)


def test_requests_follow_kubes_pod_requests_with_status_resources() -> None:
    # Resized down, not yet allocated or actuated: the old size counts.
    assert pod_requests(running("p", "1", "4", "4"))[0] == {"cpu": 4000, "memory": Gi}
    # Allocated, not yet actuated: still the larger.
    assert pod_requests(running("p", "1", "1", "4"))[0]["cpu"] == 4000
    # Done: the new size.
    assert pod_requests(running("p", "1", "1", "1"))[0]["cpu"] == 1000
    # Resized up, not yet allocated: the spec's larger size counts.
    assert pod_requests(running("p", "4", "2", "2"))[0]["cpu"] == 4000
    # Infeasible: what the pod has, not the spec it will not get.
    assert pod_requests(running("p", "8", "2", "2", infeasible=True))[0]["cpu"] == 2000
    # Statuses without resources (an older kubelet): the spec.
    assert pod_requests(running("p", "3"))[0]["cpu"] == 3000


def test_a_pod_resized_down_keeps_its_room_until_the_kubelet_made_the_change() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n0").capacity(cpu="4", memory="16Gi"))
    h.add_pods(running("big", "1", "3", "3"))  # spec says 1 cpu, it still holds 3
    h.add_pods(make_pod("new").uid("new").req(cpu="2", memory="1Gi"))
    placements, messages = h.run()
    assert placements["default/new"] is None
    assert "Insufficient cpu" in messages["default/new"]
    h.update_pod(running("big", "1", "1", "1"))  # the kubelet resized it
    assert h.advance(30).placements["default/new"] == "n0"


def test_an_infeasible_resize_counts_what_the_pod_has() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n0").capacity(cpu="4", memory="16Gi"))
    h.add_pods(running("greedy", "8", "1", "1", infeasible=True))
    h.add_pods(make_pod("new").uid("new").req(cpu="2", memory="1Gi"))
    assert h.run().placements["default/new"] == "n0"


# ---- pod-level resources resized in place (InPlacePodLevelResourcesVerticalScaling) ----


def pod_level(
    name: str,
    spec_cpu: str,
    allocated_cpu: str | None = None,
    actuated_cpu: str | None = None,
    infeasible: bool = False,
    overhead_cpu: str | None = None,
) -> Pod:
    """A running pod with pod-level requests (its container asks nothing of its own) and
    the pod-level figures the kubelet reports (which include overhead)."""
    status: dict[str, Any] = {"phase": "Running"}
    if allocated_cpu is not None:
        status["allocatedResources"] = {"cpu": allocated_cpu, "memory": "1Gi"}
    if actuated_cpu is not None:
        status["resources"] = {"requests": {"cpu": actuated_cpu, "memory": "1Gi"}}
    if infeasible:
        status["conditions"] = [
            {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}
        ]
    spec: dict[str, Any] = {
        "nodeName": "n0",
        "resources": {"requests": {"cpu": spec_cpu, "memory": "1Gi"}},
        "containers": [{"name": "app"}],
    }
    if overhead_cpu is not None:
        spec["overhead"] = {"cpu": overhead_cpu}
    raw = {"metadata": {"name": name, "namespace": "default", "uid": name}, "spec": spec}
    raw["status"] = status
    return decode(raw, Pod)


def test_pod_level_requests_follow_the_pod_level_status() -> None:
    # Resized down at pod level, the kubelet not done yet: the old size counts.
    assert pod_requests(pod_level("p", "1", "4", "4"))[0] == {"cpu": 4000, "memory": Gi}
    assert pod_requests(pod_level("p", "1", "1", "4"))[0]["cpu"] == 4000
    assert pod_requests(pod_level("p", "1", "1", "1"))[0]["cpu"] == 1000
    # Resized up, not yet allocated: the spec's larger size.
    assert pod_requests(pod_level("p", "4", "2", "2"))[0]["cpu"] == 4000
    # Only one of the two reported: it still counts at pod level.
    assert pod_requests(pod_level("p", "1", allocated_cpu="3"))[0]["cpu"] == 3000
    # Infeasible: what the pod has.
    assert pod_requests(pod_level("p", "8", "2", "2", infeasible=True))[0]["cpu"] == 2000
    # The kubelet's pod-level figures include overhead: taken off, then added once.
    with_overhead = pod_level("p", "1", "3500m", "3500m", overhead_cpu="500m")
    assert pod_requests(with_overhead)[0]["cpu"] == 3500
    # Nothing reported: the spec.
    assert pod_requests(pod_level("p", "2"))[0]["cpu"] == 2000


def test_container_requests_use_the_pod_level_status_when_both_are_reported() -> None:
    # A pod without pod-level requests whose kubelet reports the pod's allocated and
    # actuated totals: those stand for the containers' statuses.
    raw = running("p", "1", "1", "1")
    totals = msgspec.structs.replace(
        raw.status,
        allocated_resources={"cpu": "3", "memory": "1Gi"},
        resources=StatusResources(requests={"cpu": "3", "memory": "1Gi"}),
    )
    assert pod_requests(msgspec.structs.replace(raw, status=totals))[0]["cpu"] == 3000


def test_a_pod_resized_down_at_pod_level_keeps_its_room_until_the_kubelet_made_it_so() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n0").capacity(cpu="4", memory="16Gi"))
    h.add_pods(pod_level("big", "1", "3", "3"))
    h.add_pods(make_pod("new").uid("new").req(cpu="2", memory="1Gi"))
    placements, messages = h.run()
    assert placements["default/new"] is None
    assert "Insufficient cpu" in messages["default/new"]
    h.update_pod(pod_level("big", "1", "1", "1"))
    assert h.advance(30).placements["default/new"] == "n0"
