"""The operator commands: `shoal get queues|podgroups|pools|shards` and `shoal explain NS/POD`.

They read the cluster over a kubeconfig (as kubectl does), build the scheduler's view
of it (`shoal.drivers.kube.clusterview`) and print it as a table, JSON or YAML.
`shoal get shards` reads the node-shard Leases of the running replicas instead
(`shoal.commands.ctl_shards`).

kubectl's habits work (docs/operations.md): singular, plural, short and group-qualified
resource names (`get queue`, `get q`, `get pg`, `get nodepools`, `get queues.shoal.dev`)
and `TYPE/NAME` arguments; NAME arguments (`get queues team`); `-n NAMESPACE` and
`-A/--all-namespaces`; `-l/--selector` on the objects' labels; `-o wide` and `-o name`;
`--show-labels`; options before the resource (`get -n ml pg`); `explain -n NS POD`.

Exit codes, for scripts (docs/operations.md):

* 0: done (for `explain`: the pod is bound, finished, or fits now);
* 1: the cluster could not be read (kubeconfig, connection, authorization, API error);
* 2: bad arguments or a bad scheduler configuration;
* 3: not found (the pod `explain` was asked about, a NAME given to `get`);
* 4: `explain`: the pod is pending and cannot be placed now (gated, over quota, no
  node fits, or not Shoal's schedulerName).

Only typer and rich are imported at module level, so `shoal` loads without the `kube`
extra; the client is imported when a command runs.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperGroup

from shoal.commands.ctl_output import (
    EXIT_BLOCKED,
    EXIT_CLUSTER,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    OUTPUTS,
    Output,
)
from shoal.commands.ctl_output import console as _console
from shoal.commands.ctl_output import dump as _dump
from shoal.commands.ctl_output import fail as _fail
from shoal.commands.ctl_output import table as _table
from shoal.commands.ctl_output import table_console as _table_console

if TYPE_CHECKING:
    from typer._click.core import Command, Context  # typer's own click

    from shoal.api.selectors import Requirement
    from shoal.drivers.kube.clusterview import ClusterView

__all__ = [
    "EXIT_BLOCKED",
    "EXIT_CLUSTER",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "get_app",
    "register",
]

NO_POOL = "(no pool)"  # clusterview's row of the nodes in no NodePool


# ---- resource names, as kubectl accepts them ---------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A resource `shoal get` shows, and the names it answers to."""

    command: str  # shoal get's canonical name (its subcommand)
    resource: str  # kubectl's plural, as in NotFound errors
    singular: str  # kubectl's singular, as in `-o name`
    groups: tuple[str, ...]  # API groups it is read from (group-qualified names)
    short: tuple[str, ...]  # other names: the CRD's shortNames and habits
    namespaced: bool

    @property
    def names(self) -> tuple[str, ...]:
        """Every name it answers to, canonical first (without the group-qualified)."""
        plain = (self.command, self.resource, self.singular, *self.short)
        return tuple(dict.fromkeys(plain))


QUEUE_KIND = Kind("queues", "queues", "queue", ("shoal.dev",), ("q", "sq"), False)
PODGROUP_KIND = Kind(
    "podgroups",
    "podgroups",
    "podgroup",
    ("scheduling.x-k8s.io", "scheduling.sigs.k8s.io", "scheduling.volcano.sh"),
    ("pg", "pgs"),
    True,
)
POOL_KIND = Kind("pools", "nodepools", "nodepool", ("shoal.dev",), ("pool", "np"), False)
SHARD_KIND = Kind("shards", "shards", "shard", (), (), False)  # Leases, not an API resource
KINDS = (QUEUE_KIND, PODGROUP_KIND, POOL_KIND, SHARD_KIND)


def _aliases() -> dict[str, tuple[Kind, str | None]]:
    """name -> (kind, the API group it names, None for any)."""
    out: dict[str, tuple[Kind, str | None]] = {}
    for kind in KINDS:
        for name in kind.names:
            out[name] = (kind, None)
        for group in kind.groups:
            for name in (kind.resource, kind.singular):
                out[f"{name}.{group}"] = (kind, group)
    return out


