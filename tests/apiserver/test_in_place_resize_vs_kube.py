"""In-place pod resize beside the kit's kube-scheduler on the real API server. A pod
bound to n0 holds 3 of its 4 cpu; it is resized to 1 cpu through the `resize`
subresource, but its status (written here, as the kubelet would) still says 3 are
allocated: a 2-cpu pod must not go to n0 until the status says the resize is done. Both
schedulers wait, then place it. The same with the size at pod level (`spec.resources`,
and the pod-level `status.allocatedResources` / `status.resources`).

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from apihelpers import MERGE, Space, scheduling, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import NODES, PODS


async def _status(s: Space, name: str, cpu: str) -> None:
    """What the kubelet writes once it has allocated and actuated `cpu`."""
    resources = {"cpu": cpu, "memory": "64Mi"}
    body = {
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.9",
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": "2026-11-28T12:00:00Z"}},
                    "allocatedResources": resources,
                    "resources": {"requests": resources},
                }
            ],
        }
    }
    path = PODS.path(s.name, name=name, subresource="status")
    await s.client.request("PATCH", path, body=body, content_type=MERGE)


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=110)
async def test_a_pod_resized_down_keeps_its_room_until_the_kubelet_says_so(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "resize") as s:
        (n0,) = [await s.add_node("n0")]
        await s.client.request("POST", PODS.path(s.name), body=s.pod("big", "3", node_name=n0))
        resize = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
        await _resized_then_placed(control_plane, tmp_path, scheduler, s, n0, resize, _status)


async def _resized_then_placed(
    control_plane: dict[str, str],
    tmp_path: Path,
    scheduler: str,
    s: Space,
    n0: str,
    resize: dict[str, object],
    status: Callable[[Space, str, str], Awaitable[None]],
) -> None:
    """`big` (3 cpu on n0, the kubelet says) is resized to 1 cpu by `resize`; a 2-cpu
    pod must wait until `status` says the kubelet made it so, then go to n0."""
    await status(s, "big", "3")
    await s.client.request(
        "PATCH",
        PODS.path(s.name, name="big", subresource="resize"),
        body=resize,
        content_type="application/strategic-merge-patch+json",
    )
    await s.client.request("POST", PODS.path(s.name), body=s.pod("new", "2"))

    async def placed() -> bool:
        return "new" in await s.bound()

    async with scheduling(control_plane, s, tmp_path, scheduler, "resize"):
        await asyncio.sleep(4)  # it would have been bound by now
        assert "new" not in await s.bound()
        await status(s, "big", "1")
        await wait_for(placed, timeout=60, what="new bound once the resize is done")
    assert (await s.bound())["new"] == n0


async def _pod_level_status(s: Space, name: str, cpu: str) -> None:
    """What the kubelet writes once it has allocated and actuated `cpu` for the whole
    pod (pod-level in-place resize, InPlacePodLevelResourcesVerticalScaling)."""
    resources = {"cpu": cpu, "memory": "64Mi"}
    body = {
        "status": {
            "phase": "Running",
            "allocatedResources": resources,
            "resources": {"requests": resources},
        }
    }
    path = PODS.path(s.name, name=name, subresource="status")
    await s.client.request("PATCH", path, body=body, content_type=MERGE)


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=110)
async def test_a_pod_level_resize_down_keeps_its_room_until_the_kubelet_says_so(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "podresize") as s:
        (n0,) = [await s.add_node("n0")]
        # The API server lets a pod-level resize through only on a node that declares
        # the feature (NodeDeclaredFeatures, beta in 1.36), as its kubelet would.
        declared = {"status": {"declaredFeatures": ["InPlacePodLevelResourcesVerticalScaling"]}}
        await s.client.request(
            "PATCH", NODES.path(name=n0, subresource="status"), body=declared, content_type=MERGE
        )
        big = s.pod("big", "3", node_name=n0)
        # The pod's size at pod level (spec.resources); its container asks nothing.
        big["spec"]["resources"] = {"requests": {"cpu": "3", "memory": "64Mi"}}
        del big["spec"]["containers"][0]["resources"]
        await s.client.request("POST", PODS.path(s.name), body=big)
        resize = {"spec": {"resources": {"requests": {"cpu": "1"}}}}
        await _resized_then_placed(
            control_plane, tmp_path, scheduler, s, n0, resize, _pod_level_status
        )
