"""`shoal.api.validation` accepts what kube's API server accepts: the checks refuse only
what it refuses (the corpus holds the refusals, tests/corpus/generate.py
`api_validation_cases`)."""

from __future__ import annotations

import msgspec
import pytest

from shoal.api.objects import Node, Pod
from shoal.api.validation import (
    extended_resource_problem,
    label_value_problem,
    node_problem,
    pod_problem,
    qualified_name_problem,
)


@pytest.mark.parametrize(
    "name",
    [
        "app",
        "app.kubernetes.io/name",
        "topology.kubernetes.io/zone",
        "node-role.kubernetes.io/control-plane",
        "Under_Score.9",
        "a" * 63,
        f"{'b' * 253}/x",
    ],
)
def test_qualified_names_kube_accepts(name: str) -> None:
    assert qualified_name_problem(name) == ""


@pytest.mark.parametrize(
    "name", ["", "-a", "a-", "a b", "a/b/c", "Upper.Case/x", "/x", "x/", "a" * 64, "ä"]
)
def test_qualified_names_kube_refuses(name: str) -> None:
    assert qualified_name_problem(name)


def test_label_values() -> None:
    assert label_value_problem("") == ""
    assert label_value_problem("v1.2_3-x") == ""
    assert label_value_problem("a/b")
    assert label_value_problem("x" * 64)


@pytest.mark.parametrize("name", ["nvidia.com/gpu", "aliyun.com/gpu-mem", "example.com/fpga"])
def test_extended_resources(name: str) -> None:
    assert extended_resource_problem(name) == ""


def test_a_realistic_pod_and_node_pass() -> None:
    pod = msgspec.convert(
        {
            "metadata": {"name": "p", "labels": {"app.kubernetes.io/name": "web", "tier": ""}},
            "spec": {
                "initContainers": [{"name": "init", "ports": [{"containerPort": 80}]}],
                "containers": [
                    {
                        "name": "a",
                        "resources": {
                            "requests": {"cpu": "1", "hugepages-2Mi": "2Mi", "nvidia.com/gpu": 1},
                            "limits": {"ephemeral-storage": "1Gi", "nvidia.com/gpu": 1},
                        },
                        "ports": [{"containerPort": 80, "hostPort": 80}],
                    },
                    {
                        "name": "b",
                        "ports": [{"containerPort": 80, "hostPort": 80, "protocol": "UDP"}],
                    },
                ],
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"operator": "Exists"}],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "In", "values": ["n"]}
                                    ]
                                }
                            ]
                        }
                    }
                },
            },
        },
        Pod,
    )
    assert pod_problem(pod) is None
    node = msgspec.convert(
        {
            "metadata": {"name": "n", "labels": {"kubernetes.io/hostname": "n"}},
            "spec": {
                "taints": [
                    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                    {"key": "dedicated", "value": "gpu", "effect": "NoExecute"},
                ]
            },
            "status": {"allocatable": {"cpu": "4", "pods": "110", "nvidia.com/gpu": "8"}},
        },
        Node,
    )
    assert node_problem(node) is None


def test_host_network_ports_are_host_ports() -> None:
    pod = msgspec.convert(
        {
            "metadata": {"name": "p"},
            "spec": {
                "hostNetwork": True,
                "containers": [
                    {"name": "a", "ports": [{"containerPort": 80}]},
                    {"name": "b", "ports": [{"containerPort": 80}]},
                ],
            },
        },
        Pod,
    )
    found = pod_problem(pod)
    assert found is not None and found[0] == "spec.containers[1].ports[0].hostPort"
