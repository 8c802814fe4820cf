"""Deployment artifacts: generated CRDs are current and structural, the RBAC rules are
minimal (everything the backend does is allowed, every rule is used), the Helm chart
and the plain manifests agree."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import yaml
from kubehelpers import async_test, bound_pods, events_for, eventually, fast_options, node, pod
from kubehelpers import backend as running

from shoal.drivers.kube.crds import CRDS, main, render
from shoal.drivers.kube.leader import LeaderSettings
from shoal.testing.fake_apiserver import FakeApiServer, Fault

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "shoal"


def test_checked_in_crds_are_generated_from_the_models() -> None:
    assert main([str(DEPLOY / "crds"), str(CHART / "crds"), "--check"]) == 0
    assert {p.name for p in (DEPLOY / "crds").glob("*.yaml")} == set(render())


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for name, child in (schema.get("properties") or {}).items():
        out += _walk(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        out += _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += _walk(schema["additionalProperties"], f"{path}{{}}")
    return out


def test_crd_schemas_are_structural() -> None:
    for spec in CRDS:
        crd = yaml.safe_load(render()[f"{spec.resource.plural}.{spec.resource.group}.yaml"])
        version = crd["spec"]["versions"][0]
        schema = version["schema"]["openAPIV3Schema"]
        assert schema["properties"]["metadata"] == {"type": "object"}
        for path, node_schema in _walk(schema):
            text = repr(node_schema)
            assert "$ref" not in text and "title" not in node_schema, path
            if node_schema.get("x-kubernetes-int-or-string"):
                assert node_schema["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
                continue
            assert node_schema.get("type") in (
                "object",
                "array",
                "string",
                "integer",
                "number",
                "boolean",
            ), (
                spec.resource.name,
                path,
            )
            assert "anyOf" not in node_schema, path
        for field, extra in spec.validation.items():
            target = schema
            for part in field.split("."):
                target = target["properties"][part]
            assert extra.items() <= target.items()


def _rules(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """Shoal's own rules (not the reader roles it ships for others to bind)."""
    return [
        r
        for d in documents
        if d and d["kind"] == kind and not d["metadata"]["name"].endswith("-reader")
        for r in d["rules"]
    ]


def _untemplate(text: str) -> str:
    """Make a Helm template parseable: drop directive-only lines, blank inline ones."""
    lines = [line for line in text.splitlines() if not re.fullmatch(r"\s*\{\{-?.*-?\}\}\s*", line)]
    return re.sub(r"\{\{-?[^}]*\}\}", "x", "\n".join(lines))


def test_helm_chart_matches_the_plain_manifests() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "shoal"
    assert values["profiles"] == [{"schedulerName": "shoal"}]
    plain = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    templated = list(
        yaml.safe_load_all(_untemplate((CHART / "templates" / "rbac.yaml").read_text()))
    )
    assert _rules(templated, "ClusterRole") == _rules(plain, "ClusterRole")
    for template in (CHART / "templates").glob("*.yaml"):
        list(yaml.safe_load_all(_untemplate(template.read_text())))  # parses
    deployment = next(
        d
        for d in yaml.safe_load_all((DEPLOY / "deployment.yaml").read_text())
        if d["kind"] == "Deployment"
    )
    pod_spec = deployment["spec"]["template"]["spec"]
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    container = pod_spec["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "USER 65532" in dockerfile


def test_plain_network_policies_open_only_the_served_ports() -> None:
    policies = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all((DEPLOY / "networkpolicy.yaml").read_text())
    }
    assert set(policies) == {"shoal", "shoal-webhook"}

    def container_ports(path: Path, name: str) -> set[int]:
        deployment = next(
            d
            for d in yaml.safe_load_all(path.read_text())
            if d["kind"] == "Deployment" and d["metadata"]["name"] == name
        )
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        policy = policies[name]
        assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
        return {p["containerPort"] for p in container["ports"]}

    for name, path in (
        ("shoal", DEPLOY / "deployment.yaml"),
        ("shoal-webhook", DEPLOY / "webhook" / "webhook.yaml"),
    ):
        (rule,) = policies[name]["spec"]["ingress"]
        assert policies[name]["spec"]["policyTypes"] == ["Ingress"]
        assert {p["port"] for p in rule["ports"]} == container_ports(path, name)


def _allowed(rules: list[dict[str, Any]], group: str, resource: str, verb: str, name: str) -> bool:
    for rule in rules:
        if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
            names = rule.get("resourceNames")
            if not names or name in names:
                return True
    return False


