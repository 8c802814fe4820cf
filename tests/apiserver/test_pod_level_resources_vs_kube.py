"""Pod-level resources (`spec.resources`, KEP-2837, on by default since Kubernetes
1.34) beside the kit's kube-scheduler on the real API server: pods whose containers ask
nothing and whose pod asks 3 cpu go one per 4-cpu node with both schedulers, and the
third waits.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from apihelpers import Space, scheduling, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import PODS


async def _pod(s: Space, name: str) -> None:
    body = s.pod(name, "100m")
    spec = body["spec"]
    spec["containers"][0]["resources"] = {}
    spec["resources"] = {"requests": {"cpu": "3", "memory": "64Mi"}}
    await s.client.request("POST", PODS.path(s.name), body=body)


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=110)
async def test_pod_level_requests_are_charged_by_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "podlevel") as s:
        n0, n1 = [await s.add_node(f"n{i}") for i in range(2)]
        for i in range(3):
            await _pod(s, f"p{i}")

        async def two_bound() -> bool:
            return len(await s.bound()) == 2

        async with scheduling(control_plane, s, tmp_path, scheduler, "podlevel"):
            await wait_for(two_bound, timeout=60, what="two pods bound")
            await asyncio.sleep(3)  # the third would have been bound by now
            bound = await s.bound()
        assert sorted(bound.values()) == sorted([n0, n1]), bound
