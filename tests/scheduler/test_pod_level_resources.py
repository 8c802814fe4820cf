"""Pod-level resources (KEP-2837, `spec.resources`; beta and on by default since
Kubernetes 1.34): a pod that asks for cpu and memory for the whole pod, not per
container, is charged what it asks on its node. Shoal read only the containers, so
such a pod counted as asking nothing: three pods asking 3 cpu each went onto one 4-cpu
node."""

from __future__ import annotations

from typing import Any

from shoal.api.manifests import decode
from shoal.api.objects import Pod
from shoal.testing import SchedulerHarness, make_node


def pod_level(name: str, cpu: str, priority: int = 0) -> Pod:
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {
            "priority": priority,
            "containers": [{"name": "app"}, {"name": "sidecar"}],
            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
        },
    }
    return decode(raw, Pod)


def test_pods_asking_at_pod_level_are_charged_what_they_ask() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="4", memory="16Gi") for i in range(2)))
    h.add_pods(*(pod_level(f"p{i}", "3") for i in range(3)))
    placements, messages = h.run()
    assert sorted(n for n in placements.values() if n) == ["n0", "n1"]
    (waiting,) = [k for k, n in placements.items() if n is None]
    assert "2 Insufficient cpu" in messages[waiting]


def test_a_pod_level_preemptor_evicts_for_what_it_asks() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n0").capacity(cpu="4", memory="16Gi"))
    h.add_pods(pod_level("low", "3"))
    h.run()
    h.add_pods(pod_level("high", "3", priority=100))
    result = h.advance(30)
    assert result.placements["default/high"] == "n0"
    assert set(h.evicted) == {"default/low"}
