"""GpuHamiPolicy: HAMi's binpack and spread, for nodes and for devices, scored from the
pods, compute and memory on each node's registered devices (as HAMi's scheduler scores
them), in a profile of its own through the whole scheduler."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shoal.api.vgpu_protocol import ANNOTATION_HAMI_HANDSHAKE, ANNOTATION_HAMI_REGISTER
from shoal.cache.gpu_devices import GpuDevices
from shoal.config import ConfigError, KubeSchedulerConfiguration, parse_config
from shoal.scheduler import default_registry
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import NodeBuilder, PodBuilder

GPU = "nvidia.com/gpu"


def hami_node(name: str, devices: int = 2, memory: int = 16384, split: int = 10) -> NodeBuilder:
    registered = [
        {
            "id": f"GPU-{name}-{i}",
            "index": i,
            "count": split,
            "devmem": memory,
            "devcore": 100,
            "type": "NVIDIA-Tesla T4",
            "mode": "hami-core",
            "health": True,
        }
        for i in range(devices)
    ]
    return (
        make_node(name)
        .capacity({"cpu": "32", "memory": "128Gi", GPU: devices * split})
        .annotation(ANNOTATION_HAMI_REGISTER, json.dumps(registered))
        .annotation(ANNOTATION_HAMI_HANDSHAKE, "Reported 2026-11-29 12:00:00")
    )


def vgpu(name: str, memory: int = 0, cores: int = 0, count: int = 1) -> PodBuilder:
    """A HAMi vGPU pod: `count` vGPUs of `memory` MiB and `cores` % of compute each."""
    limits: dict[str, Any] = {GPU: count}
    if memory:
        limits["nvidia.com/gpumem"] = memory
    if cores:
        limits["nvidia.com/gpucores"] = cores
    return make_pod(name).uid(name).container(requests={"cpu": "1"}, limits=limits)


def harness(node_policy: str, gpu_policy: str) -> SchedulerHarness:
    config = KubeSchedulerConfiguration.model_validate(
        {
            "percentageOfNodesToScore": 100,
            "profiles": [
                {
                    "plugins": {
                        "multiPoint": {"enabled": [{"name": "GpuHamiPolicy", "weight": 10}]},
                        "score": {
                            "disabled": [{"name": "*"}],
                            "enabled": [{"name": "GpuHamiPolicy"}],
                        },
                    },
                    "pluginConfig": [
                        {
                            "name": "GpuHamiPolicy",
                            "args": {
                                "nodeSchedulerPolicy": node_policy,
                                "gpuSchedulerPolicy": gpu_policy,
                            },
                        }
                    ],
                }
            ],
        }
    )
    return SchedulerHarness(config)


def devices_of(h: SchedulerHarness, name: str) -> tuple[int, ...] | None:
    info = next(p for p in h.scheduler.cluster.placed.values() if p.pod.name == name)
    devices = GpuDevices.of(h.scheduler.handle)
    return devices.devices_of(info.pod.uid)


@pytest.mark.parametrize("node_policy", ["binpack", "spread"])
def test_node_policy_prefers_the_most_or_least_used_node(node_policy: str) -> None:
    h = harness(node_policy, "spread")
    h.add_nodes(hami_node("a").hostname_label(), hami_node("b").hostname_label())
    # A 4 GiB vGPU on a, then the next one follows the policy.
    h.add_pods(vgpu("first", memory=4096).node_selector({"kubernetes.io/hostname": "a"}))
    assert h.run().placements["default/first"] == "a"
    h.add_pods(vgpu("second", memory=2048))
    expected = "a" if node_policy == "binpack" else "b"
    assert h.run().placements["default/second"] == expected


@pytest.mark.parametrize("gpu_policy", ["binpack", "spread"])
def test_gpu_policy_puts_shares_on_the_most_or_least_used_device(gpu_policy: str) -> None:
    h = harness("binpack", gpu_policy)
    h.add_nodes(hami_node("a"))
    h.add_pods(vgpu("first", memory=4096))
    h.run()
    first = devices_of(h, "first")
    h.add_pods(vgpu("second", memory=4096))
    h.run()
    second = devices_of(h, "second")
    if gpu_policy == "binpack":
        assert second == first  # stacked on the used device
    else:
        assert second is not None and first is not None and set(second).isdisjoint(first)


def test_memory_counts_not_only_compute() -> None:
    # Node a: one vGPU holding 12 GiB of a device (little compute); node b: one vGPU
    # holding 50 % of a device's compute and 1 GiB. Compute alone would call b the more
    # used; HAMi's score (pods + compute + memory) calls a the more used.
    h = harness("binpack", "spread")
    h.add_nodes(hami_node("a").hostname_label(), hami_node("b").hostname_label())
    h.add_pods(
        vgpu("mem-heavy", memory=12288, cores=10).node_selector({"kubernetes.io/hostname": "a"}),
        vgpu("core-heavy", memory=1024, cores=50).node_selector({"kubernetes.io/hostname": "b"}),
    )
    placements = h.run().placements
    assert placements == {"default/mem-heavy": "a", "default/core-heavy": "b"}
    h.add_pods(vgpu("next", memory=1024, cores=10))
    assert h.run().placements["default/next"] == "a"


def test_a_two_device_vgpu_takes_two_devices_and_whole_gpus_are_unchanged() -> None:
    h = harness("binpack", "binpack")
    h.add_nodes(hami_node("a", devices=4))
    h.add_pods(vgpu("pair", memory=2048, count=2))
    h.run()
    pair = devices_of(h, "pair")
    assert pair is not None and len(pair) == 2 and len(set(pair)) == 2
    h.add_pods(vgpu("another", memory=2048))
    h.run()
    another = devices_of(h, "another")
    assert another is not None and another[0] in pair  # binpack: a used device


def test_the_policy_is_a_profile_choice_and_bad_args_are_refused() -> None:
    with pytest.raises(ConfigError, match="nodeSchedulerPolicy"):
        parse_config(
            {
                "profiles": [
                    {
                        "pluginConfig": [
                            {"name": "GpuHamiPolicy", "args": {"nodeSchedulerPolicy": "pack"}}
                        ]
                    }
                ]
            },
            registry=default_registry(),
        )
