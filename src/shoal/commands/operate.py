"""Operations on a live cluster: `shoal queue open|close` and `shoal suspend|resume`.

Both write the object's spec (or an annotation), never its status: the running scheduler
reads the change through its watch and acts on it, and the status it writes back says
what became of it (as `vcctl queue operate` and `kueuectl stop/resume` do).

* `shoal queue close NAME...` sets the Queue's `spec.state: Closed`: its new pods (and
  those of its subtree) wait, gated, until `shoal queue open NAME...`; pods already
  placed keep running. `kubectl get queue` shows STATE Closing until they are gone.
* `shoal suspend podgroup NAME -n NS` annotates the PodGroup `shoal.dev/suspended:
  "true"`: the scheduler evicts its placed members, all together, and holds the rest
  (and any replacement) until `shoal resume podgroup NAME`. It works on the PodGroup
  kinds Shoal reads (scheduler-plugins, Volcano and Kubernetes' own scheduling.k8s.io);
  a gang named only by pod labels has no object to annotate.

Exit codes as `shoal get`: 0 done, 1 the cluster could not be read or written, 2 usage,
3 not found.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from shoal.api.podgroup import SUSPENDED
from shoal.commands.ctl.cluster import context_namespace
from shoal.commands.ctl.options import ContextOpt, KubeconfigOpt
from shoal.commands.ctl.output import EXIT_CLUSTER, EXIT_NOT_FOUND, EXIT_USAGE, fail

__all__ = ["register"]

NamespaceOpt = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        help="The pod group's namespace (default: the kubeconfig context's, else default).",
    ),
]

queue_app = typer.Typer(
    name="queue",
    help="Open or close tenant queues (spec.state) on a live cluster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

_GROUP_KINDS = ("podgroup", "podgroups", "pg", "pgs")


@dataclass(frozen=True)
class _Change:
    """One object's write: where, the merge patch, and what to print when done."""

    path: str
    patch: dict[str, Any]
    done: str  # e.g. "queue.shoal.dev/team closed"


def _run(
    changes: Sequence[_Change] | None,
    kubeconfig: Path | None,
    context: str | None,
    find: Any = None,
) -> None:
    """Apply the changes (or, with `find`, the ones it resolves against the cluster)
    in order; exits 3 for an object that does not exist, 1 for any other API error."""
    from shoal.drivers.kube.client import ApiError

    async def main() -> list[str]:
        from shoal.drivers.kube.client import MERGE_PATCH, ClientSettings, connect

        connection = await connect(str(kubeconfig) if kubeconfig else None, context=context)
        try:
            client = connection.client("shoal-operate", ClientSettings(user_agent="shoal"))
            todo = list(changes) if changes is not None else await find(client)
            out = []
            for change in todo:
                await client.request(
                    "PATCH", change.path, body=change.patch, content_type=MERGE_PATCH
                )
                out.append(change.done)
            return out
        finally:
            await connection.close()

    try:
        done = asyncio.run(main())
    except _NotFound as err:
        raise fail(EXIT_NOT_FOUND, str(err)) from None
    except ApiError as err:
        if err.not_found:
            raise fail(EXIT_NOT_FOUND, _not_found(err)) from None
        raise fail(EXIT_CLUSTER, f"cannot change the cluster: {err}") from None
    except Exception as err:  # kubeconfig unreadable, connection refused
        raise fail(EXIT_CLUSTER, f"cannot reach the cluster: {type(err).__name__}: {err}") from None
    for line in done:
        typer.echo(line)


class _NotFound(Exception):
    pass


def _not_found(err: Any) -> str:
    path: str = err.path
    parts = path.strip("/").split("/")
    if "queues" in parts:
        name = parts[-1]
        return (
            f'queues.shoal.dev "{name}" not found (shoal get queues lists them; the Queue '
            "CRD must be installed: deploy/crds)"
        )
    return f"{path}: not found"


# ---- queues ------------------------------------------------------------------------------


def _queue_state(
    names: list[str], state: str, kubeconfig: Path | None, context: str | None
) -> None:
    from shoal.drivers.kube.resources import QUEUES

    if not names:
        raise fail(EXIT_USAGE, "name the queue(s): shoal queue open|close NAME...")
    verb = "opened" if state == "Open" else "closed"
    changes = [
        _Change(
            QUEUES.path(None, name.removeprefix("queue/").removeprefix("queues/")),
            {"spec": {"state": state}},
            f"queue.shoal.dev/{name.split('/')[-1]} {verb}",
        )
        for name in names
    ]
    _run(changes, kubeconfig, context)