ALIASES = _aliases()


def _accepted_names() -> str:
    kinds = "; ".join(f"{k.command} ({', '.join(k.names[1:])})" for k in KINDS)
    return (
        f"{kinds}; or group-qualified, as queues.shoal.dev, podgroups.scheduling.x-k8s.io, "
        "nodepools.shoal.dev; or TYPE/NAME, as queue/team"
    )


# Options that take a value, for moving the resource before them (`get -n ml pg`).
_VALUE_OPTIONS = frozenset(
    {"-n", "--namespace", "-o", "--output", "-l", "--selector"}
    | {"--kubeconfig", "--context", "--config"}
)
_GROUP_META = "shoal.get.group"  # the API group a group-qualified resource name named


class _ResourceGroup(TyperGroup):
    """`shoal get RESOURCE ...`: RESOURCE by any name kubectl would accept, options
    before it or after it; an unknown name is an error listing the accepted ones."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--" or not arg.startswith("-") or arg == "-":
                if arg != "--" and i:
                    args = [arg, *args[:i], *args[i + 1 :]]
                break
            i += 2 if arg in _VALUE_OPTIONS else 1
        else:
            if args and "--help" not in args and not ctx.resilient_parsing:
                raise _fail(
                    EXIT_USAGE,
                    f"name the resource type to get: shoal get RESOURCE, one of "
                    f"{_accepted_names()}",
                )
        return super().parse_args(ctx, args)

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        token = args[0]
        resource, slash, _ = token.partition("/")
        found = ALIASES.get(resource.lower())
        if found is None:
            if ctx.resilient_parsing or resource.startswith("-"):
                return super().resolve_command(ctx, args)
            raise _fail(
                EXIT_USAGE,
                f"unknown resource type {resource!r}: shoal get shows {_accepted_names()}",
            )
        kind, group = found
        command = self.get_command(ctx, kind.command)
        if group is not None and not slash:
            ctx.meta[_GROUP_META] = group
        # TYPE/NAME: the command reads the name (and its TYPE) from the argument.
        rest = [token, *args[1:]] if slash else args[1:]
        return kind.command, command, rest


get_app = typer.Typer(
    name="get",
    cls=_ResourceGroup,
    help="Show queues, pod groups or node pools as the scheduler sees them, or which "
    "replica holds which node shards.\n\n"
    "RESOURCE may be written as kubectl accepts it: queues (queue, q, sq), podgroups "
    "(podgroup, pg, pgs), pools (pool, nodepools, nodepool, np), shards (shard), "
    "group-qualified (queues.shoal.dev) or TYPE/NAME (queue/team).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    subcommand_metavar="RESOURCE [NAME]...",
)

KubeconfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        envvar="KUBECONFIG",
        dir_okay=False,
        help="Kubeconfig file (default: $KUBECONFIG, else the pod's service account).",
    ),
]
ContextOpt = Annotated[str | None, typer.Option(help="The kubeconfig context to use.")]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        exists=True,
        dir_okay=False,
        help="The scheduler's KubeSchedulerConfiguration (its profiles and plugins; "
        "default: `shoal run`'s default).",
    ),
]
OutputOpt = Annotated[
    str,
    typer.Option(
        "--output",
        "-o",
        help="Output format: table, wide (more columns), name (TYPE/NAME lines), json or yaml.",
    ),
]
NamesArg = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="NAME",
        show_default=False,
        help="Only these (NAME or TYPE/NAME; for pod groups also NAMESPACE/NAME).",
    ),
]
SelectorOpt = Annotated[
    str | None,
    typer.Option(
        "--selector",
        "-l",
        help="Label selector on the objects' labels: key=value, key!=value, key, !key, "
        "key in (a,b), key notin (a,b); comma-separated, all must hold.",
    ),
]
ShowLabelsOpt = Annotated[
    bool, typer.Option("--show-labels", help="Add a LABELS column (the objects' labels).")
]
AllNamespacesOpt = Annotated[
    bool,
    typer.Option(
        "--all-namespaces",
        "-A",
        help="Every namespace (the default for pod groups; ignored for cluster-scoped "
        "resources, as kubectl does).",
    ),
]
NamespaceOpt = Annotated[
    str | None,
    typer.Option(
        "--namespace", "-n", help="Only this namespace (ignored for cluster-scoped resources)."
    ),
]
LeaseNamespaceOpt = Annotated[
    str,
    typer.Option(
        "--namespace",
        "-n",
        help="The namespace of the shard map and member Leases: `shoal run`'s "
        "leader-election namespace (leaderElection.resourceNamespace, else $POD_NAMESPACE).",
    ),
]


def _unequal(value: str | None) -> str | None:
    """`-n=ml` as kubectl takes it (click reads the value `=ml`)."""
    return value.removeprefix("=") if value is not None else None


def _check_output(output: str) -> Output:
    fmt = output.removeprefix("=")  # `-o=json`, as kubectl takes it
    for known in OUTPUTS:
        if fmt == known:
            return known
    raise _fail(EXIT_USAGE, f"--output {output!r}: use table, wide, name, json or yaml")


def _view(kubeconfig: Path | None, context: str | None, config: Path | None) -> ClusterView:
    """The cluster, listed once; exits 2 on a bad configuration, 1 if it cannot be read."""
    from shoal.config import ConfigError, default_config, load_config
    from shoal.scheduler import default_registry

    try:
        loaded = (
            default_config() if config is None else load_config(config, registry=default_registry())
        )
    except ConfigError as err:
        raise _fail(EXIT_USAGE, str(err)) from None
    # What the scheduler would report about the cluster's objects (an invalid Queue, a
    # pod that cannot be read) goes to stderr, one `warning:` line each.
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("warning: %(message)s"))
    kube_log = logging.getLogger("shoal.kube")
    kube_log.addHandler(handler)
    propagate, kube_log.propagate = kube_log.propagate, False
    try:
        return asyncio.run(_load(loaded, kubeconfig, context))
    except Exception as err:  # kubeconfig unreadable, connection refused, 401/403/5xx
        raise _fail(EXIT_CLUSTER, f"cannot read the cluster: {type(err).__name__}: {err}") from None
    finally:
        kube_log.removeHandler(handler)
        kube_log.propagate = propagate


async def _load(config: Any, kubeconfig: Path | None, context: str | None) -> ClusterView:
    from shoal.drivers.kube.client import connect
    from shoal.drivers.kube.clusterview import load_view

    connection = await connect(str(kubeconfig) if kubeconfig else None, context=context)
    try:
        return await load_view(config, connection)
    finally:
        await connection.close()


# ---- human-readable amounts ------------------------------------------------------------


def _human(resource: str, text: str) -> str:
    """ "1500m" cpu -> "1.5"; "1600m" nvidia.com/gpu -> "1.6"; bytes of memory -> "4Gi";
    counts as they are."""
    from shoal.api.resources import MEMORY

    if text.endswith("m"):
        milli = int(text.removesuffix("m"))
        return f"{milli / 1000:g}"
    if resource == MEMORY or resource.startswith(("hugepages-", "ephemeral-storage")):
        value = int(text)
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= size:
                scaled = value / size
                return f"{scaled:.0f}{unit}" if scaled >= 100 else f"{scaled:.3g}{unit}"
        return str(value)
    return text


def _amounts(values: Mapping[str, str], resources: list[str] | None = None) -> str:
    keys = resources if resources is not None else sorted(values)
    parts = [f"{_short(r)}={_human(r, values[r])}" for r in keys if r in values]
    return " ".join(parts) or "-"


def _short(resource: str) -> str:
    return "gpu" if resource == "nvidia.com/gpu" else resource


# ---- label selectors -------------------------------------------------------------------

_SET_TERM = re.compile(r"^(!?)([^\s!=(),]+)\s+(in|notin)\s*\(([^()]*)\)$")
_EQ_TERM = re.compile(r"^([^\s!=(),]+)\s*(==|!=|=)\s*([^\s!=(),]*)$")
_KEY_TERM = re.compile(r"^(!?)\s*([^\s!=(),]+)$")
SELECTOR_FORMS = "key=value, key==value, key!=value, key, !key, key in (a,b), key notin (a,b)"


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """kubectl's `-l` syntax as requirements (`shoal.api.selectors`); ValueError names
    the term that is not one of `SELECTOR_FORMS`. An empty selector selects everything."""
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    requirements: list[Requirement] = []
    for raw in terms:
        term = raw.strip()
        if not term and len(terms) == 1:
            break
        if match := _SET_TERM.match(term):
            if match[1]:
                raise ValueError(f"{term!r}: '!' goes before a key alone (!key)")
            values = tuple(sorted({v.strip() for v in match[4].split(",")}))
            if "" in values:
                raise ValueError(f"{term!r}: a value in the list is empty")
            op = "In" if match[3] == "in" else "NotIn"
            requirements.append((match[2], op, values))
        elif match := _EQ_TERM.match(term):
            op = "NotIn" if match[2] == "!=" else "In"
            requirements.append((match[1], op, (match[3],)))
        elif match := _KEY_TERM.match(term):
            requirements.append((match[2], "DoesNotExist" if match[1] else "Exists", ()))
        else:
            raise ValueError(f"cannot parse {term!r}")
    return tuple(requirements)


# ---- rows: what `get` lists, with the labels and API group of each object ----------------


@dataclass
class Row:
    name: str
    namespace: str  # "" for cluster-scoped kinds
    data: dict[str, Any]  # what -o json prints
    group: str = ""  # API group of its object ("" for a gang named by pod labels only)
    labels: dict[str, str] = field(default_factory=dict)


def _labels(raw: Mapping[str, Any] | None) -> dict[str, str]:
    labels = ((raw or {}).get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


def _rows(kind: Kind, view: ClusterView) -> tuple[Any, list[Row]]:
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

    def matches(self, row: Row) -> bool:
        return (
            row.name == self.name
            and (self.namespace is None or row.namespace == self.namespace)
            and (self.group is None or row.group == self.group)
        )


def _ref(kind: Kind, token: str, namespace: str | None) -> Ref:
    parts = token.split("/")
    group = None
    head = ALIASES.get(parts[0].lower()) if len(parts) > 1 else None
    # For a namespaced kind, `a/b` is NAMESPACE/NAME unless `a` is one of its own names.
    if head is not None and not (kind.namespaced and len(parts) == 2 and head[0] is not kind):
        other, group = head
        if other is not kind:
            raise _fail(
                EXIT_USAGE,
                f"{token!r} is a {other.singular}, not a {kind.singular}: one resource type "
                f"per command (shoal get {other.command} ...)",
            )
        parts = parts[1:]
    forms = f"NAME or {kind.singular}/NAME" + (" or NAMESPACE/NAME" if kind.namespaced else "")
    if not all(parts) or len(parts) > (2 if kind.namespaced else 1):
        raise _fail(EXIT_USAGE, f"{token!r}: write a {kind.singular} as {forms}")
    if len(parts) == 1:
        return Ref(parts[0], None, group)
    if namespace is not None and parts[0] != namespace:
        raise _fail(
            EXIT_USAGE,
            f"{token!r} is in namespace {parts[0]!r} but -n says {namespace!r}: drop one",
        )
    return Ref(parts[1], parts[0], group)


# ---- printing ----------------------------------------------------------------------------

Column = tuple[str, Callable[[Row], str]]


def _queue_columns(wide: bool, tree: bool) -> list[Column]:
    def name(r: Row) -> str:
        depth = r.data["depth"] if tree else 0
        return "  " * depth + ("└─ " if depth else "") + r.name

    def share(r: Row) -> str:
        s = r.data.get("dominantShare") or {}
        return "/".join(f"{float(s.get(k, 0.0)):.0%}" for k in ("allocated", "fairShare"))

    columns: list[Column] = [
        ("QUEUE", name),
        ("ALLOCATED", lambda r: _amounts(r.data["allocated"])),
        ("GUARANTEED", lambda r: _amounts(r.data["guaranteed"])),
        ("MAX", lambda r: _amounts(r.data["max"])),
        ("FAIR SHARE", lambda r: _amounts(r.data["fairShare"])),
        ("PENDING", lambda r: str(r.data["pendingPods"])),
        ("RUNNING", lambda r: str(r.data["runningPods"])),
    ]
    if wide:
        columns += [
            ("PARENT", lambda r: r.data["parent"] or "-"),
            ("WEIGHT", lambda r: f"{r.data['weight']:g}"),
            ("DOMINANT SHARE", share),
        ]
    return columns


def _podgroup_columns(wide: bool) -> list[Column]:
    def get(key: str) -> Callable[[Row], str]:
        return lambda r: str(r.data[key])

    columns: list[Column] = [
        ("NAMESPACE", get("namespace")),
        ("NAME", get("name")),
        ("PHASE", get("phase")),
        ("SCHEDULED", get("scheduled")),
        ("RUNNING", get("running")),
        ("MIN", get("minMember")),
        ("MEMBERS", get("members")),
        ("QUEUE", get("queue")),
        ("REASON", get("reason")),
    ]
    if wide:
        columns += [
            ("SUCCEEDED", get("succeeded")),
            ("FAILED", get("failed")),
            ("SOURCE", lambda r: r.data["source"] or "-"),
            ("API", lambda r: r.group or "-"),
        ]
    return columns


def _pool_columns(wide: bool) -> list[Column]:
    from shoal.api.resources import CPU, MEMORY

    shown = {CPU, MEMORY, "nvidia.com/gpu", "pods", "ephemeral-storage"}

    def used(r: Row, resource: str) -> str:
        cap = r.data["capacity"].get(resource)
        if cap is None:
            return "-"
        return f"{_human(resource, r.data['used'].get(resource, '0'))}/{_human(resource, cap)}"

    def nodes(r: Row) -> str:
        text = str(r.data["nodes"])
        if r.data["unschedulableNodes"]:
            text += f" ({r.data['unschedulableNodes']} cordoned)"
        return text

    def other(r: Row) -> str:
        rest = [res for res in r.data["capacity"] if res not in shown]
        return " ".join(f"{res}={used(r, res)}" for res in rest) or "-"

    columns: list[Column] = [
        ("POOL", lambda r: r.name),
        ("NODES", nodes),
        ("CPU", lambda r: used(r, CPU)),
        ("MEMORY", lambda r: used(r, MEMORY)),
        ("GPU", lambda r: used(r, "nvidia.com/gpu")),
        ("OTHER", other),
        ("EXCLUSIVE TO", lambda r: ", ".join(r.data["exclusiveTo"]) or "-"),
    ]
    if wide:
        columns += [
            ("PODS", lambda r: used(r, "pods")),
            ("EPHEMERAL STORAGE", lambda r: used(r, "ephemeral-storage")),
            ("NODE SELECTOR", lambda r: _label_text(r.data["nodeSelector"], "-")),
        ]
    return columns


def _label_text(labels: Mapping[str, str], empty: str = "<none>") -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or empty


def _print_table(kind: Kind, rows: Sequence[Row], doc: Any, fmt: Output, opts: _Shown) -> None:
    wide = fmt == "wide"
    if kind is QUEUE_KIND:
        columns = _queue_columns(wide, tree=not opts.filtered)
    elif kind is PODGROUP_KIND:
        columns = _podgroup_columns(wide)
    else:
        columns = _pool_columns(wide)
    if opts.show_labels:
        columns.append(("LABELS", lambda r: _label_text(r.labels)))
    table = _table(*(title for title, _ in columns))
    for row in rows:
        table.add_row(*(escape(cell(row)) for _, cell in columns))
    console = _table_console(wide)
    console.print(table)
    if kind is QUEUE_KIND:
        console.print(
            f"cluster capacity: {_amounts(doc['capacity'])}; pods naming no queue go to "
            f"{doc['defaultQueue']!r}",
            markup=False,
        )
    elif kind is POOL_KIND:
        console.print("used/capacity: requests of the pods bound there / allocatable", markup=False)


def _object_name(kind: Kind, row: Row) -> str:
    """kubectl's `-o name`: `queue.shoal.dev/team`; a pod group keeps its namespace
    (`podgroup.scheduling.x-k8s.io/ml/ddp`), `shoal get` reads it back."""
    resource = f"{kind.singular}.{row.group}" if row.group else kind.singular
    return f"{resource}/{row.namespace}/{row.name}" if row.namespace else f"{resource}/{row.name}"


@dataclass(frozen=True)
class _Shown:
    filtered: bool  # by NAME or selector (a queue table is then no tree)
    show_labels: bool


def _get(
    kind: Kind,
    group: str | None,
    names: list[str] | None,
    namespace: str | None,
    all_namespaces: bool,
    selector: str | None,
    output: str,
    show_labels: bool,
    kubeconfig: Path | None,
    context: str | None,
    config: Path | None,
) -> None:
    """What every `shoal get RESOURCE` does, for its kind."""
    fmt = _check_output(output)
    names = names or []
    namespace, selector = _unequal(namespace), _unequal(selector)
    if names and selector is not None:
        raise _fail(
            EXIT_USAGE, "NAME arguments and -l/--selector cannot be used together: drop one"
        )
    requirements = None
    if selector is not None:
        try:
            requirements = parse_selector(selector)
        except ValueError as err:
            raise _fail(
                EXIT_USAGE, f"-l {selector!r}: {err}; write {SELECTOR_FORMS}, comma-separated"
            ) from None
    scope = namespace if kind.namespaced and not all_namespaces else None
    refs = [_ref(kind, token, scope) for token in names]
    doc, every = _rows(kind, _view(kubeconfig, context, config))

    rows = [
        r for r in every if (scope is None or r.namespace == scope) and group in (None, r.group)
    ]
    if requirements is not None:
        from shoal.api.selectors import key_matches

        rows = [r for r in rows if key_matches(requirements, r.labels)]
    missing: list[Ref] = []
    if refs:
        chosen: list[Row] = []
        for ref in refs:
            found = [r for r in rows if ref.matches(r) and all(r is not c for c in chosen)]
            if not found and not any(ref.matches(c) for c in chosen):
                missing.append(ref)
            chosen += found
        rows = chosen

    # One NAME in one namespace is one object, as kubectl prints it; else a list.
    single = len(refs) == 1 and (not kind.namespaced or bool(refs[0].namespace or scope))
    if fmt in ("json", "yaml"):
        if single:
            if rows:
                _dump(rows[0].data, fmt)
        elif kind is QUEUE_KIND:
            _dump({**doc, "queues": [r.data for r in rows]}, fmt)
        else:
            _dump([r.data for r in rows], fmt)
    elif not rows:
        if not refs:  # as kubectl says it, on stderr
            where = f" in {scope} namespace" if scope else ""
            _console(stderr=True).print(f"No resources found{where}.", markup=False)
    elif fmt == "name":
        for row in rows:
            if not (kind is POOL_KIND and row.name == NO_POOL):  # not an object
                typer.echo(_object_name(kind, row))
    else:
        _print_table(kind, rows, doc, fmt, _Shown(bool(refs or requirements), show_labels))
    if missing:
        _not_found(kind, missing, every, scope, group)
        raise typer.Exit(EXIT_NOT_FOUND)


def _not_found(
    kind: Kind, missing: list[Ref], every: list[Row], scope: str | None, group: str | None
) -> None:
    """kubectl's NotFound line for each NAME, then what to do about it."""
    console = _console(stderr=True)
    for ref in missing:
        console.print(
            f'Error from server (NotFound): {kind.resource} "{ref.name}" not found',
            markup=False,
            soft_wrap=True,
        )
        hint = _hint(kind, ref, every, scope, group)
        console.print(f"hint: {hint}", markup=False, soft_wrap=True)


