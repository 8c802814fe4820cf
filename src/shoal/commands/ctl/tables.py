"""How `shoal get` prints rows: the columns of each kind's table (and of `-o wide`), the
line under the table, kubectl's `-o name`, and kubectl's words for what is not there
(`No resources found.`, NotFound with a hint)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from rich.markup import escape

from shoal.commands.ctl.kinds import PODGROUP_KIND, POOL_KIND, QUEUE_KIND, Kind
from shoal.commands.ctl.output import console, table, table_console
from shoal.commands.ctl.rows import Query, Ref, Row, amounts, human

__all__ = [
    "Column",
    "columns_for",
    "footer",
    "label_text",
    "not_found",
    "nothing_found",
    "object_name",
    "print_table",
]

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
        ("STATE", lambda r: str(r.data.get("state", "Open"))),
        ("ALLOCATED", lambda r: amounts(r.data["allocated"])),
        ("GUARANTEED", lambda r: amounts(r.data["guaranteed"])),
        ("MAX", lambda r: amounts(r.data["max"])),
        ("FAIR SHARE", lambda r: amounts(r.data["fairShare"])),
        ("PENDING", lambda r: str(r.data["pendingPods"])),
        ("BOUND", lambda r: str(r.data.get("boundPods", 0))),
        ("RUNNING", lambda r: str(r.data["runningPods"])),
    ]
    if wide:
        columns += [
            ("PARENT", lambda r: r.data["parent"] or "-"),
            ("WEIGHT", lambda r: f"{r.data['weight']:g}"),
            ("DOMINANT SHARE", share),
            ("MESSAGE", lambda r: str(r.data.get("problem") or "-")),
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
            ("SUB-GROUPS", _sub_groups),
            ("SHORT", lambda r: str(r.data.get("shortSubGroup") or "-")),
            ("SUCCEEDED", get("succeeded")),
            ("FAILED", get("failed")),
            ("SOURCE", lambda r: r.data["source"] or "-"),
            ("API", lambda r: r.group or "-"),
        ]
    return columns


def _sub_groups(r: Row) -> str:
    """A gang's roles as `NAME=SCHEDULED/MIN`, e.g. `driver=1/1,workers=0/4` ("-": none)."""
    roles = r.data.get("subGroups") or []
    return (
        ",".join(f"{role['name']}={role['scheduled']}/{role['minMember']}" for role in roles) or "-"
    )


def _pool_columns(wide: bool) -> list[Column]:
    from shoal.api.resources import CPU, MEMORY

    shown = {CPU, MEMORY, "nvidia.com/gpu", "pods", "ephemeral-storage"}

    def used(r: Row, resource: str) -> str:
        cap = r.data["capacity"].get(resource)
        if cap is None:
            return "-"
        return f"{human(resource, r.data['used'].get(resource, '0'))}/{human(resource, cap)}"

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
            ("NODE SELECTOR", lambda r: label_text(r.data["nodeSelector"], "-")),
        ]
    return columns


def label_text(labels: Mapping[str, str], empty: str = "<none>") -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or empty


def columns_for(kind: Kind, wide: bool, tree: bool, show_labels: bool) -> list[Column]:
    """The table's columns; `tree`: queues indented under their parents."""
    if kind is QUEUE_KIND:
        columns = _queue_columns(wide, tree)
    elif kind is PODGROUP_KIND:
        columns = _podgroup_columns(wide)
    else:
        columns = _pool_columns(wide)
    if show_labels:
        columns.append(("LABELS", lambda r: label_text(r.labels)))
    return columns


def footer(kind: Kind, doc: Any) -> str | None:
    """The line under the table (None: none)."""
    if kind is QUEUE_KIND:
        return (
            f"cluster capacity: {amounts(doc['capacity'])}; pods naming no queue go to "
            f"{doc['defaultQueue']!r}"
        )
    if kind is POOL_KIND:
        return "used/capacity: requests of the pods bound there / allocatable"
    return None


def print_table(
    kind: Kind,
    rows: Sequence[Row],
    doc: Any,
    wide: bool,
    tree: bool,
    show_labels: bool,
    file: IO[str] | None = None,
) -> None:
    columns = columns_for(kind, wide, tree, show_labels)
    out = table(*(title for title, _ in columns))
    for row in rows:
        out.add_row(*(escape(cell(row)) for _, cell in columns))
    console = table_console(wide, file)
    console.print(out)
    line = footer(kind, doc)
    if line is not None:
        console.print(line, markup=False)


def object_name(kind: Kind, row: Row) -> str:
    """kubectl's `-o name`: `queue.shoal.dev/team`; a pod group keeps its namespace
    (`podgroup.scheduling.x-k8s.io/ml/ddp`), `shoal get` reads it back."""
    resource = f"{kind.singular}.{row.group}" if row.group else kind.singular
    return f"{resource}/{row.namespace}/{row.name}" if row.namespace else f"{resource}/{row.name}"


# ---- what is not there -------------------------------------------------------------------


def nothing_found(scope: str | None) -> None:
    """As kubectl says it, on stderr."""
    where = f" in {scope} namespace" if scope else ""
    console(stderr=True).print(f"No resources found{where}.", markup=False)


def not_found(query: Query, missing: Sequence[Ref], every: Sequence[Row]) -> None:
    """kubectl's NotFound line for each NAME, then what to do about it."""
    err = console(stderr=True)
    for ref in missing:
        err.print(
            f'Error from server (NotFound): {query.kind.resource} "{ref.name}" not found',
            markup=False,
            soft_wrap=True,
        )
        err.print(f"hint: {_hint(query, ref, every)}", markup=False, soft_wrap=True)


def _hint(query: Query, ref: Ref, every: Sequence[Row]) -> str:
    kind, scope = query.kind, query.scope
    named = [r for r in every if r.name == ref.name]
    target = ref.namespace or scope
    here = [r for r in named if target is None or r.namespace == target]
    wanted = ref.group or query.group
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
