"""The operator commands: `shoal get queues|podgroups|pools|shards` and `shoal explain NS/POD`.

They read the cluster over a kubeconfig (as kubectl does), build the scheduler's view
of it (`shoal.drivers.kube.clusterview`) and print it as a table, JSON or YAML; with
`--watch` they go on watching the cluster and print what changes (`watch`).
`shoal get shards` reads the node-shard Leases of the running replicas instead
(`shards`).

kubectl's habits work (docs/operations.md): singular, plural, short and group-qualified
resource names (`get queue`, `get q`, `get pg`, `get nodepools`, `get queues.shoal.dev`)
and `TYPE/NAME` arguments; NAME arguments (`get queues team`); `-n NAMESPACE` (default:
the kubeconfig context's namespace) and `-A/--all-namespaces`; `-l/--selector` on the
objects' labels; `-o wide` and `-o name`; `--show-labels`; `-w/--watch`, `--watch-only`
and `--output-watch-events`; options before the resource (`get -n ml pg`); `explain -n
NS POD`.

Exit codes, for scripts (docs/operations.md):

* 0: done (for `explain`: the pod is bound, finished, or fits now; for `--watch`:
  stopped with Ctrl-C);
* 1: the cluster could not be read (kubeconfig, connection, authorization, API error);
* 2: bad arguments or a bad scheduler configuration;
* 3: not found (the pod `explain` was asked about, a NAME given to `get`);
* 4: `explain`: the pod is pending and cannot be placed now (gated, over quota, no
  node fits, or not Shoal's schedulerName).

The modules:

* `get`: the `shoal get` group and its commands (one factory for the three kinds);
* `explain`: `shoal explain`;
* `kinds`, `options`, `selectors`: resource names, options, `-l`;
* `cluster`: the configuration, the kubeconfig context's namespace, the view;
* `rows`, `tables`: the rows of each kind, which are shown, and how they print;
* `watch`: `--watch`; `shards`: `shoal get shards`; `output`: exit codes and printing.

Only typer and rich are imported by `get` and `explain` at module level, so `shoal`
loads without the `kube` extra; the client is imported when a command runs.
"""

from __future__ import annotations

import typer

from shoal.commands.ctl.explain import explain
from shoal.commands.ctl.get import get_app
from shoal.commands.ctl.output import (
    EXIT_BLOCKED,
    EXIT_CLUSTER,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
)
from shoal.commands.ctl.selectors import SELECTOR_FORMS, parse_selector

__all__ = [
    "EXIT_BLOCKED",
    "EXIT_CLUSTER",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "SELECTOR_FORMS",
    "explain",
    "get_app",
    "parse_selector",
    "register",
]


def register(app: typer.Typer) -> None:
    """Add `shoal get ...` and `shoal explain` to the main app."""
    app.add_typer(get_app, name="get")
    app.command("explain")(explain)
