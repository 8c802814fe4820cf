"""What every `shoal get`-style command prints with: exit codes, output formats,
consoles, tables and JSON/YAML dumps (shared by `ctl` and `ctl_shards`)."""

from __future__ import annotations

import json
from typing import Any, Literal

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


def console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def fail(code: int, message: str) -> typer.Exit:
    console(stderr=True).print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


def dump(data: Any, output: Output) -> None:
    if output == "json":
        typer.echo(json.dumps(data, indent=2, sort_keys=False))
    else:
        import yaml

        typer.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False), nl=False)


def table(*columns: str) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def table_console(wide: bool) -> Console:
    """stdout's console for a table: as kubectl, rows are never folded when piped
    (`| grep`), nor with -o wide."""
    out = console()
    if wide or not out.is_terminal:
        out = Console(highlight=False, soft_wrap=False, width=_UNFOLDED)
    return out
