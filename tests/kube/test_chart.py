"""The Helm chart and the plain manifests: valid YAML without duplicate keys (rendered
with the chart's defaults and with values that reuse the chart's own keys), values
checked by values.schema.json, and a rendered configuration Shoal accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartrender import Chart

from shoal.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "shoal"


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with a key twice (PyYAML keeps the last one;
    kubectl and helm refuse the document)."""


def _mapping(loader: UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_all(text: str) -> list[Any]:
    return [d for d in yaml.load_all(text, Loader=UniqueKeyLoader) if d is not None]


def test_the_duplicate_key_check_catches_duplicates() -> None:
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key 'a'"):
        load_all("x:\n  a: 1\n  b: 2\n  a: 3\n")


def test_plain_manifests_and_chart_files_have_no_duplicate_keys() -> None:
    files = [*DEPLOY.glob("*.yaml"), *DEPLOY.glob("crds/*.yaml"), *CHART.glob("crds/*.yaml")]
    files += [*DEPLOY.glob("webhook/*.yaml")]
    files += [CHART / "Chart.yaml", CHART / "values.yaml"]
    for path in files:
        assert load_all(path.read_text()), path


def test_the_namespace_comes_in_its_own_file_applied_first() -> None:
    (namespace,) = load_all((DEPLOY / "namespace.yaml").read_text())
    assert namespace["kind"] == "Namespace" and namespace["metadata"]["name"] == "shoal-system"
    for name in ("rbac.yaml", "deployment.yaml"):
        for doc in load_all((DEPLOY / name).read_text()):
            assert doc["kind"] != "Namespace", name
            if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
                assert doc["metadata"]["namespace"] == "shoal-system", (name, doc["kind"])
    command = (
        "kubectl apply -f deploy/namespace.yaml -f deploy/crds/ -f deploy/rbac.yaml"
        " -f deploy/deployment.yaml"
    )
    assert command in (ROOT / "docs" / "kubernetes.md").read_text()
    assert command in (ROOT / "README.md").read_text()


def _rendered(values: dict[str, Any] | None = None) -> dict[str, list[Any]]:
    rendered = Chart(CHART).render(values)
    return {name: load_all(text) for name, text in rendered.items() if name.endswith(".yaml")}


def test_the_chart_renders_without_duplicate_keys() -> None:
    docs = _rendered()
    kinds = sorted(d["kind"] for file in docs.values() for d in file)
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRole",  # metrics reader, for Prometheus
            "ClusterRole",  # dashboard reader
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "NetworkPolicy",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ]
    )
    # Values that name the keys the chart sets itself are left out, not repeated.
    docs = _rendered(
        {"podAnnotations": {"prometheus.io/port": "1", "checksum/config": "x", "team": "ml"}}
    )
    (deployment,) = docs["deployment.yaml"]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "10259" and annotations["team"] == "ml"
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/config"])


