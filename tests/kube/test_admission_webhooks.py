"""Admission webhooks: the answers (validating tenancy objects and PodGroups against the
objects in the cluster, mutating pods of bound namespaces), and the HTTPS server with
generated, reloaded certificates against the fake API server."""

from __future__ import annotations

import base64
import json
import os
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubehelpers import async_test, eventually
from kubehelpers import backend as running

from shoal.commands.run import _start_webhooks
from shoal.drivers.kube.client import ClientSettings, connect
from shoal.drivers.kube.crds import render
from shoal.drivers.kube.resources import (
    ELASTIC_QUOTAS,
    NODE_POOLS,
    QUEUE_BINDINGS,
    QUEUES,
    ResourceKind,
)
from shoal.drivers.kube.tls import ReloadingContext, generate_webhook_certs
from shoal.servers.admission import in_force, mutate_pod, tenancy_objects, validate
from shoal.servers.webhook import ApiTenancySource, WebhookServer
from shoal.testing.fake_apiserver import FakeApiServer

SHOAL = "shoal.dev/v1alpha1"


def queue(name: str, parent: str = "", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SHOAL,
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"parent": parent, **spec} if parent else spec,
    }


def binding(name: str, queue_name: str, *namespaces: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SHOAL,
        "kind": "QueueBinding",
        "metadata": {"name": name},
        "spec": {"queue": queue_name, "namespaces": list(namespaces), **spec},
    }


def cluster(**kinds: list[dict[str, Any]]) -> Any:
    table: dict[str, ResourceKind] = {
        "queues": QUEUES,
        "bindings": QUEUE_BINDINGS,
        "pools": NODE_POOLS,
        "quotas": ELASTIC_QUOTAS,
    }
    return tenancy_objects({table[k]: v for k, v in kinds.items()})


def request(obj: dict[str, Any], operation: str = "CREATE", namespace: str = "") -> dict[str, Any]:
    group, _, version = obj["apiVersion"].rpartition("/")
    return {
        "uid": "u1",
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "operation": operation,
        "namespace": namespace,
        "name": obj["metadata"]["name"],
        "object": obj,
    }


def test_guarantee_above_max_is_refused_naming_the_field() -> None:
    verdict = validate(request(queue("team", guaranteed={"cpu": "4"}, max={"cpu": "2"})), cluster())
    assert not verdict.allowed
    assert "Queue team" in verdict.message
    assert "spec.guaranteed.cpu" in verdict.message and "spec.max.cpu" in verdict.message


def test_unknown_parent_and_cycle_are_refused_against_the_cluster() -> None:
    verdict = validate(request(queue("child", "nowhere")), cluster())
    assert not verdict.allowed and "spec.parent 'nowhere' does not exist" in verdict.message
    # a -> b exists; making b's parent a closes a cycle.
    existing = cluster(queues=[queue("a", "b"), queue("b")])
    verdict = validate(request(queue("b", "a"), "UPDATE"), existing)
    assert not verdict.allowed and "cycle" in verdict.message and "spec.parent" in verdict.message
    # The parent exists in the cluster: fine.
    assert validate(request(queue("c", "b")), existing).allowed


def test_child_guarantee_above_the_parents_is_refused() -> None:
    existing = cluster(
        queues=[queue("org", guaranteed={"cpu": "4"}), queue("a", "org", guaranteed={"cpu": "3"})]
    )
    verdict = validate(request(queue("b", "org", guaranteed={"cpu": "2"})), existing)
    assert not verdict.allowed
    assert "Queue b" in verdict.message and "spec.guaranteed.cpu" in verdict.message
    assert validate(request(queue("b", "org", guaranteed={"cpu": "1"})), existing).allowed


