"""`shoal run`: schedule pods on a real cluster.

Registered on the main `shoal` app by `register(app)`. Only typer is imported at module
level, so `shoal` works without the `kube` extra; the client library is imported when
the command runs.

kube-scheduler's flag spellings are accepted too, so that a Deployment written for it
needs few changes: `--leader-elect[=BOOL]` and the `--leader-elect-*` flags,
`--kube-api-qps`, `--kube-api-burst`, `-v`/`--v`, `--logging-format`, `--bind-address IP`
with `--secure-port` and `--tls-cert-file`/`--tls-private-key-file` (HTTPS). Leader
election flags override the configuration file, as in kube-scheduler. On the HTTPS port,
`--authentication-kubeconfig`, `--authorization-kubeconfig`, `--client-ca-file` and
`--authorization-always-allow-paths` authenticate and authorize requests through the
API server as kube-scheduler's do (`shoal.servers.auth`); `--requestheader-client-ca-file`
is accepted and ignored with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import ssl
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand

# kube's --authorization-always-allow-paths default (also in shoal.servers.auth, which
# needs the client library: not imported here).
ALWAYS_ALLOW = ("/healthz", "/readyz", "/livez")

if TYPE_CHECKING:
    from shoal.config import KubeSchedulerConfiguration

__all__ = ["KubeSchedulerFlags", "Serving", "extender", "register", "run", "serving"]

log = logging.getLogger("shoal.kube")

# Shoal's plain-HTTP default: loopback, so /metrics and /healthz are not exposed unless
# asked for (the deploy manifests bind 0.0.0.0 for the kubelet's probes and Prometheus).
HTTP_ADDRESS = "127.0.0.1:10251"
DEFAULT_IP = "127.0.0.1"
SECURE_PORT = 10259  # kube-scheduler's --secure-port default
# Go's strconv.ParseBool, which kube-scheduler's boolean flags use.
_TRUE = {"1", "t", "T", "true", "TRUE", "True"}
_FALSE = {"0", "f", "F", "false", "FALSE", "False"}
# Boolean flags kube-scheduler users write as --flag=false; click wants --no-flag.
_BOOLEAN_FLAGS = ("--leader-elect", "--profiling", "--contention-profiling")
# Accepted for kube-scheduler compatibility, then ignored: what they would have done.
_IGNORED = {
    "requestheader_client_ca_file": "--requestheader-client-ca-file",
    "feature_gates": "--feature-gates",
    "profiling": "--profiling",
    "contention_profiling": "--contention-profiling",
}
_WHY_IGNORED = {
    "--feature-gates": "Shoal has no kube feature gates",
    "--profiling": "Shoal serves no profiling endpoints",
    "--contention-profiling": "Shoal serves no profiling endpoints",
}
_NO_AUTH = (
    "Shoal does not accept front-proxy (request header) authentication; use bearer tokens "
    "(--authentication-kubeconfig) or client certificates (--client-ca-file)"
)


def normalize_flags(args: Sequence[str]) -> list[str]:
    """kube-scheduler's `--leader-elect=false` and `-v=2` in the forms click parses."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + list(args[i:])
        name, eq, value = arg.partition("=")
        if eq and name in _BOOLEAN_FLAGS and (value in _TRUE or value in _FALSE):
            out.append(name if value in _TRUE else "--no-" + name[2:])
        elif eq and name == "-v":
            out += ["-v", value]
        else:
            out.append(arg)
    return out


class KubeSchedulerFlags(TyperCommand):
    """`shoal run`'s command: also takes kube-scheduler's `--bool-flag=value` spelling."""

    # ctx is typer's (vendored) click Context; Any keeps this independent of which.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, normalize_flags(args))


def _duration(flag: str) -> Any:
    def check(value: str | None) -> str | None:
        from shoal.config.durations import parse_duration

        if value is None:
            return None
        try:
            seconds = parse_duration(value)
        except ValueError:
            raise typer.BadParameter(
                f"{value!r} is not a duration; write it like 15s, 1m30s or 500ms",
                param_hint=flag,
            ) from None
        if seconds <= 0:
            raise typer.BadParameter("must be greater than zero", param_hint=flag)
        return value

    return check


