"""The plugin of docs/plugin-authoring.md really works (docs/examples/gpu_model_preference.py).

The example file and its YAML profile are loaded as a user would: the plugin registered
next to the in-tree ones, the profile read from docs/examples/gpu-model-preference.yaml,
the scheduler built with `shoal.scheduler.new_scheduler`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from shoal.api.objects import (
    Container,
    Node,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodSpec,
    ResourceRequirements,
)
from shoal.config import ConfigError, load_config, parse_config
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.framework import Code, CycleState, Registry
from shoal.framework import registry as registry_module
from shoal.scheduler import Scheduler, default_registry, new_scheduler

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
H100, A100, L4 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L4"


def load_example() -> ModuleType:
    path = EXAMPLES / "gpu_model_preference.py"
    spec = importlib.util.spec_from_file_location("gpu_model_preference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves annotations through sys.modules
    spec.loader.exec_module(module)
    return module


example = load_example()


def registry() -> Registry:
    out = default_registry(include_entry_points=False)
    out.register(example.NAME, example.SPEC)
    return out


def gpu_node(name: str, model: str | None) -> Node:
    labels = {"kubernetes.io/hostname": name}
    if model:
        labels["nvidia.com/gpu.product"] = model
    return Node(
        metadata=ObjectMeta(name=name, labels=labels),
        status=NodeStatus(
            allocatable={"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
        ),
    )


def pod(name: str, gpus: int = 0, models: str | None = None) -> Pod:
    requests: dict[str, Any] = {"cpu": "1", "memory": "1Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
    annotations = {example.ANNOTATION: models} if models is not None else {}
    return Pod(
        metadata=ObjectMeta(name=name, uid=name, namespace="ml", annotations=annotations),
        spec=PodSpec(containers=[Container(resources=ResourceRequirements(requests=requests))]),
    )


@pytest.fixture
def sched() -> Scheduler:
    config = load_config(EXAMPLES / "gpu-model-preference.yaml", registry=registry())
    clock = ManualClock()
    scheduler = new_scheduler(config, clock=clock, effects=MemoryEffects(), registry=registry())
    for name, model in [
        ("h100-0", H100),
        ("a100-0", A100),
        ("a100-1", A100),
        ("l4-0", L4),
        ("l4-1", L4),
        ("cpu-0", None),
    ]:
        scheduler.add_node(gpu_node(name, model))
    return scheduler


def drain(sched: Scheduler) -> dict[str, str]:
    while sched.has_work():
        sched.schedule_one()
        sched.start_bindings()
        sched.handle.effects.drain(sched)  # type: ignore[attr-defined]
    return dict(sched.handle.effects.bound)  # type: ignore[attr-defined]


def test_the_profile_enables_every_point_the_plugin_implements(sched: Scheduler) -> None:
    fwk = sched.profiles["default-scheduler"]
    assert example.NAME in [p.name for p in fwk.plugins.pre_filter]
    assert example.NAME in [p.name for p in fwk.plugins.filter]
    assert example.NAME in [p.name for p in fwk.plugins.pre_score]
    assert (example.NAME, 5) in [(p.name, w) for p, w in fwk.plugins.score]
    plugin = next(p for p in fwk.plugins.filter if p.name == example.NAME)
    assert plugin.model_scores == {H100: 100, A100: 66, L4: 33}  # type: ignore[attr-defined]


def test_score_prefers_the_first_model(sched: Scheduler) -> None:
    sched.add_pod(pod("train", gpus=1))
    assert drain(sched) == {"train": "h100-0"}


def test_filter_keeps_only_requested_models(sched: Scheduler) -> None:
    sched.add_pod(pod("infer", gpus=1, models=f"{L4}, {A100}"))
    placed = drain(sched)
    assert placed["infer"] == "a100-0" or placed["infer"] == "a100-1"  # A100 outranks L4


def test_unknown_model_is_explained_and_unresolvable(sched: Scheduler) -> None:
    sched.add_pod(pod("b200", gpus=1, models="NVIDIA-B200"))
    result = sched.schedule_one()
    assert result is not None and result.node is None
    assert result.message == (
        "0/6 nodes are available: 6 node(s) didn't have a requested GPU model."
        " preemption: 0/6 nodes are available: 6 Preemption is not helpful for "
        "scheduling."
    )
    assert result.diagnosis is not None and result.diagnosis.unresolvable is not None
    assert result.diagnosis.unresolvable.all()  # preemption would not help
    assert result.diagnosis.unschedulable_plugins == {example.NAME}


def test_a_node_event_requeues_the_rejected_pod(sched: Scheduler) -> None:
    sched.add_pod(pod("b200", gpus=1, models="NVIDIA-B200"))
    assert drain(sched) == {}
    assert sched.scheduling_queue.counts()["unschedulable"] == 1
    sched.add_node(gpu_node("b200-0", "NVIDIA-B200"))  # a Node/Add event: registered
    clock = sched.clock
    assert isinstance(clock, ManualClock)
    clock.advance_to(clock.now() + 10)  # past the backoff
    sched.tick()
    assert drain(sched) == {"b200": "b200-0"}


def test_empty_annotation_is_rejected_in_prefilter(sched: Scheduler) -> None:
    sched.add_pod(pod("empty", gpus=1, models=" , "))
    result = sched.schedule_one()
    assert result is not None and result.node is None
    assert result.status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert result.status.plugin == example.NAME
    assert result.message == (
        "0/6 nodes are available: annotation example.com/gpu-models names no GPU model."
        " preemption: 0/6 nodes are available: 6 Preemption is not helpful for "
        "scheduling."
    )


def test_skip_switches_filter_and_score_off(sched: Scheduler) -> None:
    fwk = sched.profiles["default-scheduler"]
    info = sched.pod_info(pod("web"))  # no annotation, no GPU request
    state = CycleState()
    _, status = fwk.run_pre_filter(state, info)
    assert status.ok and example.NAME in state.skip_filter
    sched.snapshot.refresh()
    from shoal.framework import Candidates

    assert fwk.run_pre_score(state, info, Candidates.all(sched.snapshot.n)).ok
    assert example.NAME in state.skip_score
    sched.add_pod(pod("web"))
    assert "web" in drain(sched)


def test_bad_args_are_reported_with_their_path() -> None:
    raw = {
        "profiles": [
            {
                "pluginConfig": [
                    {
                        "name": example.NAME,
                        "args": {"preferredModels": [L4, L4], "labelKeys": "x"},
                    }
                ]
            }
        ]
    }
    with pytest.raises(ConfigError) as err:
        parse_config(raw, registry=registry())
    problems = {p.path: p.message for p in err.value.problems}
    assert (
        "models listed more than once"
        in problems["profiles[0].pluginConfig[0].args.preferredModels"]
    )
    assert "unknown field 'labelKeys'" in problems["profiles[0].pluginConfig[0].args.labelKeys"]


def test_entry_point_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    """`[project.entry-points."shoal.plugins"] GpuModelPreference = "...:SPEC"`."""

    class FakeEntryPoint:
        name = example.NAME

        def load(self) -> object:
            return example.SPEC

    def fake_entry_points(group: str) -> list[FakeEntryPoint]:
        return [FakeEntryPoint()] if group == "shoal.plugins" else []

    monkeypatch.setattr(registry_module, "entry_points", fake_entry_points)
    found = default_registry()
    assert found[example.NAME] is example.SPEC
    config = load_config(EXAMPLES / "gpu-model-preference.yaml", registry=found)
    scheduler = new_scheduler(config, clock=ManualClock(), effects=MemoryEffects())
    assert example.NAME in [p.name for p in scheduler.profiles["default-scheduler"].plugins.filter]
