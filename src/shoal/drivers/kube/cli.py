"""`shoal run`: schedule pods on a real cluster.

Registered on the main `shoal` app by `register(app)`. Only typer is imported at module
level, so `shoal` works without the `kube` extra; the client library is imported when
the command runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import uuid
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register", "run"]

log = logging.getLogger("shoal.kube")

DEFAULT_SCHEDULER_NAME = "shoal"


def run(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig",
            envvar="KUBECONFIG",
            dir_okay=False,
            help="Kubeconfig file; without it (and without $KUBECONFIG) the pod's "
            "service account is used (in-cluster config).",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            exists=True,
            dir_okay=False,
            help="A KubeSchedulerConfiguration; without it one profile named 'shoal' with "
            "the default plugins.",
        ),
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="Kubeconfig context to use.")
    ] = None,
    leader_elect: Annotated[
        bool | None,
        typer.Option(
            "--leader-elect/--no-leader-elect",
            help="Elect a leader among replicas with a Lease (default: on, or the "
            "configuration's leaderElection.leaderElect).",
        ),
    ] = None,
    lease_name: Annotated[str | None, typer.Option(help="Lease name (default: shoal).")] = None,
    lease_namespace: Annotated[
        str | None,
        typer.Option(help="Lease namespace (default: $POD_NAMESPACE, else kube-system)."),
    ] = None,
    identity: Annotated[
        str | None, typer.Option(help="This replica's identity (default: hostname_uuid).")
    ] = None,
    qps: Annotated[
        float | None, typer.Option(min=0, help="Client QPS for binds and status (default 50).")
    ] = None,
    burst: Annotated[int | None, typer.Option(min=1, help="Client burst (default 100).")] = None,
    bind_concurrency: Annotated[
        int, typer.Option(min=1, help="At most this many bind requests in flight.")
    ] = 64,
    bind_address: Annotated[
        str,
        typer.Option(help="host:port for /metrics, /healthz and /readyz ('' to disable)."),
    ] = "0.0.0.0:10251",
    log_format: Annotated[str, typer.Option(help="json or text.")] = "json",
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the scheduler against a Kubernetes cluster.

    Pods whose spec.schedulerName matches a profile (default: 'shoal') are scheduled and
    bound; all bound pods are counted. Exits 1 when leadership is lost (the Deployment
    restarts it as a standby) and 2 on a bad configuration.
    """
    from shoal.config import ConfigError
    from shoal.drivers.kube.logs import configure_logging

    if log_format not in ("json", "text"):
        raise typer.BadParameter("must be json or text", param_hint="--log-format")
    configure_logging(log_format, log_level)
    try:
        scheduler_config = _load(config)
    except ConfigError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(2) from None
    code = asyncio.run(
        _serve(
            scheduler_config,
            kubeconfig=str(kubeconfig) if kubeconfig else None,
            context=context,
            leader_elect=leader_elect,
            lease_name=lease_name,
            lease_namespace=lease_namespace,
            identity=identity or f"{socket.gethostname()}_{uuid.uuid4()}",
            qps=qps,
            burst=burst,
            bind_concurrency=bind_concurrency,
            bind_address=bind_address,
        )
    )
    raise typer.Exit(code)


def _load(path: Path | None) -> object:
    from shoal.config import load_config, parse_config
    from shoal.scheduler import default_registry

    if path is None:
        return parse_config({"profiles": [{"schedulerName": DEFAULT_SCHEDULER_NAME}]})
    return load_config(path, registry=default_registry())


async def _serve(
    scheduler_config: object,
    *,
    kubeconfig: str | None,
    context: str | None,
    leader_elect: bool | None,
    lease_name: str | None,
    lease_namespace: str | None,
    identity: str,
    qps: float | None,
    burst: int | None,
    bind_concurrency: int,
    bind_address: str,
) -> int:
    from dataclasses import replace

    from shoal.config import KubeSchedulerConfiguration
    from shoal.drivers.kube.backend import KubeBackend, KubeOptions
    from shoal.drivers.kube.client import connect
    from shoal.drivers.kube.leader import LeadershipLost
    from shoal.web.server import HealthServer

    assert isinstance(scheduler_config, KubeSchedulerConfiguration)
    options = KubeOptions.from_config(
        scheduler_config,
        identity=identity,
        qps=qps,
        burst=burst,
        bind_concurrency=bind_concurrency,
        leader_elect=leader_elect,
    )
    election = scheduler_config.leader_election
    namespace = (
        lease_namespace
        or election.get("resourceNamespace")
        or os.environ.get("POD_NAMESPACE")
        or "kube-system"
    )
    options = replace(
        options,
        leader=replace(
            options.leader,
            name=lease_name or options.leader.name,
            namespace=str(namespace),
            identity=identity,
        ),
    )
    try:
        connection = await connect(kubeconfig, context=context)
    except Exception as err:  # kubeconfig missing or unreadable, not in a cluster
        log.error("cannot load the cluster configuration: %s", err, extra={"error": str(err)})
        return 2
    backend = KubeBackend(scheduler_config, connection, options)
    server: HealthServer | None = None
    if bind_address:
        host, _, port = bind_address.rpartition(":")
        server = HealthServer(
            backend.metrics.registry,
            backend.healthz,
            backend.readyz,
            host=host or "0.0.0.0",
            port=int(port),
        )
        await server.start()
        log.info(
            "serving /metrics, /healthz and /readyz on %s:%d",
            server.host,
            server.port,
            extra={"address": f"{server.host}:{server.port}"},
        )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, backend.stop)
    log.info(
        "starting: profiles %s, leader election %s",
        ", ".join(backend.scheduler.profiles),
        "on" if options.leader_elect else "off",
        extra={"identity": identity, "qps": options.qps, "burst": options.burst},
    )
    code = 0
    try:
        await backend.run()
    except LeadershipLost as err:
        log.error("exiting: %s", err)
        code = 1
    except Exception:
        code = 1
    finally:
        if server is not None:
            await server.stop()
        await connection.close()
    return code


def register(app: typer.Typer) -> None:
    """Add `run` to the `shoal` command line."""
    app.command("run")(run)
