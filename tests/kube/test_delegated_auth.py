"""DelegatedAuth's own rules, with a stand-in API server (the real one is in
tests/apiserver/test_auth.py): always-allowed paths, caching by token hash, failing
closed when the API server cannot be asked."""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp import web
from kubehelpers import async_test

from shoal.drivers.kube.client import ApiError
from shoal.servers.auth import DelegatedAuth


class StandIn:
    """Answers TokenReviews (token "good" is alice) and SubjectAccessReviews (alice may
    get /metrics); counts what it was asked."""

    def __init__(self, down: bool = False) -> None:
        self.down = down
        self.asked: list[dict[str, Any]] = []

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        self.asked.append(body)
        if self.down:
            raise ApiError(503, "ServiceUnavailable", "the API server is restarting")
        if body["kind"] == "TokenReview":
            if body["spec"]["token"] != "good":
                return {"status": {"authenticated": False}}
            user = {"username": "alice", "uid": "1", "groups": ["team"]}
            return {"status": {"authenticated": True, "user": user}}
        attrs = body["spec"]["nonResourceAttributes"]
        allowed = body["spec"]["user"] == "alice" and attrs == {"path": "/metrics", "verb": "get"}
        return {"status": {"allowed": allowed, "reason": "" if allowed else "no RBAC rule"}}


async def _statuses(auth: DelegatedAuth, requests: list[tuple[str, str]]) -> list[int]:
    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(middlewares=[auth.middleware])
    for path in ("/metrics", "/healthz", "/dashboard/api/queues"):
        app.router.add_get(path, ok)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    out = []
    try:
        async with aiohttp.ClientSession() as http:
            for path, token in requests:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                async with http.get(f"http://127.0.0.1:{port}{path}", headers=headers) as r:
                    out.append(r.status)
    finally:
        await runner.cleanup()
    return out


@async_test(timeout=30)
async def test_tokens_and_decisions_are_cached_and_probes_always_allowed() -> None:
    api = StandIn()
    auth = DelegatedAuth(authenticator=api, authorizer=api)  # type: ignore[arg-type]
    statuses = await _statuses(
        auth,
        [
            ("/healthz", ""),
            ("/metrics", "good"),
            ("/metrics", "good"),
            ("/dashboard/api/queues", "good"),
            ("/metrics", "bad"),
            ("/metrics", ""),
        ],
    )
    assert statuses == [200, 200, 200, 403, 401, 403]
    kinds = [body["kind"] for body in api.asked]
    # One TokenReview for "good" (cached), one for "bad"; one decision per path/user.
    assert kinds.count("TokenReview") == 2
    assert kinds.count("SubjectAccessReview") == 3  # alice twice, anonymous once
    assert all("good" not in str(key) for key in auth._tokens)  # hashed, never the token


@async_test(timeout=30)
async def test_an_api_server_that_cannot_be_asked_fails_closed() -> None:
    api = StandIn(down=True)
    auth = DelegatedAuth(authenticator=api, authorizer=api)  # type: ignore[arg-type]
    assert await _statuses(auth, [("/metrics", "good"), ("/metrics", ""), ("/healthz", "")]) == [
        401,
        403,
        200,
    ]


@async_test(timeout=30)
async def test_without_an_authorizer_any_authenticated_user_is_allowed_and_anonymous_is_not() -> (
    None
):
    api = StandIn()
    auth = DelegatedAuth(authenticator=api)  # type: ignore[arg-type]
    statuses = await _statuses(auth, [("/dashboard/api/queues", "good"), ("/metrics", "")])
    assert statuses == [200, 401]


def test_always_allowed_paths_match_exactly_or_by_subtree() -> None:
    auth = DelegatedAuth(always_allow=("/healthz", "/debug/*"))
    assert auth.allowed_always("/healthz") and not auth.allowed_always("/healthz/x")
    assert auth.allowed_always("/debug") and auth.allowed_always("/debug/pprof")
    assert not auth.allowed_always("/debugger") and not auth.allowed_always("/metrics")


@async_test(timeout=30)
async def test_in_a_cluster_the_https_port_delegates_through_the_service_account(
    monkeypatch: Any,
) -> None:
    """kube-scheduler's default: with none of the auth flags on the HTTPS port, in a pod,
    authentication and authorization go through the pod's service account."""
    import shoal.drivers.kube.client as client_module
    from shoal.commands.run import AuthFlags

    opened: list[str | None] = []

    class Connection:
        def client(self, name: str, settings: Any) -> str:
            return f"client:{name}"

        async def close(self) -> None:
            return None

    async def connect(path: str | None = None, **_: Any) -> Connection:
        opened.append(path)
        return Connection()

    monkeypatch.setattr(client_module, "connect", connect)
    flags = AuthFlags(None, None, None, in_cluster=True)
    assert flags.enabled
    auth, connections = await flags.build(None)
    assert opened == [None, None]  # in-cluster, for TokenReviews and for decisions
    assert auth.authenticator == "client:authentication"
    assert auth.authorizer == "client:authorization"
    assert auth.allowed_always("/healthz") and len(connections) == 2
    assert not AuthFlags(None, None, None).enabled
