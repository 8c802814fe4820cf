"""Load and validate a KubeSchedulerConfiguration, reporting every problem at once.

Structural problems (types, unknown fields) come from the models; semantic problems
(unknown plugins, bad plugin args, duplicate schedulerNames, more than one QueueSort,
profiles with different QueueSorts, client and leader-election settings) are checked
against the plugin registry. Each problem is one line naming the field path.

What kube-scheduler accepts but Shoal cannot honour (plugins it does not have yet, a
profile named like the stock scheduler) is not an error: it comes back as the
configuration's `warnings`, for the command line to show.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic

from shoal.api import strict_yaml
from shoal.api.manifests import READ_ERRORS, why_unreadable
from shoal.api.objects import dns_name_problem
from shoal.config.durations import parse_duration
from shoal.config.problems import Problem
from shoal.config.types import (
    ARGS_API_VERSION,
    DEFAULT_EXTENDER_TIMEOUT,
    DEFAULT_PROFILE_NAME,
    DEFAULT_SCHEDULER_NAME,
    EXTENSION_POINTS,
    Extender,
    KubeSchedulerConfiguration,
    PluginConfig,
    PluginSet,
    Profile,
)

__all__ = [
    "ConfigError",
    "Problem",
    "default_config",
    "extender_problems",
    "extender_timeout",
    "leader_election_problems",
    "load_config",
    "parse_config",
]

# Plugins kube-scheduler's v1 API itself refuses to enable or configure (removed in favour
# of NodeVolumeLimits); kube-scheduler accepts them only in a `disabled` list.
KUBE_REMOVED_PLUGINS = frozenset({"AzureDiskLimits", "CinderLimits", "EBSLimits", "GCEPDLimits"})

# client-go's leaderelection.JitterFactor: a renewal may be retried up to 1.2 retry
# periods late, so the renew deadline must leave room for that (NewLeaderElector).
LEADER_JITTER = 1.2


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


def default_config(*, serve_unnamed_pods: bool = False) -> KubeSchedulerConfiguration:
    """What `shoal run` and `shoal simulate` use without a file: one profile named
    'shoal' with the default plugins. `serve_unnamed_pods` adds a profile named
    'default-scheduler' with the same plugins, for the simulator: it has no stock
    kube-scheduler to schedule pods that name no scheduler."""
    names = [DEFAULT_PROFILE_NAME] + ([DEFAULT_SCHEDULER_NAME] if serve_unnamed_pods else [])
    return KubeSchedulerConfiguration(profiles=[Profile(scheduler_name=n) for n in names])


def load_config(
    path: Path, registry: Mapping[str, Any] | None = None
) -> KubeSchedulerConfiguration:
    """Read a YAML/JSON file. Raises ConfigError listing every problem; what will not
    take effect is in the result's `warnings`."""
    try:
        raw = strict_yaml.load(path.read_text())
    except READ_ERRORS as err:
        raise ConfigError(str(path), [Problem("", why_unreadable(err))]) from None
    if raw is None:
        # kube-scheduler refuses an empty --config too ("Object 'Kind' is missing").
        raise ConfigError(
            str(path),
            [
                Problem(
                    "",
                    "the file is empty: give apiVersion: kubescheduler.config.k8s.io/v1 and "
                    "kind: KubeSchedulerConfiguration (or leave out --config for the defaults)",
                )
            ],
        )
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
    if not config.profiles:
        # kube-scheduler's defaulting: no profiles means the one default profile.
        config = config.model_copy(update={"profiles": [Profile()]})
    warnings: list[Problem] = []
    problems = semantic_problems(config, registry, warnings)
    if problems:
        raise ConfigError(source, problems)
    unavailable: Mapping[str, str] = getattr(registry, "unavailable", {})
    if unavailable:
        # The profiles as they will run: the plugins Shoal lacks (warned about) are gone.
        profiles = [_without(p, unavailable) for p in config.profiles]
        config = config.model_copy(update={"profiles": profiles})
    return config.with_warnings(tuple(warnings))


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
    config: KubeSchedulerConfiguration,
    registry: Mapping[str, Any] | None,
    warnings: list[Problem] | None = None,
) -> list[Problem]:
    """The problems of `config`; what is accepted but will not take effect is appended
    to `warnings` when given."""
    if warnings is None:
        warnings = []
    # What the registry knows beyond names (see shoal.framework.registry.Registry):
    # kube-scheduler plugins Shoal lacks, and how to build a profile. Read by duck
    # typing so a plain mapping of specs still validates names and args.
    unavailable: Mapping[str, str] = getattr(registry, "unavailable", {})
    broken: Mapping[str, str] = getattr(registry, "broken", {})
    check_profile = getattr(registry, "check_profile", None)
    problems: list[Problem] = []
    for name, why in getattr(registry, "ignored", {}).items():
        warnings.append(Problem(f"entry point {name}", why))
    if config.pod_max_backoff_seconds < config.pod_initial_backoff_seconds:
        problems.append(
            Problem("podMaxBackoffSeconds", "must be at least podInitialBackoffSeconds")
        )
    problems += client_connection_problems(config.client_connection)
    problems += extender_problems(config.extenders)
    problems += leader_election_problems(config.leader_election)
    seen: dict[str, int] = {}
    queue_sorts: set[str] = set()
    for i, profile in enumerate(config.profiles):
        base = f"profiles[{i}]"
        if profile.scheduler_name in seen:
            problems.append(
                Problem(
                    f"{base}.schedulerName",
                    f"{profile.scheduler_name!r} is already used by "
                    f"profiles[{seen[profile.scheduler_name]}]"
                    + (
                        # as in kube-scheduler, a profile that sets no schedulerName
                        # is default-scheduler, so two unnamed profiles collide
                        "; a profile without schedulerName is named "
                        f"{DEFAULT_SCHEDULER_NAME!r}: give each profile its own name"
                        if profile.scheduler_name == DEFAULT_SCHEDULER_NAME
                        else ""
                    ),
                )
            )
        seen.setdefault(profile.scheduler_name, i)
        if not profile.scheduler_name:
            # kube-scheduler refuses it too ("profiles[0].schedulerName: Required value").
            problems.append(
                Problem(
                    f"{base}.schedulerName",
                    "Required value: name the profile (pods pick it by spec.schedulerName), "
                    "or leave the field out for default-scheduler",
                )
            )
        elif refused := dns_name_problem(profile.scheduler_name):
            # kube-scheduler takes any name, but the API server refuses a pod whose
            # spec.schedulerName is not one: no pod can ever ask for this profile.
            warnings.append(
                Problem(
                    f"{base}.schedulerName",
                    f"no pod can name this profile: {refused.replace('name', 'schedulerName', 1)}",
                )
            )
        if profile.scheduler_name == DEFAULT_SCHEDULER_NAME:
            warnings.append(
                Problem(
                    f"{base}.schedulerName",
                    f"{DEFAULT_SCHEDULER_NAME!r} is the stock kube-scheduler's name: in a "
                    "cluster, Shoal would compete with kube-scheduler for every pod that "
                    "sets no schedulerName; name the profile e.g. "
                    f"{DEFAULT_PROFILE_NAME!r} unless Shoal replaces kube-scheduler",
                )
            )
        if registry is None:
            continue
        names = _plugin_names(profile)
        for where, name in names:
            if name == "*" or name in registry:
                continue
            why = unavailable.get(name)
            path = f"{base}.plugins.{where}"
            if name in broken:
                problems.append(Problem(path, f"plugin {name!r} cannot be used: {broken[name]}"))
                continue
            if why is None:
                problems.append(Problem(path, f"unknown plugin {name!r}{_suggest(name, registry)}"))
            elif ".disabled[" in where:
                warnings.append(
                    Problem(
                        path,
                        f"{name} is not in Shoal ({why}); disabling it in profile "
                        f"{profile.scheduler_name!r} changes nothing",
                    )
                )
            elif name in KUBE_REMOVED_PLUGINS:
                problems.append(
                    Problem(
                        path,
                        f"{name} was removed from kubescheduler.config.k8s.io/v1 (kube-scheduler "
                        "refuses it too); remove it (NodeVolumeLimits replaced it)",
                    )
                )
            else:
                warnings.append(
                    Problem(
                        path,
                        f"{name} is not in Shoal ({why}): profile {profile.scheduler_name!r} "
                        f"runs without it, so pods are placed without {name}'s checks and "
                        "scores",
                    )
                )
        for point in ("placement_generate", "placement_score"):
            plugin_set: PluginSet = getattr(profile.plugins, point)
            named = [p.name for p in (*plugin_set.enabled, *plugin_set.disabled)]
            if named:
                warnings.append(
                    Problem(
                        f"{base}.plugins.{_camel(point)}",
                        f"kube-scheduler's workload placement point; Shoal has none (its "
                        f"gang cycle places pod groups): {', '.join(named)} will not run",
                    )
                )
        configured: set[str] = set()
        for j, pc in enumerate(profile.plugin_config):
            where = f"{base}.pluginConfig[{j}]"
            if pc.name in configured:
                problems.append(Problem(f"{where}.name", f"args for {pc.name!r} given twice"))
            configured.add(pc.name)
            problems += _args_type_meta_problems(pc, where)
            spec = registry.get(pc.name)
            why = unavailable.get(pc.name)
            if pc.name in broken:
                problems.append(
                    Problem(
                        f"{where}.name", f"plugin {pc.name!r} cannot be used: {broken[pc.name]}"
                    )
                )
                continue
            if spec is None and why is not None:
                if pc.name in KUBE_REMOVED_PLUGINS:
                    problems.append(
                        Problem(
                            f"{where}.name",
                            f"{pc.name} was removed from kubescheduler.config.k8s.io/v1 "
                            "(kube-scheduler refuses it too); remove these args",
                        )
                    )
                else:
                    warnings.append(
                        Problem(
                            f"{where}.args",
                            f"{pc.name} is not in Shoal ({why}): these args for profile "
                            f"{profile.scheduler_name!r} are not used",
                        )
                    )
                continue
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
                parsed = spec.parse_args(pc.args)
                # Args accepted for compatibility that change nothing in Shoal say so.
                for note in getattr(parsed, "not_used", lambda: [])():
                    warnings.append(Problem(f"{where}.args", note))
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
            queue_sorts.add(check_profile(registry, config, _without(profile, unavailable)))
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