@dataclass(frozen=True)
class Serving:
    """Where /metrics, /healthz and /readyz are served, and whether over HTTPS."""

    host: str
    port: int
    tls: bool


def serving(
    bind_address: str | None,
    secure_port: int | None,
    tls_files: bool = False,
) -> Serving | None:
    """The address from `--bind-address` and `--secure-port`; None: not served.

    `--bind-address HOST:PORT` (Shoal's form) serves plain HTTP there ('' disables);
    `--bind-address IP` (kube-scheduler's form) or `--secure-port` serves HTTPS on that
    IP (default 127.0.0.1) and port (default 10259; 0 disables, as in kube-scheduler).
    A certificate (`tls_files`) makes Shoal's form HTTPS too.
    """
    if bind_address == "":
        return None
    ip = _ip(bind_address) if bind_address is not None else None
    if bind_address is not None and ip is None:
        if secure_port is not None:
            raise typer.BadParameter(
                "with --secure-port, give --bind-address as an IP address (kube-scheduler's "
                "form), e.g. --bind-address 0.0.0.0 --secure-port 10259",
                param_hint="--bind-address",
            )
        host, port = _host_port(bind_address)
        return Serving(host, port, tls_files)
    if secure_port is None and ip is None:
        host, port = _host_port(HTTP_ADDRESS)
        return Serving(host, port, tls_files)
    port = SECURE_PORT if secure_port is None else secure_port
    if port == 0:
        return None
    return Serving(ip or DEFAULT_IP, port, True)


def _ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        return None


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not sep or not 0 <= number <= 65535:
        raise typer.BadParameter(
            f"{text!r} is neither HOST:PORT nor an IP address", param_hint="--bind-address"
        )
    return host.strip("[]") or DEFAULT_IP, number


