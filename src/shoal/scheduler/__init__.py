"""The sans-I/O scheduler: profiles, scheduling cycle, gang cycle, binding cycle."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from shoal.cache.cluster import ClusterState
from shoal.cache.snapshot import Snapshot
from shoal.config.types import KubeSchedulerConfiguration
from shoal.framework.effects import Effects
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
    "with_profile_check",
]


def default_registry(include_entry_points: bool = True) -> Registry:
    """In-tree plugins plus third-party ones from the `shoal.plugins` entry points."""
    from shoal.plugins import in_tree_registry

    registry = in_tree_registry()
    if include_entry_points:
        registry = registry.merged(load_entry_points())
    return with_profile_check(registry)


def new_scheduler(
    config: KubeSchedulerConfiguration,
    *,
    clock: Clock,
    effects: Effects,
    seed: int = 0,
    cluster: ClusterState | None = None,
    registry: Mapping[str, PluginSpec] | None = None,
) -> Scheduler:
    """Wire a scheduler: cluster cache, snapshot, handle, profiles and queue. Time,
    randomness (`seed`) and the effects port are injected; nothing else is read. Gang
    settings come from the profiles' Coscheduling args."""
    cluster = cluster or ClusterState()
    handle = Handle(
        cluster=cluster,
        snapshot=Snapshot(cluster),
        clock=clock,
        rng=np.random.default_rng(seed),
        effects=effects,
    )
    profiles = build_profiles(config, registry or default_registry(), handle)
    queue_config = QueueConfig(
        initial_backoff_seconds=float(config.pod_initial_backoff_seconds),
        max_backoff_seconds=float(config.pod_max_backoff_seconds),
    )
    return Scheduler(profiles, handle, queue_config)
