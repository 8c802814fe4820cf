"""VolumeBinding's PreBind wait beside the kit's kube-scheduler on the real API server.

A pod's WaitForFirstConsumer claim is provisioned by a stand-in for the provisioner and
the PersistentVolume controller (the kit has neither) that takes 2 s, and whose first
attempt fails: it takes the claim's `volume.kubernetes.io/selected-node` away, as
external-provisioner does so that the scheduler places the pod again. Both schedulers
must bind the pod only once its claim is bound, must say where the pod is going
meanwhile (`status.nominatedNodeName`, kube's NominatedNodeNameForExpectation), and must
notice the failed attempt and mark the claim again.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from apihelpers import scheduling, space, wait_for
from kubehelpers import async_test
from test_volumes import claim, pod_with_claims, storage_class

from shoal.drivers.kube.volumes import PVCS
from shoal.testing.volume_controller import volume_controller


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=110)
async def test_the_pod_is_bound_after_its_claim_and_a_failed_provisioning_is_retried(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "volwait") as s:
        node = await s.add_node("n0", cpu="4")
        dynamic = await storage_class(s, "dynamic", "csi.example.com")
        await claim(s, "data", dynamic)
        early: list[str] = []
        nominated: set[str] = set()  # nominatedNodeName seen while the pod was unbound

        async def bound_before_its_claim() -> None:
            while True:
                pod_bound = "db" in await s.bound()
                data = await s.get(PVCS.path(s.name, "data")) or {}
                if pod_bound and not (data.get("spec") or {}).get("volumeName"):
                    early.append("the pod was bound before its claim")
                pod = (await s.pods()).get("db") or {}
                if not (pod.get("spec") or {}).get("nodeName"):
                    nominated.add((pod.get("status") or {}).get("nominatedNodeName", ""))
                await asyncio.sleep(0.1)

        watcher = asyncio.ensure_future(bound_before_its_claim())
        try:
            async with (
                volume_controller(
                    control_plane["KUBECONFIG"], s.name, delay=2.0, failing={node: 1}
                ) as stand_in,
                scheduling(control_plane, s, tmp_path, scheduler, "volwait"),
            ):
                await pod_with_claims(s, "db", "data")

                async def bound() -> bool:
                    return "db" in await s.bound()

                await wait_for(bound, timeout=80, what="the pod bound")
                assert stand_in.failures == [("data", node)]
                assert stand_in.provisioned == {"data": node}
            pod = (await s.pods())["db"]
        finally:
            watcher.cancel()
        assert not early
        # While PreBind waited, the pod named its node (NominatedNodeNameForExpectation,
        # on by default since 1.35); the API server cleared it at binding.
        assert node in nominated, nominated
        assert not (pod.get("status") or {}).get("nominatedNodeName")
