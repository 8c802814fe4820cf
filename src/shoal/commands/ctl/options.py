"""The options of `shoal get` and `shoal explain`, as kubectl spells them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shoal.commands.ctl.output import EXIT_USAGE, OUTPUTS, Output, fail

__all__ = [
    "VALUE_OPTIONS",
    "AllNamespacesOpt",
    "ConfigOpt",
    "ContextOpt",
    "KubeconfigOpt",
    "LeaseNamespaceOpt",
    "NamesArg",
    "NamespaceOpt",
    "OutputOpt",
    "OutputWatchEventsOpt",
    "SelectorOpt",
    "ShowLabelsOpt",
    "WatchOnlyOpt",
    "WatchOpt",
    "check_output",
    "unequal",
]

# Options that take a value, for moving the resource before them (`get -n ml pg`).
VALUE_OPTIONS = frozenset(
    {"-n", "--namespace", "-o", "--output", "-l", "--selector"}
    | {"--kubeconfig", "--context", "--config"}
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
    str,
    typer.Option(
        "--output",
        "-o",
        help="Output format: table, wide (more columns), name (TYPE/NAME lines), json or yaml.",
    ),
]
NamesArg = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="NAME",
        show_default=False,
        help="Only these (NAME or TYPE/NAME; for pod groups also NAMESPACE/NAME).",
    ),
]
SelectorOpt = Annotated[
    str | None,
    typer.Option(
        "--selector",
        "-l",
        help="Label selector on the objects' labels: key=value, key!=value, key, !key, "
        "key in (a,b), key notin (a,b); comma-separated, all must hold.",
    ),
]
ShowLabelsOpt = Annotated[
    bool, typer.Option("--show-labels", help="Add a LABELS column (the objects' labels).")
]
AllNamespacesOpt = Annotated[
    bool,
    typer.Option(
        "--all-namespaces",
        "-A",
        help="Every namespace (the default for pod groups when neither -n nor the kubeconfig "
        "context names one; ignored for cluster-scoped resources, as kubectl does).",
    ),
]
NamespaceOpt = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        help="Only this namespace (default: the kubeconfig context's namespace; ignored for "
        "cluster-scoped resources).",
    ),
]
WatchOpt = Annotated[
    bool,
    typer.Option(
        "--watch",
        "-w",
        help="After printing, watch the cluster and print the rows (objects) that change, "
        "until Ctrl-C.",
    ),
]
WatchOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--watch-only", help="Watch without printing what there is first (implies --watch)."
    ),
]
OutputWatchEventsOpt = Annotated[
    bool,
    typer.Option(
        "--output-watch-events",
        help="With --watch: say ADDED, MODIFIED or DELETED for each row (an EVENT column; "
        "-o json|yaml: {type, object}).",
    ),
]
LeaseNamespaceOpt = Annotated[
    str,
    typer.Option(
        "--namespace",
        "-n",
        help="The namespace of the shard map and member Leases: `shoal run`'s "
        "leader-election namespace (leaderElection.resourceNamespace, else $POD_NAMESPACE).",
    ),
]


def unequal(value: str | None) -> str | None:
    """`-n=ml` as kubectl takes it (click reads the value `=ml`)."""
    return value.removeprefix("=") if value is not None else None


def check_output(output: str) -> Output:
    fmt = output.removeprefix("=")  # `-o=json`, as kubectl takes it
    for known in OUTPUTS:
        if fmt == known:
            return known
    raise fail(EXIT_USAGE, f"--output {output!r}: use table, wide, name, json or yaml")
