"""A corpus of malformed inputs for the simulator's edge (issue "Hardening").

Each case is one bad object (or a bad pair) beside good ones: the bad one must be
refused or explained with a message naming the object and what is wrong, the good ones
must still run, and nothing may crash, hang or be accepted silently. Cases are
generated: every object kind the simulator reads crossed with every mutation class that
applies to it, plus kind-specific classes. `python tests/corpus/generate.py DIR` writes
them out as YAML files (one per case, with the expected message in a comment), for
running them through `shoal simulate` by hand.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]


@dataclass(frozen=True)
class Case:
    id: str
    documents: tuple[JSON | Any, ...]  # the bad object(s); the good ones are added around
    expect: str  # a fragment of the message that must name what is wrong
    # A fragment that must appear in the same message, naming the object ("" = `expect`
    # alone): the kind and name, or the file for unreadable input.
    names: str = ""
    text: str = ""  # the bad object as YAML text, for what a YAML library cannot write
    # The bad input in a file of its own (a file that cannot be parsed at all loses every
    # document in it: the good objects are then in a second file).
    alone: bool = False


# ---- good objects ------------------------------------------------------------------------


def node(name: str = "n-bad", **allocatable: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", **allocatable}},
    }


def pod(name: str = "p-bad", cpu: str = "100m", **spec: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"sim.shoal.dev/arrival": "0"}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
            **spec,
        },
    }


def priority_class(name: str = "pc-bad", value: Any = 100) -> JSON:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def queue(name: str = "q-bad", **spec: Any) -> JSON:
    return {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"guaranteed": {"cpu": "1"}, **spec},
    }


def queue_binding(name: str = "qb-bad", **spec: Any) -> JSON:
    return {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "QueueBinding",
        "metadata": {"name": name},
        "spec": {"queue": "good-queue", "namespaces": ["team-a"], **spec},
    }


def node_pool(name: str = "np-bad", **spec: Any) -> JSON:
    return {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"pool": "a"}, **spec},
    }


def elastic_quota(name: str = "eq-bad", **spec: Any) -> JSON:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": name, "namespace": "team-b"},
        "spec": {"min": {"cpu": "1"}, "max": {"cpu": "2"}, **spec},
    }


def pod_group(name: str = "pg-bad", **spec: Any) -> JSON:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": 2, **spec},
    }


def volcano_group(name: str = "vpg-bad", **spec: Any) -> JSON:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": 2, **spec},
    }


def hypernode(name: str = "hn-bad", **spec: Any) -> JSON:
    member = {"type": "Node", "selector": {"exactMatch": {"name": "good-node"}}}
    return {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {"tier": 1, "members": [member], **spec},
    }


def kueue_topology(name: str = "kt-bad", **spec: Any) -> JSON:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": "topo/block"}, {"nodeLabel": "topo/rack"}], **spec},
    }


def pdb(name: str = "pdb-bad", **spec: Any) -> JSON:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}, **spec},
    }


def workload(name: str = "wl-bad", **entry: Any) -> JSON:
    spec = {
        "name": "job",
        "count": 2,
        "interval": 10,
        "duration": 60,
        "template": {
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}
        },
        **entry,
    }
    return {
        "apiVersion": "sim.shoal.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {"pods": [spec]},
    }


def good_documents() -> list[JSON]:
    """What every case runs beside its bad object: it must load and its pod must run."""
    return [
        node("good-node"),
        queue("good-queue"),
        pod("good-pod"),
    ]


KINDS: dict[str, Callable[..., JSON]] = {
    "Node": node,
    "Pod": pod,
    "PriorityClass": priority_class,
    "Queue": queue,
    "QueueBinding": queue_binding,
    "NodePool": node_pool,
    "ElasticQuota": elastic_quota,
    "PodGroup": pod_group,
    "VolcanoPodGroup": volcano_group,
    "PodDisruptionBudget": pdb,
    "HyperNode": hypernode,
    "Topology": kueue_topology,
}


# ---- mutation classes ---------------------------------------------------------------------

BAD_NAMES = {
    "capitals": "Bad_Name",
    "too-long": "n" * 254,
    "unicode": "nöde",
    "zero-width": "a\u200bb",
    "right-to-left": "a\u202eb",
    "space": "a b",
    "trailing-dash": "abc-",
    "leading-dot": ".abc",
    "underscore": "a_b",
    "slash": "a/b",
}


def _kind_of(doc: JSON) -> str:
    kind = str(doc["kind"])
    return "VolcanoPodGroup" if doc["apiVersion"].startswith("scheduling.volcano") else kind


def name_cases() -> Iterator[Case]:
    for kind, make in KINDS.items():
        for label, bad in BAD_NAMES.items():
            doc = make()
            doc["metadata"]["name"] = bad
            yield Case(f"name-{label}-{kind}", (doc,), "metadata.name")
        doc = make()
        doc["metadata"]["name"] = ""
        yield Case(f"name-empty-{kind}", (doc,), "name")
        doc = make()
        doc["metadata"]["name"] = 5
        yield Case(f"name-number-{kind}", (doc,), "metadata.name")


def structure_cases() -> Iterator[Case]:
    for kind, make in KINDS.items():
        doc = make()
        doc["metadata"] = ["not", "a", "map"]
        yield Case(f"metadata-list-{kind}", (doc,), "metadata")
        doc = make()
        field = "status" if kind == "Node" else "value" if kind == "PriorityClass" else "spec"
        doc[field] = "a string"
        yield Case(f"{field}-string-{kind}", (doc,), field)
        doc = make()
        doc["metadata"]["labels"] = "app=x"
        yield Case(f"labels-string-{kind}", (doc,), "labels")
        doc = make()
        doc["metadata"]["annotations"] = {"a": 5}
        yield Case(f"annotation-number-{kind}", (doc,), "annotations")
        # The same name twice: the second is refused naming the first.
        first, second = make("twin"), make("twin")
        yield Case(f"duplicate-{kind}", (first, second), "twin", names="duplicate")


def document_cases() -> Iterator[Case]:
    yield Case("kind-number", ({"apiVersion": "v1", "kind": 5, "metadata": {"name": "x"}},), "kind")
    yield Case("kind-missing", ({"apiVersion": "v1", "metadata": {"name": "x"}},), "kind")
    yield Case("kind-unknown", ({"apiVersion": "v1", "kind": "Frobnicator"},), "not simulated")
    yield Case("kind-list", ({"apiVersion": "v1", "kind": ["Pod"]},), "kind")
    yield Case("document-list", (["a", "b"],), "expected a mapping")
    yield Case("document-string", ("just text",), "expected a mapping")
    yield Case("document-number", (42,), "expected a mapping")
    yield Case(
        "list-items-string",
        ({"apiVersion": "v1", "kind": "List", "items": "notalist"},),
        "items must be a list",
        names="List",
    )
    # A key given twice: refused (as the API server's strict decoding does), not "the
    # last one wins"; the documents after it in the same file are still read.
    duplicate = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p-dup}\nspec:\n"
        "  containers: [{name: a, resources: {requests: {cpu: 100m}}}]\n"
        "  containers: [{name: b, resources: {requests: {cpu: 200m}}}]"
    )
    yield Case("duplicate-key", (), "duplicate key 'containers'", names="(line ", text=duplicate)
    for kind, make in KINDS.items():
        doc = make()
        doc["metadata"]["labels"] = {"placeholder": "x"}
        text = yaml.safe_dump(doc, default_flow_style=True, width=10**9).replace(
            "{placeholder: x}", "{a: " * 3000 + "x" + "}" * 3000
        )
        yield Case(f"deep-{kind}", (), "nested too deeply", text=text, alone=True)


QUANTITIES = {
    "letters": ("abc", "quantity"),
    "negative": ("-1", "negative"),
    "huge": ("1e400", "quantity"),
    "empty": ("", "quantity"),
    "unit-typo": ("4Gb", "quantity"),
    "list": (["1"], "expected"),
}


def quantity_cases() -> Iterator[Case]:
    for label, (value, expect) in QUANTITIES.items():
        doc = node()
        doc["status"]["allocatable"]["cpu"] = value
        yield Case(f"node-allocatable-{label}", (doc,), expect)
        doc = pod()
        doc["spec"]["containers"][0]["resources"]["requests"]["cpu"] = value
        yield Case(f"pod-request-{label}", (doc,), expect)
        doc = pod()
        doc["spec"]["containers"][0]["resources"]["limits"] = {"memory": value}
        yield Case(f"pod-limit-{label}", (doc,), expect.replace("cpu", "memory"))
        doc = queue()
        doc["spec"]["guaranteed"] = {"cpu": value}
        yield Case(f"queue-guaranteed-{label}", (doc,), expect)
        doc = queue()
        doc["spec"]["max"] = {"cpu": value}
        yield Case(f"queue-max-{label}", (doc,), expect)
        doc = elastic_quota()
        doc["spec"]["max"] = {"cpu": value}
        yield Case(f"elasticquota-max-{label}", (doc,), expect)


def pod_cases() -> Iterator[Case]:
    bad = pod(cpu="2")
    bad["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1"}
    yield Case("pod-requests-above-limits", (bad,), "limit")
    yield Case("pod-unknown-priority-class", (pod(priorityClassName="nope"),), "nope")
    yield Case("pod-priority-huge", (pod(priority=10**30),), "priority")
    yield Case("pod-priority-string", (pod(priority="high"),), "priority")
    yield Case("pod-containers-missing", ({**pod(), "spec": {}},), "containers")
    yield Case("pod-containers-map", ({**pod(), "spec": {"containers": {"a": 1}}},), "containers")
    yield Case("pod-scheduler-name-bad", (pod(schedulerName="Not A Name"),), "schedulerName")
    yield Case(
        "pod-toleration-operator",
        (pod(tolerations=[{"key": "a", "operator": "Maybe", "effect": "NoSchedule"}]),),
        "operator",
    )
    yield Case(
        "pod-toleration-effect",
        (pod(tolerations=[{"key": "a", "operator": "Exists", "effect": "Sometimes"}]),),
        "effect",
    )
    selector = {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]}
    yield Case(
        "pod-affinity-operator",
        (
            pod(
                affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [selector]
                        }
                    }
                }
            ),
        ),
        "operator",
    )
    yield Case("pod-node-selector-list", (pod(nodeSelector=["a"]),), "nodeSelector")
    yield Case(
        "pod-host-port-range",
        (
            {
                **pod(),
                "spec": {
                    "containers": [
                        {"name": "c", "ports": [{"containerPort": 80, "hostPort": 70000}]}
                    ]
                },
            },
        ),
        "hostPort",
    )
    yield Case(
        "pod-arrival-negative",
        ({**pod(), "metadata": {"name": "p-bad", "annotations": {"sim.shoal.dev/arrival": "-5"}}},),
        "arrival",
    )
    yield Case(
        "pod-arrival-text",
        (
            {
                **pod(),
                "metadata": {"name": "p-bad", "annotations": {"sim.shoal.dev/arrival": "soon"}},
            },
        ),
        "arrival",
    )
    yield Case(
        "pod-duration-text",
        (
            {
                **pod(),
                "metadata": {
                    "name": "p-bad",
                    "annotations": {
                        "sim.shoal.dev/arrival": "0",
                        "sim.shoal.dev/duration": "long",
                    },
                },
            },
        ),
        "duration",
    )
    bad = pod()
    bad["spec"]["resources"] = {"requests": {"nvidia.com/gpu": "1"}}
    yield Case("pod-level-resource-unsupported", (bad,), "pod-level resources may only be")
    bad = pod()
    bad["spec"]["resources"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
    yield Case("pod-level-request-above-limit", (bad,), "is more than the limit")
    # Inline disks VolumeRestrictions compares: the fields naming the disk are required.
    for source, spec, field in (
        ("gcePersistentDisk", {"readOnly": True}, "pdName"),
        ("awsElasticBlockStore", {"fsType": "ext4"}, "volumeID"),
        ("rbd", {"monitors": "m1:6789", "image": "img"}, "monitors"),
        ("iscsi", {"targetPortal": "10.0.0.1:3260", "lun": 0}, "iqn"),
    ):
        bad = pod()
        bad["spec"]["volumes"] = [{"name": "disk", source: spec}]
        yield Case(f"pod-inline-{source}-{field}", (bad,), f"{source}")
    # (Bad GPU share annotations belong to the GPU-shares issue and are not here yet.)


def priority_class_cases() -> Iterator[Case]:
    yield Case("priorityclass-value-huge", (priority_class(value=2 * 10**9),), "value")
    yield Case("priorityclass-value-text", (priority_class(value="high"),), "value")
    yield Case("priorityclass-value-float", (priority_class(value=1.5),), "value")
    first = priority_class("first") | {"globalDefault": True}
    second = priority_class("second") | {"globalDefault": True}
    yield Case("priorityclass-two-defaults", (first, second), "global default")


def queue_cases() -> Iterator[Case]:
    yield Case(
        "queue-guarantee-above-max",
        (queue(guaranteed={"cpu": "4"}, max={"cpu": "2"}),),
        "q-bad",
    )
    yield Case("queue-unknown-parent", (queue(parent="nowhere"),), "nowhere")
    yield Case("queue-weight-negative", (queue(weight=-1),), "weight")
    yield Case("queue-weight-text", (queue(weight="heavy"),), "weight")
    a, b = queue("qa", parent="qb"), queue("qb", parent="qa")
    yield Case("queue-cycle", (a, b), "cycle")
    yield Case("queuebinding-unknown-queue", (queue_binding(queue="nowhere"),), "nowhere")
    yield Case(
        "queuebinding-namespaces-string", (queue_binding(namespaces="team-a"),), "namespaces"
    )
    yield Case("nodepool-selector-list", (node_pool(nodeSelector=["a"]),), "nodeSelector")
    yield Case("elasticquota-min-above-max", (elastic_quota(min={"cpu": "4"}),), "eq-bad")
    yield Case("podgroup-min-member-negative", (pod_group(minMember=-1),), "minMember")
    # Typos in the spec of a kind whose schema Shoal knows: refused (kubectl's strict
    # field validation refuses them too), not dropped.
    yield Case("spec-typo-queue", (queue(guaranted={"cpu": "1"}),), "spec.guaranted")
    yield Case("spec-typo-nodepool", (node_pool(nodeSelectr={"a": "b"}),), "spec.nodeSelectr")
    yield Case("spec-typo-podgroup", (pod_group(minMembr=2),), "spec.minMembr")
    yield Case("podgroup-min-member-text", (pod_group(minMember="two"),), "minMember")
    yield Case("volcano-min-member-negative", (volcano_group(minMember=-1),), "minMember")
    yield Case("pdb-both-min-and-max", (pdb(maxUnavailable=1),), "maxUnavailable")
    yield Case("pdb-percent-over", (pdb(minAvailable="150%"),), "minAvailable")


def workload_cases() -> Iterator[Case]:
    yield Case("workload-count-negative", (workload(count=-1),), "count")
    yield Case("workload-count-huge", (workload(count=10**8),), "count")
    yield Case("workload-count-text", (workload(count="many"),), "count")
    yield Case("workload-rate-negative", (workload(rate=-1, interval=None),), "rate")
    yield Case("workload-interval-negative", (workload(interval=-10),), "interval")
    # Infinite or overflowing times: an arrival at infinity never came (the run hung);
    # a run ending at infinity reported NaN and wrote invalid JSON.
    inf = float("inf")
    yield Case("workload-interval-infinite", (workload(interval=inf),), "interval")
    yield Case("workload-interval-overflowing", (workload(interval=1e308),), "interval")
    yield Case("workload-rate-vanishing", (workload(rate=1e-320, interval=None),), "rate")
    yield Case("workload-duration-infinite", (workload(duration=inf),), "duration")
    yield Case(
        "workload-duration-mean-infinite",
        (workload(duration={"distribution": "exponential", "mean": inf}),),
        "duration",
    )
    yield Case("workload-arrival-infinite", (workload(arrival=inf),), "arrival")
    # Unknown fields inside the entry are hinted from the object they are in (the
    # duration's kinds), not from the entry's own fields.
    yield Case(
        "workload-duration-unknown-field",
        (workload(duration={"distribution": "exponential", "mean": 5, "max": 10}),),
        "distribution exponential: mean",
    )
    yield Case("workload-spec-typo", ({**workload(), "spec": {"pod": []}},), "did you mean 'pods'")
    yield Case(
        "workload-duration-distribution",
        (workload(duration={"distribution": "zipfian", "mean": 5}),),
        "distribution",
    )
    yield Case("workload-duration-negative", (workload(duration=-5),), "duration")
    yield Case("workload-template-missing", (workload(template=None),), "template")
    yield Case("workload-pods-map", ({**workload(), "spec": {"pods": {"a": 1}}},), "pods")
    bad_entry = workload()
    bad_entry["spec"]["pods"][0]["name"] = "Bad Name"
    yield Case("workload-entry-name-bad", (bad_entry,), "metadata.name", names="Bad Name")
    yield Case(
        "workload-template-no-containers",
        (workload(template={"spec": {}}),),
        "containers",
    )


def gpu_pod(name: str = "p-bad", **annotations: str) -> JSON:
    doc = pod(name)
    doc["metadata"]["annotations"].update(
        {f"alibabacloud.com/{k.replace('_', '-')}": v for k, v in annotations.items()}
    )
    return doc


def gpu_cases() -> Iterator[Case]:
    """GPU requests and devices (issue "GPU shares", item 4): out-of-range or non-integer
    shares and counts are refused with the annotation and its range; absurd device
    counts on nodes are refused before any allocation, the node left out whole."""
    milli_range = "whole number from 1 to 1000"
    for label, value in (
        ("zero", "0"),
        ("fraction", "0.5"),
        ("over", "1001"),
        ("negative", "-300"),
        ("text", "half"),
        ("exponent", "5e2"),
        ("empty", ""),
    ):
        yield Case(f"gpu-milli-{label}", (gpu_pod(gpu_milli=value),), milli_range)
    count_range = "whole number from 0 to 256"
    for label, value in (("huge", "1e20"), ("fraction", "1.5"), ("text", "two"), ("big", "257")):
        yield Case(f"gpu-count-{label}", (gpu_pod(gpu_milli="500", gpu_count=value),), count_range)
    yield Case(
        "gpu-count-zero-with-milli",
        (gpu_pod(gpu_milli="500", gpu_count="0"),),
        "gpu-count is 0",
    )
    mismatch = gpu_pod(gpu_count="2")
    mismatch["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    yield Case("gpu-count-disagrees-with-request", (mismatch,), "disagrees")
    many = pod()
    many["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "100000"
    yield Case("gpu-request-huge", (many,), "more than 256 devices")
    for label, limits, expect in (
        (
            "vgpu-cores-over",
            {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-cores": 101},
            "1 to 100",
        ),
        ("hami-cores-over", {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 150}, "1 to 100"),
        ("vgpu-number-huge", {"volcano.sh/vgpu-number": 1000}, "more than 256"),
    ):
        doc = pod()
        doc["spec"]["containers"][0]["resources"]["limits"] = dict(limits)
        yield Case(f"gpu-{label}", (doc,), expect)
    for label, value in (("billion", "1000000000"), ("huge", "1e8"), ("257", "257")):
        doc = node(**{"nvidia.com/gpu": value})
        yield Case(f"node-gpus-{label}", (doc,), "more than 256")
        doc = node(**{"alibabacloud.com/gpu-count": value})
        yield Case(f"node-gpu-count-{label}", (doc,), "more than 256")
    yield from registration_cases()


HAMI_REGISTER = "hami.io/node-nvidia-register"
VOLCANO_REGISTER = "volcano.sh/node-vgpu-register"


def registration_cases() -> Iterator[Case]:
    """Device registrations of HAMi's and Volcano's device plugins (issue 24, item 1) that
    cannot be read: the node is left out whole with the annotation, the device and the
    fix named, never counted with devices its plugin does not know."""
    t4 = "NVIDIA-Tesla T4"
    many = "".join(f"GPU-{i},10,16384,100,{t4},0,true:" for i in range(300))
    for label, key, value, expect in (
        ("hami-fields", HAMI_REGISTER, f"GPU-a,10,16384,100,{t4},0:", "expected 7 or 9"),
        (
            "hami-negative-memory",
            HAMI_REGISTER,
            f"GPU-a,10,-1,100,{t4},0,true:",
            "memory (MiB) '-1' must be a whole number from 1 to",
        ),
        ("hami-bad-uuid", HAMI_REGISTER, f"GPU a b,10,16384,100,{t4},0,true:", "not a device id"),
        (
            "hami-duplicate-uuid",
            HAMI_REGISTER,
            f"GPU-a,10,16384,100,{t4},0,true:GPU-a,10,16384,100,{t4},0,true:",
            "listed twice",
        ),
        ("hami-absurd-split", HAMI_REGISTER, f"GPU-a,100000,16384,100,{t4},0,true:", "split"),
        ("hami-too-many", HAMI_REGISTER, many, "300 devices is more than 256"),
        ("hami-json-broken", HAMI_REGISTER, '[{"id": "GPU-a", "devmem": ', "not a JSON list"),
        ("hami-json-no-id", HAMI_REGISTER, '[{"devmem": 16384, "count": 10}]', "not a device id"),
        ("hami-empty", HAMI_REGISTER, "", "no device is listed"),
        ("volcano-fields", VOLCANO_REGISTER, "GPU-a,10,16384:", "expected 5 or 6"),
        (
            "volcano-huge-memory",
            VOLCANO_REGISTER,
            f"GPU-a,10,1000000000000,{t4},true,hami-core:",
            "memory (MiB)",
        ),
        ("volcano-health", VOLCANO_REGISTER, f"GPU-a,10,16384,{t4},maybe,hami-core:", "health"),
    ):
        doc = node(**{"nvidia.com/gpu": "1"})
        doc["metadata"]["annotations"] = {key: value}
        yield Case(f"node-register-{label}", (doc,), expect)


def hypernode_cases() -> Iterator[Case]:
    def member(kind: str, **selector: Any) -> JSON:
        return {"type": kind, "selector": selector}

    yield Case(
        "hypernode-regex-bad",
        (hypernode(members=[member("Node", regexMatch={"pattern": "(["})]),),
        "spec.members[0].selector.regexMatch.pattern",
    )
    yield Case("hypernode-tier-text", (hypernode(tier="top"),), "spec.tier")
    yield Case("hypernode-tier-zero", (hypernode(tier=0),), "spec.tier")
    yield Case("hypernode-tier-list", (hypernode(tier=[1]),), "tier")
    yield Case(
        "hypernode-member-type",
        (hypernode(members=[member("Switch", exactMatch={"name": "x"})]),),
        "spec.members[0].type",
    )
    yield Case(
        "hypernode-two-selectors",
        (
            hypernode(
                members=[member("Node", exactMatch={"name": "x"}, regexMatch={"pattern": "x"})]
            ),
        ),
        "exactly one of",
    )
    yield Case("hypernode-no-selector", (hypernode(members=[member("Node")]),), "exactly one of")
    yield Case(
        "hypernode-label-match-on-hypernode",
        (hypernode(tier=2, members=[member("HyperNode", labelMatch={"matchLabels": {"a": "b"}})]),),
        "selects nodes only",
    )
    yield Case("hypernode-members-map", (hypernode(members={"type": "Node"}),), "spec.members")
    a = hypernode("hn-a", tier=2, members=[member("HyperNode", exactMatch={"name": "hn-b"})])
    b = hypernode("hn-b", tier=3, members=[member("HyperNode", exactMatch={"name": "hn-a"})])
    yield Case("hypernode-cycle", (a, b), "hn-a -> hn-b -> hn-a", names="hn-a")
    low = hypernode("hn-low", tier=1, members=[member("HyperNode", exactMatch={"name": "hn-high"})])
    yield Case(
        "hypernode-tier-not-below",
        (low, hypernode("hn-high", tier=2)),
        "not lower than this one's tier 1",
        names="hn-low",
    )
    yield Case("kueue-topology-no-levels", (kueue_topology(levels=[]),), "spec.levels")
    yield Case(
        "kueue-topology-empty-label",
        (kueue_topology(levels=[{"nodeLabel": "topo/block"}, {"nodeLabel": ""}]),),
        "spec.levels[1].nodeLabel",
    )
    yield Case(
        "kueue-topology-label-twice",
        (kueue_topology(levels=[{"nodeLabel": "topo/rack"}, {"nodeLabel": "topo/rack"}]),),
        "listed twice",
    )
    yield Case(
        "kueue-topology-levels-map", (kueue_topology(levels={"nodeLabel": "x"}),), "spec.levels"
    )
    yield Case(
        "kueue-topology-label-number", (kueue_topology(levels=[{"nodeLabel": 5}]),), "nodeLabel"
    )
    topology = {"networkTopology": {"mode": "strict"}}
    yield Case(
        "volcano-network-topology-mode", (volcano_group(**topology),), "networkTopology.mode"
    )
    topology = {"networkTopology": {"mode": "hard", "highestTierAllowed": 0}}
    yield Case(
        "volcano-network-topology-tier-zero", (volcano_group(**topology),), "highestTierAllowed"
    )


def api_validation_cases() -> Iterator[Case]:
    """What the API server's validation refuses in the fields the scheduler reads
    (`shoal.api.validation`): before, each of these ran as if kube had accepted it."""
    container = {"name": "c", "resources": {"requests": {"cpu": "100m"}}}
    twins = pod()
    twins["spec"]["containers"] = [container, dict(container)]
    yield Case("validation-pod-container-names-duplicate", (twins,), "duplicate container name 'c'")
    init_twin = pod()
    init_twin["spec"]["initContainers"] = [dict(container)]
    yield Case(
        "validation-pod-init-container-name-duplicate", (init_twin,), "duplicate container name"
    )
    ports = pod()
    ports["spec"]["containers"][0]["ports"] = [
        {"containerPort": 80, "hostPort": 8080},
        {"containerPort": 81, "hostPort": 8080},
    ]
    yield Case(
        "validation-pod-host-port-duplicate", (ports,), "host port 8080/TCP is already taken"
    )
    for case_id, key, expect in (
        ("validation-pod-label-key-space", "bad key", "label key 'bad key' is not valid"),
        ("validation-pod-label-key-prefix", "Example.COM/app", "the prefix before '/'"),
        ("validation-pod-label-key-long", "k" * 64, "label key"),
    ):
        bad = pod()
        bad["metadata"]["labels"] = {key: "x"}
        yield Case(case_id, (bad,), expect)
    bad = pod()
    bad["metadata"]["labels"] = {"app": "-web-"}
    yield Case("validation-pod-label-value-invalid", (bad,), "label value '-web-' is not valid")
    for case_id, name, expect in (
        ("validation-pod-resource-name-space", "bad resource", "resource name 'bad resource'"),
        ("validation-pod-resource-unqualified", "gpu", "not a standard resource"),
        (
            "validation-pod-resource-kubernetes-io",
            "kubernetes.io/gpu",
            "outside the kubernetes.io domain",
        ),
        ("validation-pod-resource-pods", "pods", "not a standard resource"),
    ):
        bad = pod()
        bad["spec"]["containers"][0]["resources"]["requests"][name] = "1"
        yield Case(case_id, (bad,), expect)
    yield Case(
        "validation-pod-node-selector-value-invalid",
        (pod(nodeSelector={"zone": "a b"}),),
        "spec.nodeSelector[zone]",
    )
    yield Case(
        "validation-pod-toleration-key-invalid",
        (pod(tolerations=[{"key": "a b", "operator": "Exists"}]),),
        "taint key 'a b'",
    )

    def required(term: JSON) -> JSON:
        return pod(
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            }
        )

    two = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}
    yield Case("validation-pod-match-fields-two-names", (required(two),), "must be only one value")
    other = {"matchFields": [{"key": "spec.nodeName", "operator": "In", "values": ["a"]}]}
    yield Case(
        "validation-pod-match-fields-key", (required(other),), "not a supported field selector key"
    )
    spaced = {"matchExpressions": [{"key": "a b", "operator": "Exists"}]}
    yield Case("validation-pod-affinity-key-invalid", (required(spaced),), "label key 'a b'")
    yield Case(
        "validation-pod-priority-without-class",
        (pod(priority=1000),),
        "must not be provided in pod spec; priority admission controller computed 0",
    )
    typo = pod()
    typo["metadata"]["annotations"] = {"sim.shoal.dev/arival": "30"}
    yield Case("pod-arrival-annotation-typo", (typo,), "did you mean sim.shoal.dev/arrival?")
    bad = node()
    bad["metadata"]["labels"] = {"bad key": "x"}
    yield Case("validation-node-label-key-invalid", (bad,), "label key 'bad key'")
    bad = node()
    bad["spec"] = {"taints": [{"key": "a b", "effect": "NoSchedule"}]}
    yield Case("validation-node-taint-key-invalid", (bad,), "taint key 'a b'")
    bad = node()
    bad["spec"] = {"taints": [{"key": "k", "value": "x y", "effect": "NoSchedule"}]}
    yield Case("validation-node-taint-value-invalid", (bad,), "taint value 'x y'")
    bad = node()
    twice = {"key": "k", "effect": "NoSchedule"}
    bad["spec"] = {"taints": [twice, {**twice, "value": "v"}]}
    yield Case("validation-node-taint-duplicate", (bad,), "unique by key and effect")
    yield Case(
        "validation-node-resource-name-invalid",
        (node(**{"cpu cores": "3"}),),
        "resource name 'cpu cores'",
    )
    # A kind in a version (or group) that does not serve it: the API server has no such
    # resource (before, any apiVersion was read by kind alone).
    for kind, make in KINDS.items():
        doc = make()
        doc["apiVersion"] = "example.com/v9" if kind != "Pod" else "apps/v1"
        yield Case(f"validation-api-version-{kind}", (doc,), "does not serve kind")
    # Values of the wrong JSON type, read strictly as the API server does.
    yield Case("validation-pod-priority-quoted", (pod(priority="5"),), "Expected `int")
    yield Case("validation-pod-host-network-string", (pod(hostNetwork="true"),), "Expected `bool`")
    yield Case("validation-workload-count-quoted", (workload(count="5"),), "Expected `int`")
    yield Case(
        "validation-priorityclass-system-prefix",
        (priority_class("system-mine"),),
        "reserved for system use only",
    )
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
    yield Case(
        "validation-namespace-duplicate",
        (namespace, {**namespace, "metadata": {"name": "team", "labels": {"a": "b"}}}),
        "duplicate of",
        names="Namespace team",
    )
    yield Case(
        "validation-namespace-label-invalid",
        ({**namespace, "metadata": {"name": "team", "labels": {"a b": "c"}}},),
        "label key 'a b'",
    )
    yield Case(
        "validation-namespace-api-version",
        ({**namespace, "apiVersion": "v2"},),
        "does not serve kind Namespace",
    )

    # A node a Workload adds later is held to what a Node file is (before, any manifest
    # was read as a Node: a Pod under `add` became a node with no resources).
    def node_event(add: JSON) -> JSON:
        doc = workload()
        doc["spec"]["nodeEvents"] = [{"at": 5, "add": add}]
        return doc

    yield Case(
        "validation-workload-node-event-pod",
        (node_event({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}),),
        "`add` takes a Node manifest",
    )
    late = node("late-node")
    late["metadata"]["labels"] = {"bad key": "x"}
    yield Case("validation-workload-node-event-label", (node_event(late),), "label key 'bad key'")
    late = node("Late_Node")
    yield Case("validation-workload-node-event-name", (node_event(late),), "metadata.name")
    template = {"spec": {"containers": [container, dict(container)]}}
    yield Case(
        "validation-workload-template-container-names-duplicate",
        (workload(template=template),),
        "duplicate container name",
    )


GENERATORS = (
    api_validation_cases,
    gpu_cases,
    name_cases,
    structure_cases,
    document_cases,
    quantity_cases,
    pod_cases,
    priority_class_cases,
    queue_cases,
    workload_cases,
    hypernode_cases,
)


def cases() -> list[Case]:
    out: list[Case] = []
    for generate in GENERATORS:
        out.extend(c for c in generate() if c is not None)
    ids = [c.id for c in out]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return out


def write(case: Case, path: Path) -> list[Path]:
    """The case as YAML at `path` (and, for `alone`, the good objects beside it); the
    files to load, in order."""
    bad = [copy.deepcopy(d) for d in case.documents]
    good = good_documents()
    header = f"# corpus case {case.id}: expect {case.expect!r}\n"
    text = f"{case.text}\n---\n" if case.text else ""
    if case.alone:
        path.write_text(header + text + (yaml.safe_dump_all(bad) if bad else ""))
        other = path.with_name(path.stem + ".good.yaml")
        other.write_text(yaml.safe_dump_all(good, sort_keys=False))
        return [path, other]
    path.write_text(header + text + yaml.safe_dump_all(bad + good, sort_keys=False))
    return [path]


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "corpus")
    target.mkdir(parents=True, exist_ok=True)
    for case in cases():
        write(case, target / f"{case.id}.yaml")
    print(f"{len(cases())} cases in {target}")
