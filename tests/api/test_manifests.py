"""Manifest decoding: errors name the object and the field; bad documents never hide
good ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shoal.api.errors import ManifestError
from shoal.api.manifests import decode, load_objects
from shoal.api.objects import Node, Pod, PriorityClass


def _pod(spec: dict[str, Any], name: str = "web-1", namespace: str = "default") -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@pytest.mark.parametrize(
    ("raw", "cls", "field", "problem"),
    [
        pytest.param(
            _pod({"containers": [{"resources": {"requests": {"cpu": "-1"}}}]}),
            Pod,
            "spec.containers[0].resources",
            "requests.cpu: quantity '-1' must not be negative",
            id="negative-request",
        ),
        pytest.param(
            _pod({"containers": [{}, {"resources": {"limits": {"memory": "lots"}}}]}),
            Pod,
            "spec.containers[1].resources",
            "limits.memory: quantity 'lots' is not valid",
            id="bad-quantity-second-container",
        ),
        pytest.param(
            _pod({"tolerations": [{"key": "a", "effect": "NoSchedul"}]}),
            Pod,
            "spec.tolerations[0].effect",
            "Invalid enum value 'NoSchedul'",
            id="toleration-effect-typo",
        ),
        pytest.param(
            _pod({"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]}),
            Pod,
            "spec.tolerations[0]",
            "value must be empty when operator is Exists",
            id="exists-with-value",
        ),
        pytest.param(
            _pod({"priority": "high"}),
            Pod,
            "spec.priority",
            "Expected `int | null`, got `str`",
            id="wrong-type",
        ),
        pytest.param(
            _pod({"containers": [{"ports": [{"containerPort": 80, "hostPort": 70000}]}]}),
            Pod,
            "spec.containers[0].ports[0]",
            "hostPort 70000 must be in 0..65535",
            id="host-port-range",
        ),
        pytest.param(
            _pod(
                {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": "a", "operator": "Gt", "values": ["x"]}
                                        ]
                                    }
                                ]
                            }
                        }
                    }
                }
            ),
            Pod,
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0]",
            "operator Gt needs an integer value, got 'x'",
            id="gt-needs-integer",
        ),
        pytest.param(
            _pod(
                {
                    "topologySpreadConstraints": [
                        {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
                    ]
                }
            ),
            Pod,
            "spec.topologySpreadConstraints[0]",
            "maxSkew 0 must be at least 1",
            id="max-skew",
        ),
        pytest.param(
            {
                "kind": "Node",
                "metadata": {"name": "n1"},
                "spec": {"taints": [{"key": "k", "effect": "Sometimes"}]},
            },
            Node,
            "spec.taints[0].effect",
            "Invalid enum value 'Sometimes'",
            id="taint-effect",
        ),
        pytest.param(
            {"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "-4"}}},
            Node,
            "status",
            "allocatable.cpu: quantity '-4' must not be negative",
            id="negative-allocatable",
        ),
    ],
)
def test_decode_errors_name_kind_name_and_field(
    raw: dict[str, Any], cls: type[Pod] | type[Node], field: str, problem: str
) -> None:
    with pytest.raises(ManifestError) as caught:
        decode(raw, cls, source="cluster.yaml#3")
    err = caught.value
    name = raw["metadata"]["name"]
    display = f"default/{name}" if cls is Pod else name
    assert (err.kind, err.name, err.field) == (cls.__name__, display, field)
    assert problem in err.problem
    assert str(err).startswith(f"cluster.yaml#3: {cls.__name__} {display}: field {field}: ")


def test_decode_not_a_mapping() -> None:
    with pytest.raises(ManifestError) as caught:
        decode(["not", "a", "pod"], Pod)  # type: ignore[arg-type]
    assert str(caught.value) == "Pod <unnamed>: expected a mapping, got list"


def test_decode_good_pod_and_unknown_fields_ignored() -> None:
    pod = decode(
        _pod(
            {
                "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}],
                "dnsPolicy": "ClusterFirst",  # not modelled: ignored like any client
            }
        ),
        Pod,
    )
    assert pod.spec.containers[0].resources.requests == {"cpu": "1"}
    assert pod.spec.scheduler_name == "default-scheduler"


DOCS = """\
apiVersion: v1
kind: Pod
metadata: {name: good-1, namespace: team}
spec:
  containers: [{resources: {requests: {cpu: 500m}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: bad-1}
spec:
  containers: [{resources: {requests: {cpu: "-1"}}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
data: {a: b}
---
- just
- a list of strings
---
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: 110}}
---
apiVersion: v1
kind: List
items:
  - {apiVersion: v1, kind: Node, metadata: {name: n2}}
  - {apiVersion: v1, kind: Node, metadata: {name: n3}, spec: {taints: [{key: a}]}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
"""


def test_load_objects_keeps_good_documents_and_reports_bad_ones(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(DOCS)
    (tmp_path / "b.json").write_text(json.dumps({"kind": "Pod", "metadata": {"name": "j"}}))
    (tmp_path / "c.yaml").write_text("kind: Pod\nmetadata: {name: [unclosed\n")
    (tmp_path / "notes.txt").write_text("not a manifest")  # other suffixes are skipped
    objects, errors = load_objects([tmp_path])

    names = [(type(o).__name__, o.metadata.name) for o in objects]  # type: ignore[attr-defined]
    assert names == [
        ("Pod", "good-1"),
        ("Node", "n1"),
        ("Node", "n2"),
        ("PriorityClass", "high"),
        ("Pod", "j"),
    ]
    assert isinstance(objects[3], PriorityClass) and objects[3].value == 1000

    messages = [str(e) for e in errors]
    assert len(messages) == 5, messages
    a = tmp_path / "a.yaml"
    assert messages[0] == (
        f"{a}#1: Pod bad-1: field spec.containers[0].resources: "
        "requests.cpu: quantity '-1' must not be negative"
    )
    # A list at the top level is flattened: each string is a bad document.
    assert messages[1] == f"{a}#3: document <unnamed>: expected a mapping"
    assert messages[2] == f"{a}#4: document <unnamed>: expected a mapping"
    # Inside a List, the taint without an effect is reported with its path.
    assert messages[3].startswith(f"{a}#7: Node n3: field spec.taints[0]")
    assert "effect" in messages[3]
    c = tmp_path / "c.yaml"
    assert messages[4].startswith(f"file {c}: cannot be read: ")


def test_bad_files_and_a_non_string_kind_are_errors_and_the_good_files_still_load(
    tmp_path: Path,
) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"kind: Node\nmetadata: {name: \xff}\n")
    odd = tmp_path / "odd.yaml"
    odd.write_text("kind: 5\n---\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 10\n")
    objects, errors = load_objects([deep, binary, odd])
    messages = [str(e) for e in errors]
    assert any(f"file {deep}: cannot be read: nested too deeply" in m for m in messages)
    assert any(f"file {binary}: cannot be read: not UTF-8 text" in m for m in messages)
    assert any(f"{odd}#0" in m for m in messages)  # kind 5: named, not a crash
    assert [type(o).__name__ for o in objects] == ["PriorityClass"]


def test_load_objects_missing_file(tmp_path: Path) -> None:
    objects, errors = load_objects([tmp_path / "nope.yaml"])
    assert objects == []
    assert len(errors) == 1 and "cannot be read" in str(errors[0])


def test_priorities_beyond_what_the_api_server_accepts_are_refused() -> None:
    """Pod priority is an int32; PriorityClass values above 1e9 belong to the built-in
    system- classes. Both used to be taken as they came (1e30 included)."""
    from shoal.api.manifests import decode
    from shoal.api.objects import Pod, PriorityClass

    with pytest.raises(ManifestError, match=r"Pod p: field spec.priority: Expected `int` <="):
        decode({"metadata": {"name": "p"}, "spec": {"priority": 10**30}}, Pod)
    with pytest.raises(ManifestError, match="only the built-in system- classes may use"):
        decode({"metadata": {"name": "gold"}, "value": 2 * 10**9}, PriorityClass)
    system = decode(
        {"metadata": {"name": "system-node-critical"}, "value": 2000001000}, PriorityClass
    )
    assert system.value == 2000001000


def test_a_request_above_its_limit_is_refused_naming_the_container() -> None:
    from shoal.api.manifests import decode
    from shoal.api.objects import Pod

    resources = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
    spec = {"containers": [{"name": "c", "resources": resources}]}
    with pytest.raises(ManifestError, match=r"spec.containers\[0\].resources: requests.cpu"):
        decode({"metadata": {"name": "p"}, "spec": spec}, Pod)
