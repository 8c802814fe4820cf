"""GPU fragmentation policies on GPUs published through DRA (a DeviceClass standing for
`nvidia.com/gpu`): FGD scores a node from its DRA devices' state as from the GPUs a
node lists, so the same cluster and pods give the same placements either way."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import device_class, gpu_slice, resource_claim, with_claims

POLICIES = ["GpuFragmentation", "GpuFragGuard"]
# Each node's GPUs, and how many a pod already holds on it (placed first).
NODES = {"n1": (4, 3), "n2": (4, 0), "n3": (2, 1), "n4": (8, 2)}
INCOMING = [1, 1, 2, 1, 4]  # GPUs per pod, in order


def _config(policy: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "plugins": {
                    "multiPoint": {"enabled": [{"name": policy, "weight": 100}]},
                    "score": {
                        "disabled": [
                            {"name": "NodeResourcesFit"},
                            {"name": "NodeResourcesBalancedAllocation"},
                            {"name": "ImageLocality"},
                        ]
                    },
                },
            }
        ],
    }


def _native(policy: str) -> dict[str, str | None]:
    h = SchedulerHarness(_config(policy), seed=7)
    for name, (gpus, _) in NODES.items():
        h.add_nodes(
            make_node(name).capacity(cpu="64", memory="256Gi", **{"nvidia.com/gpu": str(gpus)})
        )
    for name, (_, held) in NODES.items():
        if held:
            h.add_pods(make_pod(f"held-{name}").req({"nvidia.com/gpu": str(held)}).node(name))
    for i, gpus in enumerate(INCOMING):
        h.add_pods(make_pod(f"p{i}").req({"nvidia.com/gpu": str(gpus), "cpu": "1"}))
        h.run()
    return {k: v for k, v in h.run().placements.items() if k.split("/")[1].startswith("p")}


@pytest.mark.parametrize("policy", POLICIES)
def test_dra_gpus_are_placed_as_listed_gpus_are(policy: str) -> None:
    native = _native(policy)
    assert all(native.values()), native
    h = SchedulerHarness(_config(policy), seed=7)
    gpu_class = device_class()
    gpu_class = msgspec.structs.replace(
        gpu_class,
        spec=msgspec.structs.replace(gpu_class.spec, extended_resource_name="nvidia.com/gpu"),
    )
    for name in NODES:
        h.add_nodes(make_node(name).capacity(cpu="64", memory="256Gi").hostname_label())
    h.add_dra(gpu_class, *(gpu_slice(n, count=g) for n, (g, _) in NODES.items()))
    # The pods already holding GPUs: claims pinned to their node by a nodeName.
    for name, (_, held) in NODES.items():
        if held:
            h.add_dra(resource_claim(f"held-{name}", count=held))
            pod = with_claims(make_pod(f"held-{name}"), gpu=f"held-{name}")
            spec = msgspec.structs.replace(pod.spec, node_selector={"kubernetes.io/hostname": name})
            h.add_pods(msgspec.structs.replace(pod, spec=spec))
            assert h.run().placements[f"default/held-{name}"] == name
    for i, gpus in enumerate(INCOMING):
        h.add_dra(resource_claim(f"p{i}", count=gpus))
        h.add_pods(with_claims(make_pod(f"p{i}").req({"cpu": "1"}), gpu=f"p{i}"))
        h.run()
    dra = {k: v for k, v in h.run().placements.items() if k.split("/")[1].startswith("p")}
    assert dra == native
