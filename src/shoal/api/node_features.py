"""The node features a pod needs (NodeDeclaredFeatures, KEP-5328; beta and on by default
in Kubernetes 1.36).

Kubelets declare in `status.declaredFeatures` the newer features they support;
kube-scheduler's NodeDeclaredFeatures plugin infers from a pod's spec which of them the
pod needs (`component-helpers/nodedeclaredfeatures`, `InferForPodScheduling`) and keeps
it off nodes that do not declare them all. The features kube-scheduler v1.36 registers
(read from its binary) and which pods being scheduled need them:

* `RestartAllContainersOnContainerExits`: a pod with a container or init container
  whose `restartPolicyRules` have the action `RestartAllContainers`;
* `UserNamespacesHostNetworkSupport`: a pod with `hostNetwork: true` and
  `hostUsers: false`;
* `ExtendWebSocketsToKubelet` and the in-place resize features: none (they concern exec
  and pod updates, which the API server checks).
"""

from __future__ import annotations

from shoal.api.objects import PodSpec

__all__ = ["RESTART_ALL_CONTAINERS", "USER_NAMESPACES_HOST_NETWORK", "required_features"]

RESTART_ALL_CONTAINERS = "RestartAllContainersOnContainerExits"
USER_NAMESPACES_HOST_NETWORK = "UserNamespacesHostNetworkSupport"


_NONE: frozenset[str] = frozenset()


def required_features(spec: PodSpec) -> frozenset[str]:
    """The declared node features the pod needs to be scheduled (empty: nearly all; it
    runs for every pod, so the common case allocates nothing)."""
    restart_all = False
    for containers in (spec.containers, spec.init_containers):
        for container in containers:
            if container.restart_policy_rules:
                restart_all = restart_all or any(
                    rule.action == "RestartAllContainers" for rule in container.restart_policy_rules
                )
    userns = spec.host_network and spec.host_users is False
    if not restart_all and not userns:
        return _NONE
    needed = {RESTART_ALL_CONTAINERS} if restart_all else set()
    if userns:
        needed.add(USER_NAMESPACES_HOST_NETWORK)
    return frozenset(needed)
