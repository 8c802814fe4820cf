"""Delegated authentication and authorization for Shoal's HTTP ports, as kube-scheduler's.

kube-scheduler (like every component built on k8s.io/apiserver) does not keep users of
its own: it asks the API server. Shoal does the same, per request:

* **Authentication**: a client certificate signed by `--client-ca-file` (HTTPS only; the
  user is the certificate's CN, its groups the O entries), else a bearer token, checked
  with a TokenReview (`authentication.k8s.io/v1`) through `--authentication-kubeconfig`.
  A request with neither is `system:anonymous` (group `system:unauthenticated`); a token
  the API server does not accept is refused with 401.
* **Authorization**: a SubjectAccessReview (`authorization.k8s.io/v1`) through
  `--authorization-kubeconfig` for the request's path and verb (the HTTP method in lower
  case) as a non-resource URL, so RBAC decides with a ClusterRole such as
  `rules: [{nonResourceURLs: ["/metrics"], verbs: [get]}]`. Denied: 403 with the
  reason. Without an authorizer, any authenticated user (not anonymous) is allowed.
* `--authorization-always-allow-paths` (default `/healthz,/readyz,/livez`, kube's) are
  served to anyone, so the kubelet's probes need no credentials. A pattern ending in
  `/*` allows a subtree.

Answers are cached for `ttl` seconds (kube's defaults: 10 s for tokens and decisions),
keyed by a hash of the token, never the token itself. An API server that cannot be
asked fails the request closed (401 or 403 saying so), never open.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from shoal.drivers.kube.client import ApiError, KubeClient

__all__ = ["ALWAYS_ALLOW", "DelegatedAuth", "User", "client_ca_context"]

log = logging.getLogger("shoal.auth")

# kube's --authorization-always-allow-paths default.
ALWAYS_ALLOW = ("/healthz", "/readyz", "/livez")
ANONYMOUS = "system:anonymous"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, compare=False, hash=False)

    @property
    def anonymous(self) -> bool:
        return self.name == ANONYMOUS


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def client_ca_context(context: ssl.SSLContext, ca_file: str) -> None:
    """Ask HTTPS clients for a certificate signed by `ca_file` (optional: a client may
    still present a bearer token instead)."""
    context.load_verify_locations(cafile=ca_file)
    context.verify_mode = ssl.CERT_OPTIONAL


class DelegatedAuth:
    """The aiohttp middleware (`middleware`) and what it asks the API server."""

    def __init__(
        self,
        *,
        authenticator: KubeClient | None = None,
        authorizer: KubeClient | None = None,
        client_certificates: bool = False,
        always_allow: Sequence[str] = ALWAYS_ALLOW,
        ttl: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.client_certificates = client_certificates
        self.always_allow = tuple(p for p in always_allow if p)
        self.ttl = ttl
        self._clock = clock
        self._tokens: dict[str, tuple[float, User | None]] = {}
        self._decisions: dict[tuple[str, str, str], tuple[float, bool, str]] = {}
        self.refused = 0  # requests answered 401 or 403

    @property
    def enabled(self) -> bool:
        return bool(self.authenticator or self.authorizer or self.client_certificates)

    def allowed_always(self, path: str) -> bool:
        for pattern in self.always_allow:
            if pattern.endswith("/*"):
                if path.startswith(pattern[:-1]) or path == pattern[:-2]:
                    return True
            elif path == pattern:
                return True
        return False

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.enabled or self.allowed_always(request.path):
            return await handler(request)
        try:
            user = await self.authenticate(request)
            await self.authorize(user, request.path, request.method.lower())
        except _Refused as refused:
            self.refused += 1
            reason = "Unauthorized" if refused.status == 401 else "Forbidden"
            return web.Response(status=refused.status, text=f"{reason}: {refused}\n")
        return await handler(request)

    # ---- who is asking ----------------------------------------------------------------

    async def authenticate(self, request: web.Request) -> User:
        user = self._certificate_user(request)
        if user is not None:
            return user
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return await self._token_user(token.strip())
        return User(ANONYMOUS, groups=("system:unauthenticated",))

    def _certificate_user(self, request: web.Request) -> User | None:
        if not self.client_certificates or request.transport is None:
            return None
        # Only a certificate the TLS handshake verified against the client CA is here.
        cert: Any = request.transport.get_extra_info("peercert")
        if not cert:
            return None
        name, groups = "", []
        for rdn in cert.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    name = value
                elif key == "organizationName":
                    groups.append(value)
        if not name:
            raise _Refused(401, "the client certificate has no common name (the user)")
        return User(name, groups=(*groups, "system:authenticated"))

    async def _token_user(self, token: str) -> User:
        if self.authenticator is None:
            raise _Refused(401, "bearer tokens are not accepted here (no authenticator)")
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        cached = self._tokens.get(key)
        if cached is not None and now - cached[0] < self.ttl:
            user = cached[1]
        else:
            user = await self._review_token(token)
            if len(self._tokens) > 10_000:
                self._tokens.clear()
            self._tokens[key] = (now, user)
        if user is None:
            raise _Refused(401, "the token was not accepted by the API server")
        return user

    async def _review_token(self, token: str) -> User | None:
        assert self.authenticator is not None
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        try:
            answer = await self.authenticator.request("POST", TOKEN_REVIEWS, body=body)
        except ApiError as err:
            log.warning("TokenReview failed: %s", err, extra={"error": str(err)})
            raise _Refused(401, f"the API server could not review the token: {err}") from None
        status = answer.get("status") or {}
        if not status.get("authenticated"):
            return None
        info = status.get("user") or {}
        return User(
            str(info.get("username", "")),
            str(info.get("uid", "")),
            tuple(str(g) for g in info.get("groups") or ()),
            {str(k): [str(x) for x in v] for k, v in (info.get("extra") or {}).items()},
        )

    # ---- may they -------------------------------------------------------------------

    async def authorize(self, user: User, path: str, verb: str) -> None:
        if self.authorizer is None:
            if user.anonymous:
                raise _Refused(401, "credentials are required (a bearer token or certificate)")
            return
        key = (f"{user.name}\n{user.uid}\n{','.join(user.groups)}", path, verb)
        now = self._clock()
        cached = self._decisions.get(key)
        if cached is not None and now - cached[0] < self.ttl:
            allowed, reason = cached[1], cached[2]
        else:
            allowed, reason = await self._review_access(user, path, verb)
            if len(self._decisions) > 10_000:
                self._decisions.clear()
            self._decisions[key] = (now, allowed, reason)
        if not allowed:
            why = f": {reason}" if reason else ""
            raise _Refused(403, f'user "{user.name}" cannot {verb} path "{path}"{why}')

    async def _review_access(self, user: User, path: str, verb: str) -> tuple[bool, str]:
        assert self.authorizer is not None
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = user.extra
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        try:
            answer = await self.authorizer.request("POST", ACCESS_REVIEWS, body=body)
        except ApiError as err:
            log.warning("SubjectAccessReview failed: %s", err, extra={"error": str(err)})
            return False, f"the API server could not be asked: {err}"
        status = answer.get("status") or {}
        allowed = bool(status.get("allowed")) and not status.get("denied")
        return allowed, str(status.get("reason") or status.get("evaluationError") or "")
