"""What `shoal get` lists: one row per object of the scheduler's view (with its labels
and API group), the NAME arguments that pick rows, and which rows a command shows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shoal.commands.ctl.kinds import ALIASES, PODGROUP_KIND, QUEUE_KIND, Kind
from shoal.commands.ctl.output import EXIT_USAGE, fail

if TYPE_CHECKING:
    from shoal.api.selectors import Requirement
    from shoal.drivers.kube.clusterview import ClusterView

__all__ = ["Query", "Ref", "Row", "amounts", "human", "parse_ref", "rows_of", "short"]


@dataclass
class Row:
    name: str
    namespace: str  # "" for cluster-scoped kinds
    data: dict[str, Any]  # what -o json prints
    group: str = ""  # API group of its object ("" for a gang named by pod labels only)
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        """Which object it is, across recomputations (a watch's)."""
        return (self.namespace, self.name, self.group)


def _labels(raw: Mapping[str, Any] | None) -> dict[str, str]:
    labels = ((raw or {}).get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


def rows_of(kind: Kind, view: ClusterView) -> tuple[Any, list[Row]]:
    """The view's document for `kind` and its rows."""
    from shoal.drivers.kube.resources import NODE_POOLS

    backend = view.backend
    if kind is QUEUE_KIND:
        doc = view.queues()
        return doc, [
            Row(q["name"], "", q, "shoal.dev", _labels(backend.queue_object(q["name"])))
            for q in doc["queues"]
        ]
    if kind is PODGROUP_KIND:
        rows = []
        groups = view.podgroups(None)
        for g in groups:
            objects = backend.group_objects(f"{g['namespace']}/{g['name']}")
            group, raw = (objects[0][0].group, objects[0][1]) if objects else ("", None)
            rows.append(Row(g["name"], g["namespace"], g, group, _labels(raw)))
        return groups, rows
    informer = backend.informers.get(NODE_POOLS.name)
    store = informer.store if informer is not None else {}
    pools = view.pools()
    return pools, [Row(p["name"], "", p, "shoal.dev", _labels(store.get(p["name"]))) for p in pools]


@dataclass(frozen=True)
class Ref:
    """A NAME argument: NAME, TYPE/NAME, or for namespaced kinds [TYPE/]NAMESPACE/NAME."""

    name: str
    namespace: str | None = None
    group: str | None = None

    def matches(self, row: Row, scope: str | None = None) -> bool:
        """Is `row` this object? Without a namespace of its own, a NAME is looked for in
        `scope` (the namespace of -n or the kubeconfig context; None: every one)."""
        namespace = self.namespace or scope
        return (
            row.name == self.name
            and (namespace is None or row.namespace == namespace)
            and (self.group is None or row.group == self.group)
        )


def parse_ref(kind: Kind, token: str, namespace: str | None) -> Ref:
    """A NAME argument of `kind`; `namespace` is -n's (a NAMESPACE/NAME naming another
    one is exit 2)."""
    parts = token.split("/")
    group = None
    head = ALIASES.get(parts[0].lower()) if len(parts) > 1 else None
    # For a namespaced kind, `a/b` is NAMESPACE/NAME unless `a` is one of its own names.
    if head is not None and not (kind.namespaced and len(parts) == 2 and head[0] is not kind):
        other, group = head
        if other is not kind:
            raise fail(
                EXIT_USAGE,
                f"{token!r} is a {other.singular}, not a {kind.singular}: one resource type "
                f"per command (shoal get {other.command} ...)",
            )
        parts = parts[1:]
    forms = f"NAME or {kind.singular}/NAME" + (" or NAMESPACE/NAME" if kind.namespaced else "")
    if not all(parts) or len(parts) > (2 if kind.namespaced else 1):
        raise fail(EXIT_USAGE, f"{token!r}: write a {kind.singular} as {forms}")
    if len(parts) == 1:
        return Ref(parts[0], None, group)
    if namespace is not None and parts[0] != namespace:
        raise fail(
            EXIT_USAGE,
            f"{token!r} is in namespace {parts[0]!r} but -n says {namespace!r}: drop one",
        )
    return Ref(parts[1], parts[0], group)


@dataclass(frozen=True)
class Query:
    """Which rows of a kind a `shoal get` shows."""

    kind: Kind
    group: str | None = None  # the API group a group-qualified resource name named
    refs: tuple[Ref, ...] = ()  # NAME arguments, in the order given
    scope: str | None = None  # the namespace (-n, else the kubeconfig context's); None: all
    requirements: tuple[Requirement, ...] | None = None  # -l

    @property
    def filtered(self) -> bool:
        """By NAME or selector (a queue table is then no tree)."""
        return bool(self.refs or self.requirements)

    @property
    def single(self) -> bool:
        """One NAME in one namespace: one object, as kubectl prints it (else a list)."""
        if len(self.refs) != 1:
            return False
        return not self.kind.namespaced or bool(self.refs[0].namespace or self.scope)

    def select(self, every: Sequence[Row]) -> tuple[list[Row], list[Ref]]:
        """The rows shown, in order (the NAMEs' order when given), and the NAMEs that
        match none."""
        scope, group = self.scope, self.group
        rows = [
            r
            for r in every
            if (scope is None or self.refs or r.namespace == scope) and group in (None, r.group)
        ]
        if self.requirements is not None:
            from shoal.api.selectors import key_matches

            requirements = self.requirements
            rows = [r for r in rows if key_matches(requirements, r.labels)]
        missing: list[Ref] = []
        if self.refs:
            chosen: list[Row] = []
            for ref in self.refs:
                found = [
                    r for r in rows if ref.matches(r, scope) and all(r is not c for c in chosen)
                ]
                if not found and not any(ref.matches(c, scope) for c in chosen):
                    missing.append(ref)
                chosen += found
            rows = chosen
        return rows, missing


# ---- human-readable amounts ------------------------------------------------------------


def human(resource: str, text: str) -> str:
    """A quantity as people read it (`shoal.api.resources.format_amount`): "1500m" cpu ->
    "1.5"; "1600m" nvidia.com/gpu -> "1.6"; memory in binary units ("4Gi"); counts as
    they are."""
    from shoal.api.resources import format_amount, parse_quota_list

    try:
        amount = parse_quota_list({resource: text}).get(resource, 0)
    except ValueError:
        return text
    return format_amount(resource, amount)


def amounts(values: Mapping[str, str], resources: list[str] | None = None) -> str:
    keys = resources if resources is not None else sorted(values)
    parts = [f"{short(r)}={human(r, values[r])}" for r in keys if r in values]
    return " ".join(parts) or "-"


def short(resource: str) -> str:
    return "gpu" if resource == "nvidia.com/gpu" else resource