def run(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig",
            envvar="KUBECONFIG",
            dir_okay=False,
            help="Kubeconfig file; without it (and without $KUBECONFIG or the "
            "configuration's clientConnection.kubeconfig) the pod's service account is used "
            "(in-cluster config).",
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
            "configuration's leaderElection.leaderElect). --leader-elect=false works too.",
        ),
    ] = None,
    lease_name: Annotated[
        str | None,
        typer.Option(
            "--lease-name",
            "--leader-elect-resource-name",
            help="Lease name (default: shoal, or leaderElection.resourceName).",
        ),
    ] = None,
    lease_namespace: Annotated[
        str | None,
        typer.Option(
            "--lease-namespace",
            "--leader-elect-resource-namespace",
            help="Lease namespace (default: leaderElection.resourceNamespace, else "
            "$POD_NAMESPACE, else kube-system).",
        ),
    ] = None,
    lease_duration: Annotated[
        str | None,
        typer.Option(
            "--leader-elect-lease-duration",
            callback=_duration("--leader-elect-lease-duration"),
            help="How long a standby waits before taking an unrenewed Lease (default 15s).",
        ),
    ] = None,
    renew_deadline: Annotated[
        str | None,
        typer.Option(
            "--leader-elect-renew-deadline",
            callback=_duration("--leader-elect-renew-deadline"),
            help="How long the leader keeps trying to renew before it stops (default 10s).",
        ),
    ] = None,
    retry_period: Annotated[
        str | None,
        typer.Option(
            "--leader-elect-retry-period",
            callback=_duration("--leader-elect-retry-period"),
            help="How often the Lease is read or renewed (default 2s).",
        ),
    ] = None,
    resource_lock: Annotated[
        str | None,
        typer.Option("--leader-elect-resource-lock", help="Only 'leases', as in kube-scheduler."),
    ] = None,
    identity: Annotated[
        str | None, typer.Option(help="This replica's identity (default: hostname_uuid).")
    ] = None,
    node_shards: Annotated[
        int,
        typer.Option(
            "--node-shards",
            min=1,
            max=1024,
            help="Node shards of the cluster's shard map, if this replica creates it "
            "(default 16): active replicas split them and each binds only to the nodes "
            "of the shards it holds (docs/kubernetes.md, 'Several active replicas').",
        ),
    ] = 16,
    qps: Annotated[
        float | None,
        typer.Option(
            "--qps",
            "--kube-api-qps",
            min=0,
            help="Client QPS for binds and status (default 50, or clientConnection.qps).",
        ),
    ] = None,
    burst: Annotated[
        int | None,
        typer.Option(
            "--burst",
            "--kube-api-burst",
            min=1,
            help="Client burst (default 100, or clientConnection.burst).",
        ),
    ] = None,
    bind_concurrency: Annotated[
        int,
        typer.Option(
            min=1,
            help="At most this many bind requests in flight (and as many evictions, and "
            "as many DRA claim writes).",
        ),
    ] = 64,
    bind_address: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT to serve /metrics, /healthz and /readyz over HTTP (default "
            f"{HTTP_ADDRESS}; '' to disable), or an IP to serve them over HTTPS on "
            "--secure-port (kube-scheduler's form).",
        ),
    ] = None,
    dashboard: Annotated[
        bool,
        typer.Option(
            "--dashboard/--no-dashboard",
            help="Serve the read-only web dashboard (/dashboard/) and its JSON API "
            "(/dashboard/api) beside /metrics (docs/dashboard.md).",
        ),
    ] = True,
    webhook_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            help="Also serve the admission webhooks (as `shoal webhook`) over HTTPS on this "
            "port, from the scheduler's own view of the cluster (docs/kubernetes.md).",
        ),
    ] = None,
    webhook_cert_dir: Annotated[
        Path,
        typer.Option(file_okay=False, help="The webhooks' tls.crt and tls.key (--webhook-port)."),
    ] = Path("/tmp/k8s-webhook-server/serving-certs"),
    webhook_client_ca_file: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help="Answer admission reviews (--webhook-port) only for clients with a "
            "certificate signed by this CA (the API server's admission client "
            "certificate); /healthz stays open.",
        ),
    ] = None,
    webhook_generate_certs: Annotated[
        bool,
        typer.Option(
            "--webhook-generate-certs",
            help="Make a CA and the webhooks' certificate in --webhook-cert-dir when missing.",
        ),
    ] = False,
    secure_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            help=f"Serve over HTTPS on this port (default {SECURE_PORT} when --bind-address "
            "is an IP; 0 disables).",
        ),
    ] = None,
    tls_cert_file: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help="Certificate for HTTPS (default: a self-signed one made at start).",
        ),
    ] = None,
    tls_private_key_file: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="The certificate's private key."),
    ] = None,
    log_format: Annotated[
        str, typer.Option("--log-format", "--logging-format", help="json or text.")
    ] = "json",
    log_level: Annotated[
        str | None,
        typer.Option(help="debug, info, warning or error (default info, or from -v)."),
    ] = None,
    verbosity: Annotated[
        int | None,
        typer.Option(
            "-v",
            "--v",
            min=0,
            help="kube-scheduler's log verbosity: 4 and up logs at debug level, below at info.",
        ),
    ] = None,
    authentication_kubeconfig: Annotated[
        str | None,
        typer.Option(
            help="Check bearer tokens on the metrics/dashboard port with TokenReviews "
            "through this kubeconfig, as kube-scheduler does (needs HTTPS)."
        ),
    ] = None,
    authorization_kubeconfig: Annotated[
        str | None,
        typer.Option(
            help="Authorize requests on the metrics/dashboard port with "
            "SubjectAccessReviews through this kubeconfig (RBAC nonResourceURLs)."
        ),
    ] = None,
    authorization_always_allow_paths: Annotated[
        str,
        typer.Option(
            help="Paths served without authentication or authorization (comma-separated; "
            "'/x/*' allows a subtree)."
        ),
    ] = ",".join(ALWAYS_ALLOW),
    client_ca_file: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help="Accept client certificates signed by this CA on the HTTPS port (the "
            "user is the certificate's CN, its groups the O entries).",
        ),
    ] = None,
    requestheader_client_ca_file: Annotated[
        str | None, typer.Option(help=f"Ignored ({_NO_AUTH}).")
    ] = None,
    feature_gates: Annotated[
        str | None, typer.Option(help="Ignored (Shoal has no kube feature gates).")
    ] = None,
    profiling: Annotated[
        bool | None,
        typer.Option("--profiling/--no-profiling", help="Ignored (no profiling endpoints)."),
    ] = None,
    contention_profiling: Annotated[
        bool | None,
        typer.Option(
            "--contention-profiling/--no-contention-profiling",
            help="Ignored (no profiling endpoints).",
        ),
    ] = None,
    rescheduler: Annotated[
        bool,
        typer.Option(
            "--rescheduler",
            help="Enable the Rescheduler (move running pods to place waiting ones) in "
            "every profile that lacks it; args from the config's pluginConfig "
            "(docs/rescheduler.md).",
        ),
    ] = False,
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
    if resource_lock is not None and resource_lock != "leases":
        raise typer.BadParameter(
            f"{resource_lock!r} is not supported; only 'leases' (as in kube-scheduler)",
            param_hint="--leader-elect-resource-lock",
        )
    address = serving(
        bind_address, secure_port, tls_cert_file is not None or tls_private_key_file is not None
    )
    auth = AuthFlags(
        authentication_kubeconfig,
        authorization_kubeconfig,
        str(client_ca_file) if client_ca_file is not None else None,
        tuple(p.strip() for p in authorization_always_allow_paths.split(",") if p.strip()),
    )
    if not auth.enabled and address is not None and address.tls and _in_cluster():
        # kube-scheduler's default on its secure port: delegate to the API server it
        # runs against (the pod's service account), probes always allowed.
        auth = replace(auth, in_cluster=True)
    if auth.enabled and (address is None or not address.tls):
        raise typer.BadParameter(
            "authentication and authorization need the HTTPS port (tokens and client "
            "certificates must not cross the network in clear text): give --bind-address "
            "as an IP with --secure-port, as kube-scheduler",
            param_hint="--authentication-kubeconfig/--authorization-kubeconfig/--client-ca-file",
        )
    level = log_level or ("debug" if verbosity is not None and verbosity >= 4 else "info")
    configure_logging(log_format, level)
    election_flags = {
        "leaderElect": leader_elect,
        "resourceName": lease_name,
        "resourceNamespace": lease_namespace,
        "leaseDuration": lease_duration,
        "renewDeadline": renew_deadline,
        "retryPeriod": retry_period,
    }
    try:
        scheduler_config = _load(config, election_flags)
        if rescheduler:
            from shoal.plugins.rescheduler import with_rescheduler

            scheduler_config = with_rescheduler(scheduler_config)
    except ConfigError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(2) from None
    for warning in scheduler_config.warnings:
        log.warning("configuration: %s", warning, extra={"field": warning.path})
    given = locals()
    for name, flag in _IGNORED.items():
        if given[name] is not None:
            why = _WHY_IGNORED.get(flag, _NO_AUTH)
            log.warning(
                "%s is accepted for kube-scheduler compatibility and ignored: %s",
                flag,
                why,
                extra={"flag": flag},
            )
    from_file = scheduler_config.client_connection.get("kubeconfig")
    if kubeconfig is None and from_file:
        kubeconfig = Path(str(from_file))
    code = asyncio.run(
        _serve(
            scheduler_config,
            kubeconfig=str(kubeconfig) if kubeconfig else None,
            context=context,
            identity=identity or f"{socket.gethostname()}_{uuid.uuid4()}",
            qps=qps,
            burst=burst,
            bind_concurrency=bind_concurrency,
            node_shards=node_shards,
            address=address,
            tls_files=(tls_cert_file, tls_private_key_file),
            dashboard=dashboard,
            webhook=(
                webhook_port,
                webhook_cert_dir,
                webhook_generate_certs,
                webhook_client_ca_file,
            ),
            auth=auth,
        )
    )
    raise typer.Exit(code)


