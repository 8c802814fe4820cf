"""A plugin package or a plugin that breaks the contract gets a clear error naming it,
never a traceback, and never stops configurations that do not use it: an entry point
that cannot be loaded, one named like an in-tree plugin, two with one name, a plugin
whose `name` is not the one it is registered under, and Filters whose verdicts do not
match the candidates or reject nodes without saying why."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shoal.api.podinfo import PodInfo
from shoal.config import ConfigError, parse_config
from shoal.framework import Candidates, CycleState, FilterResult, PluginSpec
from shoal.framework import registry as registry_module
from shoal.framework.handle import Handle
from shoal.scheduler import default_registry
from shoal.testing import SchedulerHarness, make_node, make_pod


class FakeEntryPoint:
    def __init__(self, name: str, value: str, target: object = None) -> None:
        self.name = name
        self.value = value
        self.dist = None
        self._target = target

    def load(self) -> object:
        if self._target is None:
            module = self.value.split(":")[0]
            raise ModuleNotFoundError(f"No module named {module!r}")
        return self._target


class Rejects:
    """A Filter that rejects every node; how it says so is the test's."""

    def __init__(self, name: str, result: Any) -> None:
        self.name = name
        self._result = result

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        result: FilterResult = self._result(nodes.size)
        return result


def spec(name: str, result: Any = None, calls_itself: str | None = None) -> PluginSpec:
    def factory(args: object, handle: Handle) -> Rejects:
        return Rejects(calls_itself or name, result or FilterResult.all_pass)

    return PluginSpec(factory)


def installed(monkeypatch: pytest.MonkeyPatch, *eps: FakeEntryPoint) -> None:
    def fake_entry_points(group: str) -> list[FakeEntryPoint]:
        return list(eps) if group == "shoal.plugins" else []

    monkeypatch.setattr(registry_module, "entry_points", fake_entry_points)


def enabling(*names: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "batch",
                "plugins": {"multiPoint": {"enabled": [{"name": n} for n in names]}},
            }
        ],
    }


def test_a_package_whose_entry_point_cannot_be_loaded_stops_only_configs_that_use_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: every `shoal validate-config` and `simulate` died with a traceback ending
    # in ModuleNotFoundError, even for configurations that never name the plugin.
    installed(monkeypatch, FakeEntryPoint("Broken", "no_such_module:SPEC"))
    registry = default_registry()
    parse_config(enabling(), registry=registry)  # the default plugins: fine
    with pytest.raises(ConfigError) as err:
        parse_config(enabling("Broken"), registry=registry)
    assert [(p.path, p.message) for p in err.value.problems] == [
        (
            "profiles[0].plugins.multiPoint.enabled[0].name",
            "plugin 'Broken' cannot be used: the entry point Broken = 'no_such_module:SPEC' "
            "could not be loaded: ModuleNotFoundError: No module named 'no_such_module'",
        )
    ]


def test_an_entry_point_named_like_an_in_tree_plugin_is_ignored_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed(monkeypatch, FakeEntryPoint("NodeAffinity", "theirs:SPEC", spec("NodeAffinity")))
    registry = default_registry()
    config = parse_config(enabling(), registry=registry)
    assert registry["NodeAffinity"] is default_registry(include_entry_points=False)["NodeAffinity"]
    assert [(w.path, w.message) for w in config.warnings] == [
        (
            "entry point NodeAffinity",
            "the entry point 'NodeAffinity' (group shoal.plugins) is ignored: a plugin named "
            "'NodeAffinity' is already registered; rename the entry point",
        )
    ]


def test_two_entry_points_with_one_name_are_both_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed(
        monkeypatch,
        FakeEntryPoint("Quarantine", "a:SPEC", spec("Quarantine")),
        FakeEntryPoint("Quarantine", "b:SPEC", spec("Quarantine")),
    )
    registry = default_registry()
    assert "Quarantine" not in registry
    with pytest.raises(ConfigError, match="more than one installed package registers"):
        parse_config(enabling("Quarantine"), registry=registry)


def test_an_entry_point_that_points_at_neither_a_spec_nor_a_factory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed(monkeypatch, FakeEntryPoint("Odd", "theirs:NAME", "Odd"))
    with pytest.raises(ConfigError, match="points at a str, not a PluginSpec"):
        parse_config(enabling("Odd"), registry=default_registry())


def test_a_plugin_registered_under_another_name_than_its_own_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: validate-config said OK, and the plugin ran under two names.
    installed(
        monkeypatch,
        FakeEntryPoint(
            "NotQuarantine", "q:WRONG", spec("NotQuarantine", calls_itself="Quarantine")
        ),
    )
    with pytest.raises(ConfigError) as err:
        parse_config(enabling("NotQuarantine"), registry=default_registry())
    assert "plugin registered as 'NotQuarantine' calls itself 'Quarantine'" in str(err.value)


def filter_harness(result: Any) -> SchedulerHarness:
    registry = default_registry(include_entry_points=False).merged(
        [("Rejects", spec("Rejects", result))]
    )
    config = parse_config(enabling("Rejects"), registry=registry)
    h = SchedulerHarness(config, registry=registry)
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="4", memory="4Gi") for i in range(3)))
    return h


def test_a_filter_that_returns_verdicts_for_the_wrong_number_of_nodes_is_named() -> None:
    # Before: "ValueError: operands could not be broadcast together with shapes ...".
    h = filter_harness(lambda n: FilterResult(np.zeros(n + 1, dtype=bool)))
    h.add_pods(make_pod("p").scheduler_name("batch").req(cpu="1"))
    h.run()
    assert h.node_of("p") is None
    assert "plugin Rejects returned (4,) filter verdicts for 3 nodes" in h.message("p")


def test_a_filter_that_rejects_nodes_without_a_reason_is_named() -> None:
    # Before: the pod's message was "0/3 nodes are available:" and nothing else.
    h = filter_harness(lambda n: FilterResult(np.zeros(n, dtype=bool), []))
    h.add_pods(make_pod("p").scheduler_name("batch").req(cpu="1"))
    h.run()
    assert h.node_of("p") is None
    assert "plugin Rejects rejected 3 node(s) without a Failure saying why" in h.message("p")


def test_a_broken_entry_point_named_like_an_in_tree_plugin_leaves_that_plugin_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed(monkeypatch, FakeEntryPoint("NodeAffinity", "no_such_module:SPEC"))
    registry = default_registry()
    config = parse_config(enabling("NodeAffinity"), registry=registry)
    assert "NodeAffinity" in registry and "NodeAffinity" not in registry.broken
    (warning,) = config.warnings
    assert warning.message.startswith("the entry point NodeAffinity = 'no_such_module:SPEC'")
    assert warning.message.endswith("a plugin named 'NodeAffinity' is registered already")
