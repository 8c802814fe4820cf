"""The deploy/ manifests and the Helm chart, applied to a real kube-apiserver with the
kit's kubectl: the documented order works on a cluster without the namespace, the API
server accepts every object, and the service account may do what Shoal does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml
from chartrender import Chart

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
Kubectl = Callable[..., str]


def test_the_documented_apply_order_works_on_a_fresh_cluster(kubectl: Kubectl) -> None:
    assert "shoal-system" not in kubectl("get", "namespaces", "-o", "name")
    # Exactly the command in docs/kubernetes.md and the README (run from the checkout).
    out = kubectl(
        "apply",
        "-f",
        str(DEPLOY / "namespace.yaml"),
        "-f",
        str(DEPLOY / "crds"),
        "-f",
        str(DEPLOY / "rbac.yaml"),
        "-f",
        str(DEPLOY / "deployment.yaml"),
        "-f",
        str(DEPLOY / "networkpolicy.yaml"),
    )
    for created in (
        "namespace/shoal-system",
        "serviceaccount/shoal",
        "clusterrole.rbac.authorization.k8s.io/shoal",
        "role.rbac.authorization.k8s.io/shoal-leader-election",
        "configmap/shoal-config",
        "deployment.apps/shoal",
        "service/shoal-metrics",
        "networkpolicy.networking.k8s.io/shoal",
        "networkpolicy.networking.k8s.io/shoal-webhook",
    ):
        assert created in out, out
    # Applying again changes nothing.
    again = kubectl("apply", "-f", str(DEPLOY / "namespace.yaml"), "-f", str(DEPLOY))
    assert "created" not in again and "configured" not in again, again
    _can_do_what_shoal_does(kubectl, "shoal-system", "shoal")


def test_the_rendered_helm_chart_is_accepted_by_the_api_server(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    namespace = "shoal-helm"
    kubectl("create", "namespace", namespace)  # helm install --create-namespace
    rendered = Chart(DEPLOY / "helm" / "shoal", release="shoal-helm", namespace=namespace).render()
    files = []
    for name, text in rendered.items():
        if name.endswith(".yaml"):
            (tmp_path / name).write_text(text)
            files += ["-f", str(tmp_path / name)]
    # The chart's CRDs (crds/) are the same files as deploy/crds; helm applies them first.
    kubectl("apply", "--dry-run=server", "-f", str(DEPLOY / "helm" / "shoal" / "crds"))
    out = kubectl("apply", *files)
    assert "deployment.apps/shoal-helm created" in out, out
    config = yaml.safe_load(
        kubectl("-n", namespace, "get", "configmap", "shoal-helm-config", "-o", "yaml")
    )
    assert "resourceNamespace: shoal-helm" in config["data"]["config.yaml"]
    _can_do_what_shoal_does(kubectl, namespace, "shoal")


def _can_do_what_shoal_does(kubectl: Kubectl, namespace: str, account: str) -> None:
    user = f"--as=system:serviceaccount:{namespace}:{account}"
    for verb, resource, where in (
        ("create", "pods --subresource=binding", "elsewhere"),
        ("create", "pods --subresource=eviction", "elsewhere"),
        ("patch", "pods --subresource=status", "elsewhere"),
        ("watch", "nodes", ""),
        ("list", "podgroups.scheduling.x-k8s.io", ""),
        ("patch", "podgroups.scheduling.x-k8s.io --subresource=status", "elsewhere"),
        ("list", "queues.shoal.dev", ""),
        ("create", "events.events.k8s.io", "elsewhere"),
        ("create", "leases.coordination.k8s.io", namespace),
        ("update", "leases.coordination.k8s.io/shoal", namespace),  # resource/name
    ):
        args = ["auth", "can-i", verb, *resource.split(), user]
        if where:
            args += ["-n", where]
        assert kubectl(*args).strip() == "yes", (verb, resource, where)
    # Not more than that: no deleting pods, no other Leases.
    for args in (
        ["delete", "pods", "-n", "elsewhere"],
        ["update", "pods", "-n", "elsewhere"],
        ["update", "leases.coordination.k8s.io/kube-scheduler", "-n", namespace],
        ["update", "leases.coordination.k8s.io/shoal", "-n", "kube-system"],
    ):
        assert kubectl("auth", "can-i", *args, user, check=False).strip() == "no", args
