"""NodePorts: host port conflicts incl. wildcard host IPs (kube's nodeports_test.go)."""

from __future__ import annotations

import pytest

from shoal.framework.status import Code
from shoal.plugins.node_ports import REASON, NodePorts
from shoal.testing import PodBuilder, make_handle, make_node, make_pod, run_filter


def _pod(name: str, *ports: str) -> PodBuilder:
    """Ports as kube's tests write them: "PROTOCOL/hostIP/port"."""
    pod = make_pod(name)
    for spec in ports:
        protocol, ip, port = spec.split("/")
        pod.host_port(int(port), protocol, ip)  # type: ignore[arg-type]
    return pod


CASES = [
    ("other port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/9090"], True),
    ("same udp port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], False),
    ("same tcp port", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], False),
    ("different host ip", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.2/8080"], True),
    ("different protocol", ["UDP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], True),
    (
        "second udp port conflict",
        ["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"],
        ["UDP/127.0.0.1/8080"],
        False,
    ),
    (
        "first tcp port conflict",
        ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
        ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"],
        False,
    ),
    (
        "first tcp port conflict due to 0.0.0.0 hostIP",
        ["TCP/0.0.0.0/8001"],
        ["TCP/127.0.0.1/8001"],
        False,
    ),
    (
        "TCP hostPort conflict due to 0.0.0.0 hostIP",
        ["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"],
        ["TCP/127.0.0.1/8001"],
        False,
    ),
    (
        "second tcp port conflict to 0.0.0.0 hostIP",
        ["TCP/127.0.0.1/8001"],
        ["TCP/0.0.0.0/8001"],
        False,
    ),
    ("second different protocol", ["UDP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], True),
    (
        "UDP hostPort conflict due to 0.0.0.0 hostIP",
        ["UDP/127.0.0.1/8001"],
        ["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"],
        False,
    ),
    ("an empty host IP is the wildcard", ["TCP//8001"], ["TCP/10.1.1.1/8001"], False),
]


@pytest.mark.parametrize(("wanted", "used", "fits"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_node_ports(wanted: list[str], used: list[str], fits: bool) -> None:
    handle = make_handle(
        [make_node("n1").capacity(cpu="1"), make_node("n2").capacity(cpu="1")],
        [_pod("existing", *used).node("n1")],
    )
    report = run_filter(NodePorts.new(None, handle), _pod("p", *wanted), handle)
    assert report.reasons["n2"] == ()  # the other node is always free
    if fits:
        assert report.reasons["n1"] == ()
    else:
        assert report.reasons["n1"] == (REASON,)
        assert report.codes["n1"] == Code.UNSCHEDULABLE


def test_pod_without_host_ports_skips_the_plugin() -> None:
    handle = make_handle([make_node("n1")], [_pod("e", "TCP/0.0.0.0/80").node("n1")])
    report = run_filter(NodePorts.new(None, handle), make_pod("p").req(cpu="1"), handle)
    assert report.pre_filter.code == Code.SKIP
    # A container port without a host port does not count either.
    pod = make_pod("q")
    pod.host_port(0, container_port=80)
    assert run_filter(NodePorts.new(None, handle), pod, handle).pre_filter.code == Code.SKIP


def test_port_is_free_again_when_the_pod_leaves() -> None:
    handle = make_handle([make_node("n1")], [_pod("e", "TCP/0.0.0.0/80").node("n1")])
    plugin = NodePorts.new(None, handle)
    assert run_filter(plugin, _pod("p", "TCP/0.0.0.0/80"), handle).passed == []
    handle.cluster.remove_pod("default/e")
    assert run_filter(plugin, _pod("p", "TCP/0.0.0.0/80"), handle).passed == ["n1"]


def _raw(name: str, **spec: object) -> object:
    from shoal.api.manifests import decode
    from shoal.api.objects import Pod

    raw = {"metadata": {"name": name, "namespace": "default"}, "spec": spec}
    return decode(raw, Pod)


def test_a_sidecars_host_port_counts_as_kubes_get_host_ports() -> None:
    """kube's GetHostPorts includes init containers that run as long as the pod."""
    sidecar = {
        "name": "proxy",
        "restartPolicy": "Always",
        "ports": [{"containerPort": 15001, "hostPort": 15001}],
    }
    once = {"name": "setup", "ports": [{"containerPort": 9000, "hostPort": 9000}]}
    existing = _raw(
        "existing", nodeName="n1", initContainers=[sidecar, once], containers=[{"name": "app"}]
    )
    handle = make_handle([make_node("n1"), make_node("n2")], [existing])  # type: ignore[list-item]
    plugin = NodePorts.new(None, handle)
    assert run_filter(plugin, _pod("p", "TCP//15001"), handle).passed == ["n2"]
    # A regular init container's port is free once it has run.
    assert run_filter(plugin, _pod("q", "TCP//9000"), handle).passed == ["n1", "n2"]


def test_host_network_pods_take_their_container_ports_on_the_node() -> None:
    """The API server defaults hostPort to containerPort for hostNetwork pods (so objects
    from a cluster already say so); manifests given to the simulator may not."""
    app = {"name": "app", "ports": [{"containerPort": 8080}]}
    existing = _raw("existing", nodeName="n1", hostNetwork=True, containers=[app])
    handle = make_handle([make_node("n1"), make_node("n2")], [existing])  # type: ignore[list-item]
    plugin = NodePorts.new(None, handle)
    assert run_filter(plugin, _pod("p", "TCP//8080"), handle).passed == ["n2"]
    incoming = _raw("q", hostNetwork=True, containers=[app])
    assert run_filter(plugin, incoming, handle).passed == ["n2"]  # type: ignore[arg-type]
