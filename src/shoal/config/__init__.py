"""Scheduler configuration: KubeSchedulerConfiguration v1 types, loading, validation."""

from shoal.config.load import ConfigError, Problem, load_config, parse_config
from shoal.config.types import KubeSchedulerConfiguration, PluginConfig, Plugins, PluginSet, Profile

__all__ = [
    "ConfigError",
    "KubeSchedulerConfiguration",
    "PluginConfig",
    "PluginSet",
    "Plugins",
    "Problem",
    "Profile",
    "load_config",
    "parse_config",
]
