"""Build one Framework per profile from a KubeSchedulerConfiguration.

Follows kube-scheduler exactly where users will notice:
* the profile's plugin sets are merged with the defaults (`mergePluginSet`): disabled
  names (or "*") drop defaults, a re-enabled default keeps its place with the new weight,
  other enabled plugins are appended;
* `multiPoint` plugins are expanded to every extension point they implement, unless
  disabled there; plugins enabled explicitly at a point come first (`expandMultiPoint`);
* a Score weight comes from the score point, else from multiPoint, else 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from shoal.config.types import (
    EXTENSION_POINTS,
    KubeSchedulerConfiguration,
    Plugin,
    Plugins,
    PluginSet,
    Profile,
)
from shoal.framework.handle import Handle
from shoal.framework.interfaces import Plugin as PluginInstance
from shoal.framework.registry import PluginSpec, Registry
from shoal.framework.runtime import Framework, ProfilePlugins
from shoal.plugins import DEFAULT_MULTI_POINT

__all__ = ["build_check", "build_profiles", "default_plugins", "merge_plugins", "queue_sort_name"]

# The method that proves a plugin implements a point (structural, like a Go interface).
_METHOD = {
    "pre_enqueue": "pre_enqueue",
    "queue_sort": "sort_key",
    "pre_filter": "pre_filter",
    "filter": "filter",
    "post_filter": "post_filter",
    "pre_score": "pre_score",
    "score": "score",
    "reserve": "reserve",
    "permit": "permit",
    "pre_bind": "pre_bind",
    "bind": "bind",
    "post_bind": "post_bind",
}


def default_plugins() -> Plugins:
    return Plugins(
        multi_point=PluginSet(
            enabled=[Plugin(name=name, weight=weight) for name, weight in DEFAULT_MULTI_POINT]
        )
    )


def _merge_set(default: PluginSet, custom: PluginSet) -> PluginSet:
    disabled = [Plugin(name=p.name) for p in custom.disabled + default.disabled]
    disabled_names = {p.name for p in disabled}
    custom_index = {p.name: i for i, p in enumerate(custom.enabled)}
    replaced: set[int] = set()
    enabled: list[Plugin] = []
    if "*" not in disabled_names:
        for plugin in default.enabled:
            if plugin.name in disabled_names:
                continue
            if plugin.name in custom_index:
                i = custom_index[plugin.name]
                plugin = custom.enabled[i]
                replaced.add(i)
            enabled.append(plugin)
    enabled += [p for i, p in enumerate(custom.enabled) if i not in replaced]
    return PluginSet(enabled=enabled, disabled=disabled)


def merge_plugins(custom: Plugins) -> Plugins:
    """kube's mergePlugins(defaults, custom) for every extension point and multiPoint."""
    defaults = default_plugins()
    merged = {
        point: _merge_set(getattr(defaults, point), getattr(custom, point))
        for point in (*EXTENSION_POINTS, "multi_point")
    }
    return Plugins(**merged)


def _implements(plugin: PluginInstance, point: str) -> bool:
    return callable(getattr(plugin, _METHOD[point], None))


def _expand(plugins: Plugins, instances: Mapping[str, PluginInstance]) -> dict[str, list[str]]:
    """Per extension point, the ordered plugin names after multiPoint expansion."""
    out: dict[str, list[str]] = {}
    for point in EXTENSION_POINTS:
        plugin_set: PluginSet = getattr(plugins, point)
        enabled: list[str] = []
        for p in plugin_set.enabled:
            if p.name in enabled:  # kube's updatePluginList rejects double registration
                raise ValueError(f"plugin {p.name!r} is enabled twice at {point}")
            enabled.append(p.name)
        for name in enabled:
            if not _implements(instances[name], point):
                raise ValueError(f"plugin {name!r} is enabled at {point} but does not implement it")
        disabled = {p.name for p in plugin_set.disabled}
        if "*" in disabled:
            out[point] = enabled
            continue
        overrides: list[str] = []
        multi: list[str] = []
        for p in plugins.multi_point.enabled:
            if not _implements(instances[p.name], point) or p.name in disabled:
                continue
            if p.name in enabled:
                overrides.append(p.name)
                continue
            if p.name in multi:
                raise ValueError(f"plugin {p.name!r} is enabled twice in multiPoint")
            multi.append(p.name)
        first = [n for n in enabled if n in overrides]
        rest = [n for n in enabled if n not in overrides]
        out[point] = first + multi + rest
    return out


def _score_weights(plugins: Plugins) -> dict[str, int]:
    """kube's getScoreWeights: the Score point's entry wins over multiPoint's; an unset
    (or zero) weight is 1."""
    weights: dict[str, int] = {}
    for p in plugins.score.enabled + plugins.multi_point.enabled:
        weights.setdefault(p.name, p.weight or 1)
    return weights