def _load(path: Path | None, election_flags: dict[str, Any]) -> KubeSchedulerConfiguration:
    """The configuration (the file, or the default profile) with the leader election
    flags applied over it and checked again, as kube-scheduler's ApplyLeaderElectionTo."""
    from shoal.config import ConfigError, default_config, leader_election_problems, load_config
    from shoal.scheduler import default_registry

    loaded = default_config() if path is None else load_config(path, registry=default_registry())
    flags = {k: v for k, v in election_flags.items() if v is not None}
    if not flags:
        return loaded
    election = {**loaded.leader_election, **flags}
    problems = leader_election_problems(election)
    if problems:
        source = "the --leader-elect-* flags" + (f" over {path}" if path else "")
        raise ConfigError(source, problems)
    return loaded.model_copy(update={"leader_election": election})


async def _serve(
    scheduler_config: KubeSchedulerConfiguration,
    *,
    kubeconfig: str | None,
    context: str | None,
    identity: str,
    qps: float | None,
    burst: int | None,
    bind_concurrency: int,
    address: Serving | None,
    tls_files: tuple[Path | None, Path | None],
    node_shards: int = 16,
    dashboard: bool = True,
    webhook: tuple[int | None, Path, bool, Path | None] = (None, Path(), False, None),
    auth: AuthFlags | None = None,
) -> int:

    from shoal.drivers.kube.backend import KubeBackend, KubeOptions
    from shoal.drivers.kube.leader import LeadershipLost
    from shoal.drivers.kube.tls import TlsError, server_context
    from shoal.web.server import HealthServer

    options = KubeOptions.from_config(
        scheduler_config,
        identity=identity,
        qps=qps,
        burst=burst,
        bind_concurrency=bind_concurrency,
        node_shards=node_shards,
    )
    election = scheduler_config.leader_election
    namespace = (
        election.get("resourceNamespace") or os.environ.get("POD_NAMESPACE") or "kube-system"
    )
    options = replace(
        options, leader=replace(options.leader, namespace=str(namespace), identity=identity)
    )
    ssl_context: ssl.SSLContext | None = None
    if address is not None and address.tls:
        try:
            ssl_context = server_context(*tls_files)
        except TlsError as err:
            log.error("cannot serve HTTPS: %s", err, extra={"error": str(err)})
            return 2
    auth = auth or AuthFlags(None, None, None)
    opened = await _connect_with_auth(kubeconfig, context, auth, ssl_context)
    if opened is None:
        return 2
    connection, (middlewares, auth_connections) = opened
    if auth.enabled:
        log.info(
            "requests to the serving port are authenticated and authorized through the API "
            "server%s; always allowed: %s",
            " (the pod's service account)" if auth.in_cluster else "",
            ", ".join(auth.always_allow) or "nothing",
        )
    elif address is not None and address.tls:
        log.warning(
            "serving HTTPS without authentication: not in a cluster and none of "
            "--authentication-kubeconfig, --authorization-kubeconfig, --client-ca-file given; "
            "anyone who reaches the port reads /metrics and the dashboard"
        )
    backend = KubeBackend(scheduler_config, connection, options)
    server: HealthServer | None = None
    if address is not None:
        routes = None
        if dashboard:
            from shoal.web.dashboard import attach_dashboard

            routes = attach_dashboard(
                backend.driver, backend.scheduler, build_on=backend.on_core
            ).install
        server = HealthServer(
            backend.metrics.registry,
            backend.healthz,
            backend.readyz,
            host=address.host,
            port=address.port,
            ssl_context=ssl_context,
            routes=routes,
            render_on=backend.on_core,
            middlewares=middlewares,
        )
        await server.start()
        scheme = "https" if address.tls else "http"
        log.info(
            "serving /metrics, /healthz and /readyz%s on %s://%s:%d",
            " (and the dashboard: /dashboard/, /dashboard/api)" if dashboard else "",
            scheme,
            server.host,
            server.port,
            extra={"address": f"{server.host}:{server.port}", "scheme": scheme},
        )
    webhooks = await _start_webhooks(backend, *webhook)
    if webhooks is False:
        if server is not None:
            await server.stop()
        await connection.close()
        return 2
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
        log.exception("exiting on an unexpected error")
        code = 1
    finally:
        if server is not None:
            await server.stop()
        if webhooks:
            await webhooks.stop()
        for extra in auth_connections:
            await extra.close()
        await connection.close()
    return code


