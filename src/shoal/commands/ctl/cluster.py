"""Reading the cluster for `shoal get` and `shoal explain`: the scheduler configuration,
the kubeconfig context's namespace, and the scheduler's view of the cluster
(`shoal.drivers.kube.clusterview`), with what the scheduler would report about the
cluster's objects on stderr.

The Kubernetes client is imported when a command runs (the `kube` extra)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from shoal.commands.ctl.output import EXIT_CLUSTER, EXIT_USAGE, fail

if TYPE_CHECKING:
    from shoal.config import KubeSchedulerConfiguration
    from shoal.drivers.kube.clusterview import ClusterView

__all__ = ["cannot_read", "context_namespace", "kube_warnings", "scheduler_config", "view"]


def scheduler_config(config: Path | None) -> KubeSchedulerConfiguration:
    """`--config`, or `shoal run`'s default; exits 2 on a bad configuration."""
    from shoal.config import ConfigError, default_config, load_config
    from shoal.scheduler import default_registry

    try:
        return (
            default_config() if config is None else load_config(config, registry=default_registry())
        )
    except ConfigError as err:
        raise fail(EXIT_USAGE, str(err)) from None


@contextmanager
def kube_warnings() -> Iterator[logging.Handler]:
    """What the scheduler would report about the cluster's objects (an invalid Queue, a
    pod that cannot be read), and a watch's failures, go to stderr, one `warning:` line
    each."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("warning: %(message)s"))
    kube_log = logging.getLogger("shoal.kube")
    kube_log.addHandler(handler)
    propagate, kube_log.propagate = kube_log.propagate, False
    try:
        yield handler
    finally:
        kube_log.removeHandler(handler)
        kube_log.propagate = propagate


def view(kubeconfig: Path | None, context: str | None, config: Path | None) -> ClusterView:
    """The cluster, listed once; exits 2 on a bad configuration, 1 if it cannot be read.
    Without `--config`, the scheduler is judged with the configuration the running Shoal
    replicas publish on their member Leases (`published_configs`), else the default."""
    loaded = None if config is None else scheduler_config(config)
    with kube_warnings():
        try:
            return asyncio.run(_load(loaded, kubeconfig, context))
        except Exception as err:  # kubeconfig unreadable, connection refused, 401/403/5xx
            raise cannot_read(err) from None


def cannot_read(err: BaseException) -> typer.Exit:
    """exit 1, naming what went wrong."""
    return fail(EXIT_CLUSTER, f"cannot read the cluster: {type(err).__name__}: {err}")


async def _load(
    config: KubeSchedulerConfiguration | None, kubeconfig: Path | None, context: str | None
) -> ClusterView:
    from shoal.drivers.kube.client import connect
    from shoal.drivers.kube.clusterview import load_view, published_configs

    connection = await connect(str(kubeconfig) if kubeconfig else None, context=context)
    try:
        source = "--config"
        if config is None:
            config, source = await published_configs(connection)
        found = await load_view(config, connection)
        found.config_source = source
        return found
    finally:
        await connection.close()


def context_namespace(kubeconfig: Path | None, context: str | None) -> str | None:
    """The namespace the kubeconfig's context names (`--context`, else its
    current-context), as kubectl takes it for its default namespace; None when it names
    none. KUBECONFIG may list several files (`a:b`): the first to set current-context
    wins, and the first to define a context. A file that cannot be read is skipped
    here: connecting reports it."""
    if kubeconfig is None:
        return None
    import yaml

    current: str | None = None
    contexts: dict[str, Any] = {}
    for part in str(kubeconfig).split(os.pathsep):
        if not part:
            continue
        try:
            doc = yaml.safe_load(Path(part).read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if not isinstance(doc, dict):
            continue
        if current is None and doc.get("current-context"):
            current = str(doc["current-context"])
        for entry in doc.get("contexts") or ():
            if isinstance(entry, dict) and entry.get("name"):
                contexts.setdefault(str(entry["name"]), entry.get("context"))
    name = context or current
    spec = contexts.get(name) if name else None
    namespace = spec.get("namespace") if isinstance(spec, dict) else None
    return str(namespace) if namespace else None