def test_the_webhooks_render_when_enabled_with_their_failure_policies() -> None:
    docs = _rendered({"webhook": {"enabled": True, "podFailurePolicy": "Fail"}})["webhook.yaml"]
    kinds = [d["kind"] for d in docs]
    assert kinds == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "Deployment",
        "Issuer",
        "Certificate",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ]
    by_kind = {d["kind"]: d for d in docs}
    validating, mutating = (
        by_kind[k]["webhooks"][0]
        for k in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
    )
    assert validating["failurePolicy"] == "Fail" and mutating["failurePolicy"] == "Fail"
    assert validating["clientConfig"]["service"]["name"] == by_kind["Service"]["metadata"]["name"]
    annotation = by_kind["MutatingWebhookConfiguration"]["metadata"]["annotations"]
    assert annotation["cert-manager.io/inject-ca-from"] == "shoal-system/shoal-webhook"
    (container,) = by_kind["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "webhook" and "--scheduler-name=shoal" in container["args"]
    # Without cert-manager: the CA is given, no Issuer or Certificate.
    docs = _rendered({"webhook": {"enabled": True, "certManager": False, "caBundle": "Q0E="}})[
        "webhook.yaml"
    ]
    assert "Certificate" not in [d["kind"] for d in docs]
    config = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")
    assert config["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E="
    assert "annotations" not in config["metadata"]


def test_the_notes_list_every_profile() -> None:
    notes = Chart(CHART).render({"profiles": [{"schedulerName": "a"}, {"schedulerName": "b"}]})
    assert "one of:\n  - a\n  - b\nMetrics and dashboard (HTTPS" in notes["NOTES.txt"]
    assert "port-forward svc/shoal-metrics 10259" in notes["NOTES.txt"]


def test_the_rendered_configuration_is_one_shoal_accepts() -> None:
    (configmap,) = _rendered({"profiles": [{"schedulerName": "a"}, {"schedulerName": "b"}]})[
        "configmap.yaml"
    ]
    document = load_all(configmap["data"]["config.yaml"])[0]
    config = parse_config(document)
    assert [p.scheduler_name for p in config.profiles] == ["a", "b"]
    assert document["leaderElection"]["resourceNamespace"] == "shoal-system"
    assert document["leaderElection"]["resourceName"] == "shoal"
    rendered = _rendered()
    (role,) = [d for d in rendered["rbac.yaml"] if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "shoal-system"
    # Leases of its own namespace only (leader election, node shards), updated by name.
    assert [r["resources"] for r in role["rules"]] == [["leases"], ["leases"]]
    named = role["rules"][1]["resourceNames"]
    assert named[:2] == ["shoal", "shoal-node-shards"] and "shoal-member-31" in named
    plain = load_all((DEPLOY / "rbac.yaml").read_text())
    roles = {
        d["metadata"]["name"].replace("shoal", "RELEASE", 1): d["rules"]
        for d in rendered["rbac.yaml"]
        if d["kind"] == "ClusterRole"
    }
    plain_roles = {
        d["metadata"]["name"].replace("shoal", "RELEASE", 1): d["rules"]
        for d in plain
        if d["kind"] == "ClusterRole"
    }
    assert roles == plain_roles
    assert set(roles) == {"RELEASE", "RELEASE-metrics-reader", "RELEASE-dashboard-reader"}


# ---- values.schema.json ---------------------------------------------------------------

KEYWORDS = {
    "$schema",
    "title",
    "description",
    "type",
    "properties",
    "additionalProperties",
    "required",
    "items",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "minItems",
    "pattern",
    "$ref",
    "definitions",
}
TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
}


def _errors(value: Any, schema: dict[str, Any], root: dict[str, Any], path: str) -> list[str]:
    """JSON Schema (draft 7) for the keywords in KEYWORDS; enough for the chart's schema."""
    if "$ref" in schema:
        schema = root["definitions"][schema["$ref"].removeprefix("#/definitions/")]
    out = []
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        ok = any(
            isinstance(value, TYPES[t])
            and not (t in ("integer", "number") and value is True)
            and not (t in ("integer", "number") and value is False)
            for t in types
        )
        if not ok:
            return [f"{path}: {value!r} is not of type {'/'.join(types)}"]
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        out.append(f"{path}: {value!r} is less than {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        out.append(f"{path}: {value!r} is more than {schema['maximum']}")
    if "minLength" in schema and len(value) < schema["minLength"]:
        out.append(f"{path}: too short")
    if "minItems" in schema and len(value) < schema["minItems"]:
        out.append(f"{path}: too few items")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        out.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                out.append(f"{path}: {key!r} is required")
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                out += _errors(item, properties[key], root, f"{path}.{key}")
            elif extra is False:
                out.append(f"{path}: unknown key {key!r}")
            elif isinstance(extra, dict):
                out += _errors(item, extra, root, f"{path}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += _errors(item, schema["items"], root, f"{path}[{i}]")
    return out


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())

    def keywords(node: dict[str, Any]) -> None:
        assert set(node) <= KEYWORDS, set(node) - KEYWORDS
        for child in node.get("properties", {}).values():
            keywords(child)
        for child in node.get("definitions", {}).values():
            keywords(child)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                keywords(node[key])

    keywords(schema)
    return schema


def test_the_values_schema_accepts_the_defaults_and_covers_every_value() -> None:
    schema = _schema()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert _errors(values, schema, schema, "values") == []
    assert set(values) == set(schema["properties"])
    used = "".join(p.read_text() for p in (CHART / "templates").iterdir())
    for key in values:
        assert f".Values.{key}" in used, f"value {key} is used by no template"


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"replicaCount": "2"}, "values.replicaCount: '2' is not of type integer"),
        ({"imagePullPolicy": "Always"}, "values: unknown key 'imagePullPolicy'"),
        ({"leaderElection": {"resourceName": "shoal", "resourceNamespace": "x"}}, "unknown key"),
        ({"leaderElection": {"resourceName": "shoal", "leaseDuration": "15"}}, "does not match"),
        ({"profiles": []}, "values.profiles: too few items"),
        ({"logFormat": "yaml"}, "values.logFormat: 'yaml' is not one of"),
        ({"image": {"repository": "x", "pullPolicy": "always"}}, "pullPolicy"),
        ({"webhook": {"enabled": True, "failurePolicy": "fail"}}, "failurePolicy"),
    ],
)
def test_the_values_schema_rejects_mistakes(values: dict[str, Any], error: str) -> None:
    schema = _schema()
    merged = {**yaml.safe_load((CHART / "values.yaml").read_text()), **values}
    errors = _errors(merged, schema, schema, "values")
    assert any(error in e for e in errors), errors


def test_the_network_policy_admits_only_the_serving_port_from_whom_it_is_told() -> None:
    (policy,) = _rendered()["networkpolicy.yaml"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 10259}] and "from" not in rule
    monitoring = [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
    (policy,) = _rendered({"networkPolicy": {"metricsFrom": monitoring}})["networkpolicy.yaml"]
    assert policy["spec"]["ingress"][0]["from"] == monitoring
    with_webhook = _rendered({"webhook": {"enabled": True}})["networkpolicy.yaml"]
    assert [p["spec"]["ingress"][0]["ports"][0]["port"] for p in with_webhook] == [10259, 9443]
    assert (
        "networkpolicy.yaml" not in _rendered({"networkPolicy": {"enabled": False}})
        or not (_rendered({"networkPolicy": {"enabled": False}})["networkpolicy.yaml"])
    )