def test_binding_pool_quota_and_podgroup_references_are_checked() -> None:
    existing = cluster(queues=[queue("org"), queue("leaf", "org")])
    verdict = validate(request(binding("b", "missing", "ns")), existing)
    assert not verdict.allowed and "QueueBinding b: spec.queue 'missing'" in verdict.message
    verdict = validate(request(binding("b", "org", "ns")), existing)
    assert not verdict.allowed and "not a leaf queue" in verdict.message
    assert validate(request(binding("b", "leaf", "ns")), existing).allowed
    pool = {
        "apiVersion": SHOAL,
        "kind": "NodePool",
        "metadata": {"name": "gpus"},
        "spec": {"nodeSelector": {"gpu": "a100"}, "exclusiveTo": ["ghost"]},
    }
    verdict = validate(request(pool), existing)
    assert not verdict.allowed and "spec.exclusiveTo queue 'ghost'" in verdict.message
    quota = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "q"},
        "spec": {"min": {"cpu": "8"}, "max": {"cpu": "4"}},
    }
    verdict = validate(request(quota, namespace="research"), existing)
    assert not verdict.allowed and "spec.min.cpu" in verdict.message
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "ml"},
        "spec": {"minMember": 2, "queue": "ghost"},
    }
    verdict = validate(request(group, namespace="ml"), existing)
    assert not verdict.allowed and "spec.queue 'ghost' does not exist" in verdict.message
    group["spec"]["queue"] = "leaf"
    assert validate(request(group, namespace="ml"), existing).allowed


def test_unreadable_objects_are_refused_with_the_field() -> None:
    verdict = validate(request(queue("bad", guaranteed={"cpu": "lots"})), cluster())
    assert not verdict.allowed
    assert verdict.message.startswith("Queue bad") and "guaranteed" in verdict.message
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ml"},
        "spec": {"minMember": "two"},
    }
    verdict = validate(request(group, namespace="ml"), cluster())
    assert not verdict.allowed and "spec.minMember" in verdict.message


def test_a_bad_object_already_in_the_cluster_blocks_nothing_else() -> None:
    existing = cluster(queues=[queue("broken", "nowhere"), queue("ok")])
    assert "broken" not in in_force(existing).queues
    assert validate(request(queue("new", "ok")), existing).allowed
    # Fixing the broken one is allowed.
    assert validate(request(queue("broken", "ok"), "UPDATE"), existing).allowed
    assert validate(request(queue("x"), "DELETE"), existing).allowed


def _pod(namespace: str = "ml", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "x"}], **spec},
    }


def test_pods_in_a_bound_namespace_get_shoal_and_the_queue() -> None:
    objects = in_force(cluster(queues=[queue("team")], bindings=[binding("b", "team", "ml")]))
    pod = _pod(schedulerName="default-scheduler")
    verdict = mutate_pod(request(pod, namespace="ml"), objects.bindings, {}, "shoal")
    assert verdict.allowed
    assert verdict.patch == [
        {"op": "replace", "path": "/spec/schedulerName", "value": "shoal"},
        {"op": "add", "path": "/metadata/labels", "value": {"shoal.dev/queue": "team"}},
    ]
    # An existing label map gets the key added (escaped), an explicit queue is kept.
    pod = _pod()
    pod["metadata"]["labels"] = {"app": "x"}
    verdict = mutate_pod(request(pod, namespace="ml"), objects.bindings, {}, "shoal")
    assert {"op": "add", "path": "/metadata/labels/shoal.dev~1queue", "value": "team"} in (
        verdict.patch
    )
    pod["metadata"]["labels"]["shoal.dev/queue"] = "other"
    pod["spec"]["schedulerName"] = "my-scheduler"
    assert mutate_pod(request(pod, namespace="ml"), objects.bindings, {}, "shoal").patch == []
    # Not bound: untouched; bound by selector: handled.
    assert mutate_pod(request(_pod("web"), namespace="web"), objects.bindings, {}).patch == []
    selected = in_force(
        cluster(
            queues=[queue("team")],
            bindings=[binding("s", "team", namespaceSelector={"matchLabels": {"team": "a"}})],
        )
    )
    verdict = mutate_pod(request(_pod("web"), namespace="web"), selected.bindings, {"team": "a"})
    assert len(verdict.patch) == 2


