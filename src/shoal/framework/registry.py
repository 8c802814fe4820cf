"""The plugin registry: plugin name -> factory and typed args.

In-tree plugins are one explicit literal map (`shoal.plugins.IN_TREE`); third-party
plugins are found through the `shoal.plugins` entry-point group. A name registered twice
is an error, never a silent override.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import pydantic

from shoal.framework.handle import Handle
from shoal.framework.interfaces import Plugin

__all__ = ["ENTRY_POINT_GROUP", "PluginSpec", "Registry", "RegistryError", "load_entry_points"]

ENTRY_POINT_GROUP = "shoal.plugins"


class RegistryError(ValueError):
    pass


@dataclass(frozen=True)
class PluginSpec:
    """How to build a plugin: a factory taking validated args and the handle.

    `args` is a pydantic model describing the plugin's pluginConfig args (None if the
    plugin takes none); the config loader validates user args against it.
    """

    factory: Callable[[Any, Handle], Plugin]
    args: type[pydantic.BaseModel] | None = None

    def build(self, raw_args: Mapping[str, Any] | None, handle: Handle) -> Plugin:
        args = self.parse_args(raw_args)
        return self.factory(args, handle)

    def parse_args(self, raw_args: Mapping[str, Any] | None) -> Any:
        if self.args is None:
            return None
        return self.args.model_validate(dict(raw_args or {}))


ProfileCheck = Callable[[Any, Any, Any], str]
"""(registry, configuration, profile) -> the profile's QueueSort plugin name; ValueError
when the profile cannot be built with that registry. Supplied by the scheduler, so that
configuration validation can build every profile without the config layer importing the
scheduler."""


class Registry(dict[str, PluginSpec]):
    """Plugin name -> spec, plus what validation needs to know about the catalogue:
    `unavailable` (names users carry over from kube-scheduler configs that Shoal does not
    have, with why) and `check_profile` (see `ProfileCheck`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unavailable: dict[str, str] = {}
        self.check_profile: ProfileCheck | None = None

    def register(self, name: str, spec: PluginSpec) -> None:
        if name in self:
            raise RegistryError(f"plugin {name!r} is registered twice")
        self[name] = spec

    def merged(self, others: Iterable[tuple[str, PluginSpec]]) -> Registry:
        out = Registry(self)
        out.unavailable = dict(self.unavailable)
        out.check_profile = self.check_profile
        for name, spec in others:
            out.register(name, spec)
        return out


def load_entry_points() -> list[tuple[str, PluginSpec]]:
    """Third-party plugins: entry point `name = "pkg.module:spec"` pointing at a PluginSpec
    (or at a factory taking (args, handle))."""
    found: list[tuple[str, PluginSpec]] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        target = ep.load()
        spec = target if isinstance(target, PluginSpec) else PluginSpec(target)
        found.append((ep.name, spec))
    return found