def _hint(kind: Kind, ref: Ref, every: list[Row], scope: str | None, group: str | None) -> str:
    named = [r for r in every if r.name == ref.name]
    target = ref.namespace or scope
    here = [r for r in named if target is None or r.namespace == target]
    wanted = ref.group or group
    if wanted and here:  # of another API than the one asked for
        apis = ", ".join(sorted({r.group or "pod labels only" for r in here}))
        return (
            f"{kind.singular} {ref.name} is not of {wanted} but of {apis}: "
            f"`shoal get {kind.command} {ref.name}` shows it"
        )
    if not kind.namespaced or target is None:
        return f"`shoal get {kind.command}` lists them"
    others = sorted({r.namespace for r in named if r.namespace != target})
    if others:
        fix = (
            f"use -n {others[0]} or -A"
            if ref.namespace is None
            else f"write {others[0]}/{ref.name}"
        )
        return f"{kind.singular} {ref.name} is in namespace {', '.join(others)}: {fix}"
    return f"`shoal get {kind.command} -A` lists the {kind.resource} of every namespace"


# ---- commands --------------------------------------------------------------------------


@get_app.command("queues")
def get_queues(
    ctx: typer.Context,
    names: NamesArg = None,
    selector: SelectorOpt = None,
    output: OutputOpt = "table",
    show_labels: ShowLabelsOpt = False,
    namespace: NamespaceOpt = None,
    all_namespaces: AllNamespacesOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    config: ConfigOpt = None,
) -> None:
    """The queue tree: allocated, guaranteed, max and fair share per queue (computed by
    the scheduler's tenancy code from the cluster's Queues, ElasticQuotas and pods).

    Also named: queue, q, sq, queues.shoal.dev."""
    _get(
        QUEUE_KIND,
        ctx.meta.get(_GROUP_META),
        names,
        namespace,
        all_namespaces,
        selector,
        output,
        show_labels,
        kubeconfig,
        context,
        config,
    )


