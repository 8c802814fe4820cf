"""Fluent builders for pods and nodes, in the style of kube-scheduler's `st.MakePod()` and
`st.MakeNode()`.

Every method returns the builder, so an object reads as one expression::

    pod = (
        make_pod("web-1")
        .namespace("shop")
        .req(cpu="500m", memory="1Gi")
        .priority(10)
        .labels(app="web")
        .toleration("dedicated", "web", "NoSchedule")
        .obj()
    )
    node = make_node("n1").capacity(cpu="4", memory="8Gi").zone("a").obj()

Resource names that are not Python identifiers go in a mapping passed positionally:
`.req({"nvidia.com/gpu": 1}, cpu="1")` (or `**{"nvidia.com/gpu": 1}`).

`obj()` returns a fresh, independent object each time and validates it exactly as a
manifest would be validated (`shoal.api.manifests.decode`), so a typo such as
`effect="NoSchedul"` raises a `ManifestError` naming the field instead of producing an
object the scheduler would never receive from the API server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import msgspec

from shoal.api.manifests import decode
from shoal.api.objects import (
    Affinity,
    Container,
    ContainerImage,
    ContainerPort,
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    OwnerReference,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodAntiAffinity,
    PreferredSchedulingTerm,
    ResourceRequirements,
    Taint,
    Toleration,
    TopologySpreadConstraint,
    Volume,
    WeightedPodAffinityTerm,
)
from shoal.api.podinfo import PodInfo

__all__ = [
    "DEFAULT_MAX_PODS",
    "HOSTNAME_LABEL",
    "ZONE_LABEL",
    "NodeBuilder",
    "PodBuilder",
    "RequirementLike",
    "label_selector",
    "make_node",
    "make_pod",
    "node_requirement",
]

Quantity = str | int | float
ResourceMap = Mapping[str, Quantity]
LabelMap = Mapping[str, str]
SelectorLike = LabelMap | LabelSelector | None
RequirementLike = NodeSelectorRequirement | tuple[str, str] | tuple[str, str, Sequence[str]]
"""A node selector requirement, or `(key, operator)` / `(key, operator, values)`."""

DEFAULT_MAX_PODS = 110
"""The kubelet's default maxPods; `NodeBuilder.capacity` uses it when `pods` is not given."""
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
HOSTNAME_LABEL = "kubernetes.io/hostname"

NodeOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
TolerationEffect = Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"]
WhenUnsatisfiable = Literal["DoNotSchedule", "ScheduleAnyway"]


def _merge(
    mapping: Mapping[str, Quantity] | None, extra: Mapping[str, Quantity]
) -> dict[str, Quantity]:
    out: dict[str, Quantity] = dict(mapping or {})
    out.update(extra)
    return out


def _labels(mapping: LabelMap | None, extra: Mapping[str, str]) -> dict[str, str]:
    out = dict(mapping or {})
    out.update(extra)
    return out


def node_requirement(
    key: str, operator: NodeOperator | str, values: Iterable[str | int] = ()
) -> NodeSelectorRequirement:
    """A `NodeSelectorRequirement`; Gt/Lt take one integer value."""
    return msgspec.convert(
        {"key": key, "operator": operator, "values": [str(v) for v in values]},
        NodeSelectorRequirement,
    )


def _requirement(req: RequirementLike) -> NodeSelectorRequirement:
    if isinstance(req, NodeSelectorRequirement):
        return req
    if len(req) == 2:
        return node_requirement(req[0], req[1])
    key, operator, values = req
    return node_requirement(key, operator, values)


def label_selector(
    match_labels: LabelMap | None = None,
    *,
    expressions: Iterable[tuple[str, str, Sequence[str]] | tuple[str, str]] = (),
) -> LabelSelector:
    """A `LabelSelector` from matchLabels and `(key, operator[, values])` expressions."""
    reqs = [
        msgspec.convert(
            {"key": e[0], "operator": e[1], "values": list(e[2]) if len(e) == 3 else []},
            LabelSelectorRequirement,
        )
        for e in expressions
    ]
    return LabelSelector(match_labels=dict(match_labels or {}), match_expressions=reqs)


def _selector(selector: SelectorLike) -> LabelSelector | None:
    if selector is None or isinstance(selector, LabelSelector):
        return selector
    return label_selector(selector)


