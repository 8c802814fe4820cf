"""The operator commands: `shoal get queues|podgroups|pools` and `shoal explain NS/POD`.

They read the cluster over a kubeconfig (as kubectl does), build the scheduler's view
of it (`shoal.drivers.kube.clusterview`) and print it as a table, JSON or YAML.

Exit codes, for scripts (docs/operations.md):

* 0: done (for `explain`: the pod is bound, finished, or fits now);
* 1: the cluster could not be read (kubeconfig, connection, authorization, API error);
* 2: bad arguments or a bad scheduler configuration;
* 3: not found (the pod `explain` was asked about);
* 4: `explain`: the pod is pending and cannot be placed now (gated, over quota, no
  node fits, or not Shoal's schedulerName).

Only typer and rich are imported at module level, so `shoal` loads without the `kube`
extra; the client is imported when a command runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
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

EXIT_OK = 0
EXIT_CLUSTER = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_BLOCKED = 4

Output = Literal["table", "json", "yaml"]

get_app = typer.Typer(
    name="get",
    help="Show queues, pod groups or node pools as the scheduler sees them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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
    str, typer.Option("--output", "-o", help="Output format: table, json or yaml.")
]


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def _fail(code: int, message: str) -> typer.Exit:
    _console(stderr=True).print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


def _check_output(output: str) -> Output:
    if output not in ("table", "json", "yaml"):
        raise _fail(EXIT_USAGE, f"--output {output!r}: use table, json or yaml")
    return output  # type: ignore[return-value]


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


def _dump(data: Any, output: Output) -> None:
    if output == "json":
        typer.echo(json.dumps(data, indent=2, sort_keys=False))
    else:
        import yaml

        typer.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False), nl=False)


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


def _table(*columns: str) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


# ---- commands --------------------------------------------------------------------------


@get_app.command("queues")
def get_queues(
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    config: ConfigOpt = None,
    output: OutputOpt = "table",
) -> None:
    """The queue tree: allocated, guaranteed, max and fair share per queue (computed by
    the scheduler's tenancy code from the cluster's Queues, ElasticQuotas and pods)."""
    fmt = _check_output(output)
    data = _view(kubeconfig, context, config).queues()
    if fmt != "table":
        _dump(data, fmt)
        return
    table = _table("QUEUE", "ALLOCATED", "GUARANTEED", "MAX", "FAIR SHARE", "PENDING", "RUNNING")
    for q in data["queues"]:
        indent = "  " * q["depth"] + ("└─ " if q["depth"] else "")
        table.add_row(
            escape(indent + q["name"]),
            _amounts(q["allocated"]),
            _amounts(q["guaranteed"]),
            _amounts(q["max"]),
            _amounts(q["fairShare"]),
            str(q["pendingPods"]),
            str(q["runningPods"]),
        )
    console = _console()
    console.print(table)
    console.print(
        f"cluster capacity: {_amounts(data['capacity'])}; pods naming no queue go to "
        f"{data['defaultQueue']!r}",
        markup=False,
    )


@get_app.command("podgroups")
def get_podgroups(
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Only this namespace.")
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    config: ConfigOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Pod groups (gangs): phase and members (scheduled / running / minMember)."""
    fmt = _check_output(output)
    data = _view(kubeconfig, context, config).podgroups(namespace)
    if fmt != "table":
        _dump(data, fmt)
        return
    table = _table(
        "NAMESPACE", "NAME", "PHASE", "SCHEDULED", "RUNNING", "MIN", "MEMBERS", "QUEUE", "REASON"
    )
    for g in data:
        table.add_row(
            *(
                escape(str(v))
                for v in (
                    g["namespace"],
                    g["name"],
                    g["phase"],
                    g["scheduled"],
                    g["running"],
                    g["minMember"],
                    g["members"],
                    g["queue"],
                    g["reason"],
                )
            )
        )
    _console().print(table)


@get_app.command("pools")
def get_pools(
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    config: ConfigOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Node pools: nodes, capacity and what is requested on them (GPUs included); nodes
    in no NodePool are listed as `(no pool)`."""
    fmt = _check_output(output)
    data = _view(kubeconfig, context, config).pools()
    if fmt != "table":
        _dump(data, fmt)
        return
    from shoal.api.resources import CPU, MEMORY

    table = _table("POOL", "NODES", "CPU", "MEMORY", "GPU", "OTHER", "EXCLUSIVE TO")

    def used(p: dict[str, Any], resource: str) -> str:
        cap = p["capacity"].get(resource)
        if cap is None:
            return "-"
        return f"{_human(resource, p['used'].get(resource, '0'))}/{_human(resource, cap)}"

    for p in data:
        shown = {CPU, MEMORY, "nvidia.com/gpu", "pods", "ephemeral-storage"}
        other = {r: v for r, v in p["capacity"].items() if r not in shown}
        nodes = str(p["nodes"])
        if p["unschedulableNodes"]:
            nodes += f" ({p['unschedulableNodes']} cordoned)"
        table.add_row(
            escape(p["name"]),
            nodes,
            used(p, CPU),
            used(p, MEMORY),
            used(p, "nvidia.com/gpu"),
            escape(" ".join(f"{r}={used(p, r)}" for r in other) or "-"),
            escape(", ".join(p["exclusiveTo"]) or "-"),
        )
    _console().print(table)
    _console().print("used/capacity: requests of the pods bound there / allocatable", markup=False)


def explain(
    pod: Annotated[str, typer.Argument(metavar="NAMESPACE/POD", help="The pod to explain.")],
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    config: ConfigOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Why a pod is (not) scheduled: its queue and quota, its gang, what gates it, and
    which nodes reject it and why (the scheduler's filters run on the cluster as it is
    now). Exit 0: bound or fits now; 3: no such pod; 4: blocked."""
    fmt = _check_output(output)
    namespace, sep, name = pod.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise _fail(EXIT_USAGE, f"{pod!r}: write the pod as NAMESPACE/NAME")
    result = _view(kubeconfig, context, config).explain(namespace, name)
    if not result.found:
        raise _fail(EXIT_NOT_FOUND, str(result.answer["error"]))
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
