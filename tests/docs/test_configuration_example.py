"""docs/examples/two-profiles.yaml (the example of docs/configuration.md) parses, builds
both profiles as the guide describes, and the two profiles place pods differently."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from shoal.api.objects import (
    Container,
    Node,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodSpec,
    ResourceRequirements,
)
from shoal.config import KubeSchedulerConfiguration, parse_config
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.scheduler import Scheduler, default_registry, new_scheduler

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "two-profiles.yaml"


def load() -> KubeSchedulerConfiguration:
    raw = yaml.safe_load(EXAMPLE.read_text())
    return parse_config(raw, source=EXAMPLE.name, registry=default_registry())


@pytest.fixture
def sched() -> Scheduler:
    scheduler = new_scheduler(load(), clock=ManualClock(), effects=MemoryEffects(), seed=3)
    for i in range(3):
        scheduler.add_node(
            Node(
                metadata=ObjectMeta(name=f"gpu-{i}"),
                status=NodeStatus(
                    allocatable={
                        "cpu": "64",
                        "memory": "512Gi",
                        "pods": "110",
                        "nvidia.com/gpu": "8",
                    }
                ),
            )
        )
    return scheduler


def pod(name: str, scheduler_name: str) -> Pod:
    requests: dict[str, str | int | float] = {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 2}
    return Pod(
        metadata=ObjectMeta(name=name, uid=name),
        spec=PodSpec(
            scheduler_name=scheduler_name,
            containers=[Container(resources=ResourceRequirements(requests=requests))],
        ),
    )


def placements(sched: Scheduler) -> dict[str, str]:
    while sched.has_work():
        sched.schedule_one()
        sched.start_bindings()
        sched.handle.effects.drain(sched)  # type: ignore[attr-defined]
    return dict(sched.handle.effects.bound)  # type: ignore[attr-defined]


def test_it_parses_with_the_default_registry() -> None:
    config = load()
    assert [p.scheduler_name for p in config.profiles] == ["default-scheduler", "bin-packing"]
    assert config.percentage_of_nodes_to_score == 0
    assert (config.pod_initial_backoff_seconds, config.pod_max_backoff_seconds) == (1, 10)


def test_both_profiles_are_built_as_documented(sched: Scheduler) -> None:
    assert set(sched.profiles) == {"default-scheduler", "bin-packing"}
    default, packing = sched.profiles["default-scheduler"], sched.profiles["bin-packing"]

    assert default.percentage_of_nodes_to_score == 0  # inherited from the top level
    assert packing.percentage_of_nodes_to_score == 100

    default_weights = {p.name: w for p, w in default.plugins.score}
    packing_weights = {p.name: w for p, w in packing.plugins.score}
    assert default_weights["NodeResourcesFit"] == 1
    assert default_weights["NodeResourcesBalancedAllocation"] == 1
    assert packing_weights["NodeResourcesFit"] == 5
    assert "NodeResourcesBalancedAllocation" not in packing_weights
    assert all(p.name != "NodeResourcesBalancedAllocation" for p in packing.plugins.all())
    # Everything else is the default profile, in the same order.
    assert [n for n in default_weights if n != "NodeResourcesBalancedAllocation"] == list(
        packing_weights
    )
    assert [p.name for p in default.plugins.filter] == [p.name for p in packing.plugins.filter]

    fit = next(p for p, _ in packing.plugins.score if p.name == "NodeResourcesFit")
    assert fit.strategy == "MostAllocated"  # type: ignore[attr-defined]
    assert fit.score_resources == ["cpu", "memory", "nvidia.com/gpu"]  # type: ignore[attr-defined]
    assert fit.weights.tolist() == [1, 1, 5]  # type: ignore[attr-defined]
    default_fit = next(p for p, _ in default.plugins.score if p.name == "NodeResourcesFit")
    assert default_fit.strategy == "LeastAllocated"  # type: ignore[attr-defined]


def test_default_spreads_and_bin_packing_packs(sched: Scheduler) -> None:
    for i in range(3):
        sched.add_pod(pod(f"spread-{i}", "default-scheduler"))
    spread = placements(sched)
    assert sorted(spread.values()) == ["gpu-0", "gpu-1", "gpu-2"]

    for i in range(3):
        sched.add_pod(pod(f"pack-{i}", "bin-packing"))
    packed = {k: v for k, v in placements(sched).items() if k.startswith("pack-")}
    assert len(set(packed.values())) == 1  # all three on the same (already used) node
