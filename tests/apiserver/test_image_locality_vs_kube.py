"""ImageLocality beside the kit's kube-scheduler on the real API server: nodes report
images in `status.images` (written here, as a kubelet would), and both schedulers put
each pod on the node that already holds its image, an untagged image name matching the
node's `:latest` entry.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from apihelpers import MERGE, Space, scheduling, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import NODES, PODS

GB = 1024**3  # large: a clear preference whatever other tests' nodes the cluster holds


async def _images(s: Space, node: str, *names: str) -> None:
    image = {"names": list(names), "sizeBytes": 20 * GB}
    await s.client.request(
        "PATCH",
        NODES.path(name=node, subresource="status"),
        body={"status": {"images": [image]}},
        content_type=MERGE,
    )


async def _pod(s: Space, name: str, image: str) -> None:
    body = s.pod(name, "100m")
    body["spec"]["containers"][0]["image"] = image
    await s.client.request("POST", PODS.path(s.name), body=body)


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=110)
async def test_each_pod_goes_where_its_image_is_with_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "imgloc") as s:
        nodes = [await s.add_node(f"n{i}") for i in range(3)]
        await _images(s, nodes[1], "registry.example/train:v3", "registry.example/train@sha256:1")
        await _images(s, nodes[2], "registry.example/tools:latest")
        await _pod(s, "train", "registry.example/train:v3")
        await _pod(s, "tools", "registry.example/tools")

        async def both_bound() -> bool:
            return len(await s.bound()) == 2

        async with scheduling(control_plane, s, tmp_path, scheduler, "imgloc"):
            await wait_for(both_bound, timeout=60, what="both pods bound")
        assert await s.bound() == {"train": nodes[1], "tools": nodes[2]}