def _copy_valid(obj: msgspec.Struct, cls: type[msgspec.Struct]) -> msgspec.Struct:
    """A deep, validated copy: the object goes through the manifest decoder."""
    return decode(msgspec.to_builtins(obj), cls)


class PodBuilder:
    """Builds a `shoal.api.objects.Pod`. Start with `make_pod(name)`."""

    def __init__(self, name: str = "", namespace: str = "default") -> None:
        self._pod = Pod()
        self._pod.metadata.name = name
        self._pod.metadata.namespace = namespace
        self._term_open = False  # whether node_affinity_* adds to the last required term

    # ---- metadata ------------------------------------------------------------------

    def name(self, name: str) -> PodBuilder:
        self._pod.metadata.name = name
        return self

    def namespace(self, namespace: str) -> PodBuilder:
        self._pod.metadata.namespace = namespace
        return self

    def uid(self, uid: str) -> PodBuilder:
        self._pod.metadata.uid = uid
        return self

    def labels(self, mapping: LabelMap | None = None, /, **labels: str) -> PodBuilder:
        """Add labels (`.labels(app="web")` or `.labels({"app.kubernetes.io/name": "x"})`)."""
        self._pod.metadata.labels = {**self._pod.metadata.labels, **_labels(mapping, labels)}
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        return self.labels({key: value})

    def annotations(self, mapping: LabelMap | None = None, /, **annotations: str) -> PodBuilder:
        meta = self._pod.metadata
        meta.annotations = {**meta.annotations, **_labels(mapping, annotations)}
        return self

    def creation_timestamp(self, timestamp: str) -> PodBuilder:
        self._pod.metadata.creation_timestamp = timestamp
        return self

    def owner(self, kind: str, name: str, uid: str = "", controller: bool = True) -> PodBuilder:
        ref = OwnerReference(kind=kind, name=name, uid=uid, controller=controller)
        self._pod.metadata.owner_references = [*self._pod.metadata.owner_references, ref]
        return self

    def terminating(self, timestamp: str = "1970-01-01T00:00:00Z") -> PodBuilder:
        self._pod.metadata.deletion_timestamp = timestamp
        return self

    # ---- scheduling fields ---------------------------------------------------------

    def scheduler_name(self, name: str) -> PodBuilder:
        self._pod.spec.scheduler_name = name
        return self

    def priority(self, value: int) -> PodBuilder:
        self._pod.spec.priority = value
        return self

    def priority_class(self, name: str) -> PodBuilder:
        self._pod.spec.priority_class_name = name
        return self

    def preemption_policy(self, policy: Literal["PreemptLowerPriority", "Never"]) -> PodBuilder:
        self._pod.spec.preemption_policy = policy
        return self

    def node(self, name: str) -> PodBuilder:
        """Set `spec.nodeName` (a pod already bound, or one that asks for a node)."""
        self._pod.spec.node_name = name
        return self

    def nominated_node(self, name: str) -> PodBuilder:
        self._pod.status.nominated_node_name = name
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._pod.status.phase = phase
        return self

    def scheduling_gates(self, *names: str) -> PodBuilder:
        gates = [*self._pod.spec.scheduling_gates, *({"name": n} for n in names)]
        self._pod.spec.scheduling_gates = gates
        return self

    # ---- containers and resources --------------------------------------------------

    def container(
        self,
        name: str = "",
        *,
        requests: ResourceMap | None = None,
        limits: ResourceMap | None = None,
        image: str = "",
    ) -> PodBuilder:
        """Append an app container with the given requests and limits."""
        self._pod.spec.containers = [
            *self._pod.spec.containers,
            _container(name or f"c{len(self._pod.spec.containers)}", requests, limits, image),
        ]
        return self

    def req(self, mapping: ResourceMap | None = None, /, **resources: Quantity) -> PodBuilder:
        """Append a container requesting these resources (like kube's `Req`; each call is
        one more container, so requests add up)."""
        return self.container(requests=_merge(mapping, resources))

    def lim(self, mapping: ResourceMap | None = None, /, **resources: Quantity) -> PodBuilder:
        """Append a container with only limits (the API server defaults requests to them)."""
        return self.container(limits=_merge(mapping, resources))

    def init_req(self, mapping: ResourceMap | None = None, /, **resources: Quantity) -> PodBuilder:
        """Append an init container requesting these resources (runs before the app)."""
        spec = self._pod.spec
        name = f"init{len(spec.init_containers)}"
        spec.init_containers = [
            *spec.init_containers,
            _container(name, _merge(mapping, resources), None, ""),
        ]
        return self

    def sidecar_req(
        self, mapping: ResourceMap | None = None, /, **resources: Quantity
    ) -> PodBuilder:
        """Append a restartable init container (sidecar, `restartPolicy: Always`)."""
        spec = self._pod.spec
        sidecar = _container(
            f"init{len(spec.init_containers)}", _merge(mapping, resources), None, ""
        )
        sidecar.restart_policy = "Always"
        spec.init_containers = [*spec.init_containers, sidecar]
        return self

    def overhead(self, mapping: ResourceMap | None = None, /, **resources: Quantity) -> PodBuilder:
        self._pod.spec.overhead = {**self._pod.spec.overhead, **_merge(mapping, resources)}
        return self

    def pod_resources(
        self,
        requests: ResourceMap | None = None,
        limits: ResourceMap | None = None,
    ) -> PodBuilder:
        """Pod-level requests and limits (`spec.resources`: cpu, memory, hugepages-*)."""
        self._pod.spec.resources = ResourceRequirements(
            requests=dict(requests or {}), limits=dict(limits or {})
        )
        return self

    def host_port(
        self,
        port: int,
        protocol: Literal["TCP", "UDP", "SCTP"] = "TCP",
        host_ip: str = "",
        container_port: int | None = None,
    ) -> PodBuilder:
        """Expose a host port on the last container (one is added if there is none)."""
        spec = self._pod.spec
        if not spec.containers:
            spec.containers = [Container(name="c0")]
        last = spec.containers[-1]
        last.ports = [
            *last.ports,
            ContainerPort(
                container_port=container_port if container_port is not None else port,
                host_port=port,
                protocol=protocol,
                host_ip=host_ip,
            ),
        ]
        return self

    # ---- node placement constraints ------------------------------------------------

    def node_selector(self, mapping: LabelMap | None = None, /, **labels: str) -> PodBuilder:
        spec = self._pod.spec
        spec.node_selector = {**spec.node_selector, **_labels(mapping, labels)}
        return self

    def toleration(
        self,
        key: str = "",
        value: str | None = None,
        effect: TolerationEffect = "",
        *,
        operator: Literal["Equal", "Exists"] | None = None,
        seconds: int | None = None,
    ) -> PodBuilder:
        """Tolerate a taint. Without a value the operator is Exists; `toleration()` alone
        tolerates every taint."""
        op = operator or ("Exists" if value is None else "Equal")
        tol = Toleration(
            key=key, operator=op, value=value or "", effect=effect, toleration_seconds=seconds
        )
        self._pod.spec.tolerations = [*self._pod.spec.tolerations, tol]
        return self

    def _node_affinity(self) -> NodeAffinity:
        spec = self._pod.spec
        if spec.affinity is None:
            spec.affinity = Affinity()
        if spec.affinity.node_affinity is None:
            spec.affinity.node_affinity = NodeAffinity()
        return spec.affinity.node_affinity

    def _required_terms(self) -> list[NodeSelectorTerm]:
        aff = self._node_affinity()
        if aff.required_during_scheduling_ignored_during_execution is None:
            aff.required_during_scheduling_ignored_during_execution = NodeSelector(
                node_selector_terms=[]
            )
        return aff.required_during_scheduling_ignored_during_execution.node_selector_terms

    def node_affinity_term(
        self, *requirements: RequirementLike, fields: Sequence[RequirementLike] = ()
    ) -> PodBuilder:
        """Add a required NodeSelectorTerm (terms are ORed; requirements in one term ANDed).

        Later `node_affinity_*` calls add their requirement to this new term.
        """
        self._required_terms().append(
            NodeSelectorTerm(
                match_expressions=[_requirement(r) for r in requirements],
                match_fields=[_requirement(r) for r in fields],
            )
        )
        self._term_open = True
        return self

    def node_affinity(
        self,
        key: str,
        operator: NodeOperator,
        values: Iterable[str | int] = (),
        *,
        field: bool = False,
    ) -> PodBuilder:
        """AND a requirement into the current required term (creating the first term).
        `field=True` makes it a matchFields requirement (only `metadata.name` is valid)."""
        terms = self._required_terms()
        if not terms or not self._term_open:
            terms.append(NodeSelectorTerm())
            self._term_open = True
        term = terms[-1]
        req = node_requirement(key, operator, values)
        if field:
            term.match_fields = [*term.match_fields, req]
        else:
            term.match_expressions = [*term.match_expressions, req]
        return self

    def node_affinity_in(self, key: str, values: Iterable[str]) -> PodBuilder:
        return self.node_affinity(key, "In", values)

    def node_affinity_not_in(self, key: str, values: Iterable[str]) -> PodBuilder:
        return self.node_affinity(key, "NotIn", values)

    def node_affinity_exists(self, key: str) -> PodBuilder:
        return self.node_affinity(key, "Exists")

    def node_affinity_does_not_exist(self, key: str) -> PodBuilder:
        return self.node_affinity(key, "DoesNotExist")

    def node_affinity_node_names(self, *names: str) -> PodBuilder:
        """Require `metadata.name In names` (a matchFields requirement)."""
        return self.node_affinity("metadata.name", "In", names, field=True)

    def preferred_node_affinity(
        self,
        weight: int,
        key: str,
        values: Iterable[str | int] = (),
        operator: NodeOperator = "In",
    ) -> PodBuilder:
        """A preferred term with one requirement (weight 1..100)."""
        return self.preferred_node_term(weight, (key, operator, [str(v) for v in values]))

    def preferred_node_term(self, weight: int, *requirements: RequirementLike) -> PodBuilder:
        """A preferred term whose requirements are ANDed."""
        aff = self._node_affinity()
        term = PreferredSchedulingTerm(
            weight=weight,
            preference=NodeSelectorTerm(match_expressions=[_requirement(r) for r in requirements]),
        )
        aff.preferred_during_scheduling_ignored_during_execution = [
            *aff.preferred_during_scheduling_ignored_during_execution,
            term,
        ]
        return self

    # ---- pod (anti-)affinity and spreading -----------------------------------------

    def _pod_term(
        self,
        topology_key: str,
        selector: SelectorLike,
        namespaces: Sequence[str],
        namespace_selector: SelectorLike,
        match_label_keys: Sequence[str],
        mismatch_label_keys: Sequence[str],
    ) -> PodAffinityTerm:
        return PodAffinityTerm(
            topology_key=topology_key,
            label_selector=_selector(selector),
            namespaces=list(namespaces),
            namespace_selector=_selector(namespace_selector),
            match_label_keys=list(match_label_keys),
            mismatch_label_keys=list(mismatch_label_keys),
        )

    def pod_affinity(
        self,
        topology_key: str,
        selector: SelectorLike,
        *,
        weight: int | None = None,
        namespaces: Sequence[str] = (),
        namespace_selector: SelectorLike = None,
        match_label_keys: Sequence[str] = (),
        mismatch_label_keys: Sequence[str] = (),
    ) -> PodBuilder:
        """Pod affinity to pods matching `selector` (a matchLabels mapping or a
        LabelSelector) in the same `topology_key` domain; with `weight` it is preferred."""
        term = self._pod_term(
            topology_key,
            selector,
            namespaces,
            namespace_selector,
            match_label_keys,
            mismatch_label_keys,
        )
        aff = self._affinity()
        if aff.pod_affinity is None:
            aff.pod_affinity = PodAffinity()
        pa = aff.pod_affinity
        if weight is None:
            pa.required_during_scheduling_ignored_during_execution = [
                *pa.required_during_scheduling_ignored_during_execution,
                term,
            ]
        else:
            pa.preferred_during_scheduling_ignored_during_execution = [
                *pa.preferred_during_scheduling_ignored_during_execution,
                WeightedPodAffinityTerm(weight=weight, pod_affinity_term=term),
            ]
        return self

    def pod_anti_affinity(
        self,
        topology_key: str,
        selector: SelectorLike,
        *,
        weight: int | None = None,
        namespaces: Sequence[str] = (),
        namespace_selector: SelectorLike = None,
        match_label_keys: Sequence[str] = (),
        mismatch_label_keys: Sequence[str] = (),
    ) -> PodBuilder:
        """Pod anti-affinity (see `pod_affinity`)."""
        term = self._pod_term(
            topology_key,
            selector,
            namespaces,
            namespace_selector,
            match_label_keys,
            mismatch_label_keys,
        )
        aff = self._affinity()
        if aff.pod_anti_affinity is None:
            aff.pod_anti_affinity = PodAntiAffinity()
        paa = aff.pod_anti_affinity
        if weight is None:
            paa.required_during_scheduling_ignored_during_execution = [
                *paa.required_during_scheduling_ignored_during_execution,
                term,
            ]
        else:
            paa.preferred_during_scheduling_ignored_during_execution = [
                *paa.preferred_during_scheduling_ignored_during_execution,
                WeightedPodAffinityTerm(weight=weight, pod_affinity_term=term),
            ]
        return self

    def pod_affinity_in(
        self, key: str, values: Sequence[str], topology_key: str, *, weight: int | None = None
    ) -> PodBuilder:
        """Affinity to pods whose label `key` is in `values` (kube's `PodAffinityIn`)."""
        selector = label_selector(expressions=[(key, "In", values)])
        return self.pod_affinity(topology_key, selector, weight=weight)

    def pod_affinity_exists(
        self, key: str, topology_key: str, *, weight: int | None = None
    ) -> PodBuilder:
        selector = label_selector(expressions=[(key, "Exists")])
        return self.pod_affinity(topology_key, selector, weight=weight)

    def pod_anti_affinity_in(
        self, key: str, values: Sequence[str], topology_key: str, *, weight: int | None = None
    ) -> PodBuilder:
        selector = label_selector(expressions=[(key, "In", values)])
        return self.pod_anti_affinity(topology_key, selector, weight=weight)

    def pod_anti_affinity_exists(
        self, key: str, topology_key: str, *, weight: int | None = None
    ) -> PodBuilder:
        selector = label_selector(expressions=[(key, "Exists")])
        return self.pod_anti_affinity(topology_key, selector, weight=weight)

    def _affinity(self) -> Affinity:
        if self._pod.spec.affinity is None:
            self._pod.spec.affinity = Affinity()
        return self._pod.spec.affinity

    def spread(
        self,
        max_skew: int,
        topology_key: str,
        when_unsatisfiable: WhenUnsatisfiable = "DoNotSchedule",
        selector: SelectorLike = None,
        *,
        min_domains: int | None = None,
        node_affinity_policy: Literal["Honor", "Ignore"] = "Honor",
        node_taints_policy: Literal["Honor", "Ignore"] = "Ignore",
        match_label_keys: Sequence[str] = (),
    ) -> PodBuilder:
        """A topologySpreadConstraint (kube's `SpreadConstraint`)."""
        constraint = TopologySpreadConstraint(
            max_skew=max_skew,
            topology_key=topology_key,
            when_unsatisfiable=when_unsatisfiable,
            label_selector=_selector(selector),
            min_domains=min_domains,
            node_affinity_policy=node_affinity_policy,
            node_taints_policy=node_taints_policy,
            match_label_keys=list(match_label_keys),
        )
        spec = self._pod.spec
        spec.topology_spread_constraints = [*spec.topology_spread_constraints, constraint]
        return self

    def pvc(self, claim: str, volume: str = "") -> PodBuilder:
        """A volume using the PersistentVolumeClaim `claim` (volume named after it)."""
        return self.volume({"name": volume or claim, "persistentVolumeClaim": {"claimName": claim}})

    def ephemeral_volume(
        self, volume: str, storage_class: str = "", size: str = "1Gi"
    ) -> PodBuilder:
        """A generic ephemeral volume (its claim is `<pod>-<volume>`)."""
        spec: dict[str, object] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        }
        if storage_class:
            spec["storageClassName"] = storage_class
        return self.volume({"name": volume, "ephemeral": {"volumeClaimTemplate": {"spec": spec}}})

    def volume(self, manifest: Mapping[str, object]) -> PodBuilder:
        """A pod volume from its manifest (e.g. `{"name": "tmp", "emptyDir": {}}`)."""
        decoded = msgspec.convert(dict(manifest), Volume)
        self._pod.spec.volumes = [*self._pod.spec.volumes, decoded]
        return self

    # ---- results -------------------------------------------------------------------

    def obj(self) -> Pod:
        """A new, validated Pod (independent of the builder and of earlier results)."""
        pod = _copy_valid(self._pod, Pod)
        assert isinstance(pod, Pod)
        return pod

    def info(self, timestamp: float = 0.0) -> PodInfo:
        """The pod as the scheduler sees it (requests, ports and tolerations derived)."""
        return PodInfo(self.obj(), timestamp)


