"""`shoal get RESOURCE`: the resource group (kubectl's names, options before or after the
resource), one command per kind built by one factory, and what they all do."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from typer.core import TyperGroup

from shoal.commands.ctl.cluster import context_namespace, view
from shoal.commands.ctl.kinds import (
    ALIASES,
    NO_POOL,
    PODGROUP_KIND,
    POOL_KIND,
    QUEUE_KIND,
    Kind,
    accepted_names,
)
from shoal.commands.ctl.options import (
    VALUE_OPTIONS,
    AllNamespacesOpt,
    ConfigOpt,
    ContextOpt,
    KubeconfigOpt,
    LeaseNamespaceOpt,
    NamesArg,
    NamespaceOpt,
    OutputOpt,
    OutputWatchEventsOpt,
    SelectorOpt,
    ShowLabelsOpt,
    WatchOnlyOpt,
    WatchOpt,
    check_output,
    unequal,
)
from shoal.commands.ctl.output import EXIT_NOT_FOUND, EXIT_USAGE, dump, fail
from shoal.commands.ctl.rows import Query, parse_ref, rows_of
from shoal.commands.ctl.selectors import SELECTOR_FORMS, parse_selector
from shoal.commands.ctl.tables import not_found, nothing_found, object_name, print_table

if TYPE_CHECKING:
    from typer._click.core import Command, Context  # typer's own click

__all__ = ["GetArgs", "get_app", "run_get"]

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
            i += 2 if arg in VALUE_OPTIONS else 1
        else:
            if args and "--help" not in args and not ctx.resilient_parsing:
                raise fail(
                    EXIT_USAGE,
                    f"name the resource type to get: shoal get RESOURCE, one of {accepted_names()}",
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
            raise fail(
                EXIT_USAGE,
                f"unknown resource type {resource!r}: shoal get shows {accepted_names()}",
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


@dataclass(frozen=True)
class GetArgs:
    """The arguments every `shoal get RESOURCE` takes, as given."""

    names: list[str] | None = None
    namespace: str | None = None
    all_namespaces: bool = False
    selector: str | None = None
    output: str = "table"
    show_labels: bool = False
    watch: bool = False
    watch_only: bool = False
    output_watch_events: bool = False
    kubeconfig: Path | None = None
    context: str | None = None
    config: Path | None = None


def _query(kind: Kind, group: str | None, args: GetArgs) -> Query:
    """Which rows to show; exits 2 on arguments that cannot be read."""
    names = args.names or []
    namespace, selector = unequal(args.namespace), unequal(args.selector)
    if names and selector is not None:
        raise fail(EXIT_USAGE, "NAME arguments and -l/--selector cannot be used together: drop one")
    requirements = None
    if selector is not None:
        try:
            requirements = parse_selector(selector)
        except ValueError as err:
            raise fail(
                EXIT_USAGE, f"-l {selector!r}: {err}; write {SELECTOR_FORMS}, comma-separated"
            ) from None
    scope = None
    if kind.namespaced and not args.all_namespaces:
        # kubectl's default namespace: the kubeconfig context's, when it names one.
        scope = (
            namespace if namespace is not None else context_namespace(args.kubeconfig, args.context)
        )
    given = namespace if kind.namespaced and not args.all_namespaces else None
    refs = tuple(parse_ref(kind, token, given) for token in names)
    return Query(kind, group, refs, scope, requirements)


def run_get(kind: Kind, group: str | None, args: GetArgs) -> None:
    """What every `shoal get RESOURCE` does, for its kind."""
    fmt = check_output(args.output)
    query = _query(kind, group, args)
    if args.watch or args.watch_only:
        from shoal.commands.ctl.watch import follow

        follow(
            query,
            fmt,
            args.show_labels,
            watch_only=args.watch_only,
            events=args.output_watch_events,
            kubeconfig=args.kubeconfig,
            context=args.context,
            config=args.config,
        )
        return
    doc, every = rows_of(kind, view(args.kubeconfig, args.context, args.config))
    rows, missing = query.select(every)
    if fmt in ("json", "yaml"):
        if query.single:
            if rows:
                dump(rows[0].data, fmt)
        elif kind is QUEUE_KIND:
            dump({**doc, "queues": [r.data for r in rows]}, fmt)
        else:
            dump([r.data for r in rows], fmt)
    elif not rows:
        if not query.refs:
            nothing_found(query.scope)
    elif fmt == "name":
        for row in rows:
            if not (kind is POOL_KIND and row.name == NO_POOL):  # not an object
                typer.echo(object_name(kind, row))
    else:
        print_table(kind, rows, doc, fmt == "wide", not query.filtered, args.show_labels)
    if missing:
        not_found(query, missing, every)
        raise typer.Exit(EXIT_NOT_FOUND)


# ---- the commands, one per kind ---------------------------------------------------------

# Where each option goes in a command's --help: pod groups take a namespace first;
# queues and pools list -n and -A after the rest (they ignore them).
_NAMESPACE_OPTIONS = ("namespace", "all_namespaces")


def _get_command(kind: Kind, doc: str) -> Callable[..., None]:
    """`shoal get KIND`: the same options for every kind, documented by `doc`."""

    def command(
        ctx: typer.Context,
        names: NamesArg = None,
        namespace: NamespaceOpt = None,
        all_namespaces: AllNamespacesOpt = False,
        selector: SelectorOpt = None,
        output: OutputOpt = "table",
        show_labels: ShowLabelsOpt = False,
        watch: WatchOpt = False,
        watch_only: WatchOnlyOpt = False,
        output_watch_events: OutputWatchEventsOpt = False,
        kubeconfig: KubeconfigOpt = None,
        context: ContextOpt = None,
        config: ConfigOpt = None,
    ) -> None:
        args = GetArgs(
            names,
            namespace,
            all_namespaces,
            selector,
            output,
            show_labels,
            watch,
            watch_only,
            output_watch_events,
            kubeconfig,
            context,
            config,
        )
        run_get(kind, ctx.meta.get(_GROUP_META), args)

    command.__name__ = command.__qualname__ = f"get_{kind.command}"
    command.__doc__ = doc
    if not kind.namespaced:
        signature = inspect.signature(command, eval_str=True)
        params = list(signature.parameters.values())
        moved = [p for p in params if p.name in _NAMESPACE_OPTIONS]
        rest = [p for p in params if p.name not in _NAMESPACE_OPTIONS]
        at = next(i for i, p in enumerate(rest) if p.name == "kubeconfig")
        command.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*rest[:at], *moved, *rest[at:]]
        )
    return command


get_app.command("queues")(
    _get_command(
        QUEUE_KIND,
        """The queue tree: allocated, guaranteed, max and fair share per queue (computed by
    the scheduler's tenancy code from the cluster's Queues, ElasticQuotas and pods).

    Also named: queue, q, sq, queues.shoal.dev.""",
    )
)
get_app.command("podgroups")(
    _get_command(
        PODGROUP_KIND,
        """Pod groups (gangs): phase and members (scheduled / running / minMember), in the
    kubeconfig context's namespace, or every namespace when it names none, unless -n or
    -A says otherwise.

    Also named: podgroup, pg, pgs, podgroups.scheduling.x-k8s.io (and the same in the
    scheduling.sigs.k8s.io and scheduling.volcano.sh groups: their PodGroups only).""",
    )
)
get_app.command("pools")(
    _get_command(
        POOL_KIND,
        """Node pools: nodes, capacity and what is requested on them (GPUs included); nodes
    in no NodePool are listed as `(no pool)`.

    Also named: pool, nodepools, nodepool, np, nodepools.shoal.dev.""",
    )
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
    from shoal.commands.ctl.shards import show_shards

    fmt = check_output(output)
    if fmt == "name":
        raise fail(EXIT_USAGE, f"--output {output!r}: shards prints table, wide, json or yaml")
    show_shards(unequal(namespace) or "kube-system", fmt, kubeconfig, context)
