"""What every `shoal get`-style command prints with: exit codes, output formats,
consoles, tables and JSON/YAML dumps."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import IO, Any, Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = [
    "EXIT_BLOCKED",
    "EXIT_CLUSTER",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "OUTPUTS",
    "Output",
    "console",
    "dump",
    "dump_each",
    "fail",
    "table",
    "table_console",
]

EXIT_OK = 0
EXIT_CLUSTER = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_BLOCKED = 4

Output = Literal["table", "wide", "name", "json", "yaml"]
OUTPUTS: tuple[Output, ...] = ("table", "wide", "name", "json", "yaml")

_UNFOLDED = 100_000  # a console width no table reaches


def console(stderr: bool = False, file: IO[str] | None = None) -> Console:
    """A console on stdout (stderr), or on `file`."""
    return Console(stderr=stderr, file=file, highlight=False, soft_wrap=False)


def fail(code: int, message: str) -> typer.Exit:
    console(stderr=True).print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


def dump(data: Any, output: Output) -> None:
    if output == "json":
        typer.echo(json.dumps(data, indent=2, sort_keys=False))
    else:
        import yaml

        typer.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False), nl=False)


def dump_each(objects: Sequence[Any], output: Output, file: IO[str] | None = None) -> None:
    """Objects one after the other, as `kubectl get --watch` prints them: JSON documents
    back to back, YAML documents each opened by `---`."""
    if output == "json":
        text = "".join(json.dumps(o, indent=2, sort_keys=False) + "\n" for o in objects)
    else:
        import yaml

        text = "".join(
            yaml.safe_dump(o, sort_keys=False, default_flow_style=False, explicit_start=True)
            for o in objects
        )
    typer.echo(text, nl=False, file=file)


def table(*columns: str, min_widths: Sequence[int] = (), header: bool = True) -> Table:
    """A kubectl-looking table; `min_widths` keeps the columns of rows printed later (a
    watch's) under those of the first table."""
    table = Table(box=None, header_style="bold", pad_edge=False, show_header=header)
    for i, column in enumerate(columns):
        width = min_widths[i] if i < len(min_widths) else None
        table.add_column(column, overflow="fold", min_width=width)
    return table


def table_console(wide: bool, file: IO[str] | None = None) -> Console:
    """stdout's console (or `file`'s) for a table: as kubectl, rows are never folded when
    piped (`| grep`), nor with -o wide."""
    out = console(file=file)
    if wide or not out.is_terminal:
        out = Console(file=file, highlight=False, soft_wrap=False, width=_UNFOLDED)
    return out
