"""A pod that asks for devices through ResourceClaims (Dynamic Resource Allocation) is
refused with a message naming the claims, never placed as if it had asked for nothing
(it would start on a node without its devices); other pods are unaffected."""

from __future__ import annotations

from shoal.api.manifests import decode
from shoal.api.objects import Pod
from shoal.testing import SchedulerHarness, make_node, make_pod


def test_a_pod_with_resource_claims_waits_with_the_reason() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    raw = {
        "metadata": {"name": "dra", "namespace": "default", "uid": "u-dra"},
        "spec": {
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }
    h.add_pods(decode(raw, Pod), make_pod("plain").req(cpu="1"))
    result = h.advance(5)
    assert result.placements == {"default/dra": None, "default/plain": "n1"}
    message = result.messages["default/dra"]
    assert "ResourceClaims (spec.resourceClaims: gpu)" in message
    assert "Dynamic Resource Allocation" in message