def _without(profile: Profile, names: Mapping[str, str]) -> Profile:
    """`profile` with every mention of `names` dropped (plugin lists and pluginConfig)."""
    if not names:
        return profile

    def keep(plugin_set: PluginSet) -> PluginSet:
        return PluginSet(
            enabled=[p for p in plugin_set.enabled if p.name not in names],
            disabled=[p for p in plugin_set.disabled if p.name not in names],
        )

    plugins = profile.plugins.model_copy(
        update={
            point: keep(getattr(profile.plugins, point))
            for point in (*EXTENSION_POINTS, "multi_point")
        }
    )
    return profile.model_copy(
        update={
            "plugins": plugins,
            "plugin_config": [pc for pc in profile.plugin_config if pc.name not in names],
        }
    )


def client_connection_problems(client: Mapping[str, Any]) -> list[Problem]:
    """kube's clientConnection: qps a number >= 0, burst a whole number >= 0."""
    problems: list[Problem] = []
    for key in client:
        if key not in _CLIENT_FIELDS:
            problems.append(Problem(f"clientConnection.{key}", _unknown(key, _CLIENT_FIELDS)))
    if "qps" in client:
        qps = client["qps"]
        if isinstance(qps, bool) or not isinstance(qps, int | float) or not math.isfinite(qps):
            problems.append(
                Problem("clientConnection.qps", f"{qps!r} is not a number; write e.g. qps: 50")
            )
        elif qps < 0:
            problems.append(
                Problem("clientConnection.qps", f"{qps!r} is negative; use 0 for no limit")
            )
    if "burst" in client:
        burst = client["burst"]
        if isinstance(burst, bool) or not isinstance(burst, int):
            problems.append(
                Problem(
                    "clientConnection.burst",
                    f"{burst!r} is not a whole number; write e.g. burst: 100",
                )
            )
        elif burst < 0:
            problems.append(Problem("clientConnection.burst", f"{burst} must be non-negative"))
    return problems


