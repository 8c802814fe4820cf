"""Shoal's admission webhooks served over HTTPS (aiohttp): `shoal webhook`, or `shoal run
--webhook-port` beside the scheduler.

* `POST /validate`: Queue, QueueBinding, NodePool, ElasticQuota and PodGroup objects,
  checked against the tenancy objects in the cluster (`admission.validate`);
* `POST /mutate-pods`: pods created in a namespace bound by a QueueBinding get Shoal's
  scheduler name and the binding's queue (`admission.mutate_pod`);
* `GET /healthz`.

Where the objects in the cluster come from is a `TenancySource`: `ApiTenancySource`
lists them from the API server for every review (the standalone webhook: an object
created a moment before is always seen, e.g. a parent queue applied together with its
children), `SchedulerTenancySource` reads the running scheduler's informer copies
(`shoal run`: no requests, as current as the scheduler's own view). The certificate is
`tls.crt`/`tls.key` in a directory (cert-manager's Secret layout, or generated), reloaded
when the files change. A review that cannot be answered (the API server unreachable)
is answered with an HTTP 500, and the configuration's failurePolicy decides.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from aiohttp import web

from shoal.api.queue import DEFAULT_QUEUE
from shoal.config.types import DEFAULT_PROFILE_NAME
from shoal.drivers.kube.backend import KubeBackend
from shoal.drivers.kube.client import JSON, ApiError, KubeClient
from shoal.drivers.kube.resources import (
    ELASTIC_QUOTAS,
    ELASTIC_QUOTAS_SIGS,
    NAMESPACES,
    NODE_POOLS,
    QUEUE_BINDINGS,
    QUEUES,
    ResourceKind,
)
from shoal.drivers.kube.tls import ReloadingContext
from shoal.servers.admission import (
    Verdict,
    in_force,
    mutate_pod,
    review_response,
    tenancy_objects,
    validate,
)
from shoal.tenancy.validation import TenancyObjects

__all__ = [
    "ApiTenancySource",
    "SchedulerTenancySource",
    "TenancySource",
    "WebhookServer",
]

log = logging.getLogger("shoal.kube.webhook")

TENANCY_KINDS = (QUEUES, QUEUE_BINDINGS, NODE_POOLS, ELASTIC_QUOTAS, ELASTIC_QUOTAS_SIGS)


class TenancySource(Protocol):
    async def objects(self) -> TenancyObjects:
        """The tenancy objects in the cluster (as they are, valid or not)."""
        ...

    async def namespace_labels(self, namespace: str) -> dict[str, str]: ...


class ApiTenancySource:
    """Lists the objects from the API server for every review (a CRD that is not
    installed counts as no objects)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def _list(self, kind: ResourceKind) -> list[JSON]:
        try:
            body = await self.client.request("GET", kind.path())
        except ApiError as err:
            if err.not_found:
                return []
            raise
        items = body.get("items") if isinstance(body, dict) else None
        return [i for i in items or [] if isinstance(i, dict)]

    async def objects(self) -> TenancyObjects:
        listed = await asyncio.gather(*(self._list(k) for k in TENANCY_KINDS))
        return tenancy_objects(dict(zip(TENANCY_KINDS, listed, strict=True)))

    async def namespace_labels(self, namespace: str) -> dict[str, str]:
        try:
            body = await self.client.request("GET", NAMESPACES.path(None, namespace))
        except ApiError as err:
            if err.not_found:
                return {}
            raise
        labels = ((body or {}).get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}


class SchedulerTenancySource:
    """The running scheduler's copies (`KubeBackend.tenancy`, kept by its informers) and
    the namespace labels it knows."""

    def __init__(self, backend: KubeBackend) -> None:
        self.backend = backend

    async def objects(self) -> TenancyObjects:
        sync = self.backend.tenancy

        def copy() -> TenancyObjects:
            return TenancyObjects(
                dict(sync.queues), dict(sync.elastic), dict(sync.bindings), dict(sync.pools)
            )

        # Copied where the core runs (its thread writes them).
        objects: TenancyObjects = await self.backend.on_core(copy)
        return objects

    async def namespace_labels(self, namespace: str) -> dict[str, str]:
        queues = self.backend.scheduler.tenant_queues

        def copy() -> dict[str, str]:
            labels: Mapping[str, str] = queues.namespace_labels.get(namespace, {})
            return dict(labels)

        labels: dict[str, str] = await self.backend.on_core(copy)
        return labels


