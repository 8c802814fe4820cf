"""`shoal webhook`: serve Shoal's admission webhooks (`shoal.servers.webhook`).

Registered on the main `shoal` app by `register(app)`; the aiohttp and client imports
happen when the command runs. Certificates: `tls.crt`/`tls.key` in `--cert-dir` (the
layout of cert-manager's Secret, mounted there), reloaded when they change; with
`--generate-certs`, a CA and a serving certificate are made there first when missing
(`ca.crt` is the caBundle the webhook configurations need).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from shoal.drivers.kube.tls import ReloadingContext

__all__ = ["register", "webhook", "webhook_tls"]

log = logging.getLogger("shoal.kube.webhook")

WEBHOOK_ADDRESS = "0.0.0.0"
WEBHOOK_PORT = 9443  # controller-runtime's webhook port
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # controller-runtime's default


def webhook_tls(cert_dir: Path, generate: bool, names: list[str] | None) -> ReloadingContext:
    """The reloading TLS context over `cert_dir` (making the files first with
    `generate`); raises TlsError with what to do when there is no usable certificate."""
    from shoal.drivers.kube.tls import WEBHOOK_NAMES, TlsError, generate_webhook_certs

    if generate and generate_webhook_certs(cert_dir, tuple(names or WEBHOOK_NAMES)):
        log.info(
            "made a CA and a webhook serving certificate in %s; give the API server "
            "ca.crt (base64) as the webhooks' caBundle",
            cert_dir,
            extra={"directory": str(cert_dir)},
        )
    cert, key = cert_dir / "tls.crt", cert_dir / "tls.key"
    if not cert.exists() or not key.exists():
        raise TlsError(
            f"no tls.crt and tls.key in {cert_dir}: mount cert-manager's Secret there, or "
            "pass --generate-certs"
        )
    return ReloadingContext(cert, key)


def webhook(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="Kubeconfig (default: in-cluster)."),
    ] = None,
    context: Annotated[str | None, typer.Option(help="Kubeconfig context to use.")] = None,
    bind_address: Annotated[str, typer.Option(help="Address to listen on.")] = WEBHOOK_ADDRESS,
    port: Annotated[int, typer.Option(min=0, max=65535, help="HTTPS port.")] = WEBHOOK_PORT,
    cert_dir: Annotated[
        Path, typer.Option(file_okay=False, help="Directory holding tls.crt and tls.key.")
    ] = CERT_DIR,
    generate_certs: Annotated[
        bool,
        typer.Option(
            "--generate-certs",
            help="Make a CA (ca.crt) and a serving certificate in --cert-dir when missing.",
        ),
    ] = False,
    dns_name: Annotated[
        list[str] | None,
        typer.Option(
            "--dns-name",
            help="DNS names of the generated certificate (repeatable; default: the "
            "shoal-webhook Service in shoal-system, and localhost).",
        ),
    ] = None,
    print_ca_bundle: Annotated[
        bool,
        typer.Option(
            "--print-ca-bundle",
            help="Print --cert-dir's ca.crt in base64 (the configurations' caBundle) and exit.",
        ),
    ] = False,
    scheduler_name: Annotated[
        str, typer.Option(help="The schedulerName given to pods in bound namespaces.")
    ] = "shoal",
    default_queue: Annotated[str, typer.Option(help="The scheduler's default queue.")] = "default",
    reload_seconds: Annotated[
        float, typer.Option(min=0, help="How often to look for a renewed certificate (0: never).")
    ] = 10.0,
    client_ca_file: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help="Answer reviews only for clients with a certificate signed by this CA (the "
            "API server's admission client certificate, AdmissionConfiguration "
            "kubeConfigFile); /healthz stays open.",
        ),
    ] = None,
    log_format: Annotated[str, typer.Option(help="json or text.")] = "json",
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Serve Shoal's admission webhooks over HTTPS: validating for Queue, QueueBinding,
    NodePool, ElasticQuota and PodGroup (checked against the objects in the cluster),
    mutating for pods (schedulerName and queue from the namespace's QueueBinding).
    Exits 2 when there is no certificate or no cluster configuration."""
    from shoal.drivers.kube.logs import configure_logging
    from shoal.drivers.kube.tls import TlsError

    if log_format not in ("json", "text"):
        raise typer.BadParameter("must be json or text", param_hint="--log-format")
    configure_logging(log_format, log_level)
    try:
        tls = webhook_tls(cert_dir, generate_certs, dns_name)
    except TlsError as err:
        log.error("cannot serve the webhooks: %s", err, extra={"error": str(err)})
        raise typer.Exit(2) from None
    if print_ca_bundle:
        ca = cert_dir / "ca.crt"
        if not ca.exists():
            log.error("no ca.crt in %s (it is made with --generate-certs)", cert_dir)
            raise typer.Exit(2)
        typer.echo(base64.b64encode(ca.read_bytes()).decode())
        raise typer.Exit(0)
    code = asyncio.run(
        _serve(
            tls,
            kubeconfig=str(kubeconfig) if kubeconfig else None,
            context=context,
            host=bind_address,
            port=port,
            scheduler_name=scheduler_name,
            default_queue=default_queue,
            reload_seconds=reload_seconds,
            client_ca_file=client_ca_file,
        )
    )
    raise typer.Exit(code)


def client_ca_middlewares(tls: ReloadingContext, client_ca_file: Path | None) -> list[Any] | None:
    """With a client CA: `tls` asks clients for a certificate signed by it, and the
    middleware refuses requests without one (/healthz stays open). [] without a CA; None
    (logged) when the CA cannot be loaded."""
    from shoal.servers.auth import DelegatedAuth, client_ca_context

    if client_ca_file is None:
        return []
    try:
        client_ca_context(tls.context, str(client_ca_file))
    except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
        log.error("cannot load %s: %s", client_ca_file, err, extra={"error": str(err)})
        return None
    verified = DelegatedAuth(client_certificates=True, always_allow=("/healthz",))
    return [verified.middleware]


async def _serve(
    tls: ReloadingContext,
    *,
    kubeconfig: str | None,
    context: str | None,
    host: str,
    port: int,
    scheduler_name: str,
    default_queue: str,
    reload_seconds: float,
    client_ca_file: Path | None = None,
) -> int:
    from shoal.drivers.kube.client import ClientSettings, connect
    from shoal.servers.webhook import ApiTenancySource, WebhookServer

    middlewares = client_ca_middlewares(tls, client_ca_file)
    if middlewares is None:
        return 2

    try:
        connection = await connect(kubeconfig, context=context)
    except Exception as err:  # kubeconfig missing or unreadable, not in a cluster
        log.error("cannot load the cluster configuration: %s", err, extra={"error": str(err)})
        return 2
    client = connection.client("webhook", ClientSettings(user_agent="shoal-webhook"))
    server = WebhookServer(
        ApiTenancySource(client),
        tls,
        host=host,
        port=port,
        scheduler_name=scheduler_name,
        default_queue=default_queue,
        reload_seconds=reload_seconds,
        middlewares=middlewares,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
        log.info(
            "serving the admission webhooks (/validate, /mutate-pods) on https://%s:%d",
            host,
            server.port,
            extra={"address": f"{host}:{server.port}"},
        )
        await stop.wait()
    except OSError as err:
        log.error("cannot serve the webhooks: %s", err, extra={"error": str(err)})
        return 2
    finally:
        await server.stop()
        await connection.close()
    return 0


def register(app: typer.Typer) -> None:
    """Add `webhook` to the `shoal` command line."""
    app.command("webhook")(webhook)