@get_app.command("podgroups")
def get_podgroups(
    ctx: typer.Context,
    names: NamesArg = None,
    namespace: NamespaceOpt = None,
    all_namespaces: AllNamespacesOpt = False,
    selector: SelectorOpt = None,
    output: OutputOpt = "table",
    show_labels: ShowLabelsOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Pod groups (gangs): phase and members (scheduled / running / minMember), in every
    namespace unless -n says one.

    Also named: podgroup, pg, pgs, podgroups.scheduling.x-k8s.io (and the same in the
    scheduling.sigs.k8s.io and scheduling.volcano.sh groups: their PodGroups only)."""
    _get(
        PODGROUP_KIND,
        ctx.meta.get(_GROUP_META),
        names,
        namespace,
        all_namespaces,
        selector,
        output,
        show_labels,
        kubeconfig,
        context,
        config,
    )


@get_app.command("pools")
def get_pools(
    ctx: typer.Context,
    names: NamesArg = None,
    selector: SelectorOpt = None,
    output: OutputOpt = "table",
    show_labels: ShowLabelsOpt = False,
    namespace: NamespaceOpt = None,
    all_namespaces: AllNamespacesOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Node pools: nodes, capacity and what is requested on them (GPUs included); nodes
    in no NodePool are listed as `(no pool)`.

    Also named: pool, nodepools, nodepool, np, nodepools.shoal.dev."""
    _get(
        POOL_KIND,
        ctx.meta.get(_GROUP_META),
        names,
        namespace,
        all_namespaces,
        selector,
        output,
        show_labels,
        kubeconfig,
        context,
        config,
    )


@get_app.command("shards")
def get_shards(
    namespace: LeaseNamespaceOpt = "kube-system",
    output: OutputOpt = "table",
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Node shards: for each `shoal run` replica (member Lease), the shards of the
    shard map it holds, the cluster's nodes in them, its schedulerNames, when it last
    renewed and whether its Lease is live; then the shards held by nobody.

    Also named: shard."""
    from shoal.commands.ctl_shards import show_shards

    fmt = _check_output(output)
    if fmt == "name":
        raise _fail(EXIT_USAGE, f"--output {output!r}: shards prints table, wide, json or yaml")
    show_shards(_unequal(namespace) or "kube-system", fmt, kubeconfig, context)


_POD_TYPES = ("pod", "pods", "po")


def _pod_key(pod: str, namespace: str | None) -> tuple[str, str]:
    """`NAMESPACE/POD`, or `POD` / `pod/POD` (kubectl's `-o name`) with -n."""
    parts = pod.split("/")
    if namespace is not None and len(parts) == 2 and parts[0].lower() in _POD_TYPES:
        parts = [namespace, parts[1]]
    if len(parts) == 1 and namespace is not None:
        parts = [namespace, parts[0]]
    if len(parts) != 2 or not all(parts):
        raise _fail(
            EXIT_USAGE,
            f"{pod!r}: write the pod as NAMESPACE/NAME, or -n NAMESPACE NAME",
        )
    if namespace is not None and parts[0] != namespace:
        raise _fail(
            EXIT_USAGE,
            f"{pod!r} is in namespace {parts[0]!r} but -n says {namespace!r}: drop one",
        )
    return parts[0], parts[1]


def explain(
    pod: Annotated[
        str,
        typer.Argument(
            metavar="POD",
            help="The pod to explain: NAMESPACE/POD, or POD (or pod/POD) with -n.",
        ),
    ],
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="The pod's namespace.")
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    config: ConfigOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Why a pod is (not) scheduled: its queue and quota, its gang, what gates it, and
    which nodes reject it and why (the scheduler's filters run on the cluster as it is
    now). Exit 0: bound or fits now; 3: no such pod; 4: blocked."""
    fmt = _check_output(output)
    if fmt in ("wide", "name"):
        raise _fail(EXIT_USAGE, f"--output {output!r}: explain prints table, json or yaml")
    ns, name = _pod_key(pod, _unequal(namespace))
    result = _view(kubeconfig, context, config).explain(ns, name)
    if not result.found:
        message = str(result.answer["error"])
        if namespace is None and ns.lower() in _POD_TYPES:
            message += f" (for kubectl's {ns}/NAME form, add -n NAMESPACE)"
        raise _fail(EXIT_NOT_FOUND, message)
    if fmt != "table":
        _dump({**result.answer, "blocked": result.blocked}, fmt)
    else:
        _print_explanation(result.answer, result.blocked)
    if result.blocked:
        raise typer.Exit(EXIT_BLOCKED)


def _print_explanation(a: dict[str, Any], blocked: bool) -> None:
    console = _console()
    line: Callable[[str, str], None] = lambda label, text: console.print(  # noqa: E731
        f"[bold]{label:<10}[/] {escape(text)}", soft_wrap=True
    )
    line("Pod", f"{a['pod']} (schedulerName {a['schedulerName']}, phase {a['phase'] or '?'})")
    verdict = "[red]BLOCKED[/]" if blocked else "[green]OK[/]"
    console.print(
        f"[bold]{'Answer':<10}[/] {verdict} {escape(a.get('summary', ''))}", soft_wrap=True
    )
    queue = a.get("queue")
    if queue:
        problem = queue.get("problem") or queue.get("quota") or "within its limits"
        usage = ", ".join(
            f"{key} {_amounts(queue[key])}"
            for key in ("allocated", "guaranteed", "max")
            if queue.get(key)
        )
        line("Queue", f"{queue['name']}: {problem}" + (f" ({usage})" if usage else ""))
    gang = a.get("gang")
    if gang:
        line(
            "Gang",
            f"{gang['name']}: {gang['phase']}, {gang['scheduled']} scheduled of "
            f"{gang['members']} members (minMember {gang['minMember']})"
            + (f"; {gang['reason']}" if gang["reason"] else ""),
        )
    gate = a.get("gate")
    if gate:
        line("Gated", gate["message"])
    placement = a.get("placement")
    if placement:
        if placement["fits"]:
            line("Placement", f"fits on {placement['node']}")
        else:
            line("Placement", placement.get("message", ""))
            for plugin, count in (placement.get("rejectedBy") or {}).items():
                line("", f"{count} node(s) rejected first by {plugin}")
    cond = a.get("condition")
    if cond:
        line(
            "Last said",
            f"PodScheduled={cond.get('status', '')} {cond.get('reason', '')}: "
            f"{cond.get('message', '')}",
        )


def register(app: typer.Typer) -> None:
    """Add `shoal get ...` and `shoal explain` to the main app."""
    app.add_typer(get_app, name="get")
    app.command("explain")(explain)
