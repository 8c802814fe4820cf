"""`shoal get queues|podgroups|pools --watch`: print, then follow the cluster, as
`kubectl get --watch` does.

The view is listed once (`load_view`), as without --watch; then the informers of the
resources the kind's rows are computed from (`inputs`: a queue's usage moves with its
pods, a pool's with the pods bound to its nodes) watch on, feeding the same scheduler
core through the same handlers. Their list+watch loop (`shoal.drivers.kube.informer`)
resumes a dropped watch from its resourceVersion, relists when the server answers 410
Gone, and backs off (with a `warning:` line on stderr) while the API server cannot be
reached, so a watch outlives an API server restart.

Each change wakes the recomputation of the rows, at most every `INTERVAL` seconds (one
pod can move many rows: its queue and every ancestor); the rows that differ from what
was printed last are printed: for a table without the header again, under the columns
of the first table; for `-o name` their names; for `-o json|yaml` each object on its
own (YAML documents opened by `---`); a row that is gone is printed once more as it
was last (as kubectl prints a deleted object). `--output-watch-events` says ADDED,
MODIFIED or DELETED. Ctrl-C ends it with exit 0; a reader that goes away (`| head`)
with exit 1, quietly, at the next change.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import typer
from rich.cells import cell_len
from rich.markup import escape

from shoal.commands.ctl.cluster import cannot_read, kube_warnings, scheduler_config
from shoal.commands.ctl.kinds import NO_POOL, PODGROUP_KIND, POOL_KIND, QUEUE_KIND, Kind
from shoal.commands.ctl.output import EXIT_NOT_FOUND, Output, dump_each, table, table_console
from shoal.commands.ctl.rows import Query, Row, rows_of
from shoal.commands.ctl.tables import columns_for, footer, not_found, nothing_found, object_name

if TYPE_CHECKING:
    from shoal.config import KubeSchedulerConfiguration
    from shoal.drivers.kube.clusterview import ClusterView

__all__ = [
    "ADDED",
    "DELETED",
    "INTERVAL",
    "MODIFIED",
    "Changes",
    "Printer",
    "WatchFailures",
    "follow",
    "inputs",
    "watch",
]

INTERVAL = 0.5  # seconds: the rows are computed again at most this often
_INFORMER_LOG = "shoal.kube.informer"

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"

Change = tuple[str, Row]


def inputs(kind: Kind) -> frozenset[str]:
    """The informers (by resource name) whose objects the rows of `kind` depend on."""
    from shoal.drivers.kube.resources import (
        ELASTIC_QUOTAS,
        ELASTIC_QUOTAS_SIGS,
        NAMESPACES,
        NODE_POOLS,
        NODES,
        PODGROUPS,
        PODGROUPS_SIGS,
        PODS,
        QUEUE_BINDINGS,
        QUEUES,
        UPSTREAM_PODGROUPS,
        VOLCANO_PODGROUPS,
    )

    groups = (PODGROUPS, PODGROUPS_SIGS, VOLCANO_PODGROUPS, UPSTREAM_PODGROUPS)
    tenancy = (QUEUES, QUEUE_BINDINGS, NODE_POOLS, ELASTIC_QUOTAS, ELASTIC_QUOTAS_SIGS)
    if kind is POOL_KIND:  # nodes, their NodePools, the pods bound to them
        kinds: tuple[Any, ...] = (NODES, PODS, NODE_POOLS)
    elif kind in (QUEUE_KIND, PODGROUP_KIND):
        # Usage and fair shares (capacity: nodes); which queue a pod is in (its labels,
        # namespace, PodGroup, QueueBindings); a gang's members and their phases.
        kinds = (NODES, PODS, NAMESPACES, *groups, *tenancy)
    else:
        raise ValueError(f"shoal get {kind.command} does not watch")
    return frozenset(k.name for k in kinds)


class Changes:
    """What was printed last, per object, and what differs from it now."""

    def __init__(self) -> None:
        self.shown: dict[tuple[str, str, str], Row] = {}

    def since(self, rows: Sequence[Row]) -> list[Change]:
        """Rows added or changed (in the rows' order), then rows gone (as last shown)."""
        out: list[Change] = []
        now: dict[tuple[str, str, str], Row] = {}
        for row in rows:
            now[row.key] = row
            old = self.shown.get(row.key)
            if old is None:
                out.append((ADDED, row))
            elif old.data != row.data or old.labels != row.labels:
                out.append((MODIFIED, row))
        out += [(DELETED, old) for key, old in self.shown.items() if key not in now]
        self.shown = now
        return out


class Printer:
    """Prints changed rows as `kubectl get --watch` does, in any output format."""

    def __init__(
        self,
        query: Query,
        fmt: Output,
        show_labels: bool,
        events: bool = False,
        file: IO[str] | None = None,
    ) -> None:
        self.kind = query.kind
        self.fmt = fmt
        self.events = events
        self.file = file
        self.columns = columns_for(
            query.kind, fmt == "wide", tree=not query.filtered, show_labels=show_labels
        )
        self.widths: list[int] = []  # none yet: the header is still to be printed
        self.footer: str | None = None

    def print(self, changes: Sequence[Change], doc: Any) -> None:
        if self.fmt in ("json", "yaml"):
            objects = [
                {"type": event, "object": row.data} if self.events else row.data
                for event, row in changes
            ]
            if objects:
                dump_each(objects, self.fmt, self.file)
        elif self.fmt == "name":
            for event, row in changes:
                if not (self.kind is POOL_KIND and row.name == NO_POOL):  # not an object
                    name = object_name(self.kind, row)
                    typer.echo(f"{event} {name}" if self.events else name, file=self.file)
        else:
            self._table(changes, doc)

    def _table(self, changes: Sequence[Change], doc: Any) -> None:
        out = table_console(self.fmt == "wide", self.file)
        if changes:
            titles = [title for title, _ in self.columns]
            cells = [[cell(row) for _, cell in self.columns] for _, row in changes]
            if self.events:
                titles = ["EVENT", *titles]
                cells = [[event, *row] for (event, _), row in zip(changes, cells, strict=True)]
            header = not self.widths
            widths = self.widths or [cell_len(t) for t in titles]
            for row_cells in cells:
                widths = [max(w, cell_len(c)) for w, c in zip(widths, row_cells, strict=True)]
            self.widths = widths
            printed = table(*titles, min_widths=widths, header=header)
            for row_cells in cells:
                printed.add_row(*(escape(c) for c in row_cells))
            out.print(printed)
        line = footer(self.kind, doc)
        if line is not None and line != self.footer and (changes or self.footer is not None):
            # Under the first table, and again when it says something else (the
            # cluster's capacity changed).
            out.print(line, markup=False)
            self.footer = line


class WatchFailures(logging.Filter):
    """The informers' warnings (a watch or list that failed, retried after a backoff),
    one line per `seconds`: an API server that restarts ends every watch at once."""

    def __init__(self, seconds: float = 10.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.seconds = seconds
        self.clock = clock
        self.last = -math.inf

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(_INFORMER_LOG) or record.levelno != logging.WARNING:
            return True
        now = self.clock()
        if now - self.last < self.seconds:
            return False
        self.last = now
        record.msg = f"{record.getMessage()} (retrying; more such failures in the next "
        record.msg += f"{self.seconds:g} s are not shown)"
        record.args = None
        return True


class _Unreadable(Exception):
    """The cluster could not be read at the start (exit 1)."""


def follow(
    query: Query,
    fmt: Output,
    show_labels: bool,
    *,
    watch_only: bool,
    events: bool,
    kubeconfig: Path | None,
    context: str | None,
    config: Path | None,
) -> None:
    """`shoal get ... --watch`: until Ctrl-C (exit 0); exit 1 if the cluster cannot be
    read at the start, 3 if a NAME is not there."""
    loaded = scheduler_config(config)
    printer = Printer(query, fmt, show_labels, events)
    with kube_warnings() as warnings:
        warnings.addFilter(WatchFailures())
        try:
            asyncio.run(watch(loaded, query, printer, kubeconfig, context, watch_only=watch_only))
        except KeyboardInterrupt:
            return
        except _Unreadable as err:
            raise cannot_read(err.__cause__ or err) from None
        except BrokenPipeError:
            # `| head`: the reader is gone. Quietly, with exit 1, as rich ends a table
            # printed into a closed pipe.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(1) from None


async def watch(
    config: KubeSchedulerConfiguration,
    query: Query,
    printer: Printer,
    kubeconfig: Path | None,
    context: str | None,
    *,
    watch_only: bool = False,
    interval: float = INTERVAL,
    stop: asyncio.Event | None = None,
) -> None:
    """List, print, watch and print changes until cancelled (or until `stop` is set)."""
    from shoal.drivers.kube.client import connect
    from shoal.drivers.kube.clusterview import load_view

    try:
        connection = await connect(str(kubeconfig) if kubeconfig else None, context=context)
    except Exception as err:  # kubeconfig unreadable
        raise _Unreadable() from err
    try:
        try:
            view = await load_view(config, connection)
        except Exception as err:  # connection refused, 401/403/5xx
            raise _Unreadable() from err
        doc, every = rows_of(query.kind, view)
        rows, missing = query.select(every)
        if missing:
            not_found(query, missing, every)
            raise typer.Exit(EXIT_NOT_FOUND)
        changes = Changes()
        first = changes.since(rows)
        if not watch_only:
            if not rows and not query.refs:
                nothing_found(query.scope)
            printer.print(first, doc)
        await _follow(view, query, changes, printer, interval, stop)
    finally:
        await connection.close()


async def _follow(
    view: ClusterView,
    query: Query,
    changes: Changes,
    printer: Printer,
    interval: float,
    stop: asyncio.Event | None,
) -> None:
    backend = view.backend
    changed = asyncio.Event()
    backend.intake.wake = changed.set  # called for every object an informer delivers
    wanted = inputs(query.kind)
    tasks = [
        asyncio.create_task(informer.run(), name=f"watch-{name}")
        for name, informer in backend.informers.items()
        if name in wanted
    ]
    loop = asyncio.get_running_loop()
    last = loop.time()
    try:
        while await _changed(changed, stop):
            await asyncio.sleep(max(0.0, last + interval - loop.time()))
            changed.clear()
            last = loop.time()
            view.scheduler.tick()  # as load_view does: gang phases, backoffs
            doc, every = rows_of(query.kind, view)
            rows, _ = query.select(every)
            printer.print(changes.since(rows), doc)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _changed(changed: asyncio.Event, stop: asyncio.Event | None) -> bool:
    """Wait for a change; False when `stop` was set first."""
    if stop is None:
        await changed.wait()
        return True
    waiters = {asyncio.ensure_future(changed.wait()), asyncio.ensure_future(stop.wait())}
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return not stop.is_set()