def leader_election_problems(election: Mapping[str, Any]) -> list[Problem]:
    """kube's leaderElection, checked as kube-scheduler and client-go check it: durations
    parse and are positive, leaseDuration > renewDeadline > retryPeriod x 1.2, and the
    lock is a Lease. The timing is checked only when leader election may be on (a flag
    can turn it on, so only an explicit `leaderElect: false` skips it)."""
    problems: list[Problem] = []
    for key in election:
        if key not in _ELECTION_FIELDS:
            problems.append(Problem(f"leaderElection.{key}", _unknown(key, _ELECTION_FIELDS)))
    elect = election.get("leaderElect", True)
    if not isinstance(elect, bool):
        problems.append(Problem("leaderElection.leaderElect", f"{elect!r} is not true or false"))
    for key in ("resourceName", "resourceNamespace"):
        value = election.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            problems.append(
                Problem(f"leaderElection.{key}", f"{value!r} is not a non-empty string")
            )
    lock = election.get("resourceLock", "leases")
    if lock != "leases":
        problems.append(
            Problem(
                "leaderElection.resourceLock",
                f"{lock!r} is not supported; only 'leases' (as in kube-scheduler)",
            )
        )
    timings: dict[str, float] = {}
    for key, default in _ELECTION_TIMINGS.items():
        raw = election.get(key, default)
        try:
            value = parse_duration(raw)
        except ValueError:
            problems.append(
                Problem(
                    f"leaderElection.{key}",
                    f"{raw!r} is not a duration; write it like {default!r}, '1m30s' or '500ms'",
                )
            )
            continue
        if value <= 0:
            problems.append(Problem(f"leaderElection.{key}", f"{raw!r} must be greater than zero"))
            continue
        timings[key] = value
    if elect is False or len(timings) < len(_ELECTION_TIMINGS):
        return problems
    lease, renew, retry = (timings[k] for k in _ELECTION_TIMINGS)
    if lease <= renew:
        problems.append(
            Problem(
                "leaderElection.leaseDuration",
                f"must be greater than renewDeadline ({_seconds(lease)} <= {_seconds(renew)}): "
                "a leader that cannot renew must stop before another may take over",
            )
        )
    if renew <= retry * LEADER_JITTER:
        problems.append(
            Problem(
                "leaderElection.renewDeadline",
                f"must be greater than retryPeriod x {LEADER_JITTER} ({_seconds(renew)} <= "
                f"{_seconds(retry * LEADER_JITTER)}): lower retryPeriod or raise renewDeadline",
            )
        )
    return problems


