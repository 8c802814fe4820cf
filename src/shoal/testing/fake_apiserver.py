"""A test-only Kubernetes API server stand-in that speaks the real HTTP protocol.

No maintained Python package emulates the API server faithfully enough (watches,
bookmarks, 410 Gone, subresources), and kwok/envtest binaries cannot be fetched here, so
this is a small fake built on aiohttp. It is what the kube backend's tests and the bind
benchmark run against; it is not for production.

What it implements, with the real server's semantics:

* Every resource (core, grouped, and CRDs created through
  apiextensions.k8s.io/v1) with get, list (paginated with `limit`/`continue`, from a
  consistent snapshot), create (generateName, AlreadyExists), update (optimistic
  concurrency on `metadata.resourceVersion`: 409 Conflict), patch (merge patch and
  strategic merge patch, with a resourceVersion precondition when the patch names one),
  delete; one global resourceVersion counter, as etcd's.
* Watches: `?watch=1&resourceVersion=&allowWatchBookmarks=true&timeoutSeconds=`, with
  synthetic ADDED events when started without a resourceVersion, replay from a
  resourceVersion, periodic BOOKMARK events, and an ERROR event with a 410 Expired
  Status when the resourceVersion is older than the retained history (`compact()`).
* Custom resources (created through a CRD or `register`) with the status subresource:
  `/status` writes only the status, writes to the object itself leave the status alone
  and a create drops it (as the real server's customResourceStrategy); without the
  subresource, `/status` is 404 and the status is an ordinary field.
* `pods/binding`: binds once; 409 Conflict when the pod is already bound, is being
  deleted, or its UID does not match; 404 when it is gone. Sets PodScheduled=True.
* `pods/status` (PUT and PATCH), `pods/eviction` (policy/v1 Eviction honouring
  PodDisruptionBudgets: 429 when the budget allows no disruption; pods that are not
  Running can always be evicted, as upstream's canIgnorePDB).
* events.k8s.io/v1 Events and coordination.k8s.io/v1 Leases are ordinary resources.
* TokenReviews and SubjectAccessReviews (non-resource URLs) answered from `tokens` and
  `allowed`, which a test fills, for the delegated authentication of Shoal's ports.
* Fault injection (`inject`): error codes, delays, dropped connections, per method,
  path pattern, user agent, watch or not, for a number of requests; `drop_watches()`
  cuts every open watch; `stall_watches()` makes every open watch go silent without
  closing it (a half-open connection: no events, no bookmarks, no reset);
  `delay_watch_events()` makes a resource's watch events arrive late, one by one (a
  lagging watch cache).

Deliberately missing: authentication of its own clients (every request is allowed),
admission and field validation (the fake stores what it is given, which is how the
tests feed bad objects), label and field selectors, graceful deletion (deletes are
immediate), kubelets (pods stay Pending unless a test sets their phase through
`pods/status`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import copy
import itertools
import json
import math
import re
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

__all__ = ["FakeApiServer", "Fault", "RecordedRequest", "main"]

JSON = dict[str, Any]

# (group, plural) -> (version, kind, namespaced)
BUILTIN: dict[tuple[str, str], tuple[str, str, bool]] = {
    ("", "pods"): ("v1", "Pod", True),
    ("", "nodes"): ("v1", "Node", False),
    ("", "namespaces"): ("v1", "Namespace", False),
    ("", "events"): ("v1", "Event", True),
    ("", "configmaps"): ("v1", "ConfigMap", True),
    ("", "persistentvolumeclaims"): ("v1", "PersistentVolumeClaim", True),
    ("", "persistentvolumes"): ("v1", "PersistentVolume", False),
    ("storage.k8s.io", "storageclasses"): ("v1", "StorageClass", False),
    ("storage.k8s.io", "csinodes"): ("v1", "CSINode", False),
    ("storage.k8s.io", "csidrivers"): ("v1", "CSIDriver", False),
    ("storage.k8s.io", "csistoragecapacities"): ("v1", "CSIStorageCapacity", True),
    ("scheduling.k8s.io", "priorityclasses"): ("v1", "PriorityClass", False),
    ("scheduling.k8s.io", "podgroups"): ("v1alpha2", "PodGroup", True),
    ("policy", "poddisruptionbudgets"): ("v1", "PodDisruptionBudget", True),
    ("coordination.k8s.io", "leases"): ("v1", "Lease", True),
    ("events.k8s.io", "events"): ("v1", "Event", True),
    ("apiextensions.k8s.io", "customresourcedefinitions"): (
        "v1",
        "CustomResourceDefinition",
        False,
    ),
    ("authentication.k8s.io", "tokenreviews"): ("v1", "TokenReview", False),
    ("authorization.k8s.io", "subjectaccessreviews"): ("v1", "SubjectAccessReview", False),
}

# Strategic merge patch: lists merged by key instead of replaced.
MERGE_KEYS = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "tolerations": "key",
    "ports": "containerPort",
    "ownerReferences": "uid",
}


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str, **details: Any) -> JSON:
    body: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class HttpError(Exception):
    def __init__(self, code: int, reason: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def response(self) -> web.Response:
        return web.json_response(
            status_body(self.code, self.reason, self.message, **self.details), status=self.code
        )


@dataclass
class Fault:
    """Make matching requests fail, hang or drop. `times=None`: forever."""

    method: str | None = None
    path: str | None = None  # regular expression searched in the URL path
    status: int = 500
    delay: float = 0.0
    times: int | None = 1
    user_agent: str | None = None  # substring of the User-Agent header
    watch: bool | None = None  # only watch requests (True) or only others (False)
    drop: bool = False  # close the connection without answering
    applied: bool = False  # with drop: the request takes effect first (a lost answer)
    reason: str = ""
    message: str = "injected fault"
    hits: int = 0

    def matches(self, request: web.Request, is_watch: bool) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.method and request.method != self.method.upper():
            return False
        if self.path and not re.search(self.path, request.path):
            return False
        if self.user_agent and self.user_agent not in request.headers.get("User-Agent", ""):
            return False
        return self.watch is None or self.watch == is_watch


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    verb: str  # get list watch create update patch delete
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    status: int
    user_agent: str


@dataclass(frozen=True)
class Binding:
    uid: str
    key: str
    node: str
    user_agent: str
    at: float


@dataclass
class _Watcher:
    group: str
    plural: str
    namespace: str
    queue: asyncio.Queue[tuple[str, JSON] | None] = field(default_factory=asyncio.Queue)


@dataclass(frozen=True)
class _Route:
    group: str
    version: str
    plural: str
    namespace: str
    name: str
    subresource: str


class FakeApiServer:
    """Start with `async with FakeApiServer() as api:`; `api.url` is the base URL."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 1.0,
        history: int = 100_000,
        page_snapshots: int = 64,
    ) -> None:
        self.host = host
        self.port = port
        self.bookmark_interval = bookmark_interval
        self.history_limit = history
        self.resources: dict[tuple[str, str], tuple[str, str, bool]] = dict(BUILTIN)
        # Custom resources (group, plural) -> whether they have the status subresource.
        self.custom: dict[tuple[str, str], bool] = {}
        self.objects: dict[tuple[str, str], dict[str, JSON]] = {}
        self.rv = 0
        self.history: deque[tuple[int, str, str, str, JSON]] = deque()
        self.compacted_rv = 0  # events at or below this resourceVersion are gone
        self.faults: list[Fault] = []
        self.requests: list[RecordedRequest] = []
        self.bindings: list[Binding] = []
        self.binding_conflicts = 0
        # TokenReviews: token -> (user name, groups); SubjectAccessReviews: the
        # (user, path, verb) allowed on non-resource URLs.
        self.tokens: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.allowed: set[tuple[str, str, str]] = set()
        self.evictions: list[str] = []
        # Pods evicted under each budget: still expected (their controller would recreate
        # them), as the disruption controller's status.disruptedPods.
        self._disrupted: dict[str, int] = {}
        self._watchers: list[_Watcher] = []
        self._event_delays: dict[tuple[str, str], float] = {}
        self._drop_generation = 0
        self._snapshots: dict[str, list[JSON]] = {}
        self._page_snapshots = page_snapshots
        self._token = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()

    # ---- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> FakeApiServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=0.1
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        for address in self._runner.addresses:
            if isinstance(address, tuple) and len(address) >= 2:
                self.port = int(address[1])
                break

    async def stop(self) -> None:
        self._closing.set()
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def kubeconfig(self, path: Path, user: str = "shoal") -> Path:
        """Write a kubeconfig that points at this server."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": user, "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": user}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # ---- test controls ---------------------------------------------------------------

    def inject(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        self.faults.clear()

    def drop_watches(self) -> None:
        """Cut every open watch connection (the client sees a broken stream)."""
        self._drop_generation += 1
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(("DROP", {}))

    def open_watches(self, plural: str) -> int:
        """How many watches of the resource are open (registered) now."""
        return sum(1 for w in self._watchers if w.plural == plural)

    def stall_watches(self) -> None:
        """Make every open watch go silent, its connection left open (as if half-open):
        nothing more is sent on it. Watches opened later work normally."""
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(("STALL", {}))

    def delay_watch_events(self, group: str, plural: str, seconds: float) -> None:
        """Send each watch event of the resource `seconds` after the previous one (and
        not before `seconds` passed): clients see changes late and one at a time."""
        self._event_delays[(group, plural)] = seconds

    def compact(self) -> None:
        """Forget all history: watches from any earlier resourceVersion get 410."""
        self.history.clear()
        self.compacted_rv = self.rv

    def register(
        self,
        group: str,
        version: str,
        plural: str,
        kind: str,
        namespaced: bool,
        status: bool = True,
    ) -> None:
        """Serve a custom resource (as an installed CRD would), with the status
        subresource unless `status` is False."""
        self.resources[(group, plural)] = (version, kind, namespaced)
        self.custom[(group, plural)] = status

    def binds_of(self, uid: str) -> list[Binding]:
        return [b for b in self.bindings if b.uid == uid]

    # ---- direct store access (no HTTP) -------------------------------------------------

    def create(self, api_version: str, plural: str, obj: JSON) -> JSON:
        group = api_version.rpartition("/")[0]
        meta = obj.setdefault("metadata", {})
        namespaced = self._resource(group, plural)[2]
        namespace = str(meta.get("namespace") or ("default" if namespaced else ""))
        return self._create(group, plural, namespace, obj)

    def get(self, group: str, plural: str, namespace: str, name: str) -> JSON | None:
        return self.objects.get((group, plural), {}).get(self._key(namespace, name))

    def list_objects(self, group: str, plural: str) -> list[JSON]:
        return list(self.objects.get((group, plural), {}).values())

    def pods(self) -> list[JSON]:
        return self.list_objects("", "pods")

    def update(self, group: str, plural: str, obj: JSON) -> JSON:
        """Replace an object without a resourceVersion check (as another client would)."""
        meta = obj["metadata"]
        return self._replace(group, plural, str(meta.get("namespace") or ""), meta["name"], obj)

    def delete(self, group: str, plural: str, namespace: str, name: str) -> JSON:
        return self._delete(group, plural, namespace, name)

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> JSON:
        """What a kubelet would report (through pods/status)."""
        return self.set_pod_status(namespace, name, phase=phase)

    def set_pod_status(self, namespace: str, name: str, **fields: Any) -> JSON:
        """Set fields of a pod's status (through pods/status), as a kubelet or a
        scheduler would write them."""
        pod = self._existing("", "pods", namespace, name)
        status = {**(pod.get("status") or {}), **fields}
        return self._replace("", "pods", namespace, name, {"status": status}, "status")

    def bind(
        self,
        namespace: str,
        name: str,
        node: str,
        user_agent: str = "test",
        annotations: dict[str, str] | None = None,
    ) -> None:
        """Bind as some other scheduler would (with these Binding annotations)."""
        body: JSON = {"target": {"name": node}, "metadata": {"annotations": annotations or {}}}
        self._bind(namespace, name, body, user_agent)

    # ---- storage ---------------------------------------------------------------------

    def _resource(self, group: str, plural: str) -> tuple[str, str, bool]:
        found = self.resources.get((group, plural))
        if found is None:
            raise HttpError(
                404,
                "NotFound",
                f"the server could not find the requested resource ({plural}.{group})",
            )
        return found

    @staticmethod
    def _key(namespace: str, name: str) -> str:
        return f"{namespace}/{name}" if namespace else name

    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _emit(self, group: str, plural: str, kind: str, obj: JSON) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        snapshot = copy.deepcopy(obj)
        self.history.append((rv, group, plural, kind, snapshot))
        while len(self.history) > self.history_limit:
            old_rv, *_ = self.history.popleft()
            self.compacted_rv = old_rv
        namespace = str(obj["metadata"].get("namespace") or "")
        for watcher in self._watchers:
            if (watcher.group, watcher.plural) == (group, plural) and (
                not watcher.namespace or watcher.namespace == namespace
            ):
                watcher.queue.put_nowait((kind, snapshot))

    def _typed(self, group: str, plural: str, obj: JSON) -> JSON:
        version, kind, _ = self._resource(group, plural)
        obj["apiVersion"] = f"{group}/{version}" if group else version
        obj["kind"] = kind
        return obj

    def _create(self, group: str, plural: str, namespace: str, obj: JSON) -> JSON:
        _, kind, namespaced = self._resource(group, plural)
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise HttpError(422, "Invalid", f"{kind}: metadata.name: Required value")
            meta["name"] = prefix + uuid.uuid4().hex[:5]
        if namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        store = self.objects.setdefault((group, plural), {})
        key = self._key(str(meta.get("namespace") or ""), meta["name"])
        if key in store:
            raise HttpError(
                409, "AlreadyExists", f'{plural}.{group} "{meta["name"]}" already exists'
            )
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        meta.pop("deletionTimestamp", None)
        if (group, plural) == ("", "pods"):
            # The API server resets a new pod's status (PrepareForCreate).
            obj["status"] = {"phase": "Pending"}
        elif self.custom.get((group, plural)):
            obj.pop("status", None)  # "create cannot set status"
        meta["resourceVersion"] = str(self._next_rv())
        self._typed(group, plural, obj)
        store[key] = obj
        self._emit(group, plural, "ADDED", obj)
        if (group, plural) == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._install_crd(obj)
        return obj

    def _install_crd(self, crd: JSON) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
        stored = next((v for v in versions if v.get("storage")), None)
        if stored is None and versions:
            stored = versions[0]
        self.register(
            spec.get("group", ""),
            stored["name"] if stored else "v1",
            names.get("plural", ""),
            names.get("kind", ""),
            spec.get("scope", "Namespaced") == "Namespaced",
            status="status" in ((stored or {}).get("subresources") or {}),
        )

    def _existing(self, group: str, plural: str, namespace: str, name: str) -> JSON:
        self._resource(group, plural)
        obj = self.objects.get((group, plural), {}).get(self._key(namespace, name))
        if obj is None:
            resource = f"{plural}.{group}" if group else plural
            raise HttpError(404, "NotFound", f'{resource} "{name}" not found')
        return obj

    def _store(self, group: str, plural: str, obj: JSON) -> JSON:
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._next_rv())
        self._typed(group, plural, obj)
        key = self._key(str(meta.get("namespace") or ""), meta["name"])
        self.objects[(group, plural)][key] = obj
        self._emit(group, plural, "MODIFIED", obj)
        return obj

    def _check_rv(self, current: JSON, wanted: str | None) -> None:
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            name = current["metadata"]["name"]
            raise HttpError(
                409,
                "Conflict",
                f"Operation cannot be fulfilled on {current.get('kind', 'object').lower()}s "
                f'"{name}": the object has been modified; please apply your changes to the '
                "latest version and try again",
            )

    def _replace(
        self, group: str, plural: str, namespace: str, name: str, obj: JSON, subresource: str = ""
    ) -> JSON:
        current = self._existing(group, plural, namespace, name)
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        self._check_rv(current, meta.get("resourceVersion"))
        if meta.get("name", name) != name:
            raise HttpError(400, "BadRequest", "the name of the object does not match the URL")
        new = copy.deepcopy(current)
        if subresource == "status":
            new["status"] = obj.get("status", {})
        else:
            keep_status = (group, plural) == ("", "pods") or self.custom.get((group, plural))
            status = new.get("status")
            new = obj
            for field_name in ("uid", "creationTimestamp", "namespace", "deletionTimestamp"):
                if field_name in current["metadata"]:
                    new["metadata"][field_name] = current["metadata"][field_name]
            new["metadata"]["name"] = name
            if keep_status:
                if status is not None:
                    new["status"] = status
                else:
                    new.pop("status", None)
        return self._store(group, plural, new)

    def _patch(
        self,
        group: str,
        plural: str,
        namespace: str,
        name: str,
        patch: JSON,
        content_type: str,
        subresource: str,
    ) -> JSON:
        current = self._existing(group, plural, namespace, name)
        self._check_rv(current, (patch.get("metadata") or {}).get("resourceVersion"))
        strategic = "strategic-merge-patch" in content_type
        if not strategic and "merge-patch" not in content_type:
            raise HttpError(415, "UnsupportedMediaType", f"unsupported patch type {content_type}")
        new = copy.deepcopy(current)
        if subresource == "status":
            patch = {"status": patch.get("status", {})}
        elif (group, plural) == ("", "pods") or self.custom.get((group, plural)):
            patch = {k: v for k, v in patch.items() if k != "status"}
        patch = {k: v for k, v in patch.items() if k not in ("apiVersion", "kind")}
        meta_patch = patch.get("metadata")
        if isinstance(meta_patch, dict):
            meta_patch.pop("resourceVersion", None)
            for fixed in ("uid", "name", "namespace", "creationTimestamp"):
                meta_patch.pop(fixed, None)
        merged = _merge(new, patch, strategic)
        return self._store(group, plural, merged)

    def _delete(self, group: str, plural: str, namespace: str, name: str) -> JSON:
        obj = self._existing(group, plural, namespace, name)
        del self.objects[(group, plural)][self._key(namespace, name)]
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self._next_rv())
        self._emit(group, plural, "DELETED", obj)
        return obj

    # ---- reviews (delegated authentication and authorization) -------------------------

    def _review_token(self, body: JSON) -> JSON:
        token = str((body.get("spec") or {}).get("token", ""))
        found = self.tokens.get(token)
        status: JSON = {"authenticated": False}
        if found is not None:
            status = {
                "authenticated": True,
                "user": {"username": found[0], "groups": [*found[1], "system:authenticated"]},
            }
        return {**body, "status": status}

    def _review_access(self, body: JSON) -> JSON:
        spec = body.get("spec") or {}
        attrs = spec.get("nonResourceAttributes") or {}
        key = (str(spec.get("user", "")), str(attrs.get("path", "")), str(attrs.get("verb", "")))
        allowed = key in self.allowed
        return {**body, "status": {"allowed": allowed, "reason": "" if allowed else "no rule"}}

    # ---- pod subresources --------------------------------------------------------------

    def _bind(self, namespace: str, name: str, body: JSON, user_agent: str) -> JSON:
        pod = self._existing("", "pods", namespace, name)
        meta, spec = pod["metadata"], pod.setdefault("spec", {})
        uid = (body.get("metadata") or {}).get("uid")
        target = (body.get("target") or {}).get("name") or ""
        if not target:
            raise HttpError(422, "Invalid", "Binding.target.name: Required value")
        if uid and uid != meta.get("uid"):
            self.binding_conflicts += 1
            raise HttpError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": Precondition '
                f"failed: UID in precondition: {uid}, UID in object meta: {meta.get('uid')}",
            )
        if meta.get("deletionTimestamp"):
            self.binding_conflicts += 1
            raise HttpError(
                409, "Conflict", f"pod {name} is being deleted, cannot be assigned to a host"
            )
        if spec.get("nodeName"):
            self.binding_conflicts += 1
            raise HttpError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                f'already assigned to node "{spec["nodeName"]}"',
            )
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = target
        # As the real BindingREST (setPodHostAndAnnotations): the Binding's annotations
        # are copied onto the pod.
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        if annotations:
            new["metadata"].setdefault("annotations", {}).update(annotations)
        status = new.setdefault("status", {})
        # As the real one since 1.35 (ClearingNominatedNodeNameAfterBinding).
        status.pop("nominatedNodeName", None)
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}
        )
        status["conditions"] = conditions
        self._store("", "pods", new)
        self.bindings.append(
            Binding(meta["uid"], self._key(namespace, name), target, user_agent, time.monotonic())
        )
        return status_body(201, "", "")

    def _evict(self, namespace: str, name: str, body: JSON) -> JSON:
        pod = self._existing("", "pods", namespace, name)
        options = body.get("deleteOptions") or {}
        uid = (options.get("preconditions") or {}).get("uid")
        if uid and uid != pod["metadata"].get("uid"):
            raise HttpError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}")
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase == "Running":  # canIgnorePDB: pending and terminal pods go regardless
            labels = pod["metadata"].get("labels") or {}
            budgets = [
                p
                for p in self.objects.get(("policy", "poddisruptionbudgets"), {}).values()
                if p["metadata"].get("namespace") == namespace
                and _selects((p.get("spec") or {}).get("selector"), labels)
            ]
            if len(budgets) > 1:
                raise HttpError(
                    500,
                    "InternalError",
                    "This pod has more than one PodDisruptionBudget, which the eviction "
                    "subresource does not support.",
                )
            if budgets:
                budget_key = f"{namespace}/{budgets[0]['metadata']['name']}"
                allowed, healthy, desired = self._disruptions_allowed(budgets[0], namespace)
                if allowed <= 0:
                    budget = budgets[0]["metadata"]["name"]
                    raise HttpError(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        causes=[
                            {
                                "reason": "DisruptionBudget",
                                "message": f"The disruption budget {budget} needs {desired} "
                                f"healthy pods and has {healthy} currently",
                            }
                        ],
                    )
                self._disrupted[budget_key] = self._disrupted.get(budget_key, 0) + 1
        self._delete("", "pods", namespace, name)
        self.evictions.append(self._key(namespace, name))
        return status_body(201, "", "")

    def _disruptions_allowed(self, pdb: JSON, namespace: str) -> tuple[int, int, int]:
        spec = pdb.get("spec") or {}
        selector = spec.get("selector")
        pods = [
            p
            for p in self.objects.get(("", "pods"), {}).values()
            if p["metadata"].get("namespace") == namespace
            and _selects(selector, p["metadata"].get("labels") or {})
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        expected = len(pods) + self._disrupted.get(f"{namespace}/{pdb['metadata']['name']}", 0)
        healthy = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
        if "minAvailable" in spec:
            desired = _scaled(spec["minAvailable"], expected)
        elif "maxUnavailable" in spec:
            desired = expected - _scaled(spec["maxUnavailable"], expected)
        else:
            desired = expected
        return healthy - desired, healthy, desired

    # ---- HTTP --------------------------------------------------------------------------

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        is_watch = request.query.get("watch") in ("1", "true")
        for fault in self.faults:
            if fault.matches(request, is_watch):
                fault.hits += 1
                if fault.delay:
                    await asyncio.sleep(fault.delay)
                if fault.drop:
                    if fault.applied:
                        with contextlib.suppress(HttpError):
                            await handler(request)
                    if request.transport is not None:
                        request.transport.close()
                    raise asyncio.CancelledError
                if fault.status:
                    reason = fault.reason or _REASONS.get(fault.status, "InternalError")
                    self._record(request, fault.status)
                    return web.json_response(
                        status_body(fault.status, reason, fault.message), status=fault.status
                    )
                break
        try:
            response: web.StreamResponse = await handler(request)
        except HttpError as err:
            self._record(request, err.code)
            return err.response()
        return response

    def _record(self, request: web.Request, status: int) -> None:
        route = _parse(request.path)
        if route is None:
            return
        if request.query.get("watch") in ("1", "true"):
            verb = "watch"
        else:
            verb = {
                "GET": "get" if route.name else "list",
                "POST": "create",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete",
            }.get(request.method, request.method.lower())
        if route.subresource in ("binding", "eviction"):
            verb = "create"
        self.requests.append(
            RecordedRequest(
                request.method,
                verb,
                route.group,
                route.plural,
                route.subresource,
                route.namespace,
                route.name,
                status,
                request.headers.get("User-Agent", ""),
            )
        )

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        if request.path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        if request.path == "/version":
            return web.json_response({"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake"})
        route = _parse(request.path)
        if route is None:
            raise HttpError(404, "NotFound", "the server could not find the requested resource")
        version, _, namespaced = self._resource(route.group, route.plural)
        if version != route.version:
            raise HttpError(404, "NotFound", f"no {route.plural} in version {route.version}")
        if request.method == "GET" and not route.name:
            if request.query.get("watch") in ("1", "true"):
                return await self._watch(request, route)
            response = self._list_response(request, route)
        else:
            response = await self._object_request(request, route, namespaced)
        self._record(request, response.status)
        return response

    async def _object_request(
        self, request: web.Request, route: _Route, namespaced: bool
    ) -> web.Response:
        method, g, p, ns, name = (
            request.method,
            route.group,
            route.plural,
            route.namespace,
            route.name,
        )
        body: JSON = {}
        if method in ("POST", "PUT", "PATCH") and request.can_read_body:
            try:
                raw = await request.json()
            except ValueError:
                raise HttpError(400, "BadRequest", "the request body is not valid JSON") from None
            if not isinstance(raw, dict):
                raise HttpError(400, "BadRequest", "the request body must be an object")
            body = raw
        agent = request.headers.get("User-Agent", "")
        sub = route.subresource
        if (g, p) == ("authentication.k8s.io", "tokenreviews") and method == "POST":
            return web.json_response(self._review_token(body), status=201)
        if (g, p) == ("authorization.k8s.io", "subjectaccessreviews") and method == "POST":
            return web.json_response(self._review_access(body), status=201)
        if (g, p) == ("", "pods") and sub == "binding" and method == "POST":
            return web.json_response(self._bind(ns, name, body, agent), status=201)
        if (g, p) == ("", "pods") and sub == "eviction" and method == "POST":
            return web.json_response(self._evict(ns, name, body), status=201)
        if sub and sub != "status":
            raise HttpError(404, "NotFound", f"subresource {sub} is not served by the fake")
        if sub == "status" and self.custom.get((g, p)) is False:
            raise HttpError(404, "NotFound", "the server could not find the requested resource")
        if method == "GET" and name:
            return web.json_response(self._existing(g, p, ns, name))
        if method == "POST" and not name:
            meta = body.setdefault("metadata", {})
            if namespaced and meta.get("namespace") and ns and meta["namespace"] != ns:
                raise HttpError(400, "BadRequest", "the namespace of the object does not match")
            return web.json_response(self._create(g, p, ns, body), status=201)
        if method == "PUT" and name:
            return web.json_response(self._replace(g, p, ns, name, body, sub))
        if method == "PATCH" and name:
            content_type = request.headers.get("Content-Type", "")
            return web.json_response(self._patch(g, p, ns, name, body, content_type, sub))
        if method == "DELETE" and name:
            return web.json_response(self._delete(g, p, ns, name))
        raise HttpError(405, "MethodNotAllowed", f"{method} is not supported here")

    def _matching(self, route: _Route) -> list[JSON]:
        items = self.objects.get((route.group, route.plural), {})
        if route.namespace:
            prefix = route.namespace + "/"
            return [v for k, v in sorted(items.items()) if k.startswith(prefix)]
        return [v for _, v in sorted(items.items())]

    def _list_response(self, request: web.Request, route: _Route) -> web.Response:
        version, kind, _ = self._resource(route.group, route.plural)
        limit = int(request.query.get("limit", "0") or 0)
        token = request.query.get("continue", "")
        if token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                snapshot_id, rv, offset = decoded["id"], str(decoded["rv"]), int(decoded["offset"])
            except (ValueError, KeyError, TypeError):
                raise HttpError(400, "BadRequest", "invalid continue token") from None
            items = self._snapshots.get(snapshot_id)
            if items is None or int(rv) <= self.compacted_rv:
                raise HttpError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.",
                )
        else:
            items = [copy.deepcopy(o) for o in self._matching(route)]
            for item in items:  # list items carry no apiVersion/kind
                item.pop("apiVersion", None)
                item.pop("kind", None)
            snapshot_id, rv, offset = "", str(self.rv), 0
        page = items[offset:]
        meta: JSON = {"resourceVersion": rv}
        if limit and len(page) > limit:
            page = page[:limit]
            if not snapshot_id:
                snapshot_id = str(next(self._token))
                self._snapshots[snapshot_id] = items
                while len(self._snapshots) > self._page_snapshots:
                    self._snapshots.pop(next(iter(self._snapshots)))
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"id": snapshot_id, "rv": rv, "offset": offset + limit}).encode()
            ).decode()
            meta["remainingItemCount"] = len(items) - offset - limit
        elif snapshot_id:
            self._snapshots.pop(snapshot_id, None)
        api_version = f"{route.group}/{version}" if route.group else version
        return web.json_response(
            {"apiVersion": api_version, "kind": f"{kind}List", "metadata": meta, "items": page},
            dumps=lambda obj: json.dumps(obj),  # this module's json, which tests may replace
        )

    async def _watch(self, request: web.Request, route: _Route) -> web.StreamResponse:
        version, kind, _ = self._resource(route.group, route.plural)
        api_version = f"{route.group}/{version}" if route.group else version
        raw_rv = request.query.get("resourceVersion", "")
        bookmarks = request.query.get("allowWatchBookmarks") in ("1", "true")
        timeout = float(request.query.get("timeoutSeconds", "0") or 0) or 1800.0
        deadline = time.monotonic() + timeout
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        watcher = _Watcher(route.group, route.plural, route.namespace)
        backlog: list[tuple[str, JSON]] = []
        expired = False
        if raw_rv in ("", "0"):
            backlog = [("ADDED", copy.deepcopy(o)) for o in self._matching(route)]
        else:
            try:
                since = int(raw_rv)
            except ValueError:
                raise HttpError(400, "BadRequest", f"invalid resourceVersion {raw_rv!r}") from None
            if since < self.compacted_rv:
                expired = True
            else:
                backlog = [
                    (k, o)
                    for rv, g, p, k, o in self.history
                    if rv > since
                    and g == route.group
                    and p == route.plural
                    and (not route.namespace or o["metadata"].get("namespace") == route.namespace)
                ]
        self._watchers.append(watcher)  # registered before any await: no gap, no overlap
        self._record(request, 200)
        try:
            await response.prepare(request)
            if expired:
                error = status_body(
                    410,
                    "Expired",
                    f"too old resource version: {raw_rv} ({self.compacted_rv + 1})",
                )
                await _send(response, "ERROR", error)
                return response
            for event_type, obj in backlog:
                await _send(response, event_type, obj)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(
                        watcher.queue.get(), min(remaining, self.bookmark_interval)
                    )
                except TimeoutError:
                    if bookmarks:
                        marker = {
                            "kind": kind,
                            "apiVersion": api_version,
                            "metadata": {"resourceVersion": str(self.rv)},
                        }
                        await _send(response, "BOOKMARK", marker)
                    continue
                if item is None:
                    break
                event_type, obj = item
                if event_type == "DROP":
                    if request.transport is not None:
                        request.transport.abort()
                    return response
                if event_type == "STALL":
                    # Events still queue up for this watcher; none is sent.
                    while (
                        not self._closing.is_set()
                        and request.transport is not None
                        and not request.transport.is_closing()
                    ):
                        await asyncio.sleep(0.05)
                    return response
                lag = self._event_delays.get((route.group, route.plural), 0.0)
                if lag:
                    await asyncio.sleep(lag)
                await _send(response, event_type, obj)
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watchers.remove(watcher)
        return response


async def _send(response: web.StreamResponse, event_type: str, obj: JSON) -> None:
    await response.write(json.dumps({"type": event_type, "object": obj}).encode() + b"\n")


_REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

_CORE = re.compile(r"^/api/(?P<version>v1)(?P<rest>/.*)?$")
_GROUP = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?P<rest>/.*)?$")


def _parse(path: str) -> _Route | None:
    match = _CORE.match(path)
    group = ""
    if match is None:
        match = _GROUP.match(path)
        if match is None:
            return None
        group = match["group"]
    parts = [p for p in (match["rest"] or "").split("/") if p]
    namespace = ""
    if len(parts) >= 3 and parts[0] == "namespaces":
        namespace, parts = parts[1], parts[2:]
    elif len(parts) == 2 and parts[0] == "namespaces":
        # /api/v1/namespaces/{name}: the namespace object itself
        parts = ["namespaces", parts[1]]
    if not parts or len(parts) > 3:
        return None
    plural = parts[0]
    name = parts[1] if len(parts) > 1 else ""
    sub = parts[2] if len(parts) > 2 else ""
    return _Route(group, match["version"], plural, namespace, name, sub)


def _merge(target: Any, patch: Any, strategic: bool, key: str = "") -> Any:
    """RFC 7386 merge patch; with `strategic`, lists in MERGE_KEYS merge by their key."""
    if not isinstance(patch, dict):
        if strategic and isinstance(patch, list) and isinstance(target, list) and key in MERGE_KEYS:
            merge_key = MERGE_KEYS[key]
            out = list(target)
            for item in patch:
                if not isinstance(item, dict):
                    continue
                index = next(
                    (
                        i
                        for i, old in enumerate(out)
                        if isinstance(old, dict) and old.get(merge_key) == item.get(merge_key)
                    ),
                    None,
                )
                if index is None:
                    out.append(item)
                else:
                    out[index] = _merge(out[index], item, strategic)
            return out
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if name.startswith("$"):
            continue  # strategic merge directives ($setElementOrder, $patch) are ignored
        if value is None:
            result.pop(name, None)
        else:
            result[name] = _merge(result.get(name), value, strategic, name)
    return result


def _selects(selector: Any, labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics; an empty selector selects everything."""
    if not isinstance(selector, dict):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key"), req.get("operator"), req.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def main(argv: list[str] | None = None) -> None:
    """`python -m shoal.testing.fake_apiserver`: serve until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kubeconfig", type=Path, help="write a kubeconfig for it here")
    parser.add_argument("--bookmark-interval", type=float, default=1.0)
    args = parser.parse_args(argv)

    async def serve() -> None:
        async with FakeApiServer(
            host=args.host, port=args.port, bookmark_interval=args.bookmark_interval
        ) as api:
            if args.kubeconfig:
                api.kubeconfig(args.kubeconfig)
            print(api.url, flush=True)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
