"""NodeDeclaredFeatures (kube-scheduler v1.36, default profile): a pod that needs newer
node features goes only to nodes declaring them all, in Shoal's default profile."""

from __future__ import annotations

from typing import Any

from shoal.api.manifests import decode
from shoal.api.node_features import (
    RESTART_ALL_CONTAINERS,
    USER_NAMESPACES_HOST_NETWORK,
    required_features,
)
from shoal.api.objects import Pod
from shoal.testing import SchedulerHarness, make_node, make_pod

REASON = "node(s) didn't match Pod's required features"


def pod(name: str, restart_all: bool = False, host_network_userns: bool = False) -> Pod:
    container: dict[str, Any] = {
        "name": "app",
        "resources": {"requests": {"cpu": "100m"}},
    }
    if restart_all:
        container["restartPolicy"] = "Never"
        container["restartPolicyRules"] = [
            {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}
        ]
    spec: dict[str, Any] = {"containers": [container]}
    if host_network_userns:
        spec["hostNetwork"] = True
        spec["hostUsers"] = False
    raw = {"metadata": {"name": name, "namespace": "default", "uid": name}, "spec": spec}
    return decode(raw, Pod)


def test_requirements_are_inferred_as_kube_infers_them() -> None:
    assert required_features(pod("plain").spec) == frozenset()
    assert required_features(pod("r", restart_all=True).spec) == {RESTART_ALL_CONTAINERS}
    assert required_features(pod("u", host_network_userns=True).spec) == {
        USER_NAMESPACES_HOST_NETWORK
    }
    # hostUsers false without hostNetwork, or a restart rule of another action: none.
    other = pod("o", host_network_userns=True)
    other.spec.host_network = False
    assert required_features(other.spec) == frozenset()


def cluster() -> SchedulerHarness:
    h = SchedulerHarness()
    h.add_nodes(
        make_node("old").capacity(cpu="4"),
        make_node("restarts").capacity(cpu="4").declares(RESTART_ALL_CONTAINERS),
        make_node("userns").capacity(cpu="4").declares(USER_NAMESPACES_HOST_NETWORK),
    )
    return h


def test_pods_go_only_where_their_features_are_declared() -> None:
    h = cluster()
    h.add_pods(pod("r", restart_all=True), pod("u", host_network_userns=True))
    placements = h.run().placements
    assert placements == {"default/r": "restarts", "default/u": "userns"}


def test_a_pod_no_node_serves_waits_with_kubes_reason_and_a_declaring_node_frees_it() -> None:
    h = cluster()
    both = pod("both", restart_all=True, host_network_userns=True)
    h.add_pods(both)
    placements, messages = h.run()
    assert placements == {"default/both": None}
    assert messages["default/both"] == (
        f"0/3 nodes are available: 3 {REASON}."
        " preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
        "scheduling."
    )
    # The old node's kubelet is upgraded: it declares both now.
    h.update_node(
        make_node("old")
        .capacity(cpu="4")
        .declares(RESTART_ALL_CONTAINERS, USER_NAMESPACES_HOST_NETWORK)
        .obj()
    )
    assert h.advance(30).placements == {"default/both": "old"}


def test_pods_needing_nothing_are_not_held_back() -> None:
    h = cluster()
    h.add_pods(*(make_pod(f"p{i}").req(cpu="1") for i in range(12)))
    assert all(node is not None for node in h.run().placements.values())
