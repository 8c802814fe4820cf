"""Delegated authentication and authorization on Shoal's metrics/dashboard port, against
a real kube-apiserver (TokenReview, SubjectAccessReview, RBAC nonResourceURLs, client
certificates signed by the cluster CA).

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp
import yaml
from apihelpers import space
from kubehelpers import async_test
from prometheus_client import CollectorRegistry

from shoal.drivers.kube.tls import server_context
from shoal.servers.auth import DelegatedAuth, client_ca_context
from shoal.web.server import Check, HealthServer

ROOT = Path(__file__).resolve().parents[2]


async def _token(s: object, account: str) -> str:
    client = s.client  # type: ignore[attr-defined]
    namespace = s.name  # type: ignore[attr-defined]
    await client.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        body={"metadata": {"name": account}},
    )
    answer = await client.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    return str(answer["status"]["token"])


@async_test(timeout=60)
async def test_tokens_and_client_certificates_are_checked_with_the_api_server(
    control_plane: dict[str, str],
) -> None:
    state = Path(control_plane["KUBECONFIG"]).parent
    async with space(control_plane["KUBECONFIG"], "auth") as s:
        reader, other = await _token(s, "reader"), await _token(s, "other")
        viewer = await _token(s, "viewer")
        # The roles the manifests ship for others to bind, under this test's names.
        shipped = {
            d["metadata"]["name"]: d["rules"]
            for d in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text())
            if d and d["kind"] == "ClusterRole"
        }
        for role, account in (
            ("shoal-metrics-reader", "reader"),
            ("shoal-dashboard-reader", "viewer"),
        ):
            name = f"{s.name}-{role}"
            await s.client.request(
                "POST",
                "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                body={"metadata": {"name": name}, "rules": shipped[role]},
            )
            s.cluster_objects.append(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")
            await s.client.request(
                "POST",
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                body={
                    "metadata": {"name": name},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": name,
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": s.name}],
                },
            )
            s.cluster_objects.append(
                f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}"
            )

        async def queues(request: aiohttp.web.Request) -> aiohttp.web.Response:
            return aiohttp.web.json_response([])

        auth = DelegatedAuth(authenticator=s.client, authorizer=s.client, client_certificates=True)
        context = server_context()
        client_ca_context(context, str(state / "pki" / "ca.crt"))
        server = HealthServer(
            CollectorRegistry(),
            lambda: [Check("ping", True)],
            lambda: [Check("ping", True)],
            port=0,
            ssl_context=context,
            middlewares=[auth.middleware],
            routes=lambda app: app.router.add_get("/dashboard/api/queues", queues),
        )
        await server.start()
        base = f"https://127.0.0.1:{server.port}"
        try:
            async with aiohttp.ClientSession() as http:

                async def get(path: str, token: str = "", cert: bool = False) -> int:
                    tls = ssl.create_default_context()
                    tls.check_hostname = False
                    tls.verify_mode = ssl.CERT_NONE
                    if cert:  # the kit's admin: CN=kubernetes-admin, O=system:masters
                        tls.load_cert_chain(
                            state / "pki" / "admin.crt", state / "pki" / "admin.key"
                        )
                    headers = {"Authorization": f"Bearer {token}"} if token else {}
                    async with http.get(base + path, headers=headers, ssl=tls) as answer:
                        await answer.read()
                        return answer.status

                # Probes need no credentials (kube's always-allow paths).
                assert await get("/healthz") == 200
                assert await get("/readyz") == 200
                # Anonymous: RBAC has nothing for system:anonymous.
                assert await get("/metrics") == 403
                # A token the API server does not accept.
                assert await get("/metrics", token="not-a-token") == 401
                # The reader may read /metrics and nothing else; the other account nothing.
                assert await get("/metrics", token=reader) == 200
                assert await get("/dashboard/api/queues", token=reader) == 403
                assert await get("/dashboard/api/queues", token=viewer) == 200
                assert await get("/metrics", token=viewer) == 403
                assert await get("/metrics", token=other) == 403
                # A certificate signed by the cluster CA: the user is its CN, its groups
                # the O entries (system:masters may do anything).
                assert await get("/dashboard/api/queues", cert=True) == 200
                assert await get("/metrics", cert=True) == 200
                assert auth.refused == 5
        finally:
            await server.stop()
