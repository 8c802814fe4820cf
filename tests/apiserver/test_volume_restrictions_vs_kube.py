"""VolumeRestrictions beside the kit's kube-scheduler on the real API server: pods with
inline disks, all preferring node n0 (a node-affinity preference of weight 100). The
second pod mounting the same AWS EBS volume must go to n1 (an EBS volume is never
shared); two read-only mounts of one GCE persistent disk may share n0. Both schedulers
place them alike.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from apihelpers import Space, scheduling, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import PODS


async def _pod(s: Space, name: str, prefer: str, source: str, disk: dict[str, Any]) -> None:
    body = s.pod(name, "100m")
    spec = body["spec"]
    spec["volumes"] = [{"name": "disk", source: disk}]
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                  "values": [prefer]}]}  # fmt: skip
    spec["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]
        }
    }
    await s.client.request("POST", PODS.path(s.name), body=body)


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=110)
async def test_inline_disks_are_placed_alike_by_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "volres") as s:
        n0, n1 = [await s.add_node(f"n{i}") for i in range(2)]
        ebs = {"volumeID": "vol-0123"}
        gce = {"pdName": "shared-pd", "readOnly": True}

        async def bound(count: int) -> bool:
            return len(await s.bound()) == count

        async with scheduling(control_plane, s, tmp_path, scheduler, "volres"):
            await _pod(s, "ebs-a", n0, "awsElasticBlockStore", ebs)
            await wait_for(lambda: bound(1), timeout=60, what="ebs-a bound")
            await _pod(s, "ebs-b", n0, "awsElasticBlockStore", ebs)
            await wait_for(lambda: bound(2), timeout=60, what="ebs-b bound")
            await _pod(s, "gce-a", n0, "gcePersistentDisk", gce)
            await _pod(s, "gce-b", n0, "gcePersistentDisk", gce)
            await wait_for(lambda: bound(4), timeout=60, what="every pod bound")
        assert await s.bound() == {"ebs-a": n0, "ebs-b": n1, "gce-a": n0, "gce-b": n0}