@queue_app.command("close")
def close_queue(
    names: Annotated[list[str], typer.Argument(metavar="NAME...", show_default=False)],
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Close queues (spec.state: Closed): their pods, and their subtrees', that are not
    placed yet wait until the queue opens; placed pods keep running."""
    _queue_state(names, "Closed", kubeconfig, context)


@queue_app.command("open")
def open_queue(
    names: Annotated[list[str], typer.Argument(metavar="NAME...", show_default=False)],
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Open queues (spec.state: Open): their waiting pods are scheduled again."""
    _queue_state(names, "Open", kubeconfig, context)


# ---- pod groups --------------------------------------------------------------------------


def _split(resource: str, names: list[str]) -> list[str]:
    """`podgroup NAME...` or `podgroup/NAME ...` (kubectl's forms) -> names."""
    kind, _, first = resource.partition("/")
    if kind.split(".")[0] not in _GROUP_KINDS:
        raise fail(
            EXIT_USAGE,
            f"cannot suspend {resource!r}: name a pod group (shoal suspend podgroup NAME -n NS)",
        )
    out = ([first] if first else []) + names
    if not out:
        raise fail(EXIT_USAGE, "name the pod group(s): shoal suspend podgroup NAME -n NS")
    return out


def _suspend(
    resource: str,
    names: list[str],
    namespace: str | None,
    kubeconfig: Path | None,
    context: str | None,
    suspended: bool,
) -> None:
    from shoal.drivers.kube.client import ApiError, KubeClient
    from shoal.drivers.kube.resources import PODGROUPS, UPSTREAM_PODGROUPS, VOLCANO_PODGROUPS

    wanted = _split(resource, names)
    verb = "suspended" if suspended else "resumed"
    value: str | None = "true" if suspended else None  # null: the merge patch removes it
    ns = namespace or context_namespace(kubeconfig, context) or "default"

    async def find(client: KubeClient) -> list[_Change]:
        changes = []
        for token in wanted:
            group_ns, _, name = token.rpartition("/") if "/" in token else (ns, "", token)
            found = []
            for kind in (PODGROUPS, VOLCANO_PODGROUPS, UPSTREAM_PODGROUPS):
                try:
                    await client.request("GET", kind.path(group_ns, name))
                except ApiError as err:
                    if err.not_found:  # no such object, or that API is not installed
                        continue
                    raise
                found.append(kind)
            if not found:
                raise _NotFound(
                    f'podgroup "{name}" not found in namespace {group_ns} (looked for '
                    "scheduler-plugins, Volcano and scheduling.k8s.io PodGroups; a gang named "
                    "only by pod labels has no object to suspend)"
                )
            for kind in found:
                changes.append(
                    _Change(
                        kind.path(group_ns, name),
                        {"metadata": {"annotations": {SUSPENDED: value}}},
                        f"podgroup.{kind.group}/{name} {verb}",
                    )
                )
        return changes

    _run(None, kubeconfig, context, find=find)


def suspend(
    resource: Annotated[str, typer.Argument(metavar="podgroup[/NAME]", show_default=False)],
    names: Annotated[
        list[str] | None, typer.Argument(metavar="NAME...", show_default=False)
    ] = None,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Suspend gangs: their placed members are evicted together and the rest (and any
    replacement) wait until `shoal resume`. Annotates the PodGroup shoal.dev/suspended."""
    _suspend(resource, list(names or []), namespace, kubeconfig, context, suspended=True)


def resume(
    resource: Annotated[str, typer.Argument(metavar="podgroup[/NAME]", show_default=False)],
    names: Annotated[
        list[str] | None, typer.Argument(metavar="NAME...", show_default=False)
    ] = None,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Resume suspended gangs: they are scheduled again, as a whole."""
    _suspend(resource, list(names or []), namespace, kubeconfig, context, suspended=False)


def register(app: typer.Typer) -> None:
    """Add `shoal queue open|close` and `shoal suspend|resume` to the main app."""
    app.add_typer(queue_app, name="queue")
    app.command("suspend")(suspend)
    app.command("resume")(resume)
