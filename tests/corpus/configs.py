"""Malformed KubeSchedulerConfigurations for `shoal validate-config` (the corpus's
configuration half): each must exit 1 with a message naming the field."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class ConfigCase:
    id: str
    config: Any  # the document (or raw text when `text`)
    expect: str  # a fragment of the reported problem
    text: str = ""
    # Accepted as kube-scheduler accepts it, with a warning saying what it means (exit 0).
    warned: bool = False


BASE: JSON = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [{"schedulerName": "shoal"}],
}


def _with(**top: Any) -> JSON:
    doc = copy.deepcopy(BASE)
    doc.update(top)
    return doc


def _profile(**fields: Any) -> JSON:
    return _with(profiles=[{"schedulerName": "shoal", **fields}])


def config_cases() -> Iterator[ConfigCase]:
    yield ConfigCase(
        "config-api-version", _with(apiVersion="kubescheduler.config.k8s.io/v9"), "apiVersion"
    )
    yield ConfigCase("config-kind", _with(kind="SchedulerConfig"), "kind")
    yield ConfigCase("config-kind-number", _with(kind=5), "kind")
    yield ConfigCase("config-profiles-string", _with(profiles="shoal"), "profiles")
    # kube-scheduler defaults an empty profile list to one default-scheduler profile.
    yield ConfigCase("config-profiles-empty", _with(profiles=[]), "default-scheduler", warned=True)
    two = [{"schedulerName": "shoal"}, {"schedulerName": "shoal"}]
    yield ConfigCase("config-duplicate-profiles", _with(profiles=two), "shoal")
    yield ConfigCase(
        "config-scheduler-name-bad",
        _profile(schedulerName="Not A Name"),
        "no pod can name this profile",
        warned=True,  # kube-scheduler accepts it; no pod can ask for it
    )
    yield ConfigCase(
        "config-percentage-over", _with(percentageOfNodesToScore=101), "percentageOfNodesToScore"
    )
    yield ConfigCase(
        "config-percentage-negative", _with(percentageOfNodesToScore=-1), "percentageOfNodesToScore"
    )
    yield ConfigCase("config-parallelism-zero", _with(parallelism=0), "parallelism")
    yield ConfigCase(
        "config-backoff-negative", _with(podInitialBackoffSeconds=-1), "podInitialBackoffSeconds"
    )
    yield ConfigCase(
        "config-backoff-max-below-initial",
        _with(podInitialBackoffSeconds=10, podMaxBackoffSeconds=5),
        "podMaxBackoffSeconds",
    )
    yield ConfigCase("config-unknown-field", _with(percentageOfNodes=50), "percentageOfNodes")
    yield ConfigCase("config-qps-negative", _with(clientConnection={"qps": -1}), "qps")
    yield ConfigCase(
        "config-lease-durations",
        _with(leaderElection={"leaderElect": True, "leaseDuration": "5s", "renewDeadline": "10s"}),
        "renewDeadline",
    )
    yield ConfigCase(
        "config-duration-text", _with(leaderElection={"leaseDuration": "soon"}), "leaseDuration"
    )
    enabled = {"score": {"enabled": [{"name": "NodeResourcesFit", "weight": -5}]}}
    yield ConfigCase("config-score-weight-negative", _profile(plugins=enabled), "weight")
    unknown = {"filter": {"enabled": [{"name": "NoSuchPlugin"}]}}
    yield ConfigCase("config-unknown-plugin", _profile(plugins=unknown), "NoSuchPlugin")
    wrong = {"filter": {"enabled": "NodeResourcesFit"}}
    yield ConfigCase("config-plugin-set-string", _profile(plugins=wrong), "enabled")
    args = [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Biggest"}}}]
    yield ConfigCase("config-args-bad-enum", _profile(pluginConfig=args), "scoringStrategy.type")
    args = [{"name": "NodeResourcesFit", "args": "fast"}]
    yield ConfigCase("config-args-string", _profile(pluginConfig=args), "args")
    args = [{"name": "NodeResourcesFit", "args": {"scoreingStrategy": {}}}]
    yield ConfigCase("config-args-unknown-field", _profile(pluginConfig=args), "scoreingStrategy")
    args = [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesFit"}]
    yield ConfigCase("config-plugin-config-twice", _profile(pluginConfig=args), "NodeResourcesFit")
    # What the kit's kube-scheduler v1.36 refuses at start (run side by side by hand).
    yield ConfigCase("config-scheduler-name-empty", _profile(schedulerName=""), "Required value")
    args = [{"name": "NodeResourcesFit", "args": {"ignoredResourceGroups": ["example.com/x"]}}]
    yield ConfigCase("config-ignored-group-slash", _profile(pluginConfig=args), "can't contain '/'")
    args = [{"name": "NodeResourcesFit", "args": {"ignoredResourceGroups": [""]}}]
    yield ConfigCase(
        "config-ignored-group-empty", _profile(pluginConfig=args), "ignoredResourceGroups[0]"
    )
    args = [{"name": "NodeResourcesFit", "args": {"ignoredResources": ["Example.com/x"]}}]
    yield ConfigCase(
        "config-ignored-resource-prefix", _profile(pluginConfig=args), "ignoredResources[0]"
    )
    extender = [{"urlPrefix": "not a url", "filterVerb": "filter"}]
    yield ConfigCase("config-extender-url", _with(extenders=extender), "urlPrefix")
    # Go's durations take a sign: "-1s" is one (kube-scheduler then waits without any
    # timeout); it was called "not a duration".
    extender = [{"urlPrefix": "http://x", "filterVerb": "f", "httpTimeout": "-1s"}]
    yield ConfigCase("config-extender-timeout-negative", _with(extenders=extender), "is negative")
    extender = [{"urlPrefix": "http://x", "weight": -1, "prioritizeVerb": "p"}]
    yield ConfigCase("config-extender-weight", _with(extenders=extender), "weight")
    yield ConfigCase("config-document-list", ["a"], "mapping")
    deep = (
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles: "
        + "[" * 5000
        + "]" * 5000
        + "\n"
    )
    yield ConfigCase("config-deep", None, "nested too deeply", text=deep)
    yield ConfigCase("config-not-yaml", None, "YAML", text="profiles: [unclosed\n  - a: b: c\n")
    yield ConfigCase("config-empty", None, "empty", text="")
    no_candidates = {
        "name": "DefaultPreemption",
        "args": {"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0},
    }
    # Typos inside plugin args were dropped without a word (the added affinity, a default
    # spread constraint): kube-scheduler's strict decoding refuses them.
    typo_affinity = {
        "name": "NodeAffinity",
        "args": {
            "addedAffinity": {
                "requiredDuringSchedulingIgnoredDurngExecution": {"nodeSelectorTerms": []}
            }
        },
    }
    yield ConfigCase(
        "config-added-affinity-typo",
        _profile(pluginConfig=[typo_affinity]),
        "requiredDuringSchedulingIgnoredDurngExecution: unknown field",
    )
    typo_spread = {
        "name": "PodTopologySpread",
        "args": {
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkw": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
            ],
        },
    }
    yield ConfigCase(
        "config-default-constraint-typo",
        _profile(pluginConfig=[typo_spread]),
        "defaultConstraints[0].maxSkw: unknown field",
    )
    yield ConfigCase(
        "config-preemption-no-candidates",
        _profile(pluginConfig=[no_candidates]),
        "cannot both be 0",
    )
    yield ConfigCase(
        "config-duplicate-key",
        None,
        "duplicate key 'percentageOfNodesToScore'",
        text=(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            "percentageOfNodesToScore: 999\npercentageOfNodesToScore: 50\n"
        ),
    )
