"""Plugin set merging and multiPoint expansion, as kube-scheduler does them
(v1 mergePluginSet, framework expandMultiPointPlugins and getScoreWeights)."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.config import ConfigError, parse_config
from shoal.config.types import Plugins
from shoal.plugins import DEFAULT_MULTI_POINT
from shoal.scheduler import default_registry
from shoal.scheduler.profiles import merge_plugins
from shoal.testing import SchedulerHarness

DEFAULT_ORDER = [name for name, _ in DEFAULT_MULTI_POINT]


def _profile(plugins: dict[str, Any], plugin_config: list[dict[str, Any]] | None = None) -> Any:
    config: dict[str, Any] = {"profiles": [{"plugins": plugins}]}
    if plugin_config:
        config["profiles"][0]["pluginConfig"] = plugin_config
    return SchedulerHarness(config).scheduler.profiles["default-scheduler"].plugins


def _names(plugins: list[Any]) -> list[str]:
    return [p.name for p in plugins]


def _scores(built: Any) -> list[tuple[str, int]]:
    return [(p.name, w) for p, w in built.score]


def test_default_profile_matches_kube() -> None:
    built = _profile({})
    assert built.queue_sort is not None and built.queue_sort.name == "PrioritySort"
    # kube's SchedulingGates and DynamicResources, then Shoal's queue and gang gates.
    assert _names(built.pre_enqueue) == [
        "SchedulingGates",
        "DynamicResources",
        "QueueCapacity",
        "Coscheduling",
    ]
    assert _names(built.bind) == ["DefaultBinder"]
    filters = _names(built.filter)
    assert filters[:6] == [
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
    ]
    assert filters == [n for n in DEFAULT_ORDER if n in filters]  # multiPoint order
    weights = dict(_scores(built))
    assert weights["TaintToleration"] == 3
    assert weights["NodeAffinity"] == 2
    assert weights["NodeResourcesFit"] == 1
    assert weights["NodeResourcesBalancedAllocation"] == 1


def test_merge_keeps_defaults_and_appends_custom() -> None:
    merged = merge_plugins(Plugins.model_validate({"filter": {"enabled": [{"name": "Custom"}]}}))
    assert [p.name for p in merged.multi_point.enabled] == DEFAULT_ORDER
    assert [p.name for p in merged.filter.enabled] == ["Custom"]


def test_multi_point_reenable_with_new_weight_keeps_position() -> None:
    custom = Plugins.model_validate(
        {"multiPoint": {"enabled": [{"name": "NodeAffinity", "weight": 7}, {"name": "Extra"}]}}
    )
    merged = merge_plugins(custom).multi_point.enabled
    assert [p.name for p in merged] == [*DEFAULT_ORDER[: -0 or None], "Extra"]
    assert {p.name: p.weight for p in merged}["NodeAffinity"] == 7
    built = _profile({"multiPoint": {"enabled": [{"name": "NodeAffinity", "weight": 7}]}})
    assert _scores(built) == [
        (n, 7 if n == "NodeAffinity" else w) for n, w in _scores(_profile({}))
    ]


def test_disable_a_default_at_one_point_only() -> None:
    built = _profile({"score": {"disabled": [{"name": "TaintToleration"}]}})
    assert "TaintToleration" not in dict(_scores(built))
    assert "TaintToleration" in _names(built.filter)
    assert "TaintToleration" in _names(built.pre_score)


def test_disable_a_default_everywhere() -> None:
    built = _profile({"multiPoint": {"disabled": [{"name": "NodePorts"}]}})
    assert "NodePorts" not in _names(built.filter) + _names(built.pre_filter)


def test_star_disables_all_defaults_at_a_point() -> None:
    built = _profile(
        {
            "filter": {
                "disabled": [{"name": "*"}],
                "enabled": [{"name": "NodeResourcesFit"}, {"name": "NodeName"}],
            }
        }
    )
    assert _names(built.filter) == ["NodeResourcesFit", "NodeName"]
    assert "TaintToleration" in dict(_scores(built))  # other points untouched


def test_star_disables_multi_point() -> None:
    built = _profile(
        {
            "multiPoint": {
                "disabled": [{"name": "*"}],
                "enabled": [
                    {"name": "PrioritySort"},
                    {"name": "NodeResourcesFit", "weight": 4},
                    {"name": "DefaultBinder"},
                ],
            }
        }
    )
    assert _names(built.filter) == ["NodeResourcesFit"]
    assert _scores(built) == [("NodeResourcesFit", 4)]
    assert _names(built.pre_enqueue) == []


def test_explicit_score_weight_wins_over_multi_point_and_goes_first() -> None:
    built = _profile({"score": {"enabled": [{"name": "NodeResourcesFit", "weight": 5}]}})
    default = _scores(_profile({}))
    # kube's expandMultiPointPlugins puts plugins re-configured at the point first.
    assert _scores(built) == [("NodeResourcesFit", 5)] + [
        (n, w) for n, w in default if n != "NodeResourcesFit"
    ]


def test_score_entry_without_weight_gets_one_not_the_multi_point_weight() -> None:
    # getScoreWeights: Score.Enabled is read first; an unset (0) weight becomes 1.
    built = _profile({"score": {"enabled": [{"name": "TaintToleration"}]}})
    assert dict(_scores(built))["TaintToleration"] == 1


def test_plugin_enabled_twice_at_a_point_is_an_error() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "profiles": [
                    {
                        "plugins": {
                            "filter": {"enabled": [{"name": "NodeName"}, {"name": "NodeName"}]}
                        }
                    }
                ]
            },
            registry=default_registry(),
        )
    assert [p.path for p in err.value.problems] == ["profiles[0].plugins"]
    assert "NodeName" in str(err.value) and "twice" in str(err.value)


def test_plugin_enabled_at_a_point_it_does_not_implement() -> None:
    with pytest.raises(ConfigError, match=r"PrioritySort.*does not implement"):
        parse_config(
            {"profiles": [{"plugins": {"filter": {"enabled": [{"name": "PrioritySort"}]}}}]},
            registry=default_registry(),
        )


def test_plugin_config_args_reach_the_plugin() -> None:
    built = _profile(
        {},
        [
            {
                "name": "NodeResourcesFit",
                "args": {
                    "ignoredResources": ["example.com/foo"],
                    "scoringStrategy": {
                        "type": "MostAllocated",
                        "resources": [{"name": "cpu", "weight": 3}],
                    },
                },
            }
        ],
    )
    fit = next(p for p, _ in built.score if p.name == "NodeResourcesFit")
    assert fit.strategy == "MostAllocated"  # type: ignore[attr-defined]
    assert fit.score_resources == ["cpu"]  # type: ignore[attr-defined]
