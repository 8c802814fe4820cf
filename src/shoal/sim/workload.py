"""Workloads: pods that arrive over virtual time, and generated pod groups.

A pod manifest may carry two annotations:

* `sim.shoal.dev/arrival`: seconds after the start at which the pod is created (default 0);
* `sim.shoal.dev/duration`: seconds the pod runs once bound (absent: it runs forever).

A `Workload` document (apiVersion `sim.shoal.dev/v1alpha1`) replicates pod templates
(`spec.pods`) and adds or removes nodes at given times (`spec.nodeEvents`). Every entry is
checked on its own: a bad entry is reported (object, field, how to fix it) and skipped,
the others still run. Random draws (Poisson arrivals, exponential durations) come from a
generator seeded by the run's seed and the group's name, so a group's draws do not
depend on what else is in the workload.
"""

from __future__ import annotations

import difflib
import math
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
import numpy as np

from shoal.api.errors import ManifestError
from shoal.api.manifests import api_version_problem, decode
from shoal.api.objects import Node, Pod, dns_name_problem
from shoal.api.validation import node_problem, pod_problem

__all__ = [
    "ANNOTATION_ARRIVAL",
    "ANNOTATION_DURATION",
    "WORKLOAD_API_VERSION",
    "Exponential",
    "NodeChange",
    "PodGroup",
    "PodSource",
    "Uniform",
    "Workload",
    "arrival_times",
    "durations",
    "expand_workload",
    "pod_source",
]

WORKLOAD_API_VERSION = "sim.shoal.dev/v1alpha1"
SIM_PREFIX = "sim.shoal.dev/"
ANNOTATION_ARRIVAL = "sim.shoal.dev/arrival"
ANNOTATION_DURATION = "sim.shoal.dev/duration"

# Seconds and rates are bounded so that infinity (YAML `.inf`), 1e308 or a rate so small
# its gaps overflow are errors naming the field: an arrival at infinity never comes
# (the run never ended) and a run ending at infinity reports NaN. A billion seconds
# (31 years of virtual time) is far beyond what a simulation run is for.
MAX_SECONDS = 1e9
MIN_RATE = 1e-9  # pods per second: one per 31 years
NonNegative = Annotated[float, msgspec.Meta(ge=0, le=MAX_SECONDS)]
Positive = Annotated[float, msgspec.Meta(gt=0, le=MAX_SECONDS)]
Rate = Annotated[float, msgspec.Meta(ge=MIN_RATE, le=MAX_SECONDS)]


# ---- what the engine consumes -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodSource:
    """A pod due at `time`: a decoded manifest, or a validated template to instantiate."""

    time: float
    duration: float | None
    namespace: str
    name: str
    pod: Pod | None = None
    template: Mapping[str, Any] | None = None
    # "cluster": read from a cluster's current state (shoal snapshot, --from-cluster);
    # "" for the simulated workload.
    origin: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def uid(self) -> str:
        """The scheduler's identity for the pod (metadata.uid, else namespace/name)."""
        if self.pod is not None and self.pod.metadata.uid:
            return self.pod.metadata.uid
        return self.key

    def build(self) -> Pod:
        """A fresh Pod object (the scheduler mutates pods it admits)."""
        if self.pod is not None:
            return self.pod
        assert self.template is not None
        return msgspec.convert(_named(self.template, self.namespace, self.name), Pod)


@dataclass(frozen=True, slots=True)
class NodeChange:
    """A node added (or replaced) or removed at `at` seconds."""

    at: float
    node: Node | None = None
    remove: str = ""


# ---- the Workload document ----------------------------------------------------------


class Exponential(
    msgspec.Struct, tag_field="distribution", tag="exponential", forbid_unknown_fields=True
):
    mean: Positive


class Uniform(msgspec.Struct, tag_field="distribution", tag="uniform", forbid_unknown_fields=True):
    min: NonNegative
    max: NonNegative


Duration = NonNegative | Exponential | Uniform


MAX_GROUP_COUNT = 1_000_000