def _in_cluster() -> bool:
    """In a pod with a service account (where kube-scheduler finds its in-cluster config)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and Path(SERVICE_ACCOUNT_TOKEN).is_file()


SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


@dataclass(frozen=True)
class AuthFlags:
    """kube-scheduler's delegated authentication and authorization flags. `in_cluster`:
    none was given on the HTTPS port inside a cluster, so both go to the API server
    through the pod's service account, as kube-scheduler's do by default."""

    authentication_kubeconfig: str | None
    authorization_kubeconfig: str | None
    client_ca_file: str | None
    always_allow: tuple[str, ...] = ALWAYS_ALLOW
    in_cluster: bool = False

    @property
    def enabled(self) -> bool:
        return bool(
            self.authentication_kubeconfig
            or self.authorization_kubeconfig
            or self.client_ca_file
            or self.in_cluster
        )

    async def middlewares_or_log(
        self, context: ssl.SSLContext | None
    ) -> tuple[list[Any], list[Any]] | None:
        """`middlewares`, or None after logging why they cannot be built (a kubeconfig
        or CA that cannot be read: the server must not start unprotected)."""
        try:
            return await self.middlewares(context)
        except Exception as err:
            log.error("cannot set up authentication: %s", err, extra={"error": str(err)})
            return None

    async def middlewares(self, context: ssl.SSLContext | None) -> tuple[list[Any], list[Any]]:
        """The aiohttp middlewares for the port (none when nothing is enabled) and the
        connections opened for them (closed by the caller at exit)."""
        if not self.enabled:
            return [], []
        delegated, opened = await self.build(context)
        return [delegated.middleware], opened

    async def build(self, context: ssl.SSLContext | None) -> tuple[Any, list[Any]]:
        """The middleware's `DelegatedAuth` and the connections it opened."""
        from shoal.drivers.kube.client import ClientSettings, connect
        from shoal.servers.auth import DelegatedAuth, client_ca_context

        opened = []

        async def client(path: str | None, name: str) -> Any:
            if not path and not self.in_cluster:
                return None
            connection = await connect(path or None)  # None: the pod's service account
            opened.append(connection)
            return connection.client(name, ClientSettings(qps=50, burst=100, timeout=10))

        if self.client_ca_file and context is not None:
            client_ca_context(context, self.client_ca_file)
        delegated = DelegatedAuth(
            authenticator=await client(self.authentication_kubeconfig, "authentication"),
            authorizer=await client(self.authorization_kubeconfig, "authorization"),
            client_certificates=bool(self.client_ca_file),
            always_allow=self.always_allow,
        )
        return delegated, opened


