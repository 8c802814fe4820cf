"""The `extenders:` section, checked as kube-scheduler's validateExtenders checks it, with
every problem reported at once and named by its path."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.config import ConfigError, parse_config
from shoal.config.load import extender_timeout
from shoal.scheduler import with_extender_ignored_resources


def problems(*extenders: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config({"extenders": list(extenders)})
    return [str(p) for p in err.value.problems]


def test_a_full_extender_entry_is_read_with_kubes_spellings() -> None:
    config = parse_config(
        {
            "extenders": [
                {
                    "urlPrefix": "https://ext.example:8443/sched",
                    "filterVerb": "filter",
                    "preemptVerb": "preempt",
                    "prioritizeVerb": "prioritize",
                    "bindVerb": "bind",
                    "weight": 5,
                    "enableHTTPS": True,
                    "tlsConfig": {"insecure": False, "serverName": "ext", "caFile": "/ca.pem"},
                    "httpTimeout": "1m30s",
                    "nodeCacheCapable": True,
                    "managedResources": [{"name": "example.com/foo", "ignoredByScheduler": True}],
                    "ignorable": True,
                }
            ]
        }
    )
    (ext,) = config.extenders
    assert ext.enable_https and ext.node_cache_capable and ext.ignorable
    assert ext.tls_config is not None and ext.tls_config.server_name == "ext"
    assert extender_timeout(ext) == 90.0
    assert ext.managed_resources[0].ignored_by_scheduler


def test_http_timeout_defaults_to_kubes_five_seconds() -> None:
    (ext,) = parse_config({"extenders": [{"urlPrefix": "http://e"}]}).extenders
    assert extender_timeout(ext) == 5.0


def test_kubes_rules_each_reported_with_its_path() -> None:
    found = problems(
        {
            "urlPrefix": "http://a",
            "prioritizeVerb": "prioritize",
            "bindVerb": "bind",
            "managedResources": [{"name": "cpu"}, {"name": "example.com/foo"}],
            "httpTimeout": "soon",
        },
        {
            "urlPrefix": "ext:8888",
            "bindVerb": "bind",
            "managedResources": [{"name": "example.com/foo"}, {"name": "requests.example.com/x"}],
            "tlsConfig": {"certData": "not base64!"},
        },
    )
    assert found == [
        "extenders[0].weight: 0 with prioritizeVerb 'prioritize': must have a positive weight "
        "applied to it",
        "extenders[0].httpTimeout: 'soon' is not a duration; write it like '5s' or '500ms'",
        "extenders[0].managedResources[0].name: 'cpu' is an invalid extended resource name: it "
        "must be fully qualified outside the kubernetes.io domain, e.g. 'example.com/gpu'",
        "extenders[1].urlPrefix: 'ext:8888' is not an http(s) URL; write it like "
        "'http://127.0.0.1:8888/scheduler'",
        "extenders[1].tlsConfig.certData: is not base64: a Go []byte is written base64-encoded "
        "(e.g. `base64 -w0 file.pem`); or use certFile",
        "extenders[1].tlsConfig.keyData: a client certificate needs both cert and key "
        "(certData/certFile and keyData/keyFile)",
        "extenders[1].managedResources[0].name: 'example.com/foo' duplicate extender managed "
        "resource name (also managed by extenders[0])",
        "extenders[1].managedResources[1].name: 'requests.example.com/x' is an invalid extended "
        "resource name: it must not start with 'requests.'",
        "extenders: found 2 extenders implementing bind (extenders[0], extenders[1]): only one "
        "extender can implement bind",
    ]


def test_unknown_fields_are_refused() -> None:
    assert problems({"urlPrefix": "http://e", "filterverb": "filter"}) == [
        "extenders[0].filterverb: unknown field 'filterverb': check the spelling against "
        "kubescheduler.config.k8s.io/v1"
    ]


def test_ignored_by_scheduler_resources_become_node_resources_fit_ignored_resources() -> None:
    config = parse_config(
        {
            "profiles": [
                {"schedulerName": "a"},
                {
                    "schedulerName": "b",
                    "pluginConfig": [
                        {"name": "NodeResourcesFit", "args": {"ignoredResources": ["x.io/y"]}}
                    ],
                },
            ],
            "extenders": [
                {
                    "urlPrefix": "http://e",
                    "managedResources": [
                        {"name": "example.com/foo", "ignoredByScheduler": True},
                        {"name": "example.com/bar"},
                    ],
                }
            ],
        }
    )
    out = with_extender_ignored_resources(config)
    for profile in out.profiles:
        (fit,) = [pc for pc in profile.plugin_config if pc.name == "NodeResourcesFit"]
        # kube replaces the profile's list with the extenders' (they take precedence).
        assert fit.args["ignoredResources"] == ["example.com/foo"]


def test_urls_and_tls_data_every_call_would_fail_on_are_refused() -> None:
    """Accepted before, then every call failed ("URL can't contain control characters";
    "no start line: cadata does not contain a certificate")."""
    assert problems(
        {"urlPrefix": "http://a b/x"},
        {"urlPrefix": "http://127.0.0.1:99999/x"},
        {"urlPrefix": "https://e/x", "tlsConfig": {"caData": "aGVsbG8="}},
    ) == [
        "extenders[0].urlPrefix: 'http://a b/x' contains spaces or control characters",
        "extenders[1].urlPrefix: 'http://127.0.0.1:99999/x': the port must be a number from 1 "
        "to 65535",
        "extenders[2].tlsConfig.caData: is base64 but not PEM (no -----BEGIN line)",
    ]


def test_a_tls_file_that_cannot_be_read_where_the_scheduler_runs_is_named() -> None:
    from shoal.drivers.extenders import ExtenderSetupError, http_extenders

    config = parse_config(
        {"extenders": [{"urlPrefix": "https://e/x", "tlsConfig": {"caFile": "/nonexistent.pem"}}]}
    )
    with pytest.raises(ExtenderSetupError) as err:
        http_extenders(config)
    assert str(err.value) == (
        "extenders[0] (https://e/x): tlsConfig.caFile '/nonexistent.pem' cannot be used: "
        "No such file or directory"
    )
