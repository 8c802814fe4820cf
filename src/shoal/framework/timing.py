"""Latency of extension points and plugins, timed by an injected timer.

kube-scheduler's `scheduler_framework_extension_point_duration_seconds` (every cycle)
and `scheduler_plugin_execution_duration_seconds` (plugins, in a sample of cycles: kube
records them in 10% of cycles, decided when the cycle starts). The core reads no clock:
the driver passes an `ExecutionTimer` (its `now()` is the clock, `sample()` the draw,
the other two methods record), and `instrument` installs it on a framework:

* each extension point method of the framework is shadowed on the instance by a timed
  one, so a framework without a timer runs exactly the untimed code;
* the PreFilter wrapper (the first extension point of a cycle) draws the sample and marks
  the cycle's state; sampled cycles run through copies of the plugins whose calls are
  timed (`Framework.plugins_for(state)`), the others through the plugins themselves.

One difference from kube: Shoal's Filter plugins run once per cycle over all candidate
nodes, so a Filter sample is one call for all nodes, not one per node.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from shoal.framework.cycle_state import CycleState
from shoal.framework.status import Code, Status
from shoal.framework.types import FilterResult

if TYPE_CHECKING:
    from shoal.framework.runtime import Framework, ProfilePlugins

__all__ = ["EXTENSION_POINTS", "STATUS_NAMES", "ExecutionTimer", "instrument"]

# kube's status label values, by Code.
STATUS_NAMES = (
    "Success",
    "Error",
    "Unschedulable",
    "UnschedulableAndUnresolvable",
    "Wait",
    "Skip",
    "Pending",
)

# Framework method -> (extension point, ProfilePlugins field, plugin method).
EXTENSION_POINTS: dict[str, tuple[str, str, str]] = {
    "run_pre_filter": ("PreFilter", "pre_filter", "pre_filter"),
    "run_filters": ("Filter", "filter", "filter"),
    "run_post_filter": ("PostFilter", "post_filter", "post_filter"),
    "run_pre_score": ("PreScore", "pre_score", "pre_score"),
    "run_score": ("Score", "score", "score"),
    "run_reserve": ("Reserve", "reserve", "reserve"),
    "run_permit": ("Permit", "permit", "permit"),
    "run_pre_bind": ("PreBind", "pre_bind", "pre_bind"),
    "run_bind": ("Bind", "bind", "bind"),
    "run_post_bind": ("PostBind", "post_bind", "post_bind"),
}


class ExecutionTimer(Protocol):
    def now(self) -> float:
        """Seconds from an arbitrary origin (a monotonic clock)."""

    def sample(self) -> bool:
        """Whether this cycle's plugins are timed."""

    def extension_point(self, profile: str, point: str, status: str, seconds: float) -> None: ...

    def plugin(self, plugin: str, point: str, status: str, seconds: float) -> None: ...


def status_name(result: Any) -> str:
    """The status label of what a framework method or a plugin returned."""
    if isinstance(result, Status):
        return STATUS_NAMES[result.code]
    if isinstance(result, tuple):
        for item in result:
            if isinstance(item, Status):
                return STATUS_NAMES[item.code]
        return "Success"
    if isinstance(result, FilterResult):
        return "Success" if bool(result.passed.all()) else "Unschedulable"
    passed = getattr(result, "passed", None)  # a FilterOutcome
    if isinstance(passed, np.ndarray):
        return "Success" if bool(passed.any()) else STATUS_NAMES[Code.UNSCHEDULABLE]
    return "Success"


class _TimedPlugin:
    """A plugin whose calls at one extension point are timed; everything else (its name,
    `unreserve`, `normalize_score`, its args) is the plugin's own."""

    def __init__(self, plugin: Any, method: str, point: str, timer: ExecutionTimer) -> None:
        self._plugin = plugin
        self.name = plugin.name
        fn = getattr(plugin, method)
        name = plugin.name
        if inspect.iscoroutinefunction(fn):

            async def timed_async(*args: Any) -> Any:
                start = timer.now()
                result = await fn(*args)
                timer.plugin(name, point, status_name(result), timer.now() - start)
                return result

            setattr(self, method, timed_async)
        else:

            def timed(*args: Any) -> Any:
                start = timer.now()
                result = fn(*args)
                timer.plugin(name, point, status_name(result), timer.now() - start)
                return result

            setattr(self, method, timed)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._plugin, attr)


def _timed_plugins(plugins: ProfilePlugins, timer: ExecutionTimer) -> ProfilePlugins:
    from shoal.framework.runtime import ProfilePlugins

    by_field = {f: (point, method) for point, f, method in EXTENSION_POINTS.values()}
    values: dict[str, Any] = {}
    for f in fields(ProfilePlugins):
        current = getattr(plugins, f.name)
        if f.name not in by_field:
            values[f.name] = current
            continue
        point, method = by_field[f.name]
        if f.name == "score":
            values[f.name] = [(_TimedPlugin(p, method, point, timer), w) for p, w in current]
        else:
            values[f.name] = [_TimedPlugin(p, method, point, timer) for p in current]
    return ProfilePlugins(**values)


def _timed_point(
    framework: Framework, method: str, point: str, timer: ExecutionTimer
) -> Callable[..., Any]:
    fn = getattr(framework, method)
    profile = framework.profile_name
    starts_cycle = method == "run_pre_filter"
    if inspect.iscoroutinefunction(fn):

        async def timed_async(state: CycleState, *args: Any) -> Any:
            start = timer.now()
            result = await fn(state, *args)
            timer.extension_point(profile, point, status_name(result), timer.now() - start)
            return result

        return timed_async

    def timed(state: CycleState, *args: Any) -> Any:
        if starts_cycle:
            state.sampled = timer.sample()
        start = timer.now()
        result = fn(state, *args)
        timer.extension_point(profile, point, status_name(result), timer.now() - start)
        return result

    return timed


def instrument(framework: Framework, timer: ExecutionTimer) -> None:
    """Time this framework's extension points (every cycle) and its plugins (in the
    cycles `timer.sample()` picks)."""
    framework.sampled_plugins = _timed_plugins(framework.plugins, timer)
    for method, (point, _, _) in EXTENSION_POINTS.items():
        setattr(framework, method, _timed_point(framework, method, point, timer))
