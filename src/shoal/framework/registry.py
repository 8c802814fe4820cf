"""The plugin registry: plugin name -> factory and typed args.

In-tree plugins are one explicit literal map (`shoal.plugins.IN_TREE`); third-party
plugins are found through the `shoal.plugins` entry-point group. A name registered twice
is an error, never a silent override. An installed package with a broken or clashing
entry point does not stop the scheduler: its name is `broken` (a configuration that uses
it is refused, saying why) or, when an in-tree plugin has the name, the entry point is
ignored with a warning (`ignored`).
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
        # Entry-point names that cannot be used, and why (could not be loaded, or more
        # than one entry point has the name): a configuration naming one is refused.
        self.broken: dict[str, str] = {}
        # Entry points left out because a plugin of the same name was registered first
        # (an in-tree one): name -> the warning configuration loading gives.
        self.ignored: dict[str, str] = {}

    def register(self, name: str, spec: PluginSpec) -> None:
        if name in self:
            raise RegistryError(f"plugin {name!r} is registered twice")
        self[name] = spec

    def merged(
        self, others: Iterable[tuple[str, PluginSpec]], broken: Mapping[str, str] | None = None
    ) -> Registry:
        """This registry plus `others`. Without `broken`, a name registered twice raises.
        With it (entry points, and the names among them that could not be loaded), a
        clash with a plugin already here is ignored with a warning, and a name two of
        `others` share becomes broken: neither is used."""
        out = Registry(self)
        out.unavailable = dict(self.unavailable)
        out.check_profile = self.check_profile
        out.broken = dict(self.broken)
        out.ignored = dict(self.ignored)
        if broken is None:
            for name, spec in others:
                out.register(name, spec)
            return out
        mine = set(self)
        for name, why in broken.items():
            if name in mine:  # the registered plugin keeps its name either way
                out.ignored[name] = f"{why}; a plugin named {name!r} is registered already"
            else:
                out.broken[name] = why
        for name, spec in others:
            if name in mine:
                out.ignored[name] = (
                    f"the entry point {name!r} (group {ENTRY_POINT_GROUP}) is ignored: a "
                    f"plugin named {name!r} is already registered; rename the entry point"
                )
            elif name in out.broken:
                continue
            elif name in out:
                del out[name]
                out.broken[name] = (
                    f"more than one installed package registers an entry point named "
                    f"{name!r} (group {ENTRY_POINT_GROUP}); uninstall or rename one"
                )
            else:
                out[name] = spec
        return out


def load_entry_points(broken: dict[str, str] | None = None) -> list[tuple[str, PluginSpec]]:
    """Third-party plugins: entry point `name = "pkg.module:spec"` pointing at a PluginSpec
    (or at a factory taking (args, handle)). An entry point that cannot be loaded raises a
    `RegistryError` naming it, or, given `broken`, is recorded there (name -> why) and
    left out, so that one broken package does not stop configurations that do not use
    it."""
    found: list[tuple[str, PluginSpec]] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            target = ep.load()
        except Exception as exc:  # any import-time failure of a third-party package
            dist = getattr(ep, "dist", None)
            package = f" of package {dist.name!r}" if dist is not None else ""
            why = (
                f"the entry point {ep.name} = {ep.value!r}{package} could not be loaded: "
                f"{type(exc).__name__}: {exc}"
            )
            if broken is None:
                raise RegistryError(why) from exc
            broken[ep.name] = why
            continue
        if isinstance(target, PluginSpec):
            spec = target
        elif callable(target):
            spec = PluginSpec(target)
        else:
            why = (
                f"the entry point {ep.name} = {ep.value!r} points at a "
                f"{type(target).__name__}, not a PluginSpec or a factory (args, handle)"
            )
            if broken is None:
                raise RegistryError(why)
            broken[ep.name] = why
            continue
        found.append((ep.name, spec))
    return found