class PodGroup(msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True):
    """`count` copies of `template`, named `<name>-0`, `<name>-1`, ..."""

    template: dict[str, Any]
    # Bounded so a typo (1e8) is an error naming the field, not minutes of memory
    # growth: a million pods per entry is far beyond what a simulation run is for.
    count: Annotated[int, msgspec.Meta(ge=0, le=MAX_GROUP_COUNT)] = 1
    name: str = ""
    arrival: NonNegative = 0.0  # when the first pod (or the Poisson process) starts
    interval: NonNegative | None = None  # fixed gap between arrivals
    rate: Rate | None = None  # Poisson arrivals: mean pods per second
    duration: Duration | None = None  # absent: the pods run forever


class NodeEventSpec(msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True):
    at: NonNegative
    add: dict[str, Any] | None = None
    remove: str | None = None


class WorkloadSpec(msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True):
    pods: list[Any] = []
    node_events: list[Any] = []


class WorkloadMeta(msgspec.Struct, kw_only=True):
    name: str = ""


class Workload(msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True):
    api_version: str = WORKLOAD_API_VERSION
    kind: str = "Workload"
    metadata: WorkloadMeta = msgspec.field(default_factory=WorkloadMeta)
    spec: WorkloadSpec = msgspec.field(default_factory=WorkloadSpec)


# ---- generators -----------------------------------------------------------------------


def group_rng(seed: int, workload: str, group: str) -> np.random.Generator:
    """A generator for one pod group: stable across runs, independent of other groups."""
    return np.random.default_rng([seed, zlib.crc32(f"{workload}/{group}".encode())])


def arrival_times(group: PodGroup, rng: np.random.Generator) -> list[float]:
    """Fixed `interval` from `arrival`, or a Poisson process of `rate` starting there."""
    if group.rate is not None:
        gaps = rng.exponential(1.0 / group.rate, size=group.count)
        return [group.arrival + float(t) for t in np.cumsum(gaps)]
    step = group.interval or 0.0
    return [group.arrival + i * step for i in range(group.count)]


def durations(group: PodGroup, rng: np.random.Generator) -> list[float | None]:
    d = group.duration
    if d is None:
        return [None] * group.count
    if isinstance(d, Exponential):
        return [float(x) for x in rng.exponential(d.mean, size=group.count)]
    if isinstance(d, Uniform):
        return [float(x) for x in rng.uniform(d.min, d.max, size=group.count)]
    return [float(d)] * group.count


# ---- decoding, with errors that name the entry and the fix ---------------------------


def _named(template: Mapping[str, Any], namespace: str, name: str) -> dict[str, Any]:
    raw = dict(template)
    meta = dict(raw.get("metadata") or {})
    meta["name"] = name
    meta["namespace"] = namespace
    meta.pop("uid", None)
    meta.pop("generateName", None)
    raw["metadata"] = meta
    raw.setdefault("apiVersion", "v1")
    raw.setdefault("kind", "Pod")
    return raw


_UNKNOWN = re.compile(r"unknown field `(?P<field>[^`]+)`(?: - at `\$(?P<at>[^`]*)`)?")


def _structs_at(cls: type[msgspec.Struct], at: str) -> list[msgspec.inspect.StructType]:
    """The struct types a msgspec error path (`.spec`, `.duration`, `.pods[0]`) leads to
    from `cls` (several for a union: the duration distributions)."""
    import msgspec.inspect as mi

    current: list[mi.Type] = [mi.type_info(cls)]
    for name, index in re.findall(r"\.([A-Za-z0-9_]+)|\[(\d+)\]", at):
        following: list[mi.Type] = []
        for info in current:
            members = info.types if isinstance(info, mi.UnionType) else (info,)
            for member in members:
                if name and isinstance(member, mi.StructType):
                    following += [f.type for f in member.fields if f.encode_name == name]
                elif index and isinstance(member, mi.ListType):
                    following.append(member.item_type)
        current = following
    out: list[mi.StructType] = []
    for info in current:
        for member in info.types if isinstance(info, mi.UnionType) else (info,):
            if isinstance(member, mi.StructType):
                out.append(member)
    return out


