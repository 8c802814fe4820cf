"""Latency of extension points and plugins, timed by an injected timer.

kube-scheduler's `scheduler_framework_extension_point_duration_seconds` (every cycle)
and `scheduler_plugin_execution_duration_seconds` (plugins, in a sample of cycles: kube
records them in 10% of cycles, decided when the cycle starts). The core reads no clock:
the driver passes an `ExecutionTimer` (its `now()` is the clock, `sample()` the draw,
the other two methods say where each series' durations go), and `instrument` installs
it on a framework:

* each extension point method of the framework is shadowed on the instance by a timed
  one, so a framework without a timer runs exactly the untimed code;
* the PreFilter wrapper (the first extension point of a cycle) draws the sample and marks
  the cycle's state; sampled cycles run through copies of the plugins whose calls are
  timed (`Framework.plugins_for(state)`), the others through the plugins themselves.

One difference from kube: Shoal's Filter plugins run once per cycle over all candidate
nodes, so a Filter sample is one call for all nodes, not one per node. What-if passes
(`CycleState(dry_run=True)`: preemption's victim search, a reservation's node mask) are
not timed, as kube does not count its preemption dry runs at the extension points.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Protocol

from shoal.framework.cycle_state import CycleState
from shoal.framework.status import Code, Status
from shoal.framework.types import FilterResult

if TYPE_CHECKING:
    from shoal.framework.runtime import Framework, ProfilePlugins

__all__ = ["EXTENSION_POINTS", "STATUS_NAMES", "ExecutionTimer", "instrument", "status_name"]

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

# Where a framework method's result carries its Status: None, the result is one; an
# index, the result is a tuple with it there; -1, no status (Success). Filter is -1 as
# in kube, whose Filter extension point reports Success when no node fits (the pod's
# diagnosis says why) and Error only on an error (Shoal's errors raise).
_RESULT_STATUS: dict[str, int | None] = {
    "run_pre_filter": 1,
    "run_filters": -1,
    "run_post_filter": 1,
    "run_pre_score": None,
    "run_score": -1,
    "run_reserve": None,
    "run_permit": 0,
    "run_pre_bind": None,
    "run_bind": None,
    "run_post_bind": -1,
}


Observe = Callable[[float], None]


class ExecutionTimer(Protocol):
    def now(self) -> float:
        """Seconds from an arbitrary origin (a monotonic clock)."""

    def sample(self) -> bool:
        """Whether this cycle's plugins are timed."""

    def extension_point(self, profile: str, point: str, status: str) -> Observe:
        """Where the durations of this extension point with this status go."""

    def plugin(self, plugin: str, point: str, status: str) -> Observe:
        """Where the durations of this plugin's calls with this status go."""


def status_code(result: Any) -> int:
    """The status (a `Code`) of what a plugin returned: a Status, a tuple holding one, a
    FilterResult (Unschedulable when it rejected some candidate), or scores / None."""
    if type(result) is Status:
        return result.code
    if isinstance(result, tuple):
        for item in result:
            if isinstance(item, Status):
                return item.code
        return Code.SUCCESS
    if isinstance(result, FilterResult):
        return Code.SUCCESS if bool(result.passed.all()) else Code.UNSCHEDULABLE
    return Code.SUCCESS


def status_name(result: Any) -> str:
    """kube's status label of what a plugin returned."""
    return STATUS_NAMES[status_code(result)]


def _observers(
    make: Callable[[str], Observe],
) -> tuple[list[Observe | None], Callable[[int], Observe]]:
    """Per status code, the series' observe function, made on first use."""
    observers: list[Observe | None] = [None] * len(STATUS_NAMES)

    def first(code: int) -> Observe:
        observe = observers[code] = make(STATUS_NAMES[code])
        return observe

    return observers, first


class _TimedPlugin:
    """A plugin whose calls at one extension point are timed; everything else (its name,
    `unreserve`, `normalize_score`, its args) is the plugin's own."""

    def __init__(self, plugin: Any, method: str, point: str, timer: ExecutionTimer) -> None:
        self._plugin = plugin
        self.name = plugin.name
        fn = getattr(plugin, method)
        name = plugin.name
        now = timer.now
        observers, first = _observers(lambda status: timer.plugin(name, point, status))

        def timed(*args: Any) -> Any:
            start = now()
            result = fn(*args)
            elapsed = now() - start
            code = result.code if type(result) is Status else status_code(result)
            (observers[code] or first(code))(elapsed)
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
    now = timer.now
    observers, first = _observers(lambda status: timer.extension_point(profile, point, status))
    where = _RESULT_STATUS[method]

    def code_of(result: Any) -> int:
        if where is None:
            return int(result.code)
        return 0 if where < 0 else int(result[where].code)

    if method == "run_pre_filter":  # the first extension point of a cycle: draw the sample
        sample = timer.sample

        def timed_first(state: CycleState, *args: Any) -> Any:
            if state.dry_run:
                return fn(state, *args)
            state.sampled = sample()
            start = now()
            result = fn(state, *args)
            elapsed = now() - start
            code = result[1].code
            (observers[code] or first(code))(elapsed)
            return result

        return timed_first

    def timed(state: CycleState, *args: Any) -> Any:
        if state.dry_run:
            return fn(state, *args)
        start = now()
        result = fn(state, *args)
        elapsed = now() - start
        code = code_of(result)
        (observers[code] or first(code))(elapsed)
        return result

    return timed


def instrument(framework: Framework, timer: ExecutionTimer) -> None:
    """Time this framework's extension points (every cycle) and its plugins (in the
    cycles `timer.sample()` picks)."""
    framework.sampled_plugins = _timed_plugins(framework.plugins, timer)
    for method, (point, _, _) in EXTENSION_POINTS.items():
        setattr(framework, method, _timed_point(framework, method, point, timer))
