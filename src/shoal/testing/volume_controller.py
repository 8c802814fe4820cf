"""A stand-in for what kube-controller-manager's PersistentVolume controller and an
external provisioner do, for tests against an API server that runs neither (the kit's
bare kube-apiserver, the fake one).

Without them a scheduler that waits in PreBind for a pod's claims to be bound (kube's
VolumeBinding, and Shoal's) never binds such a pod. Every `interval` seconds this reads
the claims of `namespace` and the PersistentVolumes, and for each claim not yet bound:

* a volume whose `spec.claimRef` names the claim (the scheduler chose it): bind them,
  as the PersistentVolume controller completes a binding (claim `spec.volumeName`,
  `pv.kubernetes.io/bind-completed` and `bound-by-controller` on the claim, both
  phases `Bound`);
* a claim marked `volume.kubernetes.io/selected-node` (to be provisioned there): after
  `delay` seconds, create a volume for it on that node (CSI, of the class's provisioner,
  with node affinity to the node's hostname) and bind them; while `failing[node]`
  (a count, taken down by each failure) is positive, fail instead as external-provisioner
  does when provisioning failed and the pod should be placed again: take the mark away
  (recorded in `failures`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from shoal.api.volumes import (
    ANNOTATION_BIND_COMPLETED,
    ANNOTATION_BOUND_BY_CONTROLLER,
    ANNOTATION_SELECTED_NODE,
)
from shoal.drivers.kube.client import ApiError, ClientSettings, KubeClient, TransportError, connect
from shoal.drivers.kube.resources import NODES
from shoal.drivers.kube.volumes import PVCS, PVS, STORAGE_CLASSES

__all__ = ["VolumeControllerStandIn", "volume_controller"]

JSON = dict[str, Any]
MERGE = "application/merge-patch+json"
HOSTNAME = "kubernetes.io/hostname"


class VolumeControllerStandIn:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        *,
        interval: float = 0.1,
        delay: float = 0.0,
        failing: dict[str, int] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.interval = interval
        self.delay = delay
        self.failing = dict(failing or {})
        self.failures: list[tuple[str, str]] = []  # (claim, node) whose provisioning failed
        self.provisioned: dict[str, str] = {}  # claim -> node it was provisioned for
        self.created: list[str] = []  # PersistentVolumes it created
        self._marked_at: dict[tuple[str, str], float] = {}
        self.errors: list[str] = []  # API errors met (each retried at the next step)

    async def run(self) -> None:
        while True:
            try:
                await self.step()
            except (ApiError, TransportError) as err:  # as a controller: try again
                self.errors.append(str(err))
            await asyncio.sleep(self.interval)

    async def step(self) -> None:
        loop = asyncio.get_running_loop()
        claims = (await self.client.request("GET", PVCS.path(self.namespace))).get("items") or []
        volumes = (await self.client.request("GET", PVS.path())).get("items") or []
        by_claim = {}
        for pv in volumes:
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            if ref.get("namespace") == self.namespace and ref.get("name"):
                by_claim[ref["name"]] = pv
        for claim in claims:
            meta = claim["metadata"]
            name = meta["name"]
            if (claim.get("spec") or {}).get("volumeName"):
                continue
            pv = by_claim.get(name)
            if pv is not None:
                await self._bind(claim, pv["metadata"]["name"])
                continue
            node = (meta.get("annotations") or {}).get(ANNOTATION_SELECTED_NODE)
            if not node:
                continue
            if self.failing.get(node, 0) > 0:
                self.failing[node] -= 1
                await self._fail(claim, node)
                continue
            marked = self._marked_at.setdefault((name, node), loop.time())
            if loop.time() - marked >= self.delay:
                await self._provision(claim, node)

    async def _fail(self, claim: JSON, node: str) -> None:
        name = claim["metadata"]["name"]
        body = {"metadata": {"annotations": {ANNOTATION_SELECTED_NODE: None}}}
        await self.client.request(
            "PATCH", PVCS.path(self.namespace, name), body=body, content_type=MERGE
        )
        self.failures.append((name, node))

    async def _provision(self, claim: JSON, node: str) -> None:
        meta, spec = claim["metadata"], claim.get("spec") or {}
        class_name = spec.get("storageClassName") or ""
        storage_class = await self.client.request("GET", STORAGE_CLASSES.path(name=class_name))
        node_object = await self.client.request("GET", NODES.path(name=node))
        hostname = (node_object["metadata"].get("labels") or {}).get(HOSTNAME, node)
        volume = f"pvc-{meta['uid']}"
        requests = (spec.get("resources") or {}).get("requests") or {}
        term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [hostname]}]}
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": requests.get("storage", "1Gi")},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "storageClassName": class_name,
                "persistentVolumeReclaimPolicy": "Delete",
                "csi": {"driver": storage_class["provisioner"], "volumeHandle": volume},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
                "claimRef": {
                    "kind": "PersistentVolumeClaim",
                    "apiVersion": "v1",
                    "namespace": self.namespace,
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        }
        await self.client.request("POST", PVS.path(), body=body)
        self.created.append(volume)
        self.provisioned[meta["name"]] = node
        await self._bind(claim, volume)

    async def _bind(self, claim: JSON, volume: str) -> None:
        name = claim["metadata"]["name"]
        annotations = {ANNOTATION_BIND_COMPLETED: "yes", ANNOTATION_BOUND_BY_CONTROLLER: "yes"}
        body = {"metadata": {"annotations": annotations}, "spec": {"volumeName": volume}}
        path = PVCS.path(self.namespace, name)
        await self.client.request("PATCH", path, body=body, content_type=MERGE)
        bound = {"status": {"phase": "Bound"}}
        await self.client.request(
            "PATCH", PVCS.path(self.namespace, name, "status"), body=bound, content_type=MERGE
        )
        await self.client.request(
            "PATCH", PVS.path(name=volume, subresource="status"), body=bound, content_type=MERGE
        )


@contextlib.asynccontextmanager
async def volume_controller(
    kubeconfig: str, namespace: str, **options: Any
) -> AsyncIterator[VolumeControllerStandIn]:
    """Run the stand-in (over a connection of its own) while the body runs."""
    connection = await connect(kubeconfig)
    client = connection.client("volume-controller", ClientSettings(user_agent="volume-controller"))
    stand_in = VolumeControllerStandIn(client, namespace, **options)
    task = asyncio.ensure_future(stand_in.run())
    try:
        yield stand_in
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for name in stand_in.created:  # the volumes it made go with it
            with contextlib.suppress(ApiError, TransportError):
                await client.request("DELETE", PVS.path(name=name))
        await connection.close()