def extender_timeout(extender: Extender) -> float:
    """The extender's httpTimeout in seconds (kube's default when unset or zero)."""
    seconds = parse_duration(extender.http_timeout)
    return seconds if seconds > 0 else DEFAULT_EXTENDER_TIMEOUT


def extender_problems(extenders: list[Extender]) -> list[Problem]:
    """kube-scheduler's validateExtenders, plus what it would only find when calling
    (an unparsable httpTimeout or urlPrefix, TLS data that is not base64)."""
    from urllib.parse import urlsplit

    problems: list[Problem] = []
    binders: list[int] = []
    managed: dict[str, int] = {}
    for i, extender in enumerate(extenders):
        base = f"extenders[{i}]"
        url = urlsplit(extender.url_prefix)
        if url.scheme not in ("http", "https") or not url.netloc:
            problems.append(
                Problem(
                    f"{base}.urlPrefix",
                    f"{extender.url_prefix!r} is not an http(s) URL; write it like "
                    "'http://127.0.0.1:8888/scheduler'",
                )
            )
        elif any(c.isspace() or ord(c) < 32 for c in extender.url_prefix):
            # Every call would fail ("URL can't contain control characters").
            problems.append(
                Problem(
                    f"{base}.urlPrefix",
                    f"{extender.url_prefix!r} contains spaces or control characters",
                )
            )
        else:
            try:
                url.port  # noqa: B018 (raises for a port out of range)
            except ValueError:
                problems.append(
                    Problem(
                        f"{base}.urlPrefix",
                        f"{extender.url_prefix!r}: the port must be a number from 1 to 65535",
                    )
                )
        if extender.prioritize_verb and extender.weight <= 0:
            problems.append(
                Problem(
                    f"{base}.weight",
                    f"{extender.weight} with prioritizeVerb {extender.prioritize_verb!r}: "
                    "must have a positive weight applied to it",
                )
            )
        if extender.weight < 0:
            problems.append(Problem(f"{base}.weight", f"{extender.weight} must not be negative"))
        if extender.bind_verb:
            binders.append(i)
        try:
            if parse_duration(extender.http_timeout) < 0:
                problems.append(
                    Problem(
                        f"{base}.httpTimeout",
                        f"{extender.http_timeout!r} is negative: kube-scheduler would wait for "
                        "the extender without any timeout; give a positive one (default 5s)",
                    )
                )
        except ValueError:
            problems.append(
                Problem(
                    f"{base}.httpTimeout",
                    f"{extender.http_timeout!r} is not a duration; write it like '5s' or '500ms'",
                )
            )
        tls = extender.tls_config
        if tls is not None:
            problems += _tls_problems(tls, f"{base}.tlsConfig")
        for j, resource in enumerate(extender.managed_resources):
            where = f"{base}.managedResources[{j}].name"
            why = _not_extended_resource(resource.name)
            if why:
                problems.append(Problem(where, f"{resource.name!r} {why}"))
            if resource.name in managed:
                problems.append(
                    Problem(
                        where,
                        f"{resource.name!r} duplicate extender managed resource name (also "
                        f"managed by extenders[{managed[resource.name]}])",
                    )
                )
            managed.setdefault(resource.name, i)
    if len(binders) > 1:
        problems.append(
            Problem(
                "extenders",
                f"found {len(binders)} extenders implementing bind "
                f"({', '.join(f'extenders[{i}]' for i in binders)}): only one extender can "
                "implement bind",
            )
        )
    return problems


