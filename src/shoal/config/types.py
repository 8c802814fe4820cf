"""KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) as typed models.

Field names and defaults follow the upstream v1 API; unknown fields are rejected so that
a typo ("scoreingStrategy") is an error, not a silently ignored setting. Fields of the
upstream API that concern only a real cluster (clientConnection, leaderElection, ...)
are accepted and kept for the Kubernetes backend.

A configuration that came through `shoal.config.parse_config` carries `warnings`: the
parts of it that are accepted but will not take effect (plugins kube-scheduler has and
Shoal does not, a profile that would compete with the stock kube-scheduler).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator
from pydantic.alias_generators import to_camel

from shoal.config.problems import Problem

__all__ = [
    "DEFAULT_EXTENDER_TIMEOUT",
    "DEFAULT_PROFILE_NAME",
    "EXTENSION_POINTS",
    "Extender",
    "ExtenderManagedResource",
    "ExtenderTLSConfig",
    "KubeSchedulerConfiguration",
    "Plugin",
    "PluginConfig",
    "PluginSet",
    "Plugins",
    "Profile",
]

API_VERSION: Literal["kubescheduler.config.k8s.io/v1"] = "kubescheduler.config.k8s.io/v1"
# kube's default for Profile.schedulerName (and for a pod's spec.schedulerName).
DEFAULT_SCHEDULER_NAME = "default-scheduler"
# The profile `shoal run` and `shoal simulate` use without a configuration file: pods opt
# in with `schedulerName: shoal`, next to the stock kube-scheduler.
DEFAULT_PROFILE_NAME = "shoal"

# Extension points in Plugins, in execution order (attribute names).
EXTENSION_POINTS = (
    "pre_enqueue",
    "queue_sort",
    "pre_filter",
    "filter",
    "post_filter",
    "pre_score",
    "score",
    "reserve",
    "permit",
    "pre_bind",
    "bind",
    "post_bind",
)


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Plugin(_Model):
    name: str = Field(min_length=1)
    weight: int | None = Field(default=None, ge=0, le=100)


class PluginSet(_Model):
    enabled: list[Plugin] = Field(default_factory=list)
    disabled: list[Plugin] = Field(default_factory=list)


class Plugins(_Model):
    pre_enqueue: PluginSet = Field(default_factory=PluginSet)
    queue_sort: PluginSet = Field(default_factory=PluginSet)
    pre_filter: PluginSet = Field(default_factory=PluginSet)
    filter: PluginSet = Field(default_factory=PluginSet)
    post_filter: PluginSet = Field(default_factory=PluginSet)
    pre_score: PluginSet = Field(default_factory=PluginSet)
    score: PluginSet = Field(default_factory=PluginSet)
    reserve: PluginSet = Field(default_factory=PluginSet)
    permit: PluginSet = Field(default_factory=PluginSet)
    pre_bind: PluginSet = Field(default_factory=PluginSet)
    bind: PluginSet = Field(default_factory=PluginSet)
    post_bind: PluginSet = Field(default_factory=PluginSet)
    multi_point: PluginSet = Field(default_factory=PluginSet)
    # kube-scheduler v1.36's workload placement points (for its alpha Workload/gang API).
    # Shoal has no such points (its gang cycle places gangs): accepted, warned about when
    # they name plugins.
    placement_generate: PluginSet = Field(default_factory=PluginSet)
    placement_score: PluginSet = Field(default_factory=PluginSet)


# The type meta kube-scheduler writes into every plugin's args (`--write-config-to`).
ARGS_API_VERSION = "kubescheduler.config.k8s.io/v1"


class PluginConfig(_Model):
    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    # `apiVersion` / `kind` of the args, as kube-scheduler writes them (e.g.
    # `kind: NodeResourcesFitArgs`); taken out of `args` and checked against the plugin.
    args_api_version: str | None = Field(default=None, exclude=True)
    args_kind: str | None = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _split_type_meta(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        args = data.get("args")
        if not isinstance(args, dict) or not ({"apiVersion", "kind"} & args.keys()):
            return data
        rest = {k: v for k, v in args.items() if k not in ("apiVersion", "kind")}
        return {
            **data,
            "args": rest,
            "args_api_version": args.get("apiVersion"),
            "args_kind": args.get("kind"),
        }


class Profile(_Model):
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    percentage_of_nodes_to_score: int | None = Field(default=None, ge=0, le=100)
    plugins: Plugins = Field(default_factory=Plugins)
    plugin_config: list[PluginConfig] = Field(default_factory=list)


# kube-scheduler's DefaultExtenderTimeout: an extender's httpTimeout when unset or zero.
DEFAULT_EXTENDER_TIMEOUT = 5.0


class ExtenderManagedResource(_Model):
    name: str
    ignored_by_scheduler: bool = False


class ExtenderTLSConfig(_Model):
    """kube's ExtenderTLSConfig. The *Data fields hold PEM, base64-encoded as a Go
    []byte is in JSON and YAML; they take precedence over the *File fields."""

    insecure: bool = False
    server_name: str = ""
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    cert_data: str = ""
    key_data: str = ""
    ca_data: str = ""


class Extender(_Model):
    """An HTTP extender (kubescheduler.config.k8s.io/v1 Extender): a verb left empty is
    an extension the extender does not provide. Checked as kube-scheduler checks it in
    `shoal.config.load` (a prioritizer needs a positive weight, one binder at most,
    managed resources are extended resource names, each managed by one extender)."""

    url_prefix: str
    filter_verb: str = ""
    preempt_verb: str = ""
    prioritize_verb: str = ""
    weight: int = 0
    bind_verb: str = ""
    enable_https: bool = Field(default=False, alias="enableHTTPS")
    tls_config: ExtenderTLSConfig | None = None
    # A Go duration ("5s", "1m30s") or seconds; 0 or unset: DEFAULT_EXTENDER_TIMEOUT.
    http_timeout: str | float = 0
    node_cache_capable: bool = False
    managed_resources: list[ExtenderManagedResource] = Field(default_factory=list)
    ignorable: bool = False


class KubeSchedulerConfiguration(_Model):
    api_version: Literal["kubescheduler.config.k8s.io/v1"] = API_VERSION
    kind: Literal["KubeSchedulerConfiguration"] = "KubeSchedulerConfiguration"
    parallelism: int = Field(default=16, ge=1)
    percentage_of_nodes_to_score: int | None = Field(default=None, ge=0, le=100)
    pod_initial_backoff_seconds: int = Field(default=1, ge=1)
    pod_max_backoff_seconds: int = Field(default=10, ge=1)
    profiles: list[Profile] = Field(default_factory=lambda: [Profile()])
    extenders: list[Extender] = Field(default_factory=list)
    # Accepted for the Kubernetes backend; the core does not read them.
    leader_election: dict[str, Any] = Field(default_factory=dict)
    client_connection: dict[str, Any] = Field(default_factory=dict)
    delay_cache_until_active: bool = False
    enable_profiling: bool | None = None
    enable_contention_profiling: bool | None = None
    health_z_bind_address: str | None = Field(default=None, alias="healthzBindAddress")
    metrics_bind_address: str | None = None
    # Set by parse_config: what is accepted but will not take effect (see the module doc).
    _warnings: tuple[Problem, ...] = PrivateAttr(default=())

    @property
    def warnings(self) -> tuple[Problem, ...]:
        return self._warnings

    def with_warnings(self, warnings: tuple[Problem, ...]) -> KubeSchedulerConfiguration:
        out = self.model_copy()
        out._warnings = warnings
        return out
