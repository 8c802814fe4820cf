"""NodeDeclaredFeatures beside the kit's kube-scheduler on the real API server (v1.36,
where the plugin is in kube-scheduler's default profile): of two nodes, only n1 declares
`RestartAllContainersOnContainerExits` in `status.declaredFeatures`; a pod whose
container's `restartPolicyRules` restart all containers must go to n1, a plain pod may
go anywhere. n0 is the less loaded node, so a scheduler ignoring the features would
pick it. Both schedulers place the pod on n1.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from apihelpers import MERGE, scheduling, space, wait_for
from kubehelpers import async_test

from shoal.api.node_features import RESTART_ALL_CONTAINERS
from shoal.drivers.kube.resources import NODES, PODS


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=110)
async def test_a_pod_needing_a_feature_goes_to_the_node_declaring_it(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "ndf") as s:
        n0 = await s.add_node("n0", cpu="8")
        n1 = await s.add_node("n1", cpu="2")
        declared = {"status": {"declaredFeatures": [RESTART_ALL_CONTAINERS]}}
        await s.client.request(
            "PATCH", NODES.path(name=n1, subresource="status"), body=declared, content_type=MERGE
        )
        body = s.pod("restarter", "100m")
        container = body["spec"]["containers"][0]
        container["restartPolicy"] = "Never"
        container["restartPolicyRules"] = [
            {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}
        ]
        await s.client.request("POST", PODS.path(s.name), body=body)

        async def bound() -> bool:
            return "restarter" in await s.bound()

        async with scheduling(control_plane, s, tmp_path, scheduler, "ndf"):
            await wait_for(bound, timeout=60, what="the pod bound")
        assert (await s.bound())["restarter"] == n1
        assert n0 != n1