def _tls_problems(tls: Any, base: str) -> list[Problem]:
    """What would stop every call to an extender: *Data that is not base64 PEM, a
    certificate without its key. (*File paths are read where the scheduler runs, when
    its extenders are built: `shoal.drivers.extenders` names the field that fails.)"""
    import base64

    problems: list[Problem] = []
    for name in ("cert", "key", "ca"):
        data = getattr(tls, f"{name}_data")
        if data:
            where = f"{base}.{name}Data"
            try:
                pem = base64.b64decode(data, validate=True)
            except ValueError:
                problems.append(
                    Problem(
                        where,
                        "is not base64: a Go []byte is written base64-encoded "
                        f"(e.g. `base64 -w0 file.pem`); or use {name}File",
                    )
                )
                continue
            if b"-----BEGIN" not in pem:
                problems.append(Problem(where, "is base64 but not PEM (no -----BEGIN line)"))
    has_cert = bool(tls.cert_data or tls.cert_file)
    has_key = bool(tls.key_data or tls.key_file)
    if has_cert != has_key:
        missing = "key" if has_cert else "cert"
        problems.append(
            Problem(
                f"{base}.{missing}Data",
                "a client certificate needs both cert and key (certData/certFile and "
                "keyData/keyFile)",
            )
        )
    return problems


# validation.IsQualifiedName: an optional DNS-subdomain prefix and "/", then a name of
# at most 63 characters, alphanumerics at both ends, '-', '_' or '.' between.
_QUALIFIED_NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"


def _not_extended_resource(name: str) -> str:
    """Why `name` is not an extended resource name (kube's IsExtendedResourceName), or ""."""
    import re

    if "/" not in name or "kubernetes.io/" in name:
        return (
            "is an invalid extended resource name: it must be fully qualified outside the "
            "kubernetes.io domain, e.g. 'example.com/gpu'"
        )
    if name.startswith("requests."):
        return "is an invalid extended resource name: it must not start with 'requests.'"
    prefix, _, short = ("requests." + name).partition("/")
    if (
        len(prefix) > 253
        or not re.fullmatch(_DNS_SUBDOMAIN, prefix)
        or len(short) > 63
        or not re.fullmatch(_QUALIFIED_NAME, short)
    ):
        return (
            "is an invalid extended resource name: a DNS subdomain, '/', then a name of "
            "alphanumerics, '-', '_' or '.' (at most 63 characters)"
        )
    return ""


_CLIENT_FIELDS = ("kubeconfig", "acceptContentTypes", "contentType", "qps", "burst")
_ELECTION_FIELDS = (
    "leaderElect",
    "leaseDuration",
    "renewDeadline",
    "retryPeriod",
    "resourceLock",
    "resourceName",
    "resourceNamespace",
)
# kube-scheduler's defaults, in the order they must decrease.
_ELECTION_TIMINGS = {"leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "2s"}


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _unknown(key: str, known: tuple[str, ...]) -> str:
    import difflib

    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known fields: {', '.join(known)}"
    return f"unknown field {key!r}{hint}"


def _args_type_meta_problems(pc: PluginConfig, where: str) -> list[Problem]:
    """kube-scheduler writes `apiVersion` and `kind` into each plugin's args and refuses
    args of another plugin's kind; so does Shoal."""
    out: list[Problem] = []
    if pc.args_api_version is not None and pc.args_api_version != ARGS_API_VERSION:
        out.append(
            Problem(
                f"{where}.args.apiVersion",
                f"{pc.args_api_version!r}: plugin args are {ARGS_API_VERSION!r}",
            )
        )
    expected = f"{pc.name}Args"
    if pc.args_kind is not None and pc.args_kind != expected:
        out.append(
            Problem(
                f"{where}.args.kind",
                f"{pc.args_kind!r} are not the args of plugin {pc.name} (kind {expected!r})",
            )
        )
    return out


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

    # A near miss of a kube plugin Shoal lacks ("VolumeBindings") is worth naming too.
    unavailable: Mapping[str, str] = getattr(registry, "unavailable", {})
    close = difflib.get_close_matches(name, [*registry, *unavailable], n=1)
    return (
        f"; did you mean {close[0]!r}?"
        if close
        else f"; known plugins: {', '.join(sorted(registry))}"
    )
