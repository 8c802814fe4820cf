"""Compatibility with existing kube-scheduler configurations: what kube-scheduler accepts
and Shoal cannot honour is accepted with a warning naming the plugin, the profile and what
is not modelled; what would make `shoal run` fail is refused here, with the field path."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.config import (
    DEFAULT_PROFILE_NAME,
    ConfigError,
    default_config,
    parse_config,
)
from shoal.scheduler import default_registry

# A stock kube-scheduler configuration as clusters carry it: volume and image plugins
# switched off or tuned, the legacy in-tree volume limits disabled.
STOCK: dict[str, Any] = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "shoal",
            "plugins": {
                "multiPoint": {
                    "disabled": [{"name": "NodeDeclaredFeatures"}, {"name": "EBSLimits"}],
                },
                "filter": {"enabled": [{"name": "VolumeRestrictions"}]},
                "score": {"enabled": [{"name": "VolumeBinding", "weight": 2}]},
            },
            "pluginConfig": [
                {"name": "VolumeBinding", "args": {"bindTimeoutSeconds": 300, "shape": []}},
                {
                    "name": "NodeResourcesFit",
                    "args": {"scoringStrategy": {"type": "MostAllocated"}},
                },
            ],
        }
    ],
}


def warnings_of(raw: dict[str, Any]) -> dict[str, str]:
    config = parse_config(raw, registry=default_registry())
    return {w.path: w.message for w in config.warnings}


def test_a_stock_config_with_plugins_shoal_lacks_is_accepted_with_warnings() -> None:
    config = parse_config(STOCK, registry=default_registry())
    found = {w.path: w.message for w in config.warnings}
    # NodeDeclaredFeatures is Shoal's now: disabling it is an ordinary disable.
    assert set(found) == {
        "profiles[0].plugins.multiPoint.disabled[1].name",
        "profiles[0].pluginConfig[0].args",
    }
    assert found["profiles[0].plugins.multiPoint.disabled[1].name"] == (
        "EBSLimits is not in Shoal (NodeVolumeLimits replaced it); disabling it in profile "
        "'shoal' changes nothing"
    )
    # VolumeBinding is Shoal's now: its args load (bindTimeoutSeconds is used), and the
    # one that changes nothing says so.
    assert found["profiles[0].pluginConfig[0].args"] == (
        "VolumeBinding's shape is not used: Shoal does not score nodes by storage capacity"
    )
    # The profile as it runs: without the plugins Shoal lacks, with the rest honoured.
    profile = config.profiles[0]
    assert [pc.name for pc in profile.plugin_config] == ["VolumeBinding", "NodeResourcesFit"]
    assert [p.name for p in profile.plugins.filter.enabled] == ["VolumeRestrictions"]
    assert [p.name for p in profile.plugins.score.enabled] == ["VolumeBinding"]


def test_a_stock_config_builds_and_schedules() -> None:
    from shoal.testing.builders import NodeBuilder, PodBuilder
    from shoal.testing.harness import SchedulerHarness

    h = SchedulerHarness(config=STOCK)
    h.add_nodes(NodeBuilder("busy").capacity(cpu="4"), NodeBuilder("idle").capacity(cpu="4"))
    h.add_pods(PodBuilder("first").scheduler_name("shoal").req(cpu="1"))
    h.run()
    h.add_pods(PodBuilder("second").scheduler_name("shoal").req(cpu="1"))
    h.run()
    # NodeResourcesFit's args (MostAllocated) are honoured: the second pod packs.
    assert h.node_of("default/first") == h.node_of("default/second")


@pytest.mark.parametrize("name", ["EBSLimits", "GCEPDLimits", "AzureDiskLimits", "CinderLimits"])
def test_plugins_removed_from_the_v1_api_may_only_be_disabled(name: str) -> None:
    # kube-scheduler's validation: "was invalid in version kubescheduler.config.k8s.io/v1".
    enabled = {"profiles": [{"plugins": {"filter": {"enabled": [{"name": name}]}}}]}
    with pytest.raises(ConfigError) as caught:
        parse_config(enabled, registry=default_registry())
    [problem] = caught.value.problems
    assert problem.path == "profiles[0].plugins.filter.enabled[0].name"
    assert f"{name} was removed from kubescheduler.config.k8s.io/v1" in problem.message
    configured = {"profiles": [{"schedulerName": "s", "pluginConfig": [{"name": name}]}]}
    with pytest.raises(ConfigError) as caught:
        parse_config(configured, registry=default_registry())
    assert [p.path for p in caught.value.problems] == ["profiles[0].pluginConfig[0].name"]
    disabled = {
        "profiles": [{"schedulerName": "s", "plugins": {"filter": {"disabled": [{"name": name}]}}}]
    }
    assert list(warnings_of(disabled)) == ["profiles[0].plugins.filter.disabled[0].name"]


def test_a_name_neither_shoal_nor_kube_has_stays_an_error() -> None:
    raw = {"profiles": [{"plugins": {"filter": {"enabled": [{"name": "VolumeBindings"}]}}}]}
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, registry=default_registry())
    assert [str(p) for p in caught.value.problems] == [
        "profiles[0].plugins.filter.enabled[0].name: unknown plugin 'VolumeBindings'; "
        "did you mean 'VolumeBinding'?"
    ]


def test_a_profile_named_default_scheduler_is_warned_about() -> None:
    found = warnings_of(
        {"profiles": [{"schedulerName": "default-scheduler"}, {"schedulerName": "gpu"}]}
    )
    assert list(found) == ["profiles[0].schedulerName"]
    assert (
        "compete with kube-scheduler for every pod that sets no schedulerName"
        in (found["profiles[0].schedulerName"])
    )
    # A profile without a name is kube's default-scheduler too.
    assert list(warnings_of({})) == ["profiles[0].schedulerName"]
    assert warnings_of({"profiles": [{"schedulerName": "shoal"}]}) == {}


def test_no_profiles_means_the_default_profile_as_in_kube() -> None:
    # kube-scheduler's defaulting turns `profiles: []` into one default profile.
    config = parse_config({"profiles": []}, registry=default_registry())
    assert [p.scheduler_name for p in config.profiles] == ["default-scheduler"]
    assert [w.path for w in config.warnings] == ["profiles[0].schedulerName"]


def test_the_default_configuration() -> None:
    assert DEFAULT_PROFILE_NAME == "shoal"
    assert [p.scheduler_name for p in default_config().profiles] == ["shoal"]
    assert default_config().warnings == ()
    both = default_config(serve_unnamed_pods=True)
    assert [p.scheduler_name for p in both.profiles] == ["shoal", "default-scheduler"]


@pytest.mark.parametrize(
    ("raw", "path", "message"),
    [
        ({"clientConnection": {"qps": "abc"}}, "clientConnection.qps", "'abc' is not a number"),
        ({"clientConnection": {"qps": -1}}, "clientConnection.qps", "use 0 for no limit"),
        ({"clientConnection": {"burst": 1.5}}, "clientConnection.burst", "not a whole number"),
        ({"clientConnection": {"burst": -1}}, "clientConnection.burst", "must be non-negative"),
        ({"clientConnection": {"qsp": 5}}, "clientConnection.qsp", "did you mean 'qps'?"),
        (
            {"leaderElection": {"leaseDuration": "abc"}},
            "leaderElection.leaseDuration",
            "'abc' is not a duration; write it like '15s', '1m30s' or '500ms'",
        ),
        (
            {"leaderElection": {"retryPeriod": "15"}},
            "leaderElection.retryPeriod",
            "'15' is not a duration",
        ),
        (
            {"leaderElection": {"renewDeadline": "0s"}},
            "leaderElection.renewDeadline",
            "must be greater than zero",
        ),
        (
            {"leaderElection": {"leaseDuration": "10s", "renewDeadline": "10s"}},
            "leaderElection.leaseDuration",
            "must be greater than renewDeadline (10s <= 10s)",
        ),
        (
            {"leaderElection": {"renewDeadline": "2s", "retryPeriod": "2s", "leaseDuration": "5s"}},
            "leaderElection.renewDeadline",
            "must be greater than retryPeriod x 1.2 (2s <= 2.4s)",
        ),
        (
            {"leaderElection": {"resourceLock": "endpointsleases"}},
            "leaderElection.resourceLock",
            "only 'leases'",
        ),
        (
            {"leaderElection": {"leaderElect": "yes"}},
            "leaderElection.leaderElect",
            "not true or false",
        ),
        (
            {"leaderElection": {"leaseDurationSeconds": 15}},
            "leaderElection.leaseDurationSeconds",
            "did you mean 'leaseDuration'?",
        ),
    ],
)
def test_client_and_leader_election_settings_are_checked(
    raw: dict[str, Any], path: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({**raw, "profiles": [{"schedulerName": "shoal"}]}, registry=default_registry())
    problems = {p.path: p.message for p in caught.value.problems}
    assert path in problems, problems
    assert message in problems[path]


def test_timing_is_not_checked_when_leader_election_is_off() -> None:
    # kube-scheduler validates the timing only with leaderElect on; bad values still fail.
    off = {"leaderElect": False, "leaseDuration": "10s", "renewDeadline": "10s"}
    parse_config({"leaderElection": off}, registry=default_registry())
    with pytest.raises(ConfigError):
        parse_config({"leaderElection": {**off, "retryPeriod": "x"}}, registry=default_registry())


def test_kube_scheduler_defaults_and_usual_values_pass() -> None:
    for election in (
        {},
        {"leaderElect": True, "leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "2s"},
        {"leaseDuration": "2s", "renewDeadline": "1s", "retryPeriod": "200ms"},
        {"resourceLock": "leases", "resourceName": "shoal", "resourceNamespace": "kube-system"},
    ):
        parse_config(
            {"leaderElection": election, "clientConnection": {"qps": 50.5, "burst": 100}},
            registry=default_registry(),
        )


# ---- what `kube-scheduler --write-config-to` writes (v1.36) ------------------------------


def test_plugin_args_with_kubes_type_meta_are_accepted_and_checked() -> None:
    """kube-scheduler writes `apiVersion` and `kind` into every plugin's args; Shoal takes
    them as kube does, and refuses args of another plugin's kind or another API."""
    config = parse_config(
        {
            "profiles": [
                {
                    "schedulerName": "shoal",
                    "pluginConfig": [
                        {
                            "name": "NodeResourcesFit",
                            "args": {
                                "apiVersion": "kubescheduler.config.k8s.io/v1",
                                "kind": "NodeResourcesFitArgs",
                                "scoringStrategy": {"type": "MostAllocated"},
                            },
                        }
                    ],
                }
            ]
        },
        registry=default_registry(),
    )
    assert config.profiles[0].plugin_config[0].args == {
        "scoringStrategy": {"type": "MostAllocated"}
    }
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "profiles": [
                    {
                        "pluginConfig": [
                            {
                                "name": "NodeResourcesFit",
                                "args": {"apiVersion": "v2", "kind": "DefaultPreemptionArgs"},
                            }
                        ]
                    }
                ]
            },
            registry=default_registry(),
        )
    text = str(err.value)
    assert "profiles[0].pluginConfig[0].args.kind" in text
    assert "'DefaultPreemptionArgs' are not the args of plugin NodeResourcesFit" in text
    assert "profiles[0].pluginConfig[0].args.apiVersion" in text


def test_kubes_workload_placement_points_are_accepted_and_warned_about_when_used() -> None:
    empty = parse_config(
        {"profiles": [{"plugins": {"placementGenerate": {}, "placementScore": {}}}]},
        registry=default_registry(),
    )
    assert not [w for w in empty.warnings if "placement" in w.path]
    used = parse_config(
        {
            "profiles": [
                {"plugins": {"placementScore": {"enabled": [{"name": "TopologyPlacement"}]}}}
            ]
        },
        registry=default_registry(),
    )
    [warning] = [w for w in used.warnings if "placement" in w.path]
    assert warning.path == "profiles[0].plugins.placementScore"
    assert "TopologyPlacement will not run" in warning.message