@async_test(timeout=60)
async def test_server_answers_over_tls_from_the_cluster_and_reloads_its_certificate(
    tmp_path: Path,
) -> None:
    certs = tmp_path / "certs"
    assert generate_webhook_certs(certs)
    assert not generate_webhook_certs(certs)  # kept when present
    tls = ReloadingContext(certs / "tls.crt", certs / "tls.key")
    async with FakeApiServer() as api:
        for text in render().values():
            api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
        api.create(SHOAL, "queues", queue("team", guaranteed={"cpu": "2"}))
        api.create(SHOAL, "queuebindings", binding("b", "team", "ml"))
        connection = await connect(str(api.kubeconfig(tmp_path / "kubeconfig")))
        source = ApiTenancySource(connection.client("webhook", ClientSettings()))
        server = WebhookServer(source, tls, host="127.0.0.1", port=0, reload_seconds=0)
        await server.start()
        client_ssl = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        url = f"https://127.0.0.1:{server.port}"
        try:
            async with aiohttp.ClientSession() as session:

                async def review(path: str, req: dict[str, Any]) -> dict[str, Any]:
                    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
                    async with session.post(
                        url + path, json={**body, "request": req}, ssl=client_ssl
                    ) as resp:
                        assert resp.status == 200
                        answer: dict[str, Any] = (await resp.json())["response"]
                        return answer

                # A child whose guarantee is above its (existing) parent's.
                answer = await review(
                    "/validate", request(queue("sub", "team", guaranteed={"cpu": "3"}))
                )
                assert answer["uid"] == "u1" and answer["allowed"] is False
                assert "spec.guaranteed.cpu" in answer["status"]["message"]
                answer = await review("/mutate-pods", request(_pod(), namespace="ml"))
                assert answer["allowed"] and answer["patchType"] == "JSONPatch"
                ops = json.loads(base64.b64decode(answer["patch"]))
                assert {"op": "add", "path": "/spec/schedulerName", "value": "shoal"} in ops
                async with session.post(url + "/validate", data=b"nope", ssl=client_ssl) as resp:
                    assert resp.status == 400
                # A renewed certificate (a new CA here) is picked up by new connections.
                first = tls.reloads
                renewed = tmp_path / "renewed"
                generate_webhook_certs(renewed)
                for name in ("tls.crt", "tls.key"):
                    os.replace(renewed / name, certs / name)
                assert tls.check() and tls.reloads == first + 1
                new_ssl = ssl.create_default_context(cafile=str(renewed / "ca.crt"))
                async with session.get(url + "/healthz", ssl=new_ssl) as resp:
                    assert resp.status == 200
        finally:
            await server.stop()
            await connection.close()


@async_test(timeout=60)
async def test_shoal_run_serves_the_webhooks_from_the_schedulers_own_view(tmp_path: Path) -> None:
    """`shoal run --webhook-port`: reviews answered from the backend's informer copies."""
    certs = tmp_path / "certs"
    generate_webhook_certs(certs)
    async with FakeApiServer() as api:
        for text in render().values():
            api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
        api.create(SHOAL, "queues", queue("team"))
        api.create(SHOAL, "queuebindings", binding("b", "team", "ml"))
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: "b" in kube.tenancy.bindings, what="the binding seen")
            server = await _start_webhooks(kube, 0, certs, False)
            assert isinstance(server, WebhookServer)
            try:
                client_ssl = ssl.create_default_context(cafile=str(certs / "ca.crt"))
                body = {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": request(_pod(), namespace="ml"),
                }
                url = f"https://127.0.0.1:{server.port}/mutate-pods"
                async with (
                    aiohttp.ClientSession() as session,
                    session.post(url, json=body, ssl=client_ssl) as resp,
                ):
                    answer = (await resp.json())["response"]
                ops = json.loads(base64.b64decode(answer["patch"]))
                assert {"op": "add", "path": "/spec/schedulerName", "value": "shoal"} in ops
                body["request"] = request(queue("child", "nowhere"))
                async with (
                    aiohttp.ClientSession() as session,
                    session.post(
                        url.replace("mutate-pods", "validate"), json=body, ssl=client_ssl
                    ) as resp,
                ):
                    answer = (await resp.json())["response"]
                assert not answer["allowed"] and "nowhere" in answer["status"]["message"]
            finally:
                await server.stop()
    # No certificate: refused at start, with what to do.
    assert await _start_webhooks(kube, 0, tmp_path / "none", False) is False