@async_test(timeout=60)
async def test_rbac_allows_every_request_the_backend_makes_and_no_more(tmp_path: Path) -> None:
    documents = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    cluster_rules = _rules(documents, "ClusterRole")
    lease_rules = _rules(documents, "Role")
    async with FakeApiServer() as api:
        for text in render().values():
            api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
        # Other projects' CRDs that Shoal reads when they are installed.
        api.register("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True)
        api.register("scheduling.sigs.k8s.io", "v1alpha1", "podgroups", "PodGroup", True)
        api.register("scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas", "ElasticQuota", True)
        api.register("topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode", False)
        api.register("kueue.x-k8s.io", "v1beta2", "topologies", "Topology", False, status=False)
        # A Kueue Topology (read only: the levels a preferred level climbs).
        api.create(
            "kueue.x-k8s.io/v1beta2",
            "topologies",
            {"metadata": {"name": "fabric"}, "spec": {"levels": [{"nodeLabel": "rack"}]}},
        )
        # A HyperNode (read only: the topology of gangs).
        api.create(
            "topology.volcano.sh/v1alpha1",
            "hypernodes",
            {
                "metadata": {"name": "leaf"},
                "spec": {
                    "tier": 1,
                    "members": [{"type": "Node", "selector": {"exactMatch": {"name": "n1"}}}],
                },
            },
        )
        api.create("v1", "nodes", node("n1", cpu="2"))
        victim = pod("victim", cpu="2", node_name="n1", scheduler="x")
        api.create("v1", "pods", victim)
        api.set_pod_phase("default", "victim", "Running")
        urgent = pod("urgent", cpu="2")
        urgent["spec"]["priority"] = 10
        api.create("v1", "pods", urgent)
        api.create("v1", "pods", pod("too-big", cpu="100"))
        # A one-member gang per PodGroup API: each gets its status written (on a node
        # too small for `urgent`, which must still preempt).
        api.create("v1", "nodes", node("gangs", cpu="1"))
        for api_version, name in (
            ("scheduling.x-k8s.io/v1alpha1", "g-plugins"),
            ("scheduling.sigs.k8s.io/v1alpha1", "g-sigs"),
            ("scheduling.volcano.sh/v1beta1", "g-volcano"),
        ):
            api.create(api_version, "podgroups", {"metadata": {"name": name}, "spec": {}})
            key = "scheduling.k8s.io/group-name" if "volcano" in name else ""
            member = pod(
                name,
                cpu="100m",
                labels=None if key else {"scheduling.x-k8s.io/pod-group": name},
                annotations={key: name} if key else None,
            )
            api.create("v1", "pods", member)
        # Kubernetes' own PodGroup (v1alpha2): the pod names it in spec.schedulingGroup.
        gang = {"gang": {"minCount": 1}}
        api.create(
            "scheduling.k8s.io/v1alpha2",
            "podgroups",
            {"metadata": {"name": "g-upstream"}, "spec": {"schedulingPolicy": gang}},
        )
        member = pod("g-upstream", cpu="100m")
        member["spec"]["schedulingGroup"] = {"podGroupName": "g-upstream"}
        api.create("v1", "pods", member)
        # A GPU node and a whole-GPU pod: its device index goes out as an annotation of
        # the Binding (no pods/patch permission needed).
        gpu_node = node("gpu", cpu="1")
        for part in ("capacity", "allocatable"):
            gpu_node["status"][part]["nvidia.com/gpu"] = "2"
        api.create("v1", "nodes", gpu_node)
        trainer = pod("trainer", cpu="100m")
        trainer["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
        api.create("v1", "pods", trainer)
        # Volumes: a claim given a static volume (its claimRef is patched) and one to be
        # provisioned (its selected-node annotation is patched).
        wffc = {"metadata": {"name": "wffc"}, "provisioner": "csi.example.com"}
        wffc["volumeBindingMode"] = "WaitForFirstConsumer"
        api.create("storage.k8s.io/v1", "storageclasses", wffc)
        api.create("storage.k8s.io/v1", "csinodes", {"metadata": {"name": "n1"}, "spec": {}})
        api.create(
            "v1",
            "persistentvolumes",
            {
                "metadata": {"name": "pv-static"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "wffc",
                },
                "status": {"phase": "Available"},
            },
        )
        for claim in ("static", "dynamic"):
            size = "1Gi" if claim == "static" else "5Gi"
            spec = {"accessModes": ["ReadWriteOnce"], "storageClassName": "wffc"}
            spec["resources"] = {"requests": {"storage": size}}
            api.create("v1", "persistentvolumeclaims", {"metadata": {"name": claim}, "spec": spec})
            user = pod(f"uses-{claim}", cpu="10m")
            user["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]
            api.create("v1", "pods", user)
        # Dynamic Resource Allocation: a GPU published for node "gpu" and a pod claiming
        # it (the claim gets its finalizer, and its status is written; the answer to the
        # status write is lost, so the claim is read back).
        for plural, kind, namespaced in (
            ("deviceclasses", "DeviceClass", False),
            ("resourceslices", "ResourceSlice", False),
            ("resourceclaims", "ResourceClaim", True),
            ("resourceclaimtemplates", "ResourceClaimTemplate", True),
        ):
            api.register("resource.k8s.io", "v1", plural, kind, namespaced)
        api.register("resource.k8s.io", "v1beta2", "devicetaintrules", "DeviceTaintRule", False)
        api.create(
            "resource.k8s.io/v1",
            "deviceclasses",
            {"metadata": {"name": "gpu"}, "spec": {}},
        )
        api.create(
            "resource.k8s.io/v1",
            "resourceslices",
            {
                "metadata": {"name": "gpu-slice"},
                "spec": {
                    "driver": "gpu.example.com",
                    "nodeName": "gpu",
                    "pool": {"name": "gpu", "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
                },
            },
        )
        # An extended resource backed by DRA: its claim is created for the pod.
        extended = pod("uses-extended", cpu="10m")
        extended["spec"]["containers"][0]["resources"]["requests"][
            "deviceclass.resource.kubernetes.io/gpu"
        ] = "1"
        api.create("v1", "pods", extended)
        request = {"name": "gpu", "exactly": {"deviceClassName": "gpu"}}
        api.create(
            "resource.k8s.io/v1",
            "resourceclaims",
            {"metadata": {"name": "dra"}, "spec": {"devices": {"requests": [request]}}},
        )
        dra_pod = pod("uses-dra", cpu="10m")
        dra_pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "dra"}]
        api.create("v1", "pods", dra_pod)
        api.inject(Fault(method="PATCH", path="resourceclaims/dra/status", drop=True, applied=True))
        # A tenant queue: its status is written.
        api.create("shoal.dev/v1alpha1", "queues", {"metadata": {"name": "team"}, "spec": {}})
        api.create("v1", "pods", pod("member", cpu="100m", labels={"shoal.dev/queue": "team"}))
        # A bound namespace and a namespace per ElasticQuota API: their statuses are written.
        api.create(
            "shoal.dev/v1alpha1",
            "queuebindings",
            {"metadata": {"name": "bound"}, "spec": {"queue": "team", "namespaces": ["bound"]}},
        )
        api.create("v1", "pods", pod("in-bound", cpu="100m", namespace="bound"))
        for api_version, namespace in (
            ("scheduling.x-k8s.io/v1alpha1", "eq-plugins"),
            ("scheduling.sigs.k8s.io/v1alpha1", "eq-sigs"),
        ):
            api.create(
                api_version,
                "elasticquotas",
                {"metadata": {"name": "quota", "namespace": namespace}, "spec": {}},
            )
            api.create("v1", "pods", pod(f"in-{namespace}", cpu="100m", namespace=namespace))
        options = fast_options(
            "rbac",
            leader_elect=True,
            event_repeat_seconds=0.0,
            leader=LeaderSettings(
                identity="rbac",
                name="shoal",
                namespace="shoal-system",
                lease_duration=1.0,
                renew_deadline=0.6,
                retry_period=0.1,
            ),
        )
        async with running(api, tmp_path, options) as (kube, _):
            await eventually(lambda: bound_pods(api).get("default/urgent") == "n1", timeout=15)
            await eventually(lambda: len(events_for(api, "too-big", "FailedScheduling")) >= 1)
            await eventually(
                lambda: (
                    sum(
                        r.subresource == "status" for r in api.requests if r.resource == "podgroups"
                    )
                    >= 3
                ),
                what="PodGroup status written in every API",
            )
            await eventually(
                lambda: any(
                    r.resource == "queues" and r.subresource == "status" for r in api.requests
                ),
                what="Queue status written",
            )
            for plural, count in (("queuebindings", 1), ("elasticquotas", 2)):
                await eventually(
                    lambda plural=plural, count=count: (
                        len(
                            {
                                (r.group, r.name)
                                for r in api.requests
                                if r.resource == plural and r.subresource == "status"
                            }
                        )
                        >= count
                    ),
                    what=f"{plural} status written",
                )
            await eventually(
                lambda: (
                    "shoal.dev/gpu-index"
                    in (
                        (api.get("", "pods", "default", "trainer") or {})
                        .get("metadata", {})
                        .get("annotations", {})
                    )
                ),
                what="the GPU index annotation written (carried by the Binding)",
            )
            for resource in ("persistentvolumes", "persistentvolumeclaims"):
                await eventually(
                    lambda resource=resource: any(
                        r.resource == resource and r.verb == "patch" for r in api.requests
                    ),
                    what=f"{resource} patched by VolumeBinding",
                )
            await eventually(
                lambda: any(
                    r.resource == "resourceclaims" and r.subresource == "status"
                    for r in api.requests
                ),
                what="the ResourceClaim's allocation written by DynamicResources",
            )
            await eventually(
                lambda: bound_pods(api).get("default/uses-dra") == "gpu",
                what="the pod with a claim bound",
            )
            # A second FailedScheduling for too-big with the same words makes the event
            # a series (PATCH). Its retries need events it waits for: a node added
            # (tainted: nothing lands there, and the taint is what too-big is told
            # about it), then that node's allocatable changed again and again (the
            # words stay the same) until the series shows. Waiting on one retry failed
            # now and then on a loaded machine.
            nudge = node("nudge", cpu="1")
            nudge["spec"] = {"taints": [{"key": "nudge", "effect": "NoSchedule"}]}
            api.create("v1", "nodes", nudge)

            def series_written() -> bool:
                return any(r.resource == "events" and r.verb == "patch" for r in api.requests)

            deadline = time.monotonic() + 60.0
            cpu = 1
            while not series_written() and time.monotonic() < deadline:
                await asyncio.sleep(1.0)
                cpu = 3 - cpu
                current = api.get("", "nodes", "", "nudge") or nudge
                status = {**current.get("status", {})}
                status["allocatable"] = {**status.get("allocatable", {}), "cpu": str(cpu)}
                api.update("", "nodes", {**current, "status": status})
            assert series_written(), "no event series update within 60 s"
            # The serving port's delegated authentication and authorization (`shoal run`
            # on its HTTPS port in a cluster), through a client of the same identity.
            from shoal.servers.auth import DelegatedAuth

            api.tokens["prometheus-token"] = ("prometheus", ())
            api.allowed.add(("prometheus", "/metrics", "get"))
            auth = DelegatedAuth(authenticator=kube.client, authorizer=kube.client)
            user = await auth._token_user("prometheus-token")
            await auth.authorize(user, "/metrics", "get")
            await asyncio.sleep(0.3)  # a few lease renewals
    used: set[tuple[str, str, str]] = set()
    for r in api.requests:
        if "(rbac)" not in r.user_agent:
            continue
        resource = f"{r.resource}/{r.subresource}" if r.subresource else r.resource
        rules = lease_rules if r.resource == "leases" else cluster_rules
        if r.resource == "leases":
            assert r.namespace == "shoal-system"
        assert _allowed(rules, r.group, resource, r.verb, r.name), r
        used.add((r.group, resource, r.verb))
    granted = {
        (g, res, v)
        for rule in cluster_rules + lease_rules
        for g in rule["apiGroups"]
        for res in rule["resources"]
        for v in rule["verbs"]
    }
    assert granted - used == set(), "granted but never used"


def _documented_grants() -> set[tuple[str, str, str]]:
    """(group, resource, verb) from the RBAC table in docs/kubernetes.md."""
    text = (DEPLOY.parent / "docs" / "kubernetes.md").read_text()
    table = text.split("<!-- rbac-table -->")[1].split("<!-- /rbac-table -->")[0]
    grants = set()
    for line in table.strip().splitlines()[2:]:
        group_cell, resource_cell, verb_cell, _ = (c.strip() for c in line.strip("|").split("|"))
        groups = ["" if g.strip() == "core" else g.strip() for g in group_cell.split(",")]
        resources = [r.strip() for r in re.sub(r"\s*\(.*?\)", "", resource_cell).split(",")]
        verbs = [v.strip() for v in verb_cell.replace(";", ",").split(",")]
        verbs = [v.replace(" on its own Lease only", "") for v in verbs]
        grants |= {(g, r, v) for g in groups for r in resources for v in verbs}
    return grants


def test_the_granted_verbs_are_the_documented_table_and_pods_are_never_patched() -> None:
    documents = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    rules = _rules(documents, "ClusterRole") + _rules(documents, "Role")
    granted = {
        (g, res, v)
        for rule in rules
        for g in rule["apiGroups"]
        for res in rule["resources"]
        for v in rule["verbs"]
    }
    assert granted == _documented_grants()
    assert ("", "pods", "patch") not in granted and ("", "pods", "update") not in granted
