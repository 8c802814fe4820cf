"""HAMi's and Volcano's device plugins read their allocation from the pod: against the fake
API server, the annotations Shoal writes with the Binding arrive on the pod (issue 24,
item 1), and a HAMi pod bound where no HAMi plugin registered devices says so in its
Scheduled event and the log."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from kubehelpers import async_test, bound_pods, events_for, eventually, node, pod
from kubehelpers import backend as running

from shoal.testing.fake_apiserver import FakeApiServer

GPU = "nvidia.com/gpu"
HAMI_UUIDS = [
    "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec",
    "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",
]
VOLCANO_UUID = "GPU-7a1f0c2e-1111-2222-3333-444455556666"
VOLCANO_REGISTER = f"{VOLCANO_UUID},10,16384,NVIDIA-T4,true,hami-core:"


def gpu_node(name: str, resources: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    doc = node(name, cpu="32", memory="128Gi")
    for part in ("capacity", "allocatable"):
        doc["status"][part].update(resources)
    doc["metadata"]["annotations"] = annotations
    return doc


def gpu_pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    doc = pod(name, cpu="1")
    resources = doc["spec"]["containers"][0]["resources"]
    resources["requests"].update(limits)  # extended resources: requests equal limits
    resources["limits"] = dict(limits)
    return doc


def annotations_of(api: FakeApiServer, name: str) -> dict[str, str]:
    found = next(p for p in api.pods() if p["metadata"]["name"] == name)
    return dict(found["metadata"].get("annotations") or {})


@async_test()
async def test_hami_and_volcano_pods_get_their_plugins_annotations_with_the_binding(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="shoal.kube")
    hami_register = json.dumps(
        [
            {
                "id": u,
                "index": i,
                "count": 10,
                "devmem": 16384,
                "devcore": 100,
                "type": "NVIDIA-Tesla T4",
                "mode": "hami-core",
                "health": True,
            }
            for i, u in enumerate(HAMI_UUIDS)
        ]
    )
    async with FakeApiServer() as api:
        api.create(
            "v1",
            "nodes",
            gpu_node("hami", {GPU: "20"}, {"hami.io/node-nvidia-register": hami_register}),
        )
        api.create(
            "v1",
            "nodes",
            gpu_node(
                "volcano",
                {"volcano.sh/vgpu-number": "10"},
                {"volcano.sh/node-vgpu-register": VOLCANO_REGISTER},
            ),
        )
        api.create("v1", "pods", gpu_pod("h1", {GPU: "1", "nvidia.com/gpumem": "6000"}))
        api.create("v1", "pods", gpu_pod("h2", {GPU: "1", "nvidia.com/gpumem-percentage": "50"}))
        api.create(
            "v1",
            "pods",
            gpu_pod("v1", {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "4000"}),
        )
        async with running(api, tmp_path):
            await eventually(lambda: len(bound_pods(api)) == 3, what="three pods bound")
            bound = bound_pods(api)
            assert bound == {"default/h1": "hami", "default/h2": "hami", "default/v1": "volcano"}
            h1, h2 = annotations_of(api, "h1"), annotations_of(api, "h2")
            for annotations, mib in ((h1, 6000), (h2, 8192)):
                uuid = HAMI_UUIDS[int(annotations["shoal.dev/gpu-index"])]
                assert annotations["hami.io/vgpu-devices-to-allocate"] == f"{uuid},NVIDIA,{mib},0:;"
                assert annotations["hami.io/vgpu-devices-allocated"] == f"{uuid},NVIDIA,{mib},0:;"
                assert annotations["hami.io/vgpu-node"] == "hami"
                assert annotations["hami.io/bind-phase"] == "allocating"
            v1 = annotations_of(api, "v1")
            assert v1["volcano.sh/devices-to-allocate"] == f"{VOLCANO_UUID},NVIDIA,4000,0:"
            assert v1["volcano.sh/vgpu-ids-new"] == f"{VOLCANO_UUID},NVIDIA,4000,0:"
            assert v1["volcano.sh/vgpu-node"] == "volcano"
            assert v1["volcano.sh/bind-phase"] == "allocating"
            assert v1["shoal.dev/gpu-index"] == "0"
            # Everything went with the bindings themselves.
            assert len(api.bindings) == 3

            # A HAMi pod sent to a node where no HAMi plugin registered devices is bound
            # (only Shoal's index is written), and says so.
            plain = gpu_node("plain", {GPU: "1"}, {})
            plain["metadata"]["labels"]["nvidia.com/gpu.memory"] = "16384"
            api.create("v1", "nodes", plain)
            sent = gpu_pod("h3", {GPU: "1", "nvidia.com/gpumem": "6000"})
            sent["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "plain"}
            api.create("v1", "pods", sent)
            await eventually(lambda: len(bound_pods(api)) == 4, what="h3 bound")
            assert bound_pods(api)["default/h3"] == "plain"
            name = "h3"
            written = annotations_of(api, name)
            assert "shoal.dev/gpu-index" in written
            assert not any(k.startswith(("hami.io/", "volcano.sh/")) for k in written)
            await eventually(lambda: bool(events_for(api, name, "Scheduled")), what="event")
            note = events_for(api, name, "Scheduled")[0]["note"]
            assert "node plain has no HAMi device registration" in note, note
            assert "hami.io/node-nvidia-register" in note
            logged = [r.getMessage() for r in caplog.records]
            assert any("plain" in m and "no HAMi device registration" in m for m in logged)
            # The pods on registered nodes were told nothing.
            scheduled = events_for(api, "h1", "Scheduled")[0]["note"]
            assert scheduled == "Successfully assigned default/h1 to hami"
