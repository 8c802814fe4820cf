"""parse_config / load_config: every mistake in a file is reported at once, each with its
field path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from shoal.config import ConfigError, load_config, parse_config
from shoal.scheduler import default_registry

BROKEN = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodeToScore: 50
profiles:
  - schedulerName: default-scheduler
    plugins:
      score:
        enabled:
          - name: NodeResourceFit
          - name: NodeAffinity
            weight: -1
    pluginConfig:
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: LeastAlocated
  - schedulerName: default-scheduler
"""


def test_all_mistakes_are_reported_with_field_paths(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.yaml"
    path.write_text(BROKEN)
    with pytest.raises(ConfigError) as caught:
        load_config(path, registry=default_registry())
    err = caught.value
    found = {p.path: p.message for p in err.problems}
    assert set(found) == {
        "percentageOfNodeToScore",
        "profiles[0].plugins.score.enabled[1].weight",
        "profiles[0].plugins.score.enabled[0].name",
        "profiles[0].pluginConfig[0].args.scoringStrategy.type",
        "profiles[1].schedulerName",
    }
    assert "unknown field 'percentageOfNodeToScore'" in found["percentageOfNodeToScore"]
    assert "greater than or equal to 0" in found["profiles[0].plugins.score.enabled[1].weight"]
    assert found["profiles[0].plugins.score.enabled[0].name"] == (
        "unknown plugin 'NodeResourceFit'; did you mean 'NodeResourcesFit'?"
    )
    assert "LeastAllocated" in found["profiles[0].pluginConfig[0].args.scoringStrategy.type"]
    assert found["profiles[1].schedulerName"] == (
        "'default-scheduler' is already used by profiles[0]; a profile without "
        "schedulerName is named 'default-scheduler': give each profile its own name"
    )
    text = str(err)
    assert text.startswith(f"{path}: 5 problem(s) in the scheduler configuration:\n  - ")
    assert text.count("\n  - ") == 5


@pytest.mark.parametrize(
    ("raw", "path", "message"),
    [
        (
            # Enabling a plugin Shoal lacks is a warning (tests/config/test_compat.py);
            # the ones kube's v1 API removed are refused, as kube-scheduler refuses them.
            {"profiles": [{"plugins": {"filter": {"enabled": [{"name": "EBSLimits"}]}}}]},
            "profiles[0].plugins.filter.enabled[0].name",
            "EBSLimits was removed from kubescheduler.config.k8s.io/v1",
        ),
        (
            {"profiles": [{"pluginConfig": [{"name": "NodeName", "args": {"x": 1}}]}]},
            "profiles[0].pluginConfig[0].args",
            "plugin NodeName takes no args",
        ),
        (
            {
                "profiles": [
                    {"pluginConfig": [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesFit"}]}
                ]
            },
            "profiles[0].pluginConfig[1].name",
            "args for 'NodeResourcesFit' given twice",
        ),
        (
            {
                "profiles": [
                    {
                        "pluginConfig": [
                            {
                                "name": "NodeResourcesFit",
                                "args": {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
                            }
                        ]
                    }
                ]
            },
            "profiles[0].pluginConfig[0].args.scoringStrategy",
            "requestedToCapacityRatio.shape is required",
        ),
        (
            {
                "profiles": [
                    {
                        "pluginConfig": [
                            {
                                "name": "NodeResourcesFit",
                                "args": {
                                    "scoringStrategy": {"resources": [{"name": "cpu", "weight": 0}]}
                                },
                            }
                        ]
                    }
                ]
            },
            "profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight",
            "greater than or equal to 1",
        ),
        (
            {
                "profiles": [
                    {
                        "pluginConfig": [
                            {"name": "NodeResourcesFit", "args": {"scoreingStrategy": {}}}
                        ]
                    }
                ]
            },
            "profiles[0].pluginConfig[0].args.scoreingStrategy",
            "unknown field 'scoreingStrategy'",
        ),
        (
            {"podInitialBackoffSeconds": 20, "podMaxBackoffSeconds": 10},
            "podMaxBackoffSeconds",
            "must be at least podInitialBackoffSeconds",
        ),
        (
            {"percentageOfNodesToScore": 101},
            "percentageOfNodesToScore",
            "less than or equal to 100",
        ),
        (
            {"apiVersion": "kubescheduler.config.k8s.io/v1beta3"},
            "apiVersion",
            "kubescheduler.config.k8s.io/v1",
        ),
        (
            {
                "profiles": [
                    {
                        "plugins": {
                            "queueSort": {
                                "enabled": [{"name": "Custom"}],
                                "disabled": [{"name": "*"}],
                            }
                        }
                    }
                ]
            },
            "profiles[0].plugins.queueSort.enabled[0].name",
            "unknown plugin 'Custom'",
        ),
    ],
)
def test_single_mistakes(raw: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, registry=default_registry())
    problems = {p.path: p.message for p in caught.value.problems}
    assert path in problems, problems
    assert message in problems[path]


def test_valid_config_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(
        """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 30
leaderElection: {leaderElect: false}
profiles:
  - schedulerName: default-scheduler
  - schedulerName: gpu
    plugins:
      multiPoint:
        enabled: [{name: NodeResourcesFit, weight: 3}]
    pluginConfig:
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: RequestedToCapacityRatio
            resources: [{name: nvidia.com/gpu, weight: 1}]
            requestedToCapacityRatio:
              shape: [{utilization: 0, score: 0}, {utilization: 100, score: 10}]
"""
    )
    config = load_config(path, registry=default_registry())
    assert [p.scheduler_name for p in config.profiles] == ["default-scheduler", "gpu"]
    assert config.percentage_of_nodes_to_score == 30


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("profiles: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply"),
        (b"profiles:\n- schedulerName: \xff\xfe\n", "not UTF-8 text (byte 27"),
    ],
)
def test_a_file_too_deep_or_not_utf8_is_a_clear_error(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)


def test_top_level_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="expected a mapping at the top level"):
        parse_config(["a", "list"])


def test_queue_sorts_must_agree_across_profiles() -> None:
    from shoal.framework.registry import PluginSpec

    class OtherSort:
        name = "OtherSort"

        def less(self, a: Any, b: Any) -> bool:
            return False

        def sort_key(self, pod: Any) -> tuple[object, ...]:
            return ()

    registry = default_registry().merged([("OtherSort", PluginSpec(lambda a, h: OtherSort()))])
    raw = {
        "profiles": [
            {"schedulerName": "a"},
            {
                "schedulerName": "b",
                "plugins": {
                    "queueSort": {"enabled": [{"name": "OtherSort"}], "disabled": [{"name": "*"}]}
                },
            },
        ]
    }
    with pytest.raises(ConfigError, match="same QueueSort plugin"):
        parse_config(raw, registry=registry)