def _needed(plugins: Plugins) -> list[str]:
    names: dict[str, None] = {}
    for point in (*EXTENSION_POINTS, "multi_point"):
        for p in getattr(plugins, point).enabled:
            names.setdefault(p.name, None)
    return list(names)


def build_framework(
    profile: Profile,
    registry: Mapping[str, PluginSpec],
    handle: Handle,
    percentage_of_nodes_to_score: int | None = None,
) -> Framework:
    plugins = merge_plugins(profile.plugins)
    args: dict[str, Any] = {pc.name: pc.args for pc in profile.plugin_config}
    instances: dict[str, PluginInstance] = {}
    for name in _needed(plugins):
        spec = registry.get(name)
        if spec is None:
            raise ValueError(f"unknown plugin {name!r}")
        instance = spec.build(args.get(name), handle)
        called = getattr(instance, "name", None)
        if called != name:
            # The framework keys skips, weights, CycleState and messages by the plugin's
            # own name: registered under another one, it would run under two names.
            raise ValueError(
                f"plugin registered as {name!r} calls itself {called!r}: the registry or "
                "entry-point name must equal the plugin's `name`"
            )
        instances[name] = instance
    order = _expand(plugins, instances)
    weights = _score_weights(plugins)
    sorts = order["queue_sort"]
    if len(sorts) != 1:
        raise ValueError(f"exactly one QueueSort plugin must be enabled, got {sorts}")
    built = ProfilePlugins(
        pre_enqueue=[instances[n] for n in order["pre_enqueue"]],  # type: ignore[misc]
        queue_sort=instances[sorts[0]],  # type: ignore[arg-type]
        pre_filter=[instances[n] for n in order["pre_filter"]],  # type: ignore[misc]
        filter=[instances[n] for n in order["filter"]],  # type: ignore[misc]
        post_filter=[instances[n] for n in order["post_filter"]],  # type: ignore[misc]
        pre_score=[instances[n] for n in order["pre_score"]],  # type: ignore[misc]
        score=[(instances[n], weights.get(n, 1)) for n in order["score"]],  # type: ignore[misc]
        reserve=[instances[n] for n in order["reserve"]],  # type: ignore[misc]
        permit=[instances[n] for n in order["permit"]],  # type: ignore[misc]
        pre_bind=[instances[n] for n in order["pre_bind"]],  # type: ignore[misc]
        bind=[instances[n] for n in order["bind"]],  # type: ignore[misc]
        post_bind=[instances[n] for n in order["post_bind"]],  # type: ignore[misc]
    )
    pct = profile.percentage_of_nodes_to_score
    if pct is None:
        pct = percentage_of_nodes_to_score
    return Framework(profile.scheduler_name, built, handle, pct)


def build_profiles(
    config: KubeSchedulerConfiguration, registry: Mapping[str, PluginSpec], handle: Handle
) -> dict[str, Framework]:
    return {
        profile.scheduler_name: build_framework(
            profile, registry, handle, config.percentage_of_nodes_to_score
        )
        for profile in config.profiles
    }


def _scratch_handle() -> Handle:
    from shoal.cache.cluster import ClusterState
    from shoal.cache.snapshot import Snapshot
    from shoal.framework.effects import NullEffects

    class _NoClock:
        def now(self) -> float:
            return 0.0

    cluster = ClusterState()
    return Handle(cluster, Snapshot(cluster), _NoClock(), np.random.default_rng(0), NullEffects())


def build_check(
    config: KubeSchedulerConfiguration, profile: Profile, registry: Mapping[str, PluginSpec]
) -> None:
    """Build the profile against an empty cluster; raises ValueError on any problem."""
    try:
        build_framework(profile, registry, _scratch_handle(), config.percentage_of_nodes_to_score)
    except ValueError:
        raise
    except Exception as err:  # a plugin factory failed: report it, don't crash
        raise ValueError(f"{type(err).__name__}: {err}") from None


def queue_sort_name(profile: Profile, registry: Mapping[str, PluginSpec]) -> str:
    fwk = build_framework(profile, registry, _scratch_handle())
    return fwk.queue_sort.name


def with_profile_check(registry: Mapping[str, PluginSpec]) -> Registry:
    """The registry, able to check that a profile builds (configuration validation)."""
    out = registry if isinstance(registry, Registry) else Registry(registry)
    if out.check_profile is None:
        out = out.merged([])
        out.check_profile = _check_profile
    return out


def _check_profile(
    registry: Mapping[str, PluginSpec], config: KubeSchedulerConfiguration, profile: Profile
) -> str:
    build_check(config, profile, registry)
    return queue_sort_name(profile, registry)
