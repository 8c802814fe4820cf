"""Calling kube-scheduler HTTP extenders from the core, with kube's semantics.

The core decides *when* to call an extender and *what to do* with the answer; the
`ExtenderTransport` port (injected by the driver: HTTP in `shoal.drivers.extenders`, or a
Python function in tests) only carries bytes. A call is synchronous: the scheduling cycle
waits for the answer, as kube-scheduler's does (bounded by the extender's httpTimeout).

What kube-scheduler does (pkg/scheduler/schedule_one.go, extender.go, preemption.go),
and so does this module:

* An extender is consulted for a pod only when it is *interested*: it manages no
  resources, or a container or init container of the pod requests or limits one of its
  `managedResources`.
* Filter: extenders run one after another over the nodes that passed the plugins' Filter,
  each narrowing the list for the next. `FailedNodes` become Unschedulable reasons,
  `FailedAndUnresolvableNodes` (which win over FailedNodes) UnschedulableAndUnresolvable
  ones, so preemption skips those nodes. An error (unreachable, timeout, non-200,
  `Error` set, a node it was not given) skips an `ignorable` extender and fails the
  cycle otherwise, naming the extender.
* Prioritize: each interested prioritizer's 0..10 scores, times its weight, times
  MAX_NODE_SCORE / MAX_EXTENDER_PRIORITY (10), are added to the plugins' total. A failing
  prioritizer is left out, ignorable or not.
* Bind: the first interested extender with a bind verb binds the pod instead of the
  Bind plugins; an ignorable one that fails hands over to the next binder (or to the
  plugins).
* Preempt: each interested extender with a preempt verb gets the candidate nodes and
  their victims and returns the ones it accepts (victims by UID), possibly fewer; a node
  it returns without victims is dropped (ignorable) or fails preemption.

Ignorable extenders are placed after the others, as kube-scheduler orders them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import msgspec

from shoal.api.extender import (
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriority,
    MetaPod,
    MetaVictims,
    NodeList,
    Victims,
    decode_wire,
    encode_wire,
)
from shoal.api.objects import Node
from shoal.api.podinfo import PodInfo
from shoal.config.types import Extender as ExtenderConfig
from shoal.framework.types import MAX_NODE_SCORE

__all__ = [
    "EXTENDER_NAME",
    "Extender",
    "ExtenderError",
    "ExtenderTransport",
    "FilterOutcome",
    "NodeVictims",
    "binder_extenders",
    "filter_with_extenders",
    "order_extenders",
    "preempt_with_extenders",
    "prioritize_with_extenders",
]

# kube's framework.ExtenderName: what a pod rejected by extenders lists as its rejector.
EXTENDER_NAME = "Extender"

T = TypeVar("T")

NodeLookup = Callable[[str], Node | None]
"""A node's object by name (for extenders that are sent whole Node objects)."""


class ExtenderError(Exception):
    """A call to an extender failed (unreachable, timeout, non-200, bad answer)."""


class ExtenderTransport(Protocol):
    """Carries one verb's JSON body to the extender and its answer back (the port)."""

    def send(self, verb: str, body: bytes) -> bytes:
        """POST `body` to urlPrefix/verb; the 200 response's body. ExtenderError on
        anything else (the message says what happened)."""
        ...

    async def send_async(self, verb: str, body: bytes) -> bytes:
        """`send` for the binding cycle (which runs concurrently in a cluster)."""
        ...


def _pod_json(pod: PodInfo) -> dict[str, Any]:
    raw: dict[str, Any] = msgspec.to_builtins(pod.pod)
    # Victims come back by UID: a pod known by its key alone (no API UID, e.g. in a
    # simulation) is sent with that key as its UID.
    raw.setdefault("metadata", {}).setdefault("uid", pod.uid)
    raw.setdefault("apiVersion", "v1")
    raw.setdefault("kind", "Pod")
    return raw


def _node_json(node: Node) -> dict[str, Any]:
    raw: dict[str, Any] = msgspec.to_builtins(node)
    raw.setdefault("apiVersion", "v1")
    raw.setdefault("kind", "Node")
    return raw


