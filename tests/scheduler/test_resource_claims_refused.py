"""A pod that asks for devices through ResourceClaims (Dynamic Resource Allocation) in
a profile without DynamicResources is refused with a message naming the claims, never
placed as if it had asked for nothing (it would start on a node without its devices);
other pods are unaffected. With the plugin (the default profile) it waits for its
claim instead (tests/dra)."""

from __future__ import annotations

from shoal.api.manifests import decode
from shoal.api.objects import Pod
from shoal.testing import SchedulerHarness, make_node, make_pod

_RAW = {
    "metadata": {"name": "dra", "namespace": "default", "uid": "u-dra"},
    "spec": {
        "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
    },
}


def test_a_pod_with_resource_claims_waits_with_the_reason() -> None:
    config = {
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "plugins": {"multiPoint": {"disabled": [{"name": "DynamicResources"}]}},
            }
        ]
    }
    h = SchedulerHarness(config)
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(decode(_RAW, Pod), make_pod("plain").req(cpu="1"))
    result = h.advance(5)
    assert result.placements == {"default/dra": None, "default/plain": "n1"}
    message = result.messages["default/dra"]
    assert "ResourceClaims (spec.resourceClaims: gpu)" in message
    assert "Dynamic Resource Allocation" in message


def test_with_the_default_profile_the_pod_waits_for_its_claim() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(decode(_RAW, Pod))
    result = h.advance(5)
    assert result.placements == {"default/dra": None}
    assert "resource claim controller" in result.messages["default/dra"]
