"""`shoal snapshot`: a live cluster's current state as one file `shoal simulate` reads.

The cluster is read once over a kubeconfig, read-only (list, no watch), as `shoal run`'s
informers list it: every kind the scheduler watches (`shoal.drivers.kube.intake.WATCHED`:
nodes, pods of all namespaces, namespaces, PriorityClasses, PodDisruptionBudgets,
PodGroups, Queues, QueueBindings, NodePools, ElasticQuotas, volumes and storage
classes), which is every kind the simulator loads; CRDs that are not installed are
skipped. Noise is stripped (managedFields, resourceVersion, kubectl's
last-applied-configuration, node images, pod container statuses, the status Shoal writes
on its own objects); what the scheduler reads stays.

The first document is a `ClusterSnapshot` (sim.shoal.dev/v1alpha1) naming where and when
it was taken: `shoal simulate -c snap.yaml` then loads the file as the cluster's current
state: bound pods start on their nodes at t=0, pending pods are pending, Succeeded and
Failed pods are finished and hold nothing, and a Queue (or any object but a pod) of the
same name in the other inputs replaces the cluster's. `shoal simulate --from-cluster`
does the same in memory (`read_documents`).

Exit codes as `shoal get`: 0 done, 1 the cluster could not be read, 2 bad arguments.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from shoal.sim.scenario import FINISHED_PHASES, SNAPSHOT_KIND
from shoal.sim.workload import WORKLOAD_API_VERSION

if TYPE_CHECKING:
    from shoal.drivers.kube.resources import ResourceKind

__all__ = ["ClusterUnreadable", "clean", "read_documents", "register", "snapshot"]

JSON = dict[str, Any]

EXIT_CLUSTER = 1
EXIT_USAGE = 2

# Metadata the API server keeps for itself: no scheduler reads it.
_NOISY_METADATA = ("managedFields", "resourceVersion", "selfLink", "generation")
_NOISY_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})
# Status Shoal (or another scheduler) writes on these: its own bookkeeping, recomputed by
# the simulation; none of it is read back.
_WRITTEN_STATUS = frozenset({"Queue", "QueueBinding", "NodePool", "ElasticQuota", "Namespace"})


class ClusterUnreadable(Exception):
    """The kubeconfig, the connection, authorization or a list failed."""


def clean(kind: str, obj: Mapping[str, Any]) -> JSON:
    """`obj` without what the scheduler does not read (see the module docstring)."""
    # apiVersion and kind first, as kubectl prints them (a list's items come without).
    out: JSON = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    out.update(obj)
    meta = dict(obj.get("metadata") or {})
    for key in _NOISY_METADATA:
        meta.pop(key, None)
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k not in _NOISY_ANNOTATIONS
    }
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    out["metadata"] = meta
    status: Any = obj.get("status")
    if kind == "Pod" and isinstance(status, Mapping):
        status = {k: status[k] for k in ("phase", "nominatedNodeName") if status.get(k)}
    elif kind == "Node" and isinstance(status, Mapping):
        conditions = [
            {k: c[k] for k in ("type", "status", "reason") if c.get(k)}
            for c in status.get("conditions") or []
            if isinstance(c, Mapping)
        ]
        status = {k: status[k] for k in ("capacity", "allocatable") if status.get(k)}
        if conditions:
            status["conditions"] = conditions
    elif kind in _WRITTEN_STATUS:
        status = None
    if kind == "Namespace":
        out.pop("spec", None)  # finalizers
    if status:
        out["status"] = status
    else:
        out.pop("status", None)
    return out


class _Keep:
    """An informer handler that keeps nothing but the objects it could not decode (the
    informer's store holds the rest)."""

    def __init__(self) -> None:
        self.unreadable: list[str] = []

    def on_upsert(self, kind: ResourceKind, old: JSON | None, new: JSON) -> None:
        pass

    def on_delete(self, kind: ResourceKind, old: JSON) -> None:
        pass

    def on_undecodable(self, kind: ResourceKind, stub: JSON, error: str) -> None:
        from shoal.drivers.kube.resources import object_key

        self.unreadable.append(f"{kind.kind} {object_key(stub)} could not be read ({error})")


async def _list_all(kubeconfig: str | None, context: str | None) -> tuple[JSON, list[JSON], _Keep]:
    """(header, objects, handler): every watched kind, listed once, pods last."""
    from shoal import __version__
    from shoal.drivers.kube.client import ClientSettings, connect
    from shoal.drivers.kube.informer import Informer
    from shoal.drivers.kube.intake import WATCHED
    from shoal.drivers.kube.resources import PODS

    connection = await connect(kubeconfig, context=context)
    try:
        settings = ClientSettings(timeout=60.0, user_agent=f"shoal/{__version__} (snapshot)")
        client = connection.client("snapshot", settings)
        keep = _Keep()
        kinds = sorted((w.kind for w in WATCHED), key=lambda k: k.name == PODS.name)
        informers = [Informer(client, kind, keep) for kind in kinds]
        await asyncio.gather(*(i.list_once() for i in informers))
        server = str(connection.configuration.host or "")
    finally:
        await connection.close()
    objects: list[JSON] = []
    counts: dict[str, int] = {}
    for informer in informers:
        kind = informer.kind.kind
        for _, obj in sorted(informer.store.items()):
            objects.append(clean(kind, obj))
            counts[kind] = counts.get(kind, 0) + 1
    spec: JSON = {"context": context or "", "server": server}
    spec["takenAt"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    spec["objects"] = counts
    header: JSON = {
        "apiVersion": WORKLOAD_API_VERSION,
        "kind": SNAPSHOT_KIND,
        "metadata": {"name": "snapshot"},
        "spec": {k: v for k, v in spec.items() if v},
    }
    return header, objects, keep


def read_documents(
    kubeconfig: Path | None, context: str | None, stderr: Console | None = None
) -> list[JSON]:
    """The snapshot's documents (a ClusterSnapshot, then the objects). Objects that could
    not be decoded are left out with a `warning:` line on `stderr`. Raises
    ClusterUnreadable."""
    path = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG") or None
    if path is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise ClusterUnreadable(
            "cannot read the cluster: no kubeconfig; give --kubeconfig FILE or set "
            "$KUBECONFIG (in a pod, its service account is used)"
        )
    try:
        header, objects, keep = asyncio.run(_list_all(path, context))
    except Exception as err:  # kubeconfig unreadable, connection refused, 401/403/5xx
        raise ClusterUnreadable(f"cannot read the cluster: {type(err).__name__}: {err}") from None
    console = stderr or Console(stderr=True, highlight=False)
    for line in keep.unreadable:
        console.print(
            f"[yellow]warning:[/] {escape(line)}; left out of the snapshot", soft_wrap=True
        )
    return [header, *objects]


def describe(documents: list[JSON]) -> str:
    """`3 nodes, 7 pods (4 bound, 2 pending, 1 finished); Namespace 4, Queue 2, ...`"""
    pods = [d for d in documents if d.get("kind") == "Pod"]
    finished = bound = 0
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
            finished += 1
        elif (pod.get("spec") or {}).get("nodeName"):
            bound += 1
    pending = len(pods) - finished - bound
    nodes = sum(1 for d in documents if d.get("kind") == "Node")
    text = (
        f"{nodes} node{'' if nodes == 1 else 's'}, {len(pods)} pod{'' if len(pods) == 1 else 's'}"
        f" ({bound} bound, {pending} pending, {finished} finished)"
    )
    others: dict[str, int] = {}
    for d in documents:
        kind = str(d.get("kind", ""))
        if kind not in ("Node", "Pod", SNAPSHOT_KIND):
            others[kind] = others.get(kind, 0) + 1
    if others:
        text += "; " + ", ".join(f"{kind} {n}" for kind, n in sorted(others.items()))
    return text


def _dump(documents: list[JSON], fmt: str) -> str:
    if fmt == "json":
        listing = {"apiVersion": "v1", "kind": "List", "items": documents}
        return json.dumps(listing, indent=2, ensure_ascii=False) + "\n"
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when there
    return str(yaml.dump_all(documents, Dumper=dumper, sort_keys=False, allow_unicode=True))


def _format(output: str | None, out: Path | None) -> str:
    """yaml or json, from -o or else the --out file's suffix; exits 2 on a mismatch."""
    fmt = (output or "").removeprefix("=") or (
        "json" if out is not None and out.suffix == ".json" else "yaml"
    )
    if fmt not in ("yaml", "json"):
        raise _fail(EXIT_USAGE, f"-o/--output {output!r}: use yaml or json")
    if out is not None and out.suffix == ".jsonl":
        raise _fail(EXIT_USAGE, f"--out {out}: write a .yaml or .json file (not JSON Lines)")
    if out is not None and out.suffix == ".json" and fmt != "json":
        raise _fail(EXIT_USAGE, f"--out {out}: a .json file is read as JSON; use -o json")
    return fmt


def _fail(code: int, message: str) -> typer.Exit:
    Console(stderr=True, highlight=False).print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


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


def snapshot(
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", dir_okay=False, help="Write the snapshot to FILE (else stdout)."),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="Output format: yaml (multi-document; the default) or json (a v1 List); "
            "with --out, .json files are json.",
        ),
    ] = None,
) -> None:
    """Read a live cluster (read-only) into a file `shoal simulate -c FILE` starts from.

    Nodes, pods of all namespaces (bound, pending, finished), PriorityClasses, Queues,
    QueueBindings, NodePools, PodGroups, ...: every kind the scheduler watches, without
    managedFields and other noise (docs/simulator.md).
    """
    fmt = _format(output, out)
    stderr = Console(stderr=True, highlight=False)
    try:
        documents = read_documents(kubeconfig, context, stderr)
    except ClusterUnreadable as err:
        raise _fail(EXIT_CLUSTER, str(err)) from None
    text = _dump(documents, fmt)
    summary = describe(documents)
    if out is None:
        typer.echo(text, nl=False)
        stderr.print(f"Snapshot: {summary}", markup=False, soft_wrap=True)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as err:
        raise _fail(EXIT_USAGE, f"--out {out}: {err.strerror or err}") from None
    Console(highlight=False).print(f"Wrote {out}: {summary}", markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add `shoal snapshot` to the main app."""
    app.command("snapshot")(snapshot)
