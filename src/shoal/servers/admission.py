"""What Shoal's admission webhooks answer (AdmissionReview v1), without any I/O.

Validating: a Queue, QueueBinding, NodePool, ElasticQuota or PodGroup is decoded by the
scheduler's own models (`shoal.api.manifests.decode`: a bad field is named) and a
tenancy object is checked against the objects already in the cluster by the
scheduler's own validation (`shoal.tenancy.validation.reconcile`): the objects in the
cluster are first reduced to the set the scheduler would have in force, the new or
edited object is put in, and any problem that appears (a cycle, a child's guarantee
above its parent's, a guarantee above the maximum, an unknown parent or queue, a
binding to a queue that is not a leaf, ...) refuses the request with the scheduler's
message, which names the object, the field and the fix. A Volcano PodGroup naming a
queue that does not exist is refused the same way. Deletions are allowed (the
scheduler keeps an object that others still depend on in force until they change).

Mutating, for pods being created: in a namespace bound by a QueueBinding, a pod left to
the default scheduler (the API server has already defaulted an empty schedulerName to
`default-scheduler`, so both read as "not chosen") gets Shoal's scheduler name, and a
pod without a queue of its own (no `shoal.dev/queue` label, no Volcano queue annotation)
gets the binding's queue as its `shoal.dev/queue` label, so one scheduler serves every
workload without each team editing its pods.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shoal.api.errors import ManifestError
from shoal.api.manifests import decode
from shoal.api.podgroup import VolcanoPodGroup
from shoal.api.queue import (
    DEFAULT_QUEUE,
    QUEUE_LABEL,
    VOLCANO_QUEUE_ANNOTATION,
    ElasticQuota,
    NodePool,
    Queue,
    QueueBinding,
)
from shoal.api.selectors import label_selector_matches
from shoal.config.types import DEFAULT_PROFILE_NAME, DEFAULT_SCHEDULER_NAME
from shoal.drivers.kube.resources import (
    ELASTIC_QUOTAS,
    ELASTIC_QUOTAS_SIGS,
    NODE_POOLS,
    PODGROUPS,
    PODGROUPS_SIGS,
    QUEUE_BINDINGS,
    QUEUES,
    VOLCANO_PODGROUPS,
    ResourceKind,
)
from shoal.tenancy.validation import TenancyObjects, reconcile

__all__ = [
    "VALIDATED",
    "Verdict",
    "binding_for",
    "in_force",
    "mutate_pod",
    "review_response",
    "tenancy_objects",
    "validate",
]

JSON = dict[str, Any]

VALIDATED: tuple[ResourceKind, ...] = (
    QUEUES,
    QUEUE_BINDINGS,
    NODE_POOLS,
    ELASTIC_QUOTAS,
    ELASTIC_QUOTAS_SIGS,
    PODGROUPS,
    PODGROUPS_SIGS,
    VOLCANO_PODGROUPS,
)
_BY_GVK = {(k.group, k.version, k.kind): k for k in VALIDATED}


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str = ""
    patch: list[JSON] = field(default_factory=list)  # JSON Patch operations (mutating)


def tenancy_objects(raw: Mapping[ResourceKind, list[JSON]]) -> TenancyObjects:
    """Decode listed objects as the scheduler's informers do; unreadable ones are left
    out (the scheduler ignores them too)."""
    out = TenancyObjects()
    for kind, items in raw.items():
        for item in items:
            assert kind.model is not None
            try:
                obj = decode(item, kind.model)
            except ManifestError:
                continue
            _put(out, obj)
    return out


def in_force(objects: TenancyObjects, default_queue: str = DEFAULT_QUEUE) -> TenancyObjects:
    """The valid subset the scheduler would apply from scratch."""
    accepted, _ = reconcile(TenancyObjects(), objects, default_queue)
    return accepted


def _put(objects: TenancyObjects, obj: object) -> None:
    if isinstance(obj, Queue):
        objects.queues[obj.metadata.name] = obj
    elif isinstance(obj, QueueBinding):
        objects.bindings[obj.metadata.name] = obj
    elif isinstance(obj, NodePool):
        objects.pools[obj.metadata.name] = obj
    elif isinstance(obj, ElasticQuota):
        objects.elastic[obj.metadata.namespace or "default"] = obj


def validate(request: JSON, objects: TenancyObjects, default_queue: str = DEFAULT_QUEUE) -> Verdict:
    """The answer to a validating AdmissionRequest for one of `VALIDATED`; `objects`
    are the tenancy objects in the cluster (as listed, valid or not)."""
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return Verdict(True)
    gvk = request.get("kind") or {}
    kind = _BY_GVK.get((gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", "")))
    raw = request.get("object")
    if kind is None or kind.model is None or not isinstance(raw, dict):
        return Verdict(True)  # not ours to judge (the configuration should not send it)
    if kind.namespaced and request.get("namespace"):
        raw = {
            **raw,
            "metadata": {**(raw.get("metadata") or {}), "namespace": request["namespace"]},
        }
    try:
        obj = decode(raw, kind.model)
    except ManifestError as err:
        return Verdict(False, str(err))
    force = in_force(objects, default_queue)
    if isinstance(obj, VolcanoPodGroup):
        queue = obj.spec.queue
        if queue and queue not in force.defs(default_queue):
            name = f"{obj.metadata.namespace}/{obj.metadata.name}"
            return Verdict(
                False,
                f"PodGroup {name}: spec.queue {queue!r} does not exist; create the Queue or "
                "fix the name",
            )
        return Verdict(True)
    if not isinstance(obj, Queue | QueueBinding | NodePool | ElasticQuota):
        return Verdict(True)  # a scheduler-plugins PodGroup: decoding is the check
    desired = force.copy()
    _put(desired, obj)
    _, problems = reconcile(force, desired, default_queue)
    if problems:
        return Verdict(False, "; ".join(problems))
    return Verdict(True)


def binding_for(
    bindings: Mapping[str, QueueBinding], namespace: str, labels: Mapping[str, str]
) -> QueueBinding | None:
    """The QueueBinding that binds `namespace`, in the scheduler's precedence: one that
    lists it, else one whose namespaceSelector matches its labels."""
    for b in bindings.values():
        if namespace in b.spec.namespaces:
            return b
    for b in bindings.values():
        sel = b.spec.namespace_selector
        if sel is not None and label_selector_matches(sel, dict(labels)):
            return b
    return None


def mutate_pod(
    request: JSON,
    bindings: Mapping[str, QueueBinding],
    namespace_labels: Mapping[str, str],
    scheduler_name: str = DEFAULT_PROFILE_NAME,
) -> Verdict:
    """The answer to a mutating AdmissionRequest for a pod: the JSON Patch that hands it
    to Shoal with its namespace's queue (none when the namespace is not bound)."""
    pod = request.get("object")
    if request.get("operation") != "CREATE" or not isinstance(pod, dict):
        return Verdict(True)
    namespace = str(request.get("namespace") or (pod.get("metadata") or {}).get("namespace", ""))
    binding = binding_for(bindings, namespace, namespace_labels)
    if binding is None:
        return Verdict(True)
    ops: list[JSON] = []
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") in (None, "", DEFAULT_SCHEDULER_NAME):
        op = "replace" if "schedulerName" in spec else "add"
        ops.append({"op": op, "path": "/spec/schedulerName", "value": scheduler_name})
    meta = pod.get("metadata") or {}
    labels = meta.get("labels")
    annotations = meta.get("annotations") or {}
    if not (labels or {}).get(QUEUE_LABEL) and VOLCANO_QUEUE_ANNOTATION not in annotations:
        if isinstance(labels, dict):
            path = "/metadata/labels/" + QUEUE_LABEL.replace("~", "~0").replace("/", "~1")
            ops.append({"op": "add", "path": path, "value": binding.spec.queue})
        else:
            ops.append(
                {
                    "op": "add",
                    "path": "/metadata/labels",
                    "value": {QUEUE_LABEL: binding.spec.queue},
                }
            )
    return Verdict(True, patch=ops)


def review_response(review: JSON, verdict: Verdict) -> JSON:
    """The AdmissionReview (v1) to send back for `review`."""
    request = review.get("request") or {}
    response: JSON = {"uid": request.get("uid", ""), "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {
            "code": 422,
            "reason": "Invalid",
            "message": verdict.message,
        }
    if verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(verdict.patch).encode()).decode()
    return {
        "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
        "kind": "AdmissionReview",
        "response": response,
    }
