"""Shoal's admission webhooks called by a real kube-apiserver (a URL clientConfig on
loopback with the generated CA as caBundle): invalid tenancy objects are refused with
the webhook's message, a pod created in a bound namespace without a schedulerName gets
Shoal's and its queue, and is then scheduled; the Queue's status and printer columns
show it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from apihelpers import Space, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.client import ApiError
from shoal.drivers.kube.resources import PODS, QUEUE_BINDINGS, QUEUES
from shoal.drivers.kube.tls import ReloadingContext, generate_webhook_certs
from shoal.servers.webhook import ApiTenancySource, WebhookServer

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
TEST_LABEL = "shoal.test/webhook"


@contextlib.asynccontextmanager
async def webhooks(s: Space, certs: Path) -> AsyncIterator[WebhookServer]:
    """The webhook server in-process on loopback, and configurations sending it this
    test's objects only (its label, its namespace)."""
    generate_webhook_certs(certs, ("localhost",))
    server = WebhookServer(
        ApiTenancySource(s.client),
        ReloadingContext(certs / "tls.crt", certs / "tls.key"),
        host="127.0.0.1",
        port=0,
        scheduler_name=s.scheduler,
        reload_seconds=0,
    )
    await server.start()
    ca = base64.b64encode((certs / "ca.crt").read_bytes()).decode()

    def client(path: str) -> dict[str, Any]:
        return {"url": f"https://127.0.0.1:{server.port}{path}", "caBundle": ca}

    common = {"admissionReviewVersions": ["v1"], "sideEffects": "None", "timeoutSeconds": 10}
    validating = {
        "metadata": {"name": s.name},
        "webhooks": [
            {
                **common,
                "name": "validate.shoal.dev",
                "failurePolicy": "Fail",
                "clientConfig": client("/validate"),
                "objectSelector": {"matchLabels": {TEST_LABEL: s.name}},
                "rules": [
                    {
                        "apiGroups": ["shoal.dev"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["queues", "queuebindings", "nodepools"],
                    }
                ],
            }
        ],
    }
    mutating = {
        "metadata": {"name": s.name},
        "webhooks": [
            {
                **common,
                "name": "pods.shoal.dev",
                "failurePolicy": "Fail",
                "clientConfig": client("/mutate-pods"),
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": s.name}},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
            }
        ],
    }
    try:
        for plural, body in (
            ("validatingwebhookconfigurations", validating),
            ("mutatingwebhookconfigurations", mutating),
        ):
            await s.create(f"{ADMISSION}/{plural}", body)
            s.cluster_objects.insert(0, f"{ADMISSION}/{plural}/{s.name}")
        yield server
    finally:
        # The configurations go before the server (a Fail policy with no server would
        # refuse this test's objects' deletion).
        for path in [p for p in s.cluster_objects if p.startswith(ADMISSION)]:
            with contextlib.suppress(ApiError):
                await s.client.request("DELETE", path)
        await server.stop()


def queue(s: Space, name: str, parent: str = "", **spec: Any) -> dict[str, Any]:
    if parent:
        spec["parent"] = parent
    return {
        "apiVersion": QUEUES.api_version,
        "kind": "Queue",
        "metadata": {"name": name, "labels": {TEST_LABEL: s.name}},
        "spec": spec,
    }


async def refusal(s: Space, path: str, body: dict[str, Any], method: str = "POST") -> str:
    """The API server's refusal message (the test fails if the object is accepted)."""
    try:
        await s.client.request(method, path, body=body)
    except ApiError as err:
        return err.message
    raise AssertionError(f"{body['metadata']['name']} was accepted")


@async_test(timeout=120)
async def test_the_api_server_refuses_invalid_queues_and_pods_get_shoal_and_their_queue(
    control_plane: dict[str, str], tmp_path: Path
) -> None:
    async with space(control_plane["KUBECONFIG"], "webhook") as s:
        await s.add_node("n1", cpu="4")
        async with webhooks(s, tmp_path / "certs"):
            # The API server picks up new configurations within a moment: probe with a
            # bad queue until it is refused (accepted probes are deleted).
            async def in_force() -> bool:
                name = f"{s.name}-probe-{uuid.uuid4().hex[:4]}"
                probe = queue(s, name, guaranteed={"cpu": "2"}, max={"cpu": "1"})
                try:
                    await s.create(QUEUES.path(), probe)
                except ApiError as err:
                    # Refused by the webhook's verdict; not by the webhook failing (its
                    # own reads get 429 while a fresh CRD's storage initializes).
                    return "denied the request" in str(err)
                await s.client.request("DELETE", QUEUES.path(name=name))
                return False

            await wait_for(in_force, timeout=30, what="the webhook configuration in force")

            team = f"{s.name}-team"
            bad = queue(s, team, guaranteed={"cpu": "4"}, max={"cpu": "2"})
            message = await refusal(s, QUEUES.path(), bad)
            assert 'admission webhook "validate.shoal.dev" denied the request' in message
            assert f"Queue {team}: spec.guaranteed.cpu (4) exceeds spec.max.cpu (2)" in (message)
            assert await s.get(QUEUES.path(name=team)) is None

            message = await refusal(s, QUEUES.path(), queue(s, f"{s.name}-x", "nowhere"))
            assert "spec.parent 'nowhere' does not exist" in message

            # Good objects pass; closing a cycle with an update is refused.
            org = f"{s.name}-org"
            for body in (
                queue(s, org, guaranteed={"cpu": "2"}),
                queue(s, team, org, guaranteed={"cpu": "1"}),
            ):
                await s.create(QUEUES.path(), body)
                s.cluster_objects.append(QUEUES.path(name=body["metadata"]["name"]))
            current = await s.get(QUEUES.path(name=org))
            assert current is not None
            current["spec"]["parent"] = team
            message = await refusal(s, QUEUES.path(name=org), current, method="PUT")
            assert "cycle" in message and "spec.parent" in message
            message = await refusal(
                s, QUEUES.path(), queue(s, f"{s.name}-big", org, guaranteed={"cpu": "3"})
            )
            assert "spec.guaranteed.cpu" in message and org in message

            # A binding to the leaf; a pod that names no scheduler is handed to Shoal
            # with the binding's queue, and scheduled.
            bound = {
                "apiVersion": QUEUE_BINDINGS.api_version,
                "kind": "QueueBinding",
                "metadata": {"name": s.name, "labels": {TEST_LABEL: s.name}},
                "spec": {"queue": team, "namespaces": [s.name]},
            }
            await s.create(QUEUE_BINDINGS.path(), bound)
            s.cluster_objects.append(QUEUE_BINDINGS.path(name=s.name))
            pod = s.pod("plain", "1")
            del pod["spec"]["schedulerName"]
            created = await s.create(PODS.path(s.name), pod)
            assert created["spec"]["schedulerName"] == s.scheduler
            assert created["metadata"]["labels"]["shoal.dev/queue"] == team
            explicit = s.pod("explicit", "1", scheduler="someone-else")
            created = await s.create(PODS.path(s.name), explicit)
            assert created["spec"]["schedulerName"] == "someone-else"

            async with s.shoal(s.options("webhook")):
                await wait_for(lambda: _bound(s, "plain"), what="the mutated pod bound by Shoal")

                async def status() -> dict[str, Any]:
                    found = await s.get(QUEUES.path(name=team)) or {}
                    return dict(found.get("status") or {})

                async def counted() -> bool:
                    got = await status()
                    # Bound, not started: there is no kubelet here.
                    return got.get("boundPods") == 1 and got.get("runningJobs") == 1

                await wait_for(counted, what="the queue's status counting the pod")
                assert (await status())["allocated"]["cpu"] == "1"
                # `kubectl get queues` shows the printer columns.
                kubectl = Path(control_plane["K8S_BIN_DIR"]) / "kubectl"
                done = await asyncio.to_thread(
                    subprocess.run,
                    [str(kubectl), "get", "queues", org, team],
                    env={**os.environ, "KUBECONFIG": control_plane["KUBECONFIG"]},
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                header, *rows = done.stdout.split("\n")
                assert header.split()[:6] == ["NAME", "STATE", "PARENT", "WEIGHT", "CPU", "GPU"], (
                    header
                )
                line = next(r.split() for r in rows if r.startswith(team))
                assert line[1:5] == ["Open", org, "1", "1"], line


async def _bound(s: Space, name: str) -> bool:
    return name in await s.bound()
