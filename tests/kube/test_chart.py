"""The Helm chart and the plain manifests: valid YAML without duplicate keys (rendered
with the chart's defaults and with values that reuse the chart's own keys), values
checked by values.schema.json, a rendered configuration Shoal accepts, and a value for
every `shoal run` flag (parsed back from the rendered Deployment by `shoal run`'s own
command line)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from chartrender import Chart

from shoal.cli import app
from shoal.commands.run import Serving, serving
from shoal.config import parse_config
from shoal.plugins.rescheduler import with_rescheduler
from shoal.scheduler import default_registry

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
    notes = Chart(CHART).render({"dashboard": {"enabled": False}})
    assert "Metrics (HTTPS" in notes["NOTES.txt"] and "dashboard" not in notes["NOTES.txt"]


def test_the_rendered_configuration_is_one_shoal_accepts() -> None:
    (configmap,) = _rendered({"profiles": [{"schedulerName": "a"}, {"schedulerName": "b"}]})[
        "configmap.yaml"
    ]
    document = load_all(configmap["data"]["config.yaml"])[0]
    config = parse_config(document, registry=default_registry())
    assert not config.warnings
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


def test_the_values_schema_describes_every_value_with_its_type() -> None:
    """Every value in values.yaml, at every depth, has a schema with a type, and every
    object's keys are listed (or typed by additionalProperties): a typo is refused, and
    nothing documented is."""
    schema = _schema()
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def undescribed(value: Any, node: dict[str, Any], path: str) -> list[str]:
        if "$ref" in node:
            node = schema["definitions"][node["$ref"].removeprefix("#/definitions/")]
        if "type" not in node:
            return [f"{path}: no type"]
        out = []
        if isinstance(value, dict):
            if node.get("additionalProperties", True) is True and "properties" not in node:
                return out  # a free-form Kubernetes object (e.g. pluginConfig args)
            if node.get("additionalProperties") is not False and "properties" in node:
                out.append(f"{path}: additionalProperties is not false")
            for key, item in value.items():
                child = node.get("properties", {}).get(key, node.get("additionalProperties"))
                if not isinstance(child, dict):
                    out.append(f"{path}.{key}: not in the schema")
                else:
                    out += undescribed(item, child, f"{path}.{key}")
        if isinstance(value, list):
            if not isinstance(node.get("items"), dict):
                return [f"{path}: no items schema"]
            for i, item in enumerate(value):
                out += undescribed(item, node["items"], f"{path}[{i}]")
        return out

    assert undescribed(values, schema, "values") == []


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"dashboard": {"enable": False}}, "values.dashboard: unknown key 'enable'"),
        ({"dashboard": {"enabled": "no"}}, "values.dashboard.enabled: 'no' is not of type"),
        ({"rescheduler": True}, "values.rescheduler: True is not of type object"),
        ({"nodeShards": "16"}, "values.nodeShards: '16' is not of type integer"),
        ({"nodeShards": 0}, "values.nodeShards: 0 is less than 1"),
        ({"nodeShards": 2048}, "values.nodeShards: 2048 is more than 1024"),
        ({"bindConcurrency": 0}, "values.bindConcurrency: 0 is less than 1"),
        ({"percentageOfNodesToScore": 101}, "101 is more than 100"),
        ({"podInitialBackoffSeconds": 0.5}, "0.5 is not of type integer"),
        ({"bindAddress": "0.0.0.0:10259"}, "values.bindAddress: '0.0.0.0:10259' does not match"),
        ({"metricsPort": 0}, "values.metricsPort: 0 is less than 1"),
        ({"leaderElection": {"resourceName": "s", "resourceLock": "configmaps"}}, "not one of"),
        ({"auth": {"alwaysAllowPaths": "/healthz"}}, "alwaysAllowPaths: '/healthz' is not of"),
        ({"auth": {"alwaysAllowPaths": ["/a,/b"]}}, "alwaysAllowPaths[0]: '/a,/b' does not"),
        ({"auth": {"clientCA": "x"}}, "values.auth: unknown key 'clientCA'"),
        ({"extraArgs": "--v=4"}, "values.extraArgs: '--v=4' is not of type array"),
        ({"extraArgs": [4]}, "values.extraArgs[0]: 4 is not of type string"),
        ({"extraEnv": [{"name": "A", "valu": "1"}]}, "values.extraEnv[0]: unknown key 'valu'"),
        ({"extraEnv": [{"value": "1"}]}, "values.extraEnv[0]: 'name' is required"),
        ({"extraVolumeMounts": [{"name": "a"}]}, "'mountPath' is required"),
        ({"affinity": {"nodeAfinity": {}}}, "values.affinity: unknown key 'nodeAfinity'"),
        ({"affinity": []}, "values.affinity: [] is not of type object"),
        ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}]}, "required"),
        ({"podLabels": {"team": 1}}, "values.podLabels.team: 1 is not of type string"),
        ({"podSecurityContext": {"runAsNonroot": True}}, "unknown key 'runAsNonroot'"),
        ({"securityContext": {"readOnlyRootFileSystem": True}}, "unknown key"),
        ({"securityContext": {"capabilities": {"drop": "ALL"}}}, "is not of type array"),
        ({"profiles": [{"schedulerName": "s", "pluginsConfig": []}]}, "unknown key"),
        ({"profiles": [{"schedulerName": "s", "plugins": {"multipoint": {}}}]}, "unknown key"),
        ({"profiles": [{"schedulerName": "s", "percentageOfNodesToScore": -1}]}, "less than"),
        ({"extenders": [{"filterVerb": "filter"}]}, "values.extenders[0]: 'urlPrefix' is required"),
        ({"extenders": [{"urlPrefix": "http://x", "enableHttps": True}]}, "unknown key"),
        ({"webhook": {"inScheduler": "true"}}, "values.webhook.inScheduler: 'true' is not of"),
        ({"webhook": {"clientCaConfigMap": "ca"}}, "values.webhook: unknown key"),
    ],
)
def test_the_values_schema_rejects_mistakes_in_the_run_values(
    values: dict[str, Any], error: str
) -> None:
    schema = _schema()
    errors = _errors(Chart(CHART).values(values), schema, schema, "values")
    assert any(error in e for e in errors), errors


# ---- `shoal run`: a value for every flag -------------------------------------------------


def _run_command() -> Any:
    return typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]


def _shoal_run(values: dict[str, Any], tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """What `shoal run` gets from the chart rendered with `values`: the parameters its
    command line parses from the Deployment's args (the flags checked as at start-up:
    types, ranges, files that must exist) and the configuration document (--config).

    The volumes' mount paths in the args are moved under `tmp_path`, where their files
    are made (config.yaml from the rendered ConfigMap, the others empty), and moved
    back in the returned parameters."""
    docs = _rendered(values)
    (deployment,) = docs["deployment.yaml"]
    (configmap,) = docs["configmap.yaml"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    mounts = {m["mountPath"]: tmp_path / m["name"] for m in container["volumeMounts"]}
    args = []
    for arg in container["args"]:
        name, eq, value = arg.partition("=")
        for mount, local in mounts.items():
            if eq and value == mount:
                local.mkdir(parents=True, exist_ok=True)
                arg = f"{name}={local}"
            elif eq and value.startswith(mount + "/"):
                path = local / value.removeprefix(mount + "/")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(configmap["data"][path.name] if name == "--config" else "")
                arg = f"{name}={path}"
        args.append(arg)
    params: dict[str, Any] = dict(_run_command().make_context("run", args).params)
    back = {local: Path(mount) for mount, local in mounts.items()}
    for key, value in params.items():
        if isinstance(value, Path | str) and Path(value).is_relative_to(tmp_path):
            local = tmp_path / Path(value).relative_to(tmp_path).parts[0]
            moved = back[local] / Path(value).relative_to(local)
            params[key] = moved if isinstance(value, Path) else str(moved)
    document = load_all(configmap["data"]["config.yaml"])[0]
    return params, document


def _config_value(document: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        document = document[part]
    return document


# Every parameter of `shoal run` the chart sets: the values that set it and what `shoal
# run` then has, parsed from the Deployment's args ("args", by parameter name) or read
# from the rendered KubeSchedulerConfiguration ("config", by path: the settings whose
# flag only overrides the configuration, as in kube-scheduler). Each value differs from
# what the defaults render, but for the three the chart fixes (marked FIXED).
WEBHOOK_IN_SCHEDULER = {"enabled": True, "inScheduler": True}
IN = "/var/run/shoal"
LE = "leaderElection"
RUN_FLAGS: dict[str, tuple[dict[str, Any], str, dict[str, Any]]] = {
    "config": ({}, "args", {"config": Path("/etc/shoal/config.yaml")}),  # FIXED: the ConfigMap
    "leader_elect": ({LE: {"leaderElect": False}}, "config", {f"{LE}.leaderElect": False}),
    "lease_name": ({LE: {"resourceName": "s2"}}, "config", {f"{LE}.resourceName": "s2"}),
    # FIXED: the release's namespace, where the Role lets Shoal update its Leases.
    "lease_namespace": ({}, "config", {f"{LE}.resourceNamespace": "shoal-system"}),
    "lease_duration": ({LE: {"leaseDuration": "30s"}}, "config", {f"{LE}.leaseDuration": "30s"}),
    "renew_deadline": ({LE: {"renewDeadline": "12s"}}, "config", {f"{LE}.renewDeadline": "12s"}),
    "retry_period": ({LE: {"retryPeriod": "3s"}}, "config", {f"{LE}.retryPeriod": "3s"}),
    # FIXED: only leases, as in kube-scheduler (the schema's enum).
    "resource_lock": ({LE: {"resourceLock": "leases"}}, "config", {f"{LE}.resourceLock": "leases"}),
    "node_shards": ({"nodeShards": 64}, "args", {"node_shards": 64}),
    "qps": ({"clientConnection": {"qps": 20.5}}, "config", {"clientConnection.qps": 20.5}),
    "burst": ({"clientConnection": {"burst": 40}}, "config", {"clientConnection.burst": 40}),
    "bind_concurrency": ({"bindConcurrency": 8}, "args", {"bind_concurrency": 8}),
    "bind_address": ({"bindAddress": "::"}, "args", {"bind_address": "::"}),
    "secure_port": ({"metricsPort": 8443}, "args", {"secure_port": 8443}),
    "dashboard": ({"dashboard": {"enabled": False}}, "args", {"dashboard": False}),
    "rescheduler": ({"rescheduler": {"enabled": True}}, "args", {"rescheduler": True}),
    "webhook_port": (
        {"webhook": {**WEBHOOK_IN_SCHEDULER, "port": 8444}},
        "args",
        {"webhook_port": 8444},
    ),
    "webhook_cert_dir": (
        {"webhook": WEBHOOK_IN_SCHEDULER},
        "args",
        {"webhook_cert_dir": Path(f"{IN}/webhook-certs")},
    ),
    "webhook_client_ca_file": (
        {"webhook": {**WEBHOOK_IN_SCHEDULER, "clientCAConfigMap": "apiserver-ca"}},
        "args",
        {"webhook_client_ca_file": Path(f"{IN}/webhook-client-ca/ca.crt")},
    ),
    "tls_cert_file": (
        {"tlsSecretName": "serving"},
        "args",
        {"tls_cert_file": Path(f"{IN}/serving-cert/tls.crt")},
    ),
    "tls_private_key_file": (
        {"tlsSecretName": "serving"},
        "args",
        {"tls_private_key_file": Path(f"{IN}/serving-cert/tls.key")},
    ),
    "client_ca_file": (
        {"auth": {"clientCAConfigMap": "kube-root-ca.crt"}},
        "args",
        {"client_ca_file": Path(f"{IN}/client-ca/ca.crt")},
    ),
    "authentication_kubeconfig": (
        {"auth": {"authenticationKubeconfig": "/auth/kubeconfig"}},
        "args",
        {"authentication_kubeconfig": "/auth/kubeconfig"},
    ),
    "authorization_kubeconfig": (
        {"auth": {"authorizationKubeconfig": "/auth/kubeconfig"}},
        "args",
        {"authorization_kubeconfig": "/auth/kubeconfig"},
    ),
    "authorization_always_allow_paths": (
        {"auth": {"alwaysAllowPaths": ["/healthz", "/readyz", "/metrics"]}},
        "args",
        {"authorization_always_allow_paths": "/healthz,/readyz,/metrics"},
    ),
    "log_format": ({"logFormat": "text"}, "args", {"log_format": "text"}),
    "log_level": ({"logLevel": "debug"}, "args", {"log_level": "debug"}),
}
FIXED = {"config", "lease_namespace", "resource_lock"}

# The parameters of `shoal run` the chart has no value for, and why (extraArgs still
# passes any flag verbatim).
RUN_FLAGS_LEFT_OUT = {
    # A pod uses its service account (in-cluster config); there is no kubeconfig to name.
    "kubeconfig": "in a pod the service account is the client configuration",
    "context": "a context of a kubeconfig, and there is none in the pod",
    # One value would give every replica the same identity in the Lease and the shard
    # map; the default (hostname_uuid, the pod's name) differs per replica.
    "identity": "must differ per replica; the default is the pod's name and a uuid",
    # -v only picks debug (4 and up) or info, and an explicit --log-level wins over it.
    "verbosity": "logLevel sets the level itself",
    # The webhooks' certificate comes from cert-manager or the Secret <release>-webhook-tls,
    # whose CA the webhook configurations carry; a CA each replica made at start could
    # not be in them (and the Secret is mounted read-only).
    "webhook_generate_certs": "the certificate is the Secret's, with a CA the API server knows",
    # Accepted for kube-scheduler's manifests and ignored with a warning.
    "requestheader_client_ca_file": "ignored by shoal run (no front-proxy authentication)",
    "feature_gates": "ignored by shoal run (no kube feature gates)",
    "profiling": "ignored by shoal run (no profiling endpoints)",
    "contention_profiling": "ignored by shoal run (no profiling endpoints)",
}


def test_every_shoal_run_flag_has_a_chart_value_or_a_reason() -> None:
    names = {p.name for p in _run_command().params}
    assert not set(RUN_FLAGS) & set(RUN_FLAGS_LEFT_OUT)
    assert set(RUN_FLAGS) | set(RUN_FLAGS_LEFT_OUT) == names, (
        "a `shoal run` flag was added or removed: give the chart a value for it "
        "(RUN_FLAGS) or say why not (RUN_FLAGS_LEFT_OUT)",
        names ^ (set(RUN_FLAGS) | set(RUN_FLAGS_LEFT_OUT)),
    )
    # The values named are the chart's and the schema takes them.
    schema = _schema()
    for name, (values, _, _) in RUN_FLAGS.items():
        assert _errors(Chart(CHART).values(values), schema, schema, "values") == [], name


@pytest.mark.parametrize("name", sorted(RUN_FLAGS))
def test_each_run_flag_s_value_renders_into_what_shoal_run_reads(name: str, tmp_path: Path) -> None:
    values, where, expected = RUN_FLAGS[name]
    params, document = _shoal_run(values, tmp_path / "set")
    defaults, default_document = _shoal_run({}, tmp_path / "defaults")
    for key, value in expected.items():
        if where == "args":
            got, default = params[key], defaults[key]
        else:
            got = _config_value(document, key)
            default = _config_value(default_document, key)
        assert got == value, (name, key, got)
        assert name in FIXED or default != value, (name, key, "the value changes nothing")
    # The configuration is still one Shoal takes, and the port is served (HTTPS).
    parse_config(document, registry=default_registry())
    address = serving(params["bind_address"], params["secure_port"], True)
    assert isinstance(address, Serving) and address.tls


def test_the_defaults_render_shoal_run_s_own_defaults_where_the_chart_has_none(
    tmp_path: Path,
) -> None:
    params, document = _shoal_run({}, tmp_path)
    command = {p.name: p.default for p in _run_command().params}
    # The chart's defaults are the flags' (or the configuration's) defaults...
    assert params["node_shards"] == command["node_shards"] == 16
    assert params["bind_concurrency"] == command["bind_concurrency"] == 64
    assert params["dashboard"] is command["dashboard"] is True
    assert params["rescheduler"] is command["rescheduler"] is False
    assert params["log_format"] == command["log_format"] == "json"
    assert params["authorization_always_allow_paths"] == command["authorization_always_allow_paths"]
    assert document["clientConnection"] == {"qps": 50, "burst": 100}
    assert {k: document["leaderElection"][k] for k in ("leaseDuration", "renewDeadline")} == {
        "leaseDuration": "15s",
        "renewDeadline": "10s",
    }
    config = parse_config(document, registry=default_registry())
    assert config.percentage_of_nodes_to_score == 0  # kube's adaptive default
    assert (config.pod_initial_backoff_seconds, config.pod_max_backoff_seconds) == (1, 10)
    # ...but for serving: HTTPS on every address, for the probes and Prometheus.
    assert serving(params["bind_address"], params["secure_port"]) == Serving("0.0.0.0", 10259, True)
    for name in RUN_FLAGS_LEFT_OUT:
        assert params[name] == command[name], name


def test_extra_args_are_appended_verbatim_and_win(tmp_path: Path) -> None:
    extra = ["--node-shards=4", "--v=2", "--feature-gates=A=true"]
    (deployment,) = _rendered({"extraArgs": extra})["deployment.yaml"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][-3:] == extra
    assert "--node-shards=16" in container["args"]
    params, _ = _shoal_run({"extraArgs": extra}, tmp_path)
    assert params["node_shards"] == 4 and params["verbosity"] == 2


def test_the_configuration_values_render_and_load(tmp_path: Path) -> None:
    extender = {
        "urlPrefix": "https://extender.example:8888/",
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "weight": 2,
        "enableHTTPS": True,
        "tlsConfig": {"insecure": True},
        "httpTimeout": "3s",
        "nodeCacheCapable": True,
        "managedResources": [{"name": "example.com/fpga", "ignoredByScheduler": True}],
        "ignorable": True,
    }
    profile = {
        "schedulerName": "shoal",
        "percentageOfNodesToScore": 70,
        "plugins": {"multiPoint": {"enabled": [{"name": "GpuShare"}]}},
        "pluginConfig": [{"name": "Rescheduler", "args": {"maxMovesPerPlan": 2}}],
    }
    values = {
        "profiles": [profile],
        "extenders": [extender],
        "percentageOfNodesToScore": 30,
        "podInitialBackoffSeconds": 2,
        "podMaxBackoffSeconds": 20,
        "rescheduler": {"enabled": True},
    }
    schema = _schema()
    assert _errors(Chart(CHART).values(values), schema, schema, "values") == []
    params, document = _shoal_run(values, tmp_path)
    assert document["extenders"] == [extender] and document["profiles"] == [profile]
    config = parse_config(document, registry=default_registry())
    assert not config.warnings
    assert config.percentage_of_nodes_to_score == 30
    assert config.profiles[0].percentage_of_nodes_to_score == 70
    assert (config.pod_initial_backoff_seconds, config.pod_max_backoff_seconds) == (2, 20)
    (loaded,) = config.extenders
    assert loaded.url_prefix == extender["urlPrefix"] and loaded.enable_https
    # --rescheduler adds the plugin to every profile and keeps the profile's args.
    assert params["rescheduler"] is True
    rescheduling = with_rescheduler(config).profiles[0]
    assert "Rescheduler" in {p.name for p in rescheduling.plugins.post_filter.enabled}
    (args,) = [c.args for c in rescheduling.plugin_config if c.name == "Rescheduler"]
    assert args == {"maxMovesPerPlan": 2}
    # Without extenders the configuration has none (kube's default), not an empty list.
    assert "extenders" not in _shoal_run({}, tmp_path / "defaults")[1]


def _pod(values: dict[str, Any] | None = None, name: str = "deployment.yaml") -> dict[str, Any]:
    deployment = next(d for d in _rendered(values)[name] if d["kind"] == "Deployment")
    pod: dict[str, Any] = deployment["spec"]["template"]
    return pod


def test_affinity_topology_spread_and_pod_labels_render() -> None:
    spec = _pod()["spec"]
    # Without a value: the replicas prefer different nodes.
    anti = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert "topologySpreadConstraints" not in spec
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}
    affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [{"matchExpressions": [zone]}]
    }
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "shoal"}},
        }
    ]
    labels = {"team": "ml", "app.kubernetes.io/name": "other"}
    pod = _pod({"affinity": affinity, "topologySpreadConstraints": spread, "podLabels": labels})
    assert pod["spec"]["affinity"] == affinity  # given: replaces the default
    assert pod["spec"]["topologySpreadConstraints"] == spread
    # The selector's labels stay the chart's (a value cannot detach the pods).
    assert pod["metadata"]["labels"] == {
        "app.kubernetes.io/name": "shoal",
        "app.kubernetes.io/instance": "shoal",
        "team": "ml",
    }


def test_extra_env_and_volumes_render() -> None:
    env = [
        {"name": "PYTHONDEVMODE", "value": "1"},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    volumes = [{"name": "auth", "secret": {"secretName": "shoal-auth"}}]
    mounts = [{"name": "auth", "mountPath": "/auth", "readOnly": True}]
    values = {
        "extraEnv": env,
        "extraVolumes": volumes,
        "extraVolumeMounts": mounts,
        "auth": {"authenticationKubeconfig": "/auth/kubeconfig"},
    }
    spec = _pod(values)["spec"]
    (container,) = spec["containers"]
    assert container["env"][0]["name"] == "POD_NAMESPACE" and container["env"][1:] == env
    assert spec["volumes"][-1:] == volumes and container["volumeMounts"][-1:] == mounts
    assert "--authentication-kubeconfig=/auth/kubeconfig" in container["args"]
    defaults = _pod()["spec"]
    assert [v["name"] for v in defaults["volumes"]] == ["config", "tmp"]
    assert len(defaults["containers"][0]["env"]) == 1


def test_tls_and_client_ca_values_mount_what_the_flags_name() -> None:
    values = {"tlsSecretName": "serving", "auth": {"clientCAConfigMap": "kube-root-ca.crt"}}
    spec = _pod(values)["spec"]
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes["serving-cert"]["secret"] == {"secretName": "serving"}
    assert volumes["client-ca"]["configMap"]["name"] == "kube-root-ca.crt"
    for arg in container["args"]:
        name, _, value = arg.partition("=")
        if name in ("--tls-cert-file", "--tls-private-key-file", "--client-ca-file"):
            directory = value.rsplit("/", 1)[0]
            assert mounts[directory] in ("serving-cert", "client-ca"), arg


def test_the_security_contexts_are_safe_by_default_and_take_values() -> None:
    for values, file in (({}, "deployment.yaml"), ({"webhook": {"enabled": True}}, "webhook.yaml")):
        spec = _pod(values, file)["spec"]
        (container,) = spec["containers"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
    # A value merges over the defaults (Helm's coalescing), for both Deployments.
    values = {
        "podSecurityContext": {"fsGroup": 65532},
        "securityContext": {"runAsNonRoot": True},
        "webhook": {"enabled": True},
    }
    for file in ("deployment.yaml", "webhook.yaml"):
        spec = _pod(values, file)["spec"]
        assert spec["securityContext"]["fsGroup"] == 65532
        assert spec["securityContext"]["runAsUser"] == 65532
        context = spec["containers"][0]["securityContext"]
        assert context["runAsNonRoot"] is True and context["readOnlyRootFilesystem"] is True


def test_the_webhooks_can_be_served_by_the_scheduler() -> None:
    values = {
        "webhook": {**WEBHOOK_IN_SCHEDULER, "clientCAConfigMap": "apiserver-ca"},
        "networkPolicy": {"metricsFrom": [{"namespaceSelector": {}}]},
    }
    docs = _rendered(values)
    webhook = {d["kind"]: d for d in docs["webhook.yaml"]}
    # No `shoal webhook` Deployment (nor its account): the Service selects the scheduler.
    assert sorted(webhook) == [
        "Certificate",
        "Issuer",
        "MutatingWebhookConfiguration",
        "Service",
        "ValidatingWebhookConfiguration",
    ]
    pod = _pod(values)
    (container,) = pod["spec"]["containers"]
    service = webhook["Service"]["spec"]
    assert service["selector"].items() <= pod["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[service["ports"][0]["targetPort"]] == 9443
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert (
        volumes["webhook-certs"]["secret"]["secretName"]
        == webhook["Certificate"]["spec"]["secretName"]
    )
    assert volumes["webhook-client-ca"]["configMap"]["name"] == "apiserver-ca"
    # The API server reaches the port whatever metricsFrom says; one policy, both ports.
    (policy,) = docs["networkpolicy.yaml"]
    metrics, hooks = policy["spec"]["ingress"]
    assert metrics["ports"][0]["port"] == 10259 and "from" in metrics
    assert hooks == {"ports": [{"protocol": "TCP", "port": 9443}]}
    # Standalone (the default): the client CA goes to `shoal webhook --client-ca-file`.
    docs = _rendered({"webhook": {"enabled": True, "clientCAConfigMap": "apiserver-ca"}})
    (container,) = _pod({"webhook": {"enabled": True}})["spec"]["containers"]
    assert not [a for a in container["args"] if a.startswith("--webhook")]
    standalone = next(d for d in docs["webhook.yaml"] if d["kind"] == "Deployment")
    (container,) = standalone["spec"]["template"]["spec"]["containers"]
    assert "--client-ca-file=/var/run/shoal/webhook-client-ca/ca.crt" in container["args"]
    volumes = standalone["spec"]["template"]["spec"]["volumes"]
    assert volumes[-1]["configMap"]["name"] == "apiserver-ca"
    # inScheduler without enabled: nothing.
    assert not _rendered({"webhook": {"inScheduler": True}}).get("webhook.yaml")
    (container,) = _pod({"webhook": {"inScheduler": True}})["spec"]["containers"]
    assert not [a for a in container["args"] if a.startswith("--webhook")]


def test_everything_on_renders_without_duplicate_keys(tmp_path: Path) -> None:
    values: dict[str, Any] = {
        "webhook": {**WEBHOOK_IN_SCHEDULER, "port": 8444, "clientCAConfigMap": "apiserver-ca"},
        "tlsSecretName": "serving",
        "auth": {
            "clientCAConfigMap": "kube-root-ca.crt",
            "authenticationKubeconfig": "/auth/kubeconfig",
            "authorizationKubeconfig": "/auth/kubeconfig",
        },
        "rescheduler": {"enabled": True},
        "extenders": [{"urlPrefix": "http://127.0.0.1:8888/", "filterVerb": "filter"}],
        "extraArgs": ["--v=1"],
        "extraEnv": [{"name": "A", "value": "1"}],
        "extraVolumes": [{"name": "auth", "secret": {"secretName": "auth"}}],
        "extraVolumeMounts": [{"name": "auth", "mountPath": "/auth"}],
        "podLabels": {"team": "ml"},
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
        "affinity": {"podAntiAffinity": {}},
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"operator": "Exists"}],
        "imagePullSecrets": [{"name": "registry"}],
    }
    schema = _schema()
    assert _errors(Chart(CHART).values(values), schema, schema, "values") == []
    _rendered(values)  # UniqueKeyLoader
    params, document = _shoal_run(values, tmp_path)
    parse_config(document, registry=default_registry())
    assert params["webhook_port"] == 8444 and params["tls_cert_file"] is not None
    assert params["verbosity"] == 1 and params["rescheduler"] is True
    assert params["authentication_kubeconfig"] == "/auth/kubeconfig"


# ---- the docs -----------------------------------------------------------------------------


def test_every_value_is_in_the_docs_helm_table() -> None:
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    section = text.split("### Helm chart values", 1)[1].split("\n#", 1)[0]
    first_cells = re.findall(r"^\| (`[^|]+)\|", section, re.M)
    documented = {name for cell in first_cells for name in re.findall(r"`([^`]+)`", cell)}
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key in values:
        assert key in documented or any(d.startswith(key + ".") for d in documented), key
    for name in documented:  # and nothing documented that is not a value
        node: Any = values
        for part in name.split("."):
            assert isinstance(node, dict) and part in node, name
            node = node[part]
    # Every flag a value sets is named in the table.
    for name in RUN_FLAGS:
        option = next(p for p in _run_command().params if p.name == name)
        assert any(o in section for o in option.opts), name


# ---- the renderer -------------------------------------------------------------------------


def test_the_renderer_s_not_and_join(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "Chart.yaml").write_text("name: t\nversion: 1.0.0\n")
    (tmp_path / "values.yaml").write_text("enabled: true\nlist: [a, b]\n")
    (tmp_path / "templates" / "t.txt").write_text(
        '{{ if not .Values.enabled }}off{{ else }}on{{ end }} {{ .Values.list | join "," }}'
        ' {{ join "-" .Values.list }} {{ not (include "x" .) }}'
        '{{ define "x" }}{{ end }}'
    )
    chart = Chart(tmp_path)
    assert chart.render()["t.txt"] == "on a,b a-b true"
    assert chart.render({"enabled": False, "list": []})["t.txt"] == "off   true"
