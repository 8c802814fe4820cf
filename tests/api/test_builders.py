"""shoal.testing builders: the objects they produce are exactly what a manifest would
decode to, independent of each other, and validated."""

from __future__ import annotations

import pytest

from shoal.api.errors import ManifestError
from shoal.api.manifests import decode
from shoal.api.objects import Node, Pod, Toleration
from shoal.testing import DEFAULT_MAX_PODS, ZONE_LABEL, make_node, make_pod


def test_pod_builder_matches_the_manifest() -> None:
    pod = (
        make_pod("web-1")
        .namespace("shop")
        .req({"nvidia.com/gpu": 1}, cpu="500m", memory="1Gi")
        .priority(10)
        .labels(app="web")
        .node_selector(disk="ssd")
        .toleration("dedicated", "web", "NoSchedule")
        .toleration("gpu")
        .node_affinity_in("zone", ["a", "b"])
        .host_port(8080)
        .spread(1, ZONE_LABEL, selector={"app": "web"})
        .obj()
    )
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {
            "containers": [
                {
                    "name": "c0",
                    "resources": {
                        "requests": {"nvidia.com/gpu": 1, "cpu": "500m", "memory": "1Gi"}
                    },
                    "ports": [{"containerPort": 8080, "hostPort": 8080}],
                }
            ],
            "priority": 10,
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"},
                {"key": "gpu", "operator": "Exists"},
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["a", "b"]}
                                ]
                            }
                        ]
                    }
                }
            },
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": ZONE_LABEL,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                }
            ],
        },
    }
    assert pod == decode(manifest, Pod)


def test_node_builder_matches_the_manifest() -> None:
    node = (
        make_node("n1")
        .capacity(cpu="4", memory="8Gi")
        .labels({"kubernetes.io/arch": "amd64"}, tier="gpu")
        .zone("a")
        .taint("dedicated", "infer", "NoSchedule")
        .unschedulable()
        .obj()
    )
    resources = {"cpu": "4", "memory": "8Gi", "pods": DEFAULT_MAX_PODS}
    manifest = {
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "labels": {"kubernetes.io/arch": "amd64", "tier": "gpu", ZONE_LABEL: "a"},
        },
        "spec": {
            "unschedulable": True,
            "taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}],
        },
        "status": {"capacity": resources, "allocatable": resources},
    }
    assert node == decode(manifest, Node)


def test_each_obj_is_independent() -> None:
    builder = make_pod("p").labels(a="1")
    first = builder.obj()
    first.metadata.labels["a"] = "changed"
    first.spec.tolerations.append(Toleration(operator="Exists"))
    second = builder.labels(b="2").obj()
    assert second.metadata.labels == {"a": "1", "b": "2"}
    assert second.spec.tolerations == []


def test_typos_are_caught_like_in_a_manifest() -> None:
    with pytest.raises(ManifestError, match=r"spec\.taints\[0\]\.effect"):
        make_node("n").taint("k", "v", "NoSchedul").obj()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must not be negative"):
        make_pod("p").req(cpu="-1")
    with pytest.raises(ValueError, match="needs at least one value"):
        make_pod("p").node_affinity_in("zone", [])


def test_node_affinity_terms() -> None:
    pod = (
        make_pod("p")
        .node_affinity_in("a", ["1"])
        .node_affinity_exists("b")  # ANDed into the same term
        .node_affinity_term(("c", "DoesNotExist"))  # a second, ORed term
        .node_affinity("d", "Gt", [5])  # ANDed into the second term
        .node_affinity_node_names("n1")
        .obj()
    )
    aff = pod.spec.affinity
    assert aff is not None and aff.node_affinity is not None
    required = aff.node_affinity.required_during_scheduling_ignored_during_execution
    assert required is not None
    terms = required.node_selector_terms
    assert [[(r.key, r.operator, r.values) for r in t.match_expressions] for t in terms] == [
        [("a", "In", ["1"]), ("b", "Exists", [])],
        [("c", "DoesNotExist", []), ("d", "Gt", ["5"])],
    ]
    assert [(r.key, r.values) for r in terms[1].match_fields] == [("metadata.name", ["n1"])]


def test_pod_affinity_and_capacity_helpers() -> None:
    pod = (
        make_pod("p")
        .pod_affinity_in("app", ["db"], "kubernetes.io/hostname")
        .pod_anti_affinity("zone", {"app": "web"}, weight=10)
        .obj()
    )
    aff = pod.spec.affinity
    assert aff is not None and aff.pod_affinity is not None and aff.pod_anti_affinity is not None
    term = aff.pod_affinity.required_during_scheduling_ignored_during_execution[0]
    assert term.topology_key == "kubernetes.io/hostname"
    assert term.label_selector is not None
    assert term.label_selector.match_expressions[0].values == ["db"]
    weighted = aff.pod_anti_affinity.preferred_during_scheduling_ignored_during_execution[0]
    assert weighted.weight == 10 and weighted.pod_affinity_term.topology_key == "zone"

    node = make_node("n").capacity(cpu=2, pods=0).allocatable(cpu="1500m").obj()
    assert node.status.capacity == {"cpu": 2, "pods": 0}
    assert node.status.allocatable == {"cpu": "1500m"}


def test_info_derives_requests() -> None:
    info = make_pod("p").req(cpu="1").sidecar_req(cpu="500m").init_req(cpu="3").info(2.5)
    assert info.requests == {"cpu": 3500}  # max(1 + 0.5, 3 + 0.5)
    assert info.timestamp == 2.5