async def _connect_with_auth(
    kubeconfig: str | None,
    context: str | None,
    auth: AuthFlags,
    ssl_context: ssl.SSLContext | None,
) -> tuple[Any, Any] | None:
    """The cluster connection and the serving port's auth middlewares (with the
    connections they hold); None when either cannot be had (logged, and the connection
    closed again)."""
    from shoal.drivers.kube.client import connect

    try:
        connection = await connect(kubeconfig, context=context)
    except Exception as err:  # kubeconfig missing or unreadable, not in a cluster
        log.error("cannot load the cluster configuration: %s", err, extra={"error": str(err)})
        return None
    built = await auth.middlewares_or_log(ssl_context)
    if built is None:
        await connection.close()
        return None
    return connection, built


async def _start_webhooks(
    backend: Any, port: int | None, cert_dir: Path, generate: bool, client_ca: Path | None = None
) -> Any:
    """The admission webhooks served beside the scheduler (None: not asked for; False:
    they cannot be served, which is logged)."""
    if port is None:
        return None
    from shoal.commands.webhook import client_ca_middlewares, webhook_tls
    from shoal.drivers.kube.tls import TlsError
    from shoal.servers.webhook import SchedulerTenancySource, WebhookServer

    try:
        tls = webhook_tls(cert_dir, generate, None)
        middlewares = client_ca_middlewares(tls, client_ca)
        if middlewares is None:
            return False
        server = WebhookServer(
            SchedulerTenancySource(backend),
            tls,
            host="0.0.0.0",
            port=port,
            scheduler_name=next(iter(backend.scheduler.profiles)),
            default_queue=backend.scheduler.tenant_queues.default_queue,
            middlewares=middlewares,
        )
        await server.start()
    except (TlsError, OSError) as err:
        log.error("cannot serve the webhooks: %s", err, extra={"error": str(err)})
        return False
    log.info(
        "serving the admission webhooks on https://0.0.0.0:%d",
        server.port,
        extra={"address": f"0.0.0.0:{server.port}"},
    )
    return server


