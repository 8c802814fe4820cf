"""kube-scheduler's HTTP extender protocol (k8s.io/kube-scheduler/extender/v1), on the wire.

One set of types for both directions: Shoal calling an extender (`shoal run`,
`shoal simulate` with `extenders:` in the configuration) and Shoal serving as one
(`shoal extender` behind a stock kube-scheduler).

The Go structs carry no json tags, so encoding/json writes the Go field names as they
are ("Pod", "NodeNames", "FailedAndUnresolvableNodes", "PodUID", "NumPDBViolations") and
nil pointers, maps and slices as `null`; it reads names case-insensitively. The structs
below write exactly those names and read `null` anywhere. Pods and Nodes travel as the
API's own JSON (v1.Pod, v1.NodeList with its lower-case keys), kept as plain mappings so
that nothing kube-scheduler sends is lost on the way through.

Verbs are POSTed to `urlPrefix + "/" + verb` with these bodies:

| verb       | request                   | response                   |
|------------|---------------------------|----------------------------|
| filter     | ExtenderArgs              | ExtenderFilterResult       |
| prioritize | ExtenderArgs              | HostPriorityList           |
| bind       | ExtenderBindingArgs       | ExtenderBindingResult      |
| preempt    | ExtenderPreemptionArgs    | ExtenderPreemptionResult   |

`Nodes` is sent when the extender is not `nodeCacheCapable`, `NodeNames` when it is;
a filter answers in the same form. Prioritize scores are 0..MAX_EXTENDER_PRIORITY.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

__all__ = [
    "MAX_EXTENDER_PRIORITY",
    "MIN_EXTENDER_PRIORITY",
    "ExtenderArgs",
    "ExtenderBindingArgs",
    "ExtenderBindingResult",
    "ExtenderFilterResult",
    "ExtenderPreemptionArgs",
    "ExtenderPreemptionResult",
    "HostPriority",
    "MetaPod",
    "MetaVictims",
    "NodeList",
    "Victims",
    "decode_wire",
    "encode_wire",
]

MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10

JSONObject = dict[str, Any]


class NodeList(msgspec.Struct, kw_only=True):
    """v1.NodeList (API JSON: lower-case keys)."""

    items: list[JSONObject] | None = None
    metadata: JSONObject = msgspec.field(default_factory=dict)
    kind: str = ""
    api_version: str = msgspec.field(default="", name="apiVersion")


class ExtenderArgs(msgspec.Struct, kw_only=True):
    pod: JSONObject | None = msgspec.field(default=None, name="Pod")
    nodes: NodeList | None = msgspec.field(default=None, name="Nodes")
    node_names: list[str] | None = msgspec.field(default=None, name="NodeNames")


class ExtenderFilterResult(msgspec.Struct, kw_only=True):
    nodes: NodeList | None = msgspec.field(default=None, name="Nodes")
    node_names: list[str] | None = msgspec.field(default=None, name="NodeNames")
    failed_nodes: dict[str, str] | None = msgspec.field(default=None, name="FailedNodes")
    failed_and_unresolvable_nodes: dict[str, str] | None = msgspec.field(
        default=None, name="FailedAndUnresolvableNodes"
    )
    error: str = msgspec.field(default="", name="Error")


class HostPriority(msgspec.Struct, kw_only=True):
    host: str = msgspec.field(default="", name="Host")
    score: int = msgspec.field(default=0, name="Score")


class ExtenderBindingArgs(msgspec.Struct, kw_only=True):
    pod_name: str = msgspec.field(default="", name="PodName")
    pod_namespace: str = msgspec.field(default="", name="PodNamespace")
    pod_uid: str = msgspec.field(default="", name="PodUID")
    node: str = msgspec.field(default="", name="Node")


class ExtenderBindingResult(msgspec.Struct, kw_only=True):
    error: str = msgspec.field(default="", name="Error")


class MetaPod(msgspec.Struct, kw_only=True):
    uid: str = msgspec.field(default="", name="UID")


class Victims(msgspec.Struct, kw_only=True):
    pods: list[JSONObject] | None = msgspec.field(default=None, name="Pods")
    num_pdb_violations: int = msgspec.field(default=0, name="NumPDBViolations")


class MetaVictims(msgspec.Struct, kw_only=True):
    pods: list[MetaPod] | None = msgspec.field(default=None, name="Pods")
    num_pdb_violations: int = msgspec.field(default=0, name="NumPDBViolations")


class ExtenderPreemptionArgs(msgspec.Struct, kw_only=True):
    pod: JSONObject | None = msgspec.field(default=None, name="Pod")
    node_name_to_victims: dict[str, Victims | None] | None = msgspec.field(
        default=None, name="NodeNameToVictims"
    )
    node_name_to_meta_victims: dict[str, MetaVictims | None] | None = msgspec.field(
        default=None, name="NodeNameToMetaVictims"
    )


class ExtenderPreemptionResult(msgspec.Struct, kw_only=True):
    node_name_to_meta_victims: dict[str, MetaVictims | None] | None = msgspec.field(
        default=None, name="NodeNameToMetaVictims"
    )


T = TypeVar("T")

_encoder = msgspec.json.Encoder()

# The Go field names, by their lower-case spelling: encoding/json matches names without
# regard to case, so an extender answering `{"nodeNames": [...]}` is understood by
# kube-scheduler, and by Shoal too.
_GO_NAMES = {
    name.lower(): name
    for name in (
        "Pod",
        "Nodes",
        "NodeNames",
        "FailedNodes",
        "FailedAndUnresolvableNodes",
        "Error",
        "Host",
        "Score",
        "PodName",
        "PodNamespace",
        "PodUID",
        "Node",
        "UID",
        "Pods",
        "NumPDBViolations",
        "NodeNameToVictims",
        "NodeNameToMetaVictims",
    )
}
_VICTIM_MAPS = ("NodeNameToVictims", "NodeNameToMetaVictims")


def encode_wire(value: object) -> bytes:
    """JSON as Go's encoding/json writes these structs (nil as null)."""
    return _encoder.encode(value)


def decode_wire(data: bytes, kind: type[T]) -> T:
    """Decode a body of one of the protocol's types, matching field names as Go does
    (any case). Raises msgspec.DecodeError / ValidationError naming the bad field."""
    raw = msgspec.json.decode(data)
    return msgspec.convert(_canonical(raw), type=kind)


_CANONICAL = frozenset(_GO_NAMES.values())


def _canonical(raw: Any) -> Any:
    """Protocol-level keys in their Go spelling (API objects inside are left alone)."""
    if isinstance(raw, list):  # a HostPriorityList: one spelling throughout, as written
        first = raw[0] if raw else None
        if not isinstance(first, dict) or all(k in _CANONICAL for k in first):
            return raw
        return [_canonical_struct(item) for item in raw]
    return _canonical_struct(raw)


def _canonical_struct(raw: Any) -> Any:
    if not isinstance(raw, dict):
        return raw
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = _GO_NAMES.get(str(key).lower(), str(key))
        if name in _VICTIM_MAPS and isinstance(value, dict):
            value = {node: _canonical_victims(v, name) for node, v in value.items()}
        out[name] = value
    return out


def _canonical_victims(raw: Any, kind: str) -> Any:
    victims = _canonical_struct(raw)
    if kind == "NodeNameToMetaVictims" and isinstance(victims, dict):
        pods = victims.get("Pods")
        if isinstance(pods, list):
            victims["Pods"] = [_canonical_struct(p) for p in pods]
    return victims