class WebhookServer:
    """The HTTPS server of the admission webhooks."""

    def __init__(
        self,
        source: TenancySource,
        tls: ReloadingContext,
        *,
        host: str = "0.0.0.0",
        port: int = 9443,
        scheduler_name: str = DEFAULT_PROFILE_NAME,
        default_queue: str = DEFAULT_QUEUE,
        reload_seconds: float = 10.0,
        middlewares: Sequence[Any] = (),
    ) -> None:
        self.source = source
        self.tls = tls
        # Before every route (client certificates: `shoal.servers.auth`).
        self.middlewares = tuple(middlewares)
        self.host = host
        self.port = port
        self.scheduler_name = scheduler_name
        self.default_queue = default_queue
        self.reload_seconds = reload_seconds
        self.reviews = 0
        self.denied = 0
        self._runner: web.AppRunner | None = None
        self._reloader: asyncio.Task[None] | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=8 * 2**20, middlewares=self.middlewares)
        app.router.add_post("/validate", self._validate)
        app.router.add_post("/mutate-pods", self._mutate)
        app.router.add_get("/healthz", self._healthz)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(
            self.app(), access_log=None, handle_signals=False, shutdown_timeout=0.1
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.tls.context)
        await site.start()
        for address in self._runner.addresses:
            if isinstance(address, tuple) and len(address) >= 2:
                self.port = int(address[1])
                break
        if self.reload_seconds > 0:
            self._reloader = asyncio.create_task(self._reload(), name="webhook-cert-reload")

    async def stop(self) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
            self._reloader = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _reload(self) -> None:
        while True:
            await asyncio.sleep(self.reload_seconds)
            before = self.tls.reloads
            if not self.tls.check():
                log.warning(
                    "cannot reload the webhook certificate %s; the one loaded stays in use",
                    self.tls.cert_file,
                )
            elif self.tls.reloads != before:
                log.info("reloaded the webhook certificate %s", self.tls.cert_file)

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _review(self, request: web.Request) -> JSON | web.Response:
        try:
            review = await request.json()
        except ValueError:
            return web.Response(status=400, text="the body is not JSON (an AdmissionReview)")
        if not isinstance(review, dict) or not isinstance(review.get("request"), dict):
            return web.Response(status=400, text="expected an AdmissionReview with a request")
        self.reviews += 1
        return review

    async def _validate(self, request: web.Request) -> web.Response:
        review = await self._review(request)
        if isinstance(review, web.Response):
            return review
        try:
            objects = await self.source.objects()
        except ApiError as err:
            log.warning("cannot list the tenancy objects to review a request: %s", err)
            return web.Response(status=500, text=f"cannot list the tenancy objects: {err}")
        verdict = validate(review["request"], objects, self.default_queue)
        return self._answer(review, verdict)

    async def _mutate(self, request: web.Request) -> web.Response:
        review = await self._review(request)
        if isinstance(review, web.Response):
            return review
        req = review["request"]
        if req.get("operation") != "CREATE":
            return self._answer(review, Verdict(True))
        try:
            bindings = in_force(await self.source.objects(), self.default_queue).bindings
            labels: dict[str, str] = {}
            if any(b.spec.namespace_selector is not None for b in bindings.values()):
                labels = await self.source.namespace_labels(str(req.get("namespace", "")))
        except ApiError as err:
            log.warning("cannot read the QueueBindings to admit a pod: %s", err)
            return web.Response(status=500, text=f"cannot read the QueueBindings: {err}")
        verdict = mutate_pod(req, bindings, labels, self.scheduler_name)
        return self._answer(review, verdict)

    def _answer(self, review: JSON, verdict: Verdict) -> web.Response:
        if not verdict.allowed:
            self.denied += 1
            req = review.get("request") or {}
            log.info(
                "refused %s %s: %s",
                (req.get("kind") or {}).get("kind", "object"),
                req.get("name", ""),
                verdict.message,
                extra={"uid": req.get("uid", "")},
            )
        return web.json_response(review_response(review, verdict))
