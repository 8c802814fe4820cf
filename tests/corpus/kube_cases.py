"""The Kubernetes-backend half of the malformed-input corpus (issue "Hardening").

Each case is a bad object (or a bad pair) delivered by the API, as a lax schema allows it
(a CRD with `x-kubernetes-preserve-unknown-fields` or int-or-string quantities, an
annotation, or a fake API server that stores anything): wrong types, absurd quantities,
nesting too deep to decode, unknown enum values, names shared across kinds, objects that
arrive before what they reference. What must happen, with a good cluster beside it:

* `invalid`: the object is skipped and reported: an `InvalidObject` event on it, a log
  line naming it, the `shoal_invalid_objects_total` metric and the `invalidObjects`
  detail of /readyz (never a failure); the message names the object and the field;
* `pending`: the object is read, but the pod it concerns cannot be placed, and says why
  (a `FailedScheduling` or `SchedulingGated` message naming what is wrong);
* `fine`: legitimate as it is: nothing is reported and its pods are placed;
* `order`: the pods wait, saying what they wait for, until the object they reference
  arrives (`later`); then they are placed and any report on them is cleared.

The good objects beside them must be scheduled, nothing may crash (a log record with a
traceback), hang or be accepted silently. Cases are generated: the simulator corpus
(generate.py) for every kind the backend watches, plus the classes only the API has.

Cases with `known_gap` need a fix outside the Kubernetes driver (the scheduler's gang,
tenancy or plugin code): they are expected to fail until it is made, and say where.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from generate import cases as simulator_cases

JSON = dict[str, Any]
SCHEDULER = "shoal"
DRIVER = "gpu.example.com"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
QUEUE_LABEL = "shoal.dev/queue"
SUB_GROUPS = "shoal.dev/sub-groups"

# apiVersion -> plural, for the kinds created here (kind names repeat across groups).
PLURALS = {
    ("v1", "Pod"): "pods",
    ("v1", "Node"): "nodes",
    ("v1", "Namespace"): "namespaces",
    ("scheduling.k8s.io/v1", "PriorityClass"): "priorityclasses",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("shoal.dev/v1alpha1", "Queue"): "queues",
    ("shoal.dev/v1alpha1", "QueueBinding"): "queuebindings",
    ("shoal.dev/v1alpha1", "NodePool"): "nodepools",
    ("scheduling.x-k8s.io/v1alpha1", "ElasticQuota"): "elasticquotas",
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup"): "podgroups",
    ("scheduling.sigs.k8s.io/v1alpha1", "PodGroup"): "podgroups",
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): "podgroups",
    ("scheduling.k8s.io/v1alpha2", "PodGroup"): "podgroups",
    ("resource.k8s.io/v1", "DeviceClass"): "deviceclasses",
    ("resource.k8s.io/v1", "ResourceSlice"): "resourceslices",
    ("resource.k8s.io/v1", "ResourceClaim"): "resourceclaims",
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): "resourceclaimtemplates",
    ("resource.k8s.io/v1beta2", "DeviceTaintRule"): "devicetaintrules",
    ("topology.volcano.sh/v1alpha1", "HyperNode"): "hypernodes",
    ("kueue.x-k8s.io/v1beta2", "Topology"): "topologies",
}
NAMESPACED = {
    "Pod",
    "PodDisruptionBudget",
    "ElasticQuota",
    "PodGroup",
    "ResourceClaim",
    "ResourceClaimTemplate",
}


@dataclass(frozen=True)
class KubeCase:
    id: str
    objects: tuple[JSON, ...]  # created before Shoal starts (apiVersion and kind set)
    expect: str  # a fragment of the message ("" for `fine`)
    # (apiVersion, kind, namespace, name) of the object the message must be about.
    about: tuple[str, str, str, str]
    channel: str = "invalid"  # invalid | pending | fine | order
    later: tuple[JSON, ...] = ()  # `order`: created once Shoal has read the rest
    bound: tuple[str, ...] = ()  # namespace/name of pods that must end up bound
    known_gap: str = ""  # why it fails today, and where the fix belongs


def ref(obj: JSON) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    namespace = str(meta.get("namespace") or "default") if obj["kind"] in NAMESPACED else ""
    return (obj["apiVersion"], obj["kind"], namespace, str(meta["name"]))


def pod_key(obj: JSON) -> str:
    return f"{obj['metadata'].get('namespace') or 'default'}/{obj['metadata']['name']}"


# ---- builders ------------------------------------------------------------------------------


def node(name: str, cpu: str = "8", memory: str = "32Gi", **labels: str) -> JSON:
    capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
    }


def pod(
    name: str,
    cpu: str = "100m",
    *,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> JSON:
    meta: JSON = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    container = {"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"schedulerName": SCHEDULER, "containers": [container], **spec},
    }


def obj(api_version: str, kind: str, name: str, namespace: str = "", **body: Any) -> JSON:
    meta: JSON = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **body}


def queue(name: str, **spec: Any) -> JSON:
    return obj("shoal.dev/v1alpha1", "Queue", name, spec=spec)


def binding(name: str, queue_name: str, *namespaces: str) -> JSON:
    spec = {"queue": queue_name, "namespaces": list(namespaces)}
    return obj("shoal.dev/v1alpha1", "QueueBinding", name, spec=spec)


def pod_group(name: str, min_member: Any = 1, api: str = "scheduling.x-k8s.io/v1alpha1") -> JSON:
    return obj(api, "PodGroup", name, "default", spec={"minMember": min_member})


def claim(name: str, **exactly: Any) -> JSON:
    request = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1, **exactly}
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}
    return obj("resource.k8s.io/v1", "ResourceClaim", name, "default", spec=spec)


def claim_user(name: str, claim_name: str) -> JSON:
    p = pod(name, resourceClaims=[{"name": "gpu", "resourceClaimName": claim_name}])
    p["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return p


def device_slice(name: str, node_name: str, count: int = 4, **pool: Any) -> JSON:
    devices = [
        {"name": f"gpu-{i}", "capacity": {"memory": {"value": "16Gi"}}} for i in range(count)
    ]
    spec = {
        "driver": DRIVER,
        "nodeName": node_name,
        "pool": {"name": name, "generation": 1, "resourceSliceCount": 1, **pool},
        "devices": devices,
    }
    return obj("resource.k8s.io/v1", "ResourceSlice", name, spec=spec)


def nested(depth: int) -> JSON:
    root: JSON = {}
    current = root
    for _ in range(depth):
        current["x"] = {}
        current = current["x"]
    return root


def good_objects() -> list[JSON]:
    """What every batch runs beside its bad objects: all of it must be placed."""
    gpu_class = obj(
        "resource.k8s.io/v1",
        "DeviceClass",
        "gpu",
        spec={"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    )
    gang = [pod(f"good-gang-{i}", labels={GROUP_LABEL: "good-gang"}) for i in range(2)]
    return [
        node("good-node", cpu="64", memory="256Gi"),
        node("good-node-2", cpu="64", memory="256Gi"),
        gpu_class,
        device_slice("good-slice", "good-node"),
        claim("good-claim"),
        claim_user("good-dra", "good-claim"),
        queue("good-queue", guaranteed={"cpu": "1"}),
        pod("good-queued", labels={QUEUE_LABEL: "good-queue"}),
        pod_group("good-gang", 2),
        *gang,
        *(pod(f"good-{i}") for i in range(3)),
    ]


GOOD_PODS = ("default/good-dra", "default/good-queued", "default/good-gang-0")
GOOD_PODS += ("default/good-gang-1", "default/good-0", "default/good-1", "default/good-2")


# ---- from the simulator corpus ------------------------------------------------------------

# Classes the API server itself refuses for every kind (so they never reach Shoal from a
# real cluster, and the fake cannot even store some), or that only the simulator reads.
_NOT_FROM_AN_API = (
    "name-",  # object names: validated by the API server for every kind
    "duplicate-",  # one object per name and kind: the API server's key
    "metadata-list-",
    "kind-",
    "document-",
    "deep-",  # as text here; nested objects below
    "workload-",  # the simulator's Workload documents
    "pod-arrival-",  # simulator annotations
    "pod-duration-",
    "pod-unknown-priority-class",  # refused at admission (Priority plugin)
    "priorityclass-two-defaults",  # refused at admission
    "pod-containers-missing",  # refused by validation (a pod needs a container)
    "pod-scheduler-name-bad",  # another scheduler's pod: not ours to judge
    "spec-typo-",  # unknown spec fields: pruned by the API server (structural schemas)
    "validation-",  # refused by the API server's validation (shoal.api.validation)
)
_DEFAULT_NAMES = {"n-bad", "p-bad", "pc-bad", "q-bad", "qb-bad", "np-bad", "eq-bad", "pg-bad"}
_DEFAULT_NAMES |= {"vpg-bad", "pdb-bad", "hn-bad", "kt-bad"}


def _watched(doc: Any) -> bool:
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        return False
    kind, api_version = doc.get("kind"), doc.get("apiVersion")
    return isinstance(kind, str) and isinstance(api_version, str) and (api_version, kind) in PLURALS


def from_simulator() -> Iterator[KubeCase]:
    """The simulator corpus's cases for the kinds the backend watches, delivered by the
    API: each in a namespace of its own, default names made unique."""
    for i, case in enumerate(simulator_cases()):
        if case.id.startswith(_NOT_FROM_AN_API) or case.text or not case.documents:
            continue
        docs = [copy.deepcopy(d) for d in case.documents]
        if not all(_watched(d) for d in docs):
            continue
        for d in docs:
            meta = d["metadata"]
            if meta.get("name") in _DEFAULT_NAMES:
                meta["name"] = f"{meta['name']}-{i}"
            if d["kind"] in NAMESPACED:
                meta["namespace"] = f"sim-{i}"
            if d["kind"] == "Pod" and isinstance(d.get("spec"), dict):
                d["spec"]["schedulerName"] = SCHEDULER
        channel = "pending" if case.id.startswith("gpu-") else "invalid"
        yield KubeCase(f"sim-{case.id}", tuple(docs), case.expect, ref(docs[0]), channel)


# ---- only through the API -----------------------------------------------------------------

DEEP_KINDS: dict[str, JSON] = {
    "pod": pod("deep-pod"),
    "node": node("deep-node"),
    "namespace": obj("v1", "Namespace", "deep-namespace"),
    "priorityclass": obj("scheduling.k8s.io/v1", "PriorityClass", "deep-pc", value=10),
    "pdb": obj(
        "policy/v1",
        "PodDisruptionBudget",
        "deep-pdb",
        "default",
        spec={"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}},
    ),
    "queue": queue("deep-queue"),
    "queuebinding": binding("deep-binding", "good-queue", "deep-ns"),
    "nodepool": obj("shoal.dev/v1alpha1", "NodePool", "deep-pool", spec={"nodeSelector": {}}),
    "elasticquota": obj(
        "scheduling.x-k8s.io/v1alpha1", "ElasticQuota", "deep-quota", "deep-eq", spec={}
    ),
    "podgroup": pod_group("deep-pg"),
    "podgroup-sigs": pod_group("deep-pg-sigs", api="scheduling.sigs.k8s.io/v1alpha1"),
    "podgroup-volcano": pod_group("deep-pg-volcano", api="scheduling.volcano.sh/v1beta1"),
    "deviceclass": obj("resource.k8s.io/v1", "DeviceClass", "deep-class", spec={}),
    "resourceslice": device_slice("deep-slice", "good-node", 1),
    "resourceclaim": claim("deep-claim"),
    "resourceclaimtemplate": obj(
        "resource.k8s.io/v1", "ResourceClaimTemplate", "deep-template", "default", spec={}
    ),
    "devicetaintrule": obj(
        "resource.k8s.io/v1beta2",
        "DeviceTaintRule",
        "deep-rule",
        spec={"taint": {"key": "example.com/x", "effect": "NoSchedule"}},
    ),
    "hypernode": obj(
        "topology.volcano.sh/v1alpha1", "HyperNode", "deep-hypernode", spec={"tier": 1}
    ),
    "topology": obj(
        "kueue.x-k8s.io/v1beta2", "Topology", "deep-topology", spec={"levels": [{"nodeLabel": "x"}]}
    ),
}


def deep_cases() -> Iterator[KubeCase]:
    """Nested 1500 levels (kube's API server takes 10000; Shoal's decoder fewer): named
    from a shallow read, skipped, and the rest of its kind flows on."""
    for label, base in DEEP_KINDS.items():
        doc = copy.deepcopy(base)
        doc["metadata"].setdefault("annotations", {})
        doc["x"] = nested(1500)
        yield KubeCase(f"deep-{label}", (doc,), "nested too deeply", ref(doc))


def wrong_type_cases() -> Iterator[KubeCase]:
    for label, labels, expect in (
        ("string", "team=a", "field metadata.labels: expected a map of strings"),
        ("number", {"team": 5}, "field metadata.labels.team: expected a string"),
        ("list", [["team", "a"]], "field metadata.labels: expected a map of strings"),
    ):
        ns = obj("v1", "Namespace", f"ns-labels-{label}")
        ns["metadata"]["labels"] = labels
        yield KubeCase(f"namespace-labels-{label}", (ns,), expect, ref(ns))
    for label, exactly, expect in (
        ("count-text", {"count": "two"}, "exactly.count"),
        ("count-float", {"count": 1.5}, "exactly.count"),
        ("admin-access-text", {"adminAccess": "yes"}, "exactly.adminAccess"),
        ("selectors-map", {"selectors": {"cel": "x"}}, "exactly.selectors"),
        ("expression-number", {"selectors": [{"cel": {"expression": 5}}]}, "cel.expression"),
        ("tolerations-string", {"tolerations": "all"}, "exactly.tolerations"),
    ):
        c = claim(f"claim-{label}", **exactly)
        yield KubeCase(f"resourceclaim-{label}", (c,), expect, ref(c))
    c = claim("claim-requests-string")
    c["spec"]["devices"]["requests"] = "gpu"
    yield KubeCase("resourceclaim-requests-string", (c,), "spec.devices.requests", ref(c))
    s = device_slice("slice-generation-text", "good-node", generation="one")
    yield KubeCase("resourceslice-generation-text", (s,), "spec.pool.generation", ref(s))
    s = device_slice("slice-attribute-int-text", "good-node")
    s["spec"]["devices"][0]["attributes"] = {"index": {"int": "zero"}}
    yield KubeCase("resourceslice-attribute-type", (s,), "attributes", ref(s))
    s = device_slice("slice-devices-map", "good-node")
    s["spec"]["devices"] = {"gpu-0": {}}
    yield KubeCase("resourceslice-devices-map", (s,), "spec.devices", ref(s))
    d = obj("resource.k8s.io/v1", "DeviceClass", "class-selectors-string", spec={"selectors": "x"})
    yield KubeCase("deviceclass-selectors-string", (d,), "spec.selectors", ref(d))
    r = obj("resource.k8s.io/v1beta2", "DeviceTaintRule", "rule-selector-string")
    r["spec"] = {"deviceSelector": "gpu", "taint": {"key": "k", "effect": "NoSchedule"}}
    yield KubeCase("devicetaintrule-selector-string", (r,), "spec.deviceSelector", ref(r))
    r = obj("resource.k8s.io/v1beta2", "DeviceTaintRule", "rule-without-key")
    r["spec"] = {"deviceSelector": {}, "taint": {"effect": "NoSchedule"}}
    yield KubeCase("devicetaintrule-without-key", (r,), "spec.taint.key", ref(r))
    t = obj("resource.k8s.io/v1", "ResourceClaimTemplate", "template-spec-string", "default")
    t["spec"] = "claim"
    yield KubeCase("resourceclaimtemplate-spec-string", (t,), "field spec", ref(t))
    for label, policy, expect in (
        ("both", {"basic": {}, "gang": {"minCount": 2}}, "exactly one of basic and gang"),
        ("min-count-text", {"gang": {"minCount": "two"}}, "minCount"),
    ):
        g = obj(
            "scheduling.k8s.io/v1alpha2",
            "PodGroup",
            f"upstream-{label}",
            "default",
            spec={"schedulingPolicy": policy},
        )
        yield KubeCase(f"upstream-podgroup-{label}", (g,), expect, ref(g))
    g = pod_group("volcano-queue-number", api="scheduling.volcano.sh/v1beta1")
    g["spec"]["queue"] = 7
    yield KubeCase("volcano-podgroup-queue-number", (g,), "spec.queue", ref(g))
    g = pod_group("pg-timeout-text")
    g["spec"]["scheduleTimeoutSeconds"] = "soon"
    yield KubeCase("podgroup-timeout-text", (g,), "scheduleTimeoutSeconds", ref(g))


def enum_cases() -> Iterator[KubeCase]:
    for field, value in (("ordering", "Random"), ("state", "Ajar")):
        q = queue(f"queue-{field}-unknown", **{field: value})
        yield KubeCase(f"queue-{field}-unknown", (q,), f"spec.{field}: Invalid enum value", ref(q))
    c = claim("claim-mode-unknown", allocationMode="Sometimes")
    yield KubeCase("resourceclaim-allocation-mode-unknown", (c,), "allocationMode", ref(c))
    n = node("node-taint-effect-unknown")
    n["spec"] = {"taints": [{"key": "a", "effect": "Sometimes"}]}
    yield KubeCase("node-taint-effect-unknown", (n,), "spec.taints[0].effect", ref(n))
    spread = {
        "maxSkew": 1,
        "topologyKey": "zone",
        "whenUnsatisfiable": "Sometimes",
        "labelSelector": {"matchLabels": {"app": "x"}},
    }
    p = pod("pod-spread-unknown", topologySpreadConstraints=[spread])
    yield KubeCase("pod-spread-when-unsatisfiable-unknown", (p,), "whenUnsatisfiable", ref(p))
    p = pod("pod-toleration-op-unknown", tolerations=[{"key": "a", "operator": "Maybe"}])
    yield KubeCase("pod-toleration-operator-unknown", (p,), "operator", ref(p))


def quantity_cases() -> Iterator[KubeCase]:
    """Absurd amounts where the API (int-or-string CRD fields, DRA counts) takes them."""
    g = pod_group("pg-min-resources-huge")
    g["spec"]["minResources"] = {"memory": "1e30"}
    yield KubeCase("podgroup-min-resources-huge", (g,), "does not fit in a 64-bit integer", ref(g))
    q = queue("queue-guaranteed-1e30", guaranteed={"cpu": "1e30"})
    yield KubeCase("queue-guaranteed-1e30", (q,), "does not fit in a 64-bit integer", ref(q))
    e = obj(
        "scheduling.x-k8s.io/v1alpha1",
        "ElasticQuota",
        "quota-min-text",
        "quota-ns",
        spec={"min": {"cpu": "lots"}},
    )
    yield KubeCase("elasticquota-min-text", (e,), "min.cpu", ref(e))
    # DRA: read, and the pod that uses the claim says what is wrong with it.
    for label, exactly, expect in (
        ("count-huge", {"count": 10**12}, "of 1000000000000 requested devices"),
        ("count-zero", {"count": 0}, "must be at least 1"),
        ("count-negative", {"count": -3}, "must be at least 1"),
        ("class-missing", {"deviceClassName": "nope"}, 'deviceclass "nope" not found'),
        (
            "selector-not-cel",
            {"selectors": [{"cel": {"expression": "device.driver =="}}]},
            "cannot compile",
        ),
        (
            "selector-not-bool",
            {"selectors": [{"cel": {"expression": "42"}}]},
            "not a bool",
        ),
        (
            "selector-5000-parentheses",
            {"selectors": [{"cel": {"expression": "(" * 5000 + "true" + ")" * 5000}}]},
            "cel.expression",
        ),
    ):
        c = claim(f"claim-{label}", **exactly)
        user = claim_user(f"uses-claim-{label}", f"claim-{label}")
        yield KubeCase(f"resourceclaim-{label}", (c, user), expect, ref(user), "pending")
    d = obj(
        "resource.k8s.io/v1",
        "DeviceClass",
        "class-not-cel",
        spec={"selectors": [{"cel": {"expression": "))"}}]},
    )
    c = claim("claim-of-class-not-cel", deviceClassName="class-not-cel")
    user = claim_user("uses-class-not-cel", "claim-of-class-not-cel")
    yield KubeCase(
        "deviceclass-selector-not-cel", (d, c, user), "cannot compile", ref(user), "pending"
    )
    g = pod_group("pg-min-member-trillion", 10**12)
    member = pod("member-of-trillion", labels={GROUP_LABEL: "pg-min-member-trillion"})
    yield KubeCase(
        "podgroup-min-member-trillion",
        (g, member),
        "waiting for 999999999999 more",
        ref(member),
        "pending",
    )


def duplicate_cases() -> Iterator[KubeCase]:
    """One name in several kinds: a gang is defined once (GROUP_PRECEDENCE in the
    intake), a queue once; names in unrelated kinds do not meet."""
    members = tuple(pod(f"twin-{i}", labels={GROUP_LABEL: "twin"}) for i in range(2))
    low = pod_group("twin", 3, api="scheduling.volcano.sh/v1beta1")
    yield KubeCase(
        "podgroup-in-two-apis-disagreeing",
        (pod_group("twin", 2), low, *members),
        "the scheduling.x-k8s.io one is in force",
        ref(low),
        bound=tuple(pod_key(m) for m in members),
    )
    members = tuple(pod(f"sigs-twin-{i}", labels={GROUP_LABEL: "sigs-twin"}) for i in range(2))
    low = pod_group("sigs-twin", 5, api="scheduling.sigs.k8s.io/v1alpha1")
    yield KubeCase(
        "podgroup-in-two-apis-disagreeing-sigs",
        (low, pod_group("sigs-twin", 2), *members),
        "says minMember 5",
        ref(low),
        bound=tuple(pod_key(m) for m in members),
    )
    members = tuple(pod(f"agreed-{i}", labels={GROUP_LABEL: "agreed"}) for i in range(2))
    same = pod_group("agreed", 2, api="scheduling.volcano.sh/v1beta1")
    yield KubeCase(
        "podgroup-in-two-apis-agreeing",
        (pod_group("agreed", 2), same, *members),
        "",
        ref(same),
        "fine",
        bound=tuple(pod_key(m) for m in members),
    )

    def quota(namespace: str) -> JSON:
        spec = {"min": {"cpu": "1"}, "max": {"cpu": "2"}}
        return obj("scheduling.x-k8s.io/v1alpha1", "ElasticQuota", "quota", namespace, spec=spec)

    q = queue("team-x", guaranteed={"cpu": "1"})
    yield KubeCase(
        "queue-and-elasticquota-namespace", (q, quota("team-x")), "a queue is defined once", ref(q)
    )
    e = quota("team-y")
    yield KubeCase(
        "elasticquota-and-queue-namespace",
        (queue("team-y"), e),
        "is also the name of Queue team-y",
        ref(e),
    )
    shared = "same-everywhere"
    objects = (
        node(shared, cpu="1"),
        queue(shared),
        obj("scheduling.k8s.io/v1", "PriorityClass", shared, value=5),
        obj("v1", "Namespace", shared),
        obj("shoal.dev/v1alpha1", "NodePool", shared, spec={"nodeSelector": {"pool": "none"}}),
        pod(shared, labels={QUEUE_LABEL: shared}),
    )
    yield KubeCase(
        "one-name-in-unrelated-kinds",
        objects,
        "",
        ref(objects[-1]),
        "fine",
        bound=(f"default/{shared}",),
    )
    a, b = binding("bind-a", "good-queue", "shared-ns"), binding("bind-b", "team-z", "shared-ns")
    yield KubeCase(
        "two-bindings-for-one-namespace",
        (queue("team-z"), a, b, pod("in-shared-ns", namespace="shared-ns")),
        "is already bound by QueueBinding bind-a",
        ref(b),
    )


def order_cases() -> Iterator[KubeCase]:
    """Objects that arrive after what references them (as informers deliver kinds in no
    particular order, and after a restart pods come first)."""
    members = tuple(pod(f"early-{i}", labels={GROUP_LABEL: "late-group"}) for i in range(2))
    yield KubeCase(
        "pods-before-their-podgroup",
        members,
        "waiting for its PodGroup object",
        ref(members[0]),
        "order",
        later=(pod_group("late-group", 2),),
        bound=tuple(pod_key(m) for m in members),
    )
    members = tuple(
        pod(f"early-v{i}", annotations={VOLCANO_GROUP: "late-volcano"}) for i in range(2)
    )
    yield KubeCase(
        "pods-before-their-volcano-podgroup",
        members,
        "waiting for its PodGroup object",
        ref(members[0]),
        "order",
        later=(pod_group("late-volcano", 2, api="scheduling.volcano.sh/v1beta1"),),
        bound=tuple(pod_key(m) for m in members),
    )
    user = claim_user("early-claim-user", "late-claim")
    yield KubeCase(
        "pod-before-its-resourceclaim",
        (user,),
        'resourceclaim "late-claim" not found',
        ref(user),
        "order",
        later=(claim("late-claim"),),
        bound=(pod_key(user),),
    )
    user = pod("early-queue-user", labels={QUEUE_LABEL: "late-queue"})
    yield KubeCase(
        "pod-before-its-queue",
        (user,),
        "queue 'late-queue' does not exist",
        ref(user),
        "order",
        later=(queue("late-queue"),),
        bound=(pod_key(user),),
    )
    # Refused while its queue is missing (its namespace's pods go by the other rules
    # meanwhile), in force once the queue comes: the report is cleared.
    b = binding("early-binding", "late-queue-2", "early-ns")
    yield KubeCase(
        "queuebinding-before-its-queue",
        (b,),
        "spec.queue 'late-queue-2' does not exist",
        ref(b),
        "order",
        later=(queue("late-queue-2"),),
    )
    user = pod("early-node-user", nodeSelector={"pool": "late"})
    yield KubeCase(
        "pod-before-its-node",
        (user,),
        "didn't match Pod's node affinity/selector",
        ref(user),
        "order",
        later=(node("late-node", pool="late"),),
        bound=(pod_key(user),),
    )

    def pool(name: str, value: str) -> JSON:
        return obj("shoal.dev/v1alpha1", "NodePool", name, spec={"nodeSelector": {"pool": value}})

    user = pod("early-pool-user", labels={QUEUE_LABEL: "pooled"})
    yield KubeCase(
        "pod-before-its-queues-nodepool",
        (queue("pooled", pools=["late-pool"]), pool("other-pool", "other"), user),
        "outside queue pooled's node pools",
        ref(user),
        "order",
        later=(pool("late-pool", "late-2"), node("late-pool-node", pool="late-2")),
        bound=(pod_key(user),),
    )
    user = pod("first-pool-user", labels={QUEUE_LABEL: "first-pooled"})
    yield KubeCase(
        "pod-before-the-first-nodepool",
        (queue("first-pooled", pools=["first-pool"]), user),
        "outside queue first-pooled's node pools",
        ref(user),
        "order",
        later=(pool("first-pool", "first"), node("first-pool-node", pool="first")),
        bound=(pod_key(user),),
    )


def sub_group_cases() -> Iterator[KubeCase]:
    """A PodGroup whose shoal.dev/sub-groups annotation cannot be read is skipped and
    reported as any invalid object (it once went to the group's `reason` only, or raised
    RecursionError on the core)."""
    g = pod_group("sub-groups-deep")
    g["metadata"]["annotations"] = {SUB_GROUPS: "[" * 5000 + "]" * 5000}
    member = pod("member-of-sub-groups-deep", labels={GROUP_LABEL: "sub-groups-deep"})
    yield KubeCase("podgroup-sub-groups-annotation-deep", (g, member), "nested too deeply", ref(g))
    g = pod_group("sub-groups-junk")
    g["metadata"]["annotations"] = {SUB_GROUPS: "{not json"}
    member = pod("member-of-sub-groups-junk", labels={GROUP_LABEL: "sub-groups-junk"})
    yield KubeCase("podgroup-sub-groups-annotation-not-json", (g, member), "is not JSON", ref(g))


GENERATORS = (
    from_simulator,
    deep_cases,
    wrong_type_cases,
    enum_cases,
    quantity_cases,
    duplicate_cases,
    order_cases,
    sub_group_cases,
)


def cases() -> list[KubeCase]:
    out = [c for generate in GENERATORS for c in generate()]
    ids = [c.id for c in out]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return out