class NodeBuilder:
    """Builds a `shoal.api.objects.Node`. Start with `make_node(name)`."""

    def __init__(self, name: str) -> None:
        self._node = Node()
        self._node.metadata.name = name

    def name(self, name: str) -> NodeBuilder:
        self._node.metadata.name = name
        return self

    def labels(self, mapping: LabelMap | None = None, /, **labels: str) -> NodeBuilder:
        meta = self._node.metadata
        meta.labels = {**meta.labels, **_labels(mapping, labels)}
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        return self.labels({key: value})

    def annotation(self, key: str, value: str) -> NodeBuilder:
        """Set one annotation (device plugins register devices in node annotations)."""
        self._node.metadata.annotations = {**self._node.metadata.annotations, key: value}
        return self

    def zone(self, zone: str) -> NodeBuilder:
        """Label `topology.kubernetes.io/zone`."""
        return self.label(ZONE_LABEL, zone)

    def region(self, region: str) -> NodeBuilder:
        """Label `topology.kubernetes.io/region`."""
        return self.label(REGION_LABEL, region)

    def hostname_label(self) -> NodeBuilder:
        """Label `kubernetes.io/hostname` with the node's name, as the kubelet does."""
        return self.label(HOSTNAME_LABEL, self._node.metadata.name)

    def capacity(
        self,
        mapping: ResourceMap | None = None,
        /,
        **resources: Quantity,
    ) -> NodeBuilder:
        """Set capacity and allocatable (like kube's `Capacity`).

        `pods` defaults to `DEFAULT_MAX_PODS` (110) when not given; pass `pods=0` for a
        node that accepts no pods.
        """
        merged = _merge(mapping, resources)
        merged.setdefault("pods", DEFAULT_MAX_PODS)
        self._node.status.capacity = dict(merged)
        self._node.status.allocatable = dict(merged)
        return self

    def allocatable(
        self, mapping: ResourceMap | None = None, /, **resources: Quantity
    ) -> NodeBuilder:
        """Set allocatable only (what the scheduler fits pods against)."""
        self._node.status.allocatable = _merge(mapping, resources)
        return self

    def taint(self, key: str, value: str = "", effect: TaintEffect = "NoSchedule") -> NodeBuilder:
        spec = self._node.spec
        spec.taints = [*spec.taints, Taint(key=key, value=value, effect=effect)]
        return self

    def image(self, *names: str, size_bytes: int) -> NodeBuilder:
        """List an image the node holds (`status.images`, as the kubelet reports it)."""
        status = self._node.status
        status.images = [*status.images, ContainerImage(names=list(names), size_bytes=size_bytes)]
        return self

    def declares(self, *features: str) -> NodeBuilder:
        """Declare node features (`status.declaredFeatures`, as a 1.36 kubelet does)."""
        status = self._node.status
        status.declared_features = tuple(sorted({*status.declared_features, *features}))
        return self

    def unschedulable(self, cordoned: bool = True) -> NodeBuilder:
        """Cordon the node (`spec.unschedulable`)."""
        self._node.spec.unschedulable = cordoned
        return self

    def obj(self) -> Node:
        """A new, validated Node (independent of the builder and of earlier results)."""
        node = _copy_valid(self._node, Node)
        assert isinstance(node, Node)
        return node


def _container(
    name: str, requests: ResourceMap | None, limits: ResourceMap | None, image: str
) -> Container:
    return Container(
        name=name,
        image=image,
        resources=ResourceRequirements(requests=dict(requests or {}), limits=dict(limits or {})),
    )


def make_pod(name: str = "", namespace: str = "default") -> PodBuilder:
    """Start building a pod (namespace "default" unless given)."""
    return PodBuilder(name, namespace)


def make_node(name: str) -> NodeBuilder:
    """Start building a node."""
    return NodeBuilder(name)