def test_the_command_makes_certificates_prints_the_ca_and_refuses_without_one(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from shoal.cli import app

    runner = CliRunner()
    done = runner.invoke(app, ["webhook", "--cert-dir", str(tmp_path / "none")])
    assert done.exit_code == 2
    certs = tmp_path / "certs"
    args = ["webhook", "--cert-dir", str(certs), "--generate-certs", "--print-ca-bundle"]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    bundle = base64.b64decode(done.stdout.strip().splitlines()[-1])
    assert bundle == (certs / "ca.crt").read_bytes()
    assert bundle.startswith(b"-----BEGIN CERTIFICATE-----")
    assert (certs / "tls.key").stat().st_mode & 0o077 == 0


@async_test(timeout=60)
async def test_with_a_client_ca_only_certified_clients_get_reviews(tmp_path: Path) -> None:
    """`shoal webhook --client-ca-file`: the API server's admission client certificate is
    required for reviews (a 401 without one); /healthz stays open for probes."""
    from shoal.servers.auth import DelegatedAuth, client_ca_context

    certs, clients = tmp_path / "certs", tmp_path / "clients"
    assert generate_webhook_certs(certs) and generate_webhook_certs(clients)
    _client_certificate(clients, "kube-apiserver")
    tls = ReloadingContext(certs / "tls.crt", certs / "tls.key")
    client_ca_context(tls.context, str(clients / "ca.crt"))
    verified = DelegatedAuth(client_certificates=True, always_allow=("/healthz",))
    async with FakeApiServer() as api:
        for text in render().values():
            api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
        connection = await connect(str(api.kubeconfig(tmp_path / "kubeconfig")))
        source = ApiTenancySource(connection.client("webhook", ClientSettings()))
        server = WebhookServer(
            source,
            tls,
            host="127.0.0.1",
            port=0,
            reload_seconds=0,
            middlewares=[verified.middleware],
        )
        await server.start()
        try:
            await _only_certified_clients_get_reviews(server.port, certs, clients)
        finally:
            await server.stop()
            await connection.close()


@async_test(timeout=60)
async def test_shoal_run_webhooks_with_a_client_ca_refuse_uncertified_clients(
    tmp_path: Path,
) -> None:
    """`shoal run --webhook-port --webhook-client-ca-file`: the same client-certificate
    check as `shoal webhook --client-ca-file` (before, the built-in webhooks answered
    anyone)."""
    certs, clients = tmp_path / "certs", tmp_path / "clients"
    assert generate_webhook_certs(certs) and generate_webhook_certs(clients)
    _client_certificate(clients, "kube-apiserver")
    async with FakeApiServer() as api:
        for text in render().values():
            api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
        async with running(api, tmp_path) as (kube, _):
            server = await _start_webhooks(kube, 0, certs, False, clients / "ca.crt")
            assert isinstance(server, WebhookServer)
            try:
                await _only_certified_clients_get_reviews(server.port, certs, clients)
            finally:
                await server.stop()
            # A CA file that cannot be loaded: refused at start, logged.
            bad = tmp_path / "bad-ca.crt"
            bad.write_text("not a certificate")
            assert await _start_webhooks(kube, 0, certs, False, bad) is False


async def _only_certified_clients_get_reviews(port: int, certs: Path, clients: Path) -> None:
    """A review without a client certificate gets 401, one with the client CA's gets an
    answer, and /healthz answers anyone."""
    anonymous = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    certified = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    certified.load_cert_chain(clients / "client.crt", clients / "client.key")
    url = f"https://127.0.0.1:{port}"
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": request(queue("team")),
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/validate", json=body, ssl=anonymous) as resp:
            assert resp.status == 401
        async with session.post(url + "/validate", json=body, ssl=certified) as resp:
            assert resp.status == 200
            assert (await resp.json())["response"]["allowed"] is True
        async with session.get(url + "/healthz", ssl=anonymous) as resp:
            assert resp.status == 200


def _client_certificate(directory: Path, name: str) -> None:
    """client.crt / client.key for `name`, signed by the CA in `directory` (clientAuth)."""
    import subprocess

    ext = directory / "client.ext"
    ext.write_text("extendedKeyUsage=clientAuth\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    steps = [
        ["openssl", "req", *ec, "-subj", f"/CN={name}", "-keyout", str(directory / "client.key"),
         "-out", str(directory / "client.csr")],
        ["openssl", "x509", "-req", "-in", str(directory / "client.csr"), "-CA",
         str(directory / "ca.crt"), "-CAkey", str(directory / "ca.key"), "-CAcreateserial",
         "-days", "1", "-extfile", str(ext), "-out", str(directory / "client.crt")],
    ]  # fmt: skip
    for command in steps:
        subprocess.run(command, check=True, capture_output=True, timeout=30)