def _node_name(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""


@dataclass(eq=False)
class Extender:
    """One configured extender: its settings and the transport to reach it."""

    config: ExtenderConfig
    transport: ExtenderTransport
    managed: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.managed = frozenset(r.name for r in self.config.managed_resources)

    @property
    def name(self) -> str:
        """kube names an extender by its urlPrefix."""
        return self.config.url_prefix

    @property
    def ignorable(self) -> bool:
        return self.config.ignorable

    @property
    def is_filter(self) -> bool:
        return bool(self.config.filter_verb)

    @property
    def is_prioritizer(self) -> bool:
        return bool(self.config.prioritize_verb)

    @property
    def is_binder(self) -> bool:
        return bool(self.config.bind_verb)

    @property
    def supports_preemption(self) -> bool:
        return bool(self.config.preempt_verb)

    def is_interested(self, pod: PodInfo) -> bool:
        if not self.managed:
            return True
        spec = pod.pod.spec
        for container in (*spec.containers, *spec.init_containers):
            res = container.resources
            if any(name in self.managed for name in (*res.requests, *res.limits)):
                return True
        return False

    # ---- the verbs -----------------------------------------------------------------

    def _call(self, verb: str, args: object, kind: type[T]) -> T:
        body = self.transport.send(verb, encode_wire(args))
        return self._decode(verb, body, kind)

    def _decode(self, verb: str, body: bytes, kind: type[T]) -> T:
        try:
            return decode_wire(body, kind)
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            raise ExtenderError(f"{verb}: unreadable answer: {err}") from None

    def _args(self, pod: PodInfo, nodes: Sequence[str], node_of: NodeLookup) -> ExtenderArgs:
        if self.config.node_cache_capable:
            return ExtenderArgs(pod=_pod_json(pod), node_names=list(nodes))
        found = (node_of(name) for name in nodes)
        items = [_node_json(n) for n in found if n is not None]
        return ExtenderArgs(pod=_pod_json(pod), nodes=NodeList(items=items))

    def filter(
        self, pod: PodInfo, nodes: Sequence[str], node_of: NodeLookup
    ) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """(passing node names, failed, failed-and-unresolvable) as kube's Filter."""
        verb = self.config.filter_verb
        result = self._call(verb, self._args(pod, nodes, node_of), ExtenderFilterResult)
        if result.error:
            raise ExtenderError(f"{verb}: {result.error}")
        given = set(nodes)
        if self.config.node_cache_capable and result.node_names is not None:
            passed = list(result.node_names)
        elif result.nodes is not None:
            passed = [_node_name(item) for item in result.nodes.items or []]
        else:
            passed = []
        for name in passed:
            if name not in given:
                raise ExtenderError(
                    f"{verb}: claims a filtered node {name!r} which is not found in the input "
                    "node list"
                )
        failed = dict(result.failed_nodes or {})
        return passed, failed, dict(result.failed_and_unresolvable_nodes or {})

    def prioritize(
        self, pod: PodInfo, nodes: Sequence[str], node_of: NodeLookup
    ) -> list[HostPriority]:
        args = self._args(pod, nodes, node_of)
        return self._call(self.config.prioritize_verb, args, list[HostPriority])

    async def bind(self, pod: PodInfo, node: str) -> None:
        args = ExtenderBindingArgs(
            pod_name=pod.name, pod_namespace=pod.namespace, pod_uid=pod.uid, node=node
        )
        verb = self.config.bind_verb
        body = await self.transport.send_async(verb, encode_wire(args))
        result = self._decode(verb, body, ExtenderBindingResult)
        if result.error:
            raise ExtenderError(f"{verb}: {result.error}")

    def preempt(
        self, pod: PodInfo, victims: Mapping[str, NodeVictims]
    ) -> dict[str, tuple[list[str], int]]:
        """node -> (victim UIDs, PDB violations) the extender accepts."""
        if self.config.node_cache_capable:
            meta: dict[str, MetaVictims | None] = {
                node: MetaVictims(
                    pods=[MetaPod(uid=p.uid) for p in v.pods],
                    num_pdb_violations=v.pdb_violations,
                )
                for node, v in victims.items()
            }
            args = ExtenderPreemptionArgs(pod=_pod_json(pod), node_name_to_meta_victims=meta)
        else:
            full: dict[str, Victims | None] = {
                node: Victims(
                    pods=[_pod_json(p) for p in v.pods], num_pdb_violations=v.pdb_violations
                )
                for node, v in victims.items()
            }
            args = ExtenderPreemptionArgs(pod=_pod_json(pod), node_name_to_victims=full)
        result = self._call(self.config.preempt_verb, args, ExtenderPreemptionResult)
        out: dict[str, tuple[list[str], int]] = {}
        for node, found in (result.node_name_to_meta_victims or {}).items():
            uids = [p.uid for p in (found.pods or [])] if found is not None else []
            out[node] = (uids, found.num_pdb_violations if found is not None else 0)
        return out


def order_extenders(extenders: Iterable[Extender]) -> list[Extender]:
    """kube-scheduler's order: the configured order, ignorable extenders last."""
    items = list(extenders)
    return [e for e in items if not e.ignorable] + [e for e in items if e.ignorable]


def _failure(extender: Extender, verb: str, err: Exception) -> str:
    return (
        f"extender {extender.name} failed to {verb} pod: {err} (it is not ignorable, so "
        "the pod waits until it answers; set `ignorable: true` to schedule without it)"
    )


@dataclass
class FilterOutcome:
    passed: list[str]
    # node -> (reason, unresolvable)
    failed: dict[str, tuple[str, bool]] = field(default_factory=dict)
    error: str = ""  # a non-ignorable extender failed: the cycle fails with this
    filtered: bool = False  # some extender removed nodes


def filter_with_extenders(
    extenders: Sequence[Extender], pod: PodInfo, nodes: Sequence[str], node_of: NodeLookup
) -> FilterOutcome:
    """kube's findNodesThatPassExtenders over `nodes` (those that passed the plugins);
    `node_of` gives the Node objects sent to extenders that are not nodeCacheCapable."""
    current = list(nodes)
    outcome = FilterOutcome(list(current))
    for extender in extenders:
        if not current:
            break
        if not extender.is_filter or not extender.is_interested(pod):
            continue
        try:
            passed, failed, unresolvable = extender.filter(pod, current, node_of)
        except ExtenderError as err:
            if extender.ignorable:
                continue
            outcome.error = _failure(extender, "filter", err)
            return outcome
        for name, message in unresolvable.items():
            outcome.failed[name] = (message, True)
        for name, message in failed.items():
            if name not in unresolvable:
                outcome.failed[name] = (message, False)
        keep = set(passed)
        if len(keep) != len(current):
            outcome.filtered = True
        current = [n for n in current if n in keep]
    outcome.passed = current
    return outcome


def prioritize_with_extenders(
    extenders: Sequence[Extender], pod: PodInfo, nodes: Sequence[str], node_of: NodeLookup
) -> dict[str, int]:
    """Per node name, what the extenders add to the plugins' total score."""
    added: dict[str, int] = {}
    scale = MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY
    for extender in extenders:
        if not extender.is_prioritizer or not extender.is_interested(pod):
            continue
        try:
            scores = extender.prioritize(pod, nodes, node_of)
        except ExtenderError:
            continue  # kube: no score from this extender, the others decide
        weight = extender.config.weight
        for host in scores:
            added[host.host] = added.get(host.host, 0) + host.score * weight * scale
    return added


def binder_extenders(extenders: Sequence[Extender], pod: PodInfo) -> list[Extender]:
    """kube's extendersBinding order: the extenders that bind `pod` instead of the Bind
    plugins, first one first (an ignorable one that fails hands over to the next, and
    after the last to the Bind plugins)."""
    return [e for e in extenders if e.is_binder and e.is_interested(pod)]


@dataclass
class NodeVictims:
    pods: list[PodInfo]
    pdb_violations: int = 0


def preempt_with_extenders(
    extenders: Sequence[Extender],
    pod: PodInfo,
    candidates: Mapping[str, NodeVictims],
) -> tuple[dict[str, NodeVictims], str]:
    """kube's callExtenders: each interested preempting extender narrows the candidate
    nodes and their victims. Returns (what is left, error); an error means preemption
    must not go ahead."""
    current = dict(candidates)
    if not current:
        return current, ""
    for extender in extenders:
        if not extender.supports_preemption or not extender.is_interested(pod):
            continue
        try:
            answer = extender.preempt(pod, current)
        except ExtenderError as err:
            if extender.ignorable:
                continue
            return {}, _failure(extender, "preempt", err)
        narrowed: dict[str, NodeVictims] = {}
        for node, (uids, violations) in answer.items():
            known = current.get(node)
            if known is None:
                if extender.ignorable:
                    continue
                return {}, (
                    f"extender {extender.name} claims to preempt on node {node!r}, which was "
                    "not a candidate"
                )
            by_uid = {p.uid: p for p in known.pods}
            missing = [u for u in uids if u not in by_uid]
            if missing:
                return {}, (
                    f"extender {extender.name} claims to preempt pod (UID: {missing[0]}) on "
                    f"node {node}, but the pod is not found on that node"
                )
            if not uids:
                if extender.ignorable:
                    continue
                return {}, f"expected at least one victim pod on node {node!r}"
            narrowed[node] = NodeVictims([by_uid[u] for u in uids], violations)
        current = narrowed
        if not current:
            break
    return current, ""
