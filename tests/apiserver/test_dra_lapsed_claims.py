"""A claim whose last user is gone keeps its allocation until the resource-claim
controller clears it, and the API server lets no scheduler replace it. Shoal gives the
claim's devices to others at once (kube's DRA preemption): a pod that uses such a claim
again before the controller ran must wait, or it gets the same GPU as someone else.

The kit runs no resource-claim controller: the test plays it, late, on purpose.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio

from apihelpers import Space, space, wait_for
from kubehelpers import async_test
from test_dra import (
    DRIVER,
    _bound,
    _devices,
    claim,
    device_class,
    gpu_slice,
    pod_with_claim,
    release_claims_of_deleted_pods,
    status_of,
)

from shoal.drivers.kube.resources import PODS


@async_test(timeout=150)
async def test_a_claim_whose_gpu_went_to_a_preemptor_waits_for_the_controller(
    control_plane: dict[str, str],
) -> None:
    """low and keeper hold the node's two GPUs; high preempts low and gets low's GPU.
    A new pod using low's claim, still written on that GPU, stays pending and says why,
    even once keeper's GPU is free; when the controller has deallocated the claims it is
    bound with a GPU nobody else holds."""
    async with space(control_plane["KUBECONFIG"], "dralapsed") as s:
        node = await s.add_node("g", cpu="8")
        await gpu_slice(s, node, 2, "80Gi")
        gpu = await device_class(s)
        for name in ("low", "keeper", "high"):
            await claim(s, name, gpu)
        keeper_class = await s.add_priority_class("keeper", 2000)
        high_class = await s.add_priority_class("high", 1000)
        async with s.shoal(s.options("dralapsed")):
            await pod_with_claim(s, "low", "low")
            await pod_with_claim(s, "keeper", "keeper", priority_class=keeper_class)
            for name in ("low", "keeper"):
                await wait_for(lambda name=name: _bound(s, name), what=f"{name} bound")
            held = _devices(await status_of(s, "low"))

            await pod_with_claim(s, "high", "high", priority_class=high_class)
            await wait_for(lambda: _bound(s, "high"), timeout=30, what="high bound")
            assert "low" not in await s.pods()
            assert _devices(await status_of(s, "high")) == held
            assert _devices(await status_of(s, "low")) == held  # no controller yet

            await pod_with_claim(s, "again", "low")

            async def says_why() -> bool:
                return any(
                    "waiting for the resource claim controller to deallocate it"
                    in (e.get("note") or "")
                    for e in await s.events("again", "FailedScheduling")
                )

            await wait_for(says_why, timeout=30, what="again's FailedScheduling")
            await s.client.request(
                "DELETE", PODS.path(s.name, "keeper"), query={"gracePeriodSeconds": "0"}
            )
            await wait_for(lambda: _gone(s, "keeper"), what="keeper deleted")
            await asyncio.sleep(3.0)  # keeper's GPU is free, but the claim's is not
            assert "again" not in await s.bound()

            released = await release_claims_of_deleted_pods(s)
            assert sorted(released) == ["keeper", "low"], released
            await wait_for(lambda: _bound(s, "again"), timeout=30, what="again bound")
            again = _devices(await status_of(s, "low"))
            assert again and again != held
            assert _devices(await status_of(s, "high")) == held
            assert set(again) | set(held) <= {(DRIVER, node, "gpu-0"), (DRIVER, node, "gpu-1")}


async def _gone(s: Space, name: str) -> bool:
    return name not in await s.pods()