def register(app: typer.Typer) -> None:
    """Add `run` and `extender` to the `shoal` command line."""
    app.command("run", cls=KubeSchedulerFlags)(run)
    app.command("extender")(extender)


# ---- `shoal extender` -------------------------------------------------------------------

EXTENDER_ADDRESS = "127.0.0.1:8888"
# What `shoal extender` runs without --config: kube-scheduler's default profile name (the
# pods it serves), Shoal's default plugins, GPU sharing and fragmentation-aware scoring.
EXTENDER_DEFAULT_CONFIG: dict[str, Any] = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "default-scheduler",
            "plugins": {
                "multiPoint": {
                    "enabled": [{"name": "GpuShare"}, {"name": "GpuFragmentation", "weight": 1}]
                }
            },
        }
    ],
}


def extender(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig",
            envvar="KUBECONFIG",
            dir_okay=False,
            help="Kubeconfig file; without it the pod's service account (in-cluster).",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            exists=True,
            dir_okay=False,
            help="A KubeSchedulerConfiguration whose profile is named like the pods' "
            "schedulerName (default: 'default-scheduler' with Shoal's default plugins plus "
            "GpuShare and GpuFragmentation).",
        ),
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="Kubeconfig context to use.")
    ] = None,
    address: Annotated[
        str, typer.Option(help="HOST:PORT to serve the extender verbs on.")
    ] = EXTENDER_ADDRESS,
    url_prefix: Annotated[
        str,
        typer.Option(
            help="Path the verbs are served under (kube-scheduler's urlPrefix is "
            "scheme://HOST:PORT + this)."
        ),
    ] = "/",
    tls_cert_file: Annotated[
        Path | None,
        typer.Option(
            exists=True, dir_okay=False, help="Serve HTTPS with this certificate (enableHTTPS)."
        ),
    ] = None,
    tls_private_key_file: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="The certificate's private key."),
    ] = None,
    client_ca_file: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help="Answer the verbs only for clients with a certificate signed by this CA "
            "(kube-scheduler's extender tlsConfig certFile/keyFile); needs HTTPS.",
        ),
    ] = None,
    authorization_kubeconfig: Annotated[
        str | None,
        typer.Option(
            help="Also authorize each verb for the certificate's user with a "
            "SubjectAccessReview (RBAC nonResourceURLs, verb post) through this kubeconfig."
        ),
    ] = None,
    identity: Annotated[
        str | None, typer.Option(help="Written on the pods it binds (default: hostname_uuid).")
    ] = None,
    qps: Annotated[float | None, typer.Option("--qps", "--kube-api-qps", min=0)] = None,
    burst: Annotated[int | None, typer.Option("--burst", "--kube-api-burst", min=1)] = None,
    log_format: Annotated[
        str, typer.Option("--log-format", "--logging-format", help="json or text.")
    ] = "json",
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Serve Shoal's policies as an HTTP extender for a stock kube-scheduler.

    Verbs filter, prioritize and bind (configure kube-scheduler's `extenders:` with
    filterVerb: filter, prioritizeVerb: prioritize, bindVerb: bind, nodeCacheCapable:
    true). Shoal watches the cluster itself and answers from its own cache; the bind
    writes shoal.dev/gpu-index on GPU pods. Exits 2 on a bad configuration.
    """
    from shoal.config import ConfigError, load_config, parse_config
    from shoal.drivers.kube.logs import configure_logging
    from shoal.scheduler import default_registry

    if log_format not in ("json", "text"):
        raise typer.BadParameter("must be json or text", param_hint="--log-format")
    configure_logging(log_format, log_level)
    try:
        host, port = _host_port(address)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--address") from None
    if (tls_cert_file is None) != (tls_private_key_file is None):
        raise typer.BadParameter("give both --tls-cert-file and --tls-private-key-file, or neither")
    if (client_ca_file is not None or authorization_kubeconfig) and tls_cert_file is None:
        raise typer.BadParameter(
            "client certificates need HTTPS: give --tls-cert-file and --tls-private-key-file "
            "(and enableHTTPS: true in kube-scheduler's extender configuration)",
            param_hint="--client-ca-file",
        )
    if authorization_kubeconfig and client_ca_file is None:
        raise typer.BadParameter(
            "authorization needs a user: give --client-ca-file (kube-scheduler presents its "
            "extender client certificate)",
            param_hint="--authorization-kubeconfig",
        )
    try:
        scheduler_config = (
            parse_config(
                EXTENDER_DEFAULT_CONFIG,
                "the default extender configuration",
                registry=default_registry(),
            )
            if config is None
            else load_config(config, registry=default_registry())
        )
    except ConfigError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(2) from None
    if scheduler_config.extenders:
        typer.echo(
            f"{config}: an extender does not call extenders itself; remove `extenders:`", err=True
        )
        raise typer.Exit(2)
    code = asyncio.run(
        _serve_extender(
            scheduler_config,
            kubeconfig=str(kubeconfig) if kubeconfig else None,
            context=context,
            identity=identity or f"{socket.gethostname()}_{uuid.uuid4()}",
            qps=qps,
            burst=burst,
            host=host,
            port=port,
            prefix=url_prefix,
            tls_files=(tls_cert_file, tls_private_key_file),
            auth=AuthFlags(
                None,
                authorization_kubeconfig,
                str(client_ca_file) if client_ca_file is not None else None,
                ("/healthz", "/readyz"),
            ),
        )
    )
    raise typer.Exit(code)


async def _serve_extender(
    scheduler_config: KubeSchedulerConfiguration,
    *,
    kubeconfig: str | None,
    context: str | None,
    identity: str,
    qps: float | None,
    burst: int | None,
    host: str,
    port: int,
    prefix: str,
    tls_files: tuple[Path | None, Path | None],
    auth: AuthFlags | None = None,
) -> int:
    from aiohttp import web

    from shoal.drivers.kube.backend import KubeBackend, KubeOptions
    from shoal.drivers.kube.tls import TlsError, server_context
    from shoal.servers.extender import ExtenderService

    options = KubeOptions.from_config(
        scheduler_config, identity=identity, qps=qps, burst=burst, leader_elect=False
    )

    options = replace(options, passive=True, leader_elect=False)
    ssl_context: ssl.SSLContext | None = None
    if tls_files[0] is not None:
        try:
            ssl_context = server_context(*tls_files)
        except TlsError as err:
            log.error("cannot serve HTTPS: %s", err, extra={"error": str(err)})
            return 2
    opened = await _connect_with_auth(
        kubeconfig, context, auth or AuthFlags(None, None, None), ssl_context
    )
    if opened is None:
        return 2
    connection, (middlewares, auth_connections) = opened
    backend = KubeBackend(scheduler_config, connection, options)
    service = ExtenderService(backend)
    app = service.app(prefix, middlewares=middlewares)

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(request: web.Request) -> web.Response:
        if backend.synced:
            return web.Response(text="ok")
        return web.Response(status=503, text="informers not synced")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    scheme = "https" if ssl_context is not None else "http"
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    log.info(
        "serving extender verbs on %s://%s:%d%s (profiles %s)",
        scheme,
        host,
        bound,
        prefix.rstrip("/") or "",
        ", ".join(backend.scheduler.profiles),
        extra={"address": f"{host}:{bound}", "scheme": scheme},
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, backend.stop)
    code = 0
    try:
        await backend.run()
    except Exception:
        log.exception("the extender stopped on an unexpected error")
        code = 1
    finally:
        await runner.cleanup()
        for extra in auth_connections:
            await extra.close()
        await connection.close()
    return code
