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


class Registry(dict[str, PluginSpec]):
    def register(self, name: str, spec: PluginSpec) -> None:
        if name in self:
            raise RegistryError(f"plugin {name!r} is registered twice")
        self[name] = spec

    def merged(self, others: Iterable[tuple[str, PluginSpec]]) -> Registry:
        out = Registry(self)
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
