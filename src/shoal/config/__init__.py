"""Scheduler configuration: KubeSchedulerConfiguration v1 types, loading, validation."""

from shoal.config.load import (
    ConfigError,
    Problem,
    default_config,
    leader_election_problems,
    load_config,
    parse_config,
)
from shoal.config.types import (
    DEFAULT_PROFILE_NAME,
    KubeSchedulerConfiguration,
    PluginConfig,
    Plugins,
    PluginSet,
    Profile,
)

__all__ = [
    "DEFAULT_PROFILE_NAME",
    "ConfigError",
    "KubeSchedulerConfiguration",
    "PluginConfig",
    "PluginSet",
    "Plugins",
    "Problem",
    "Profile",
    "default_config",
    "leader_election_problems",
    "load_config",
    "parse_config",
]
