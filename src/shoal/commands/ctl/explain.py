"""`shoal explain POD`: why a pod is (not) scheduled, from the scheduler's view."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.markup import escape

from shoal.commands.ctl.cluster import context_namespace, view
from shoal.commands.ctl.options import (
    ConfigOpt,
    ContextOpt,
    KubeconfigOpt,
    OutputOpt,
    check_output,
    unequal,
)
from shoal.commands.ctl.output import EXIT_BLOCKED, EXIT_NOT_FOUND, EXIT_USAGE, console, dump, fail
from shoal.commands.ctl.rows import amounts

__all__ = ["explain", "pod_key"]

_POD_TYPES = ("pod", "pods", "po")


def pod_key(pod: str, namespace: str | None, default: str | None = None) -> tuple[str, str]:
    """`NAMESPACE/POD`, or `POD` / `pod/POD` (kubectl's `-o name`) with -n; without -n,
    `default` (the kubeconfig context's namespace) stands for it."""
    parts = pod.split("/")
    given = namespace if namespace is not None else default
    if given is not None and len(parts) == 2 and parts[0].lower() in _POD_TYPES:
        parts = [given, parts[1]]
    if len(parts) == 1 and given is not None:
        parts = [given, parts[0]]
    if len(parts) != 2 or not all(parts):
        raise fail(
            EXIT_USAGE,
            f"{pod!r}: write the pod as NAMESPACE/NAME, or -n NAMESPACE NAME",
        )
    if namespace is not None and parts[0] != namespace:
        raise fail(
            EXIT_USAGE,
            f"{pod!r} is in namespace {parts[0]!r} but -n says {namespace!r}: drop one",
        )
    return parts[0], parts[1]


def explain(
    pod: Annotated[
        str,
        typer.Argument(
            metavar="POD",
            help="The pod to explain: NAMESPACE/POD, or POD (or pod/POD) with -n or in the "
            "kubeconfig context's namespace.",
        ),
    ],
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="The pod's namespace (default: the kubeconfig context's namespace).",
        ),
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    config: ConfigOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Why a pod is (not) scheduled: its queue and quota, its gang, what gates it, and
    which nodes reject it and why (the scheduler's filters run on the cluster as it is
    now). Exit 0: bound or fits now; 3: no such pod; 4: blocked."""
    fmt = check_output(output)
    if fmt in ("wide", "name"):
        raise fail(EXIT_USAGE, f"--output {output!r}: explain prints table, json or yaml")
    namespace = unequal(namespace)
    default = context_namespace(kubeconfig, context) if namespace is None else None
    ns, name = pod_key(pod, namespace, default)
    cluster = view(kubeconfig, context, config)
    result = cluster.explain(ns, name)
    result.answer["configSource"] = cluster.config_source
    if not result.found:
        message = str(result.answer["error"])
        if namespace is None and default is None and ns.lower() in _POD_TYPES:
            message += f" (for kubectl's {ns}/NAME form, add -n NAMESPACE)"
        raise fail(EXIT_NOT_FOUND, message)
    if fmt != "table":
        dump({**result.answer, "blocked": result.blocked}, fmt)
    else:
        _print_explanation(result.answer, result.blocked)
    if result.blocked:
        raise typer.Exit(EXIT_BLOCKED)


def _print_taints(line: Callable[[str, str], None], part: dict[str, Any]) -> None:
    """The taints the pod's status leaves out ("untolerated taint(s)", as kube)."""
    for taint, count in (part.get("untoleratedTaints") or {}).items():
        line("", f"{count} node(s) with the untolerated taint {taint}")


def _print_explanation(a: dict[str, Any], blocked: bool) -> None:
    out = console()
    line: Callable[[str, str], None] = lambda label, text: out.print(  # noqa: E731
        f"[bold]{label:<10}[/] {escape(text)}", soft_wrap=True
    )
    line("Pod", f"{a['pod']} (schedulerName {a['schedulerName']}, phase {a['phase'] or '?'})")
    verdict = "[red]BLOCKED[/]" if blocked else "[green]OK[/]"
    out.print(f"[bold]{'Answer':<10}[/] {verdict} {escape(a.get('summary', ''))}", soft_wrap=True)
    queue = a.get("queue")
    if queue:
        problem = queue.get("problem") or queue.get("quota") or "within its limits"
        usage = ", ".join(
            f"{key} {amounts(queue[key])}"
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
        for role in gang.get("subGroups") or []:
            line(
                "",
                f"sub-group {role['name']}: {role['members']} members, {role['scheduled']} "
                f"scheduled, {role['running']} running"
                + (f", {role['succeeded']} succeeded" if role.get("succeeded") else "")
                + f" (minMember {role['minMember']})",
            )
        if gang.get("shortSubGroup"):
            line("Short", gang["shortSubGroup"])
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
            _print_taints(line, placement)
    nodes = a.get("nodes")
    if nodes:
        line("Nodes", nodes.get("message", ""))
        _print_taints(line, nodes)
    for i, best in enumerate(a.get("scores") or []):
        parts = ", ".join(f"{name} {score}" for name, score in best["plugins"].items())
        line("Scores" if i == 0 else "", f"{best['node']} {best['total']}: {parts}")
    cond = a.get("condition")
    if cond:
        said = (
            f"PodScheduled={cond.get('status', '')} {cond.get('reason', '')}: "
            f"{cond.get('message', '')}"
        )
        if cond.get("status") == "False" and not blocked:
            # What the scheduler said before the cluster changed: it retries the pod.
            said += " [stale: the pod fits now; the scheduler tries it again]"
        line("Last said", said)
    if a.get("configSource"):
        line("Judged by", f"configuration: {a['configSource']}")
