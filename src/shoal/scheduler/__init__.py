"""The sans-I/O scheduler: profiles, scheduling cycle, gang cycle, binding cycle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from shoal.cache.cluster import ClusterState
from shoal.cache.snapshot import Snapshot
from shoal.config.types import KubeSchedulerConfiguration, PluginConfig
from shoal.framework.effects import Effects
from shoal.framework.extender import Extender, order_extenders
from shoal.framework.handle import Clock, Handle
from shoal.framework.registry import PluginSpec, Registry, load_entry_points
from shoal.scheduler.profiles import build_profiles, with_profile_check
from shoal.scheduler.scheduler import BindingTask, CycleResult, Scheduler
from shoal.scheduling_queue.queue import QueueConfig

__all__ = [
    "BindingTask",
    "CycleResult",
    "Scheduler",
    "default_registry",
    "new_scheduler",
    "with_extender_ignored_resources",
    "with_profile_check",
]


def default_registry(include_entry_points: bool = True) -> Registry:
    """In-tree plugins plus third-party ones from the `shoal.plugins` entry points."""
    from shoal.plugins import in_tree_registry

    registry = in_tree_registry()
    if include_entry_points:
        broken: dict[str, str] = {}
        registry = registry.merged(load_entry_points(broken), broken)
    return with_profile_check(registry)


def new_scheduler(
    config: KubeSchedulerConfiguration,
    *,
    clock: Clock,
    effects: Effects,
    seed: int = 0,
    cluster: ClusterState | None = None,
    registry: Mapping[str, PluginSpec] | None = None,
    extenders: Sequence[Extender] | None = None,
) -> Scheduler:
    """Wire a scheduler: cluster cache, snapshot, handle, profiles and queue. Time,
    randomness (`seed`), the effects port and the extenders' transports are injected;
    nothing else is read. Gang settings come from the profiles' Coscheduling args.

    `extenders`: one per entry of `config.extenders`, in the same order (the driver
    builds them, e.g. `shoal.drivers.extenders.http_extenders`)."""
    if extenders is None and config.extenders:
        raise ValueError(
            f"the configuration names {len(config.extenders)} extender(s) but no transport "
            "was given for them: build them with shoal.drivers.extenders.http_extenders"
        )
    cluster = cluster or ClusterState()
    handle = Handle(
        cluster=cluster,
        snapshot=Snapshot(cluster),
        clock=clock,
        rng=np.random.default_rng(seed),
        effects=effects,
        extenders=order_extenders(extenders or ()),
    )
    config = with_extender_ignored_resources(config)
    profiles = build_profiles(config, registry or default_registry(), handle)
    queue_config = QueueConfig(
        initial_backoff_seconds=float(config.pod_initial_backoff_seconds),
        max_backoff_seconds=float(config.pod_max_backoff_seconds),
    )
    return Scheduler(profiles, handle, queue_config)


def with_extender_ignored_resources(
    config: KubeSchedulerConfiguration,
) -> KubeSchedulerConfiguration:
    """kube-scheduler's buildExtenders: the managed resources marked
    `ignoredByScheduler` become NodeResourcesFit's `ignoredResources` in every profile
    (replacing what the profile set there): the extender alone judges them."""
    ignored = [
        r.name for e in config.extenders for r in e.managed_resources if r.ignored_by_scheduler
    ]
    if not ignored:
        return config
    profiles = []
    for profile in config.profiles:
        configs = list(profile.plugin_config)
        for i, pc in enumerate(configs):
            if pc.name == "NodeResourcesFit":
                configs[i] = PluginConfig(
                    name=pc.name, args={**pc.args, "ignoredResources": list(ignored)}
                )
                break
        else:
            configs.append(
                PluginConfig(name="NodeResourcesFit", args={"ignoredResources": list(ignored)})
            )
        profiles.append(profile.model_copy(update={"plugin_config": configs}))
    return config.model_copy(update={"profiles": profiles})
