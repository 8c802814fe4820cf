"""Load and validate a KubeSchedulerConfiguration, reporting every problem at once.

Structural problems (types, unknown fields) come from the models; semantic problems
(unknown plugins, bad plugin args, duplicate schedulerNames, more than one QueueSort,
profiles with different QueueSorts) are checked against the plugin registry. Each problem
is one line naming the field path.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
import yaml

from shoal.config.types import EXTENSION_POINTS, KubeSchedulerConfiguration, PluginSet, Profile

__all__ = ["ConfigError", "Problem", "load_config", "parse_config"]


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(ValueError):
    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"{source}: {len(problems)} problem(s) in the scheduler configuration:\n{lines}"
        )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def load_config(
    path: Path, registry: Mapping[str, Any] | None = None
) -> KubeSchedulerConfiguration:
    """Read a YAML/JSON file. Raises ConfigError listing every problem."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(str(path), [Problem("", f"cannot be read: {err}")]) from None
    return parse_config(raw, source=str(path), registry=registry)


def parse_config(
    raw: Any, source: str = "config", registry: Mapping[str, Any] | None = None
) -> KubeSchedulerConfiguration:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(source, [Problem("", "expected a mapping at the top level")])
    try:
        config = KubeSchedulerConfiguration.model_validate(raw)
    except pydantic.ValidationError as err:
        problems = [
            Problem(_loc(e["loc"]), _hint(e["type"], e["msg"], e["loc"])) for e in err.errors()
        ]
        # Report the semantic problems too (unknown plugins, bad args, duplicate names),
        # checked on a copy without the structurally bad fields, so that one run lists
        # every mistake in the file.
        cleaned = _without_bad_fields(raw, err)
        if cleaned is not None:
            bad = [p.path for p in problems]
            problems += [
                p
                for p in semantic_problems(cleaned, registry)
                if not any(_within(p.path, path) for path in bad)
            ]
        raise ConfigError(source, problems) from None
    problems = semantic_problems(config, registry)
    if problems:
        raise ConfigError(source, problems)
    return config


def _within(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith((prefix + ".", prefix + "["))


def _without_bad_fields(
    raw: Mapping[str, Any], err: pydantic.ValidationError, rounds: int = 5
) -> KubeSchedulerConfiguration | None:
    """The configuration with every field that failed validation removed (so it takes its
    default), or None when that is not possible (e.g. a bad list element)."""
    data: Any = copy.deepcopy(dict(raw))
    for _ in range(rounds):
        for e in err.errors():
            loc = e["loc"]
            parent = data
            for part in loc[:-1]:
                try:
                    parent = parent[part]
                except (KeyError, IndexError, TypeError):
                    return None
            if not loc or not isinstance(parent, dict) or loc[-1] not in parent:
                return None
            del parent[loc[-1]]
        try:
            return KubeSchedulerConfiguration.model_validate(data)
        except pydantic.ValidationError as again:
            err = again
    return None


def _hint(kind: str, message: str, loc: tuple[int | str, ...]) -> str:
    if kind == "extra_forbidden":
        return (
            f"unknown field {loc[-1]!r}: check the spelling against kubescheduler.config.k8s.io/v1"
        )
    return message


def semantic_problems(
    config: KubeSchedulerConfiguration, registry: Mapping[str, Any] | None
) -> list[Problem]:
    # What the registry knows beyond names (see shoal.framework.registry.Registry):
    # kube-scheduler plugins Shoal lacks, and how to build a profile. Read by duck
    # typing so a plain mapping of specs still validates names and args.
    unavailable: Mapping[str, str] = getattr(registry, "unavailable", {})
    check_profile = getattr(registry, "check_profile", None)
    problems: list[Problem] = []
    if config.pod_max_backoff_seconds < config.pod_initial_backoff_seconds:
        problems.append(
            Problem("podMaxBackoffSeconds", "must be at least podInitialBackoffSeconds")
        )
    seen: dict[str, int] = {}
    queue_sorts: set[str] = set()
    for i, profile in enumerate(config.profiles):
        base = f"profiles[{i}]"
        if profile.scheduler_name in seen:
            problems.append(
                Problem(
                    f"{base}.schedulerName",
                    f"{profile.scheduler_name!r} is already used by "
                    f"profiles[{seen[profile.scheduler_name]}]",
                )
            )
        seen.setdefault(profile.scheduler_name, i)
        if registry is None:
            continue
        names = _plugin_names(profile)
        for where, name in names:
            if name == "*":
                continue
            if name not in registry:
                why = unavailable.get(name)
                hint = f" ({why}); remove it" if why else _suggest(name, registry)
                problems.append(
                    Problem(f"{base}.plugins.{where}", f"unknown plugin {name!r}{hint}")
                )
        configured: set[str] = set()
        for j, pc in enumerate(profile.plugin_config):
            where = f"{base}.pluginConfig[{j}]"
            if pc.name in configured:
                problems.append(Problem(f"{where}.name", f"args for {pc.name!r} given twice"))
            configured.add(pc.name)
            spec = registry.get(pc.name)
            if spec is None:
                problems.append(
                    Problem(
                        f"{where}.name", f"unknown plugin {pc.name!r}{_suggest(pc.name, registry)}"
                    )
                )
                continue
            if getattr(spec, "args", None) is None:
                if pc.args:
                    problems.append(Problem(f"{where}.args", f"plugin {pc.name} takes no args"))
                continue
            try:
                spec.parse_args(pc.args)
            except pydantic.ValidationError as err:
                for e in err.errors():
                    problems.append(
                        Problem(
                            f"{where}.args.{_loc(e['loc'])}".rstrip("."),
                            _hint(e["type"], e["msg"], e["loc"]),
                        )
                    )
        if any(p.path.startswith(base) for p in problems) or check_profile is None:
            continue
        try:
            queue_sorts.add(check_profile(registry, config, profile))
        except ValueError as err:
            problems.append(Problem(f"{base}.plugins", str(err)))
            continue
    if len(queue_sorts) > 1:
        problems.append(
            Problem(
                "profiles",
                f"all profiles must use the same QueueSort plugin, got {sorted(queue_sorts)}",
            )
        )
    return problems


def _plugin_names(profile: Profile) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for point in (*EXTENSION_POINTS, "multi_point"):
        plugin_set: PluginSet = getattr(profile.plugins, point)
        for kind in ("enabled", "disabled"):
            for k, plugin in enumerate(getattr(plugin_set, kind)):
                out.append((f"{_camel(point)}.{kind}[{k}].name", plugin.name))
    return out


def _suggest(name: str, registry: Mapping[str, Any]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(registry), n=1)
    return (
        f"; did you mean {close[0]!r}?"
        if close
        else f"; known plugins: {', '.join(sorted(registry))}"
    )