def _hint(problem: str, cls: type[msgspec.Struct], field: str = "") -> str:
    """Add a fix to msgspec's wording for the mistakes people make most: the fields the
    object at the error's path (in `problem`, or `field` as a dotted path from `cls`)
    has, per kind for a union, or the closest one."""
    match = _UNKNOWN.search(problem)
    if not match:
        return problem
    at = match["at"] or (f".{field}" if field else "")
    structs = _structs_at(cls, at)
    fields = [
        [f.encode_name for f in info.fields if f.encode_name != info.tag_field] for info in structs
    ]
    field = match["field"]
    elsewhere = any(field in group for group in fields)  # a field of another kind
    close = difflib.get_close_matches(field, [f for group in fields for f in group], n=1)
    if close and not elsewhere:
        return f"{problem}; did you mean {close[0]!r}?"
    if len(structs) > 1 and all(info.tag is not None for info in structs):
        per_kind = "; ".join(
            f"{info.tag_field} {info.tag}: {', '.join(group)}"
            for info, group in zip(structs, fields, strict=True)
        )
        return f"{problem}; known fields by {structs[0].tag_field}: {per_kind}"
    known = fields[0] if fields else []
    return f"{problem}; known fields: {', '.join(known)}"


def _at(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(
            f'{value!r} is not a number of seconds; write e.g. "30" or "1.5"'
        ) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{value!r} must be a finite number of seconds >= 0")
    return seconds


def pod_source(raw: Mapping[str, Any], source: str) -> PodSource:
    """A Pod manifest (with optional arrival/duration annotations) -> PodSource."""
    raw = _stringify_sim_annotations(raw)
    pod = decode(raw, Pod, source)
    meta = pod.metadata
    namespace = meta.namespace or "default"
    shown = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
    if not meta.name:
        raise ManifestError("Pod", "", "metadata.name", "a pod needs a name", source)
    times: dict[str, float | None] = {ANNOTATION_ARRIVAL: 0.0, ANNOTATION_DURATION: None}
    for annotation in meta.annotations:
        if annotation.startswith(SIM_PREFIX) and annotation not in times:
            # Our own prefix: a typo would otherwise lose the arrival time without a word.
            close = difflib.get_close_matches(annotation, list(times), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ManifestError(
                "Pod",
                shown,
                f"metadata.annotations[{annotation}]",
                f"not an annotation the simulator reads; {hint}it reads "
                f"{ANNOTATION_ARRIVAL} and {ANNOTATION_DURATION}",
                source,
            )
    for annotation in times:
        value = meta.annotations.get(annotation)
        if value is None:
            continue
        try:
            times[annotation] = _seconds(value)
        except ValueError as err:
            field = f"metadata.annotations[{annotation}]"
            raise ManifestError("Pod", shown, field, str(err), source) from None
    arrival = times[ANNOTATION_ARRIVAL]
    assert arrival is not None
    return PodSource(arrival, times[ANNOTATION_DURATION], namespace, meta.name, pod=pod)


def _stringify_sim_annotations(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """Accept `sim.shoal.dev/duration: 30` unquoted (Kubernetes wants strings)."""
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        return raw
    annotations = meta.get("annotations")
    if not isinstance(annotations, Mapping):
        return raw
    fixed = {
        k: str(v) if k.startswith("sim.shoal.dev/") and isinstance(v, int | float) else v
        for k, v in annotations.items()
    }
    return {**raw, "metadata": {**meta, "annotations": fixed}}


def expand_workload(
    raw: Mapping[str, Any], source: str, seed: int
) -> tuple[list[PodSource], list[NodeChange], list[ManifestError]]:
    """A Workload document -> pods, node changes and the entries that were rejected."""
    name = str((raw.get("metadata") or {}).get("name", "")) if isinstance(raw, Mapping) else ""
    try:
        workload = decode(raw, Workload, source)
    except ManifestError as err:
        problem = _hint(err.problem, Workload, err.field)
        return [], [], [ManifestError("Workload", name, err.field, problem, source)]
    errors: list[ManifestError] = []

    def reject(field: str, problem: str) -> None:
        errors.append(ManifestError("Workload", name, field, problem, source))

    if workload.api_version != WORKLOAD_API_VERSION:
        reject(
            "apiVersion", f"{workload.api_version!r} is not supported; use {WORKLOAD_API_VERSION}"
        )
        return [], [], errors

    pods: list[PodSource] = []
    for i, entry in enumerate(workload.spec.pods):
        where = f"spec.pods[{i}]"
        try:
            group = decode(entry, PodGroup)
        except ManifestError as err:
            reject(_at(where, err.field), _hint(err.problem, PodGroup, err.field))
            continue
        made = _expand_group(group, name, where, seed, reject)
        pods.extend(made)

    changes: list[NodeChange] = []
    for i, entry in enumerate(workload.spec.node_events):
        where = f"spec.nodeEvents[{i}]"
        try:
            event = decode(entry, NodeEventSpec)
        except ManifestError as err:
            reject(_at(where, err.field), _hint(err.problem, NodeEventSpec, err.field))
            continue
        if (event.add is None) == (event.remove is None):
            reject(where, "give exactly one of `add: <Node manifest>` or `remove: <node name>`")
            continue
        if event.remove is not None:
            changes.append(NodeChange(event.at, remove=event.remove))
            continue
        assert event.add is not None
        kind = event.add.get("kind", "Node")
        if kind != "Node":
            reject(_at(where, "add.kind"), f"{kind!r}: `add` takes a Node manifest")
            continue
        if why := api_version_problem(event.add):
            reject(_at(where, "add.apiVersion"), why)
            continue
        try:
            node = decode(event.add, Node)
        except ManifestError as err:
            reject(_at(where, "add", err.field), err.problem)
            continue
        if not node.metadata.name:
            reject(_at(where, "add.metadata.name"), "a node needs a name")
            continue
        if found := (
            ("metadata.name", why)
            if (why := dns_name_problem(node.metadata.name))
            else node_problem(node)
        ):
            reject(_at(where, "add", found[0]), found[1])
            continue
        changes.append(NodeChange(event.at, node=node))
    return pods, changes, errors


def _expand_group(
    group: PodGroup,
    workload: str,
    where: str,
    seed: int,
    reject: Callable[[str, str], None],
) -> list[PodSource]:
    if group.interval is not None and group.rate is not None:
        reject(
            _at(where, "rate"),
            "set either `interval` (fixed gap) or `rate` (Poisson arrivals), not both",
        )
        return []
    if isinstance(group.duration, Uniform) and group.duration.max < group.duration.min:
        reject(_at(where, "duration.max"), "must be at least duration.min")
        return []
    template = group.template
    kind = template.get("kind", "Pod")
    if kind != "Pod":
        reject(_at(where, "template.kind"), f"{kind!r}: a template is a Pod manifest")
        return []
    meta = template.get("metadata") or {}
    if not isinstance(meta, Mapping):
        reject(_at(where, "template.metadata"), "expected a mapping")
        return []
    prefix = group.name or str(meta.get("name", ""))
    if not prefix:
        reject(
            _at(where, "name"),
            "give the group a name (its pods are named <name>-0, <name>-1, ...)",
        )
        return []
    namespace = str(meta.get("namespace") or "default")
    try:
        first = decode(_named(template, namespace, f"{prefix}-0"), Pod)
    except ManifestError as err:
        reject(_at(where, "template", err.field), err.problem)
        return []
    if not first.spec.containers:
        reject(
            _at(where, "template.spec.containers"),
            "a pod needs at least one container (Required value)",
        )
        return []
    if found := pod_problem(first):
        reject(_at(where, "template", found[0]), found[1])
        return []
    rng = group_rng(seed, workload, prefix)
    times = arrival_times(group, rng)
    runs = durations(group, rng)
    return [
        PodSource(t, d, namespace, f"{prefix}-{i}", template=template)
        for i, (t, d) in enumerate(zip(times, runs, strict=True))
    ]
