"""PodInfo: a pod plus everything the scheduler derives from it once.

Deriving requests, ports and tolerations is done when the pod enters the scheduler, not
in every scheduling cycle. The request rules follow `k8s.io/component-helpers`
`resource.PodRequests` (init containers, restartable sidecars, pod-level resources,
overhead) and the API server's defaulting (a limit with no request becomes the request).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shoal.api.objects import (
    Container,
    NodeSelectorTerm,
    ObjectMeta,
    Pod,
    PodAffinityTerm,
    PodSpec,
    PreferredSchedulingTerm,
    Taint,
    Toleration,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from shoal.api.quantity import QuantityError, check_int64
from shoal.api.resources import (
    CPU,
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    MEMORY,
    ResourceList,
    add_into,
    max_into,
    parse_resource_list,
)

__all__ = ["HostPort", "PodInfo", "controlled_by_pod", "pod_key", "pod_requests", "qos_class"]


@dataclass(frozen=True, slots=True)
class HostPort:
    ip: str
    protocol: str
    port: int

    def conflicts(self, other: HostPort) -> bool:
        """Same port and protocol, and the same address or a wildcard on either side."""
        if self.port != other.port or self.protocol != other.protocol:
            return False
        return self.ip == other.ip or self.ip in ("", "0.0.0.0") or other.ip in ("", "0.0.0.0")


def pod_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _container_requests(container: Container) -> ResourceList:
    requests = parse_resource_list(container.resources.requests)
    for name, amount in parse_resource_list(container.resources.limits).items():
        requests.setdefault(name, amount)
    return requests


def _container_nonzero(container: Container, requests: ResourceList) -> tuple[int, int]:
    cpu = requests.get(CPU, 0) if CPU in requests else DEFAULT_MILLI_CPU_REQUEST
    mem = requests.get(MEMORY, 0) if MEMORY in requests else DEFAULT_MEMORY_REQUEST
    return cpu, mem


# What a container asks (kube's containerSpecRequests and, for in-place resizes,
# containerAllocatedRequests / containerActuatedRequests): its requests, or None.
_Requests = Callable[[Container], ResourceList | None]


def _aggregate(spec: PodSpec, requests_of: _Requests) -> tuple[ResourceList, tuple[int, int]]:
    """kube's aggregateContainerResourcesByFn: the app containers and sidecars add up,
    each regular init container runs beside the sidecars started before it, and the
    pod needs the larger of the two phases; with the scheduler's non-zero (cpu, memory)
    (100m and 200Mi for a container that asks none)."""
    total: ResourceList = {}
    nz_cpu = nz_mem = 0
    for container in spec.containers:
        requests = requests_of(container) or {}
        add_into(total, requests)
        c, m = _container_nonzero(container, requests)
        nz_cpu += c
        nz_mem += m
    init_max: ResourceList = {}
    sidecars: ResourceList = {}
    nz_init = (0, 0)
    nz_sidecars = (0, 0)
    for container in spec.init_containers:
        requests = requests_of(container) or {}
        c, m = _container_nonzero(container, requests)
        if container.restart_policy == "Always":
            # A sidecar keeps running next to the app containers.
            add_into(total, requests)
            add_into(sidecars, requests)
            nz_cpu += c
            nz_mem += m
            nz_sidecars = (nz_sidecars[0] + c, nz_sidecars[1] + m)
            step = dict(sidecars)
            nz_step = nz_sidecars
        else:
            step = dict(requests)
            add_into(step, sidecars)
            nz_step = (c + nz_sidecars[0], m + nz_sidecars[1])
        max_into(init_max, step)
        nz_init = (max(nz_init[0], nz_step[0]), max(nz_init[1], nz_step[1]))
    max_into(total, init_max)
    return total, (max(nz_cpu, nz_init[0]), max(nz_mem, nz_init[1]))


def resize_infeasible(pod: Pod) -> bool:
    """kube's IsPodResizeInfeasible: the PodResizePending condition says Infeasible."""
    for condition in pod.status.conditions:
        if condition.type == "PodResizePending":
            return condition.reason == "Infeasible"
    return False


def _status_resources(pod: Pod) -> dict[str, tuple[ResourceList, ResourceList | None]] | None:
    """Per container name: (allocated, actuated requests) as the kubelet reports them,
    for pods it reported resources for (None otherwise: nearly all pending pods). A
    status the scheduler cannot read is left out (the spec counts), never refused."""
    status = pod.status
    found: dict[str, tuple[ResourceList, ResourceList | None]] = {}
    for cs in (*status.container_statuses, *status.init_container_statuses):
        if not cs.allocated_resources and not (cs.resources and cs.resources.requests):
            continue
        try:
            allocated = parse_resource_list(cs.allocated_resources)
            actuated = (
                parse_resource_list(cs.resources.requests)
                if cs.resources is not None and cs.resources.requests
                else None
            )
        except ValueError:
            continue
        found[cs.name] = (allocated, actuated)
    return found or None


def _pod_status_resources(pod: Pod) -> tuple[ResourceList | None, ResourceList | None]:
    """(allocated, actuated requests) the kubelet reports for the whole pod
    (`status.allocatedResources`, `status.resources.requests`; None where not reported
    or not readable: never refused)."""
    status = pod.status
    allocated: ResourceList | None = None
    actuated: ResourceList | None = None
    try:
        if status.allocated_resources is not None:
            allocated = parse_resource_list(status.allocated_resources)
        if status.resources is not None and status.resources.requests:
            actuated = parse_resource_list(status.resources.requests)
    except ValueError:
        return None, None
    return allocated, actuated


def pod_requests(pod: Pod) -> tuple[ResourceList, tuple[int, int]]:
    """Effective requests and the non-zero (cpu, memory) used by scoring plugins, as
    kube-scheduler computes them (component-helpers' PodRequests with status resources):

    * containers, init containers and sidecars (`_aggregate`);
    * a pod being resized in place counts the most of what its spec asks, what the
      kubelet allocated and what it actuated, per resource (a pod resized down keeps its
      old size until the kubelet has made it so); with the resize Infeasible, only the
      last two (the spec's new size will not be given). The kubelet's pod-level figures
      (`status.allocatedResources` and `status.resources.requests`, both reported) stand
      for the containers' when present, else the containers' statuses count;
    * pod-level requests (cpu, memory, hugepages) replace the containers' sum; while
      such a pod is resized in place (InPlacePodLevelResourcesVerticalScaling), the
      most of its spec, the pod-level resources the kubelet actuated and those it
      allocated, overhead taken off both (the spec's not when Infeasible);
    * overhead comes on top.
    """
    spec = pod.spec
    total, (nz_cpu, nz_mem) = _aggregate(spec, _container_requests)
    pod_allocated, pod_actuated = _pod_status_resources(pod)
    statuses = _status_resources(pod)
    if pod_allocated is not None and pod_actuated is not None:
        # The pod-level maps already add up every container (kube's
        # AggregateContainerRequests with InPlacePodLevelResourcesVerticalScaling).
        if resize_infeasible(pod):
            total, (nz_cpu, nz_mem) = {}, (0, 0)
        for other in (pod_allocated, pod_actuated):
            max_into(total, other)
            nz_cpu = max(nz_cpu, other.get(CPU, 0))
            nz_mem = max(nz_mem, other.get(MEMORY, 0))
    elif statuses is not None:
        infeasible = resize_infeasible(pod)

        def allocated(container: Container) -> ResourceList | None:
            found = statuses.get(container.name)
            if found is not None and found[0]:
                return found[0]
            return None if infeasible else _container_requests(container)

        def actuated(container: Container) -> ResourceList | None:
            found = statuses.get(container.name)
            if found is not None and found[1] is not None:
                return found[1]
            return allocated(container)

        variants = [_aggregate(spec, allocated), _aggregate(spec, actuated)]
        if infeasible:
            total, (nz_cpu, nz_mem) = {}, (0, 0)
        for other, (c, m) in variants:
            max_into(total, other)
            nz_cpu, nz_mem = max(nz_cpu, c), max(nz_mem, m)
    pod_level = _pod_level_requests(spec, total)
    if pod_level and (pod_allocated is not None or pod_actuated is not None):
        pod_level = _pod_level_effective(pod, pod_level, pod_allocated, pod_actuated)
    if pod_level:
        # kube's PodRequests: pod-level requests (cpu, memory, hugepages) replace what
        # the containers add up to, for scheduling and for scoring alike.
        total.update(pod_level)
        nz_cpu = pod_level.get(CPU, nz_cpu)
        nz_mem = pod_level.get(MEMORY, nz_mem)
    overhead = parse_resource_list(spec.overhead)
    add_into(total, overhead)
    nz_cpu += overhead.get(CPU, 0)
    nz_mem += overhead.get(MEMORY, 0)
    return {k: v for k, v in total.items() if v}, (nz_cpu, nz_mem)


def _host_ports(spec: PodSpec) -> tuple[HostPort, ...]:
    """kube's GetHostPorts: the host ports of the containers and of the init containers
    that run as long as the pod (sidecars). With `hostNetwork` a container port is a
    host port (the API server defaults `hostPort` to `containerPort`)."""
    sidecars = [c for c in spec.init_containers if c.restart_policy == "Always"]
    return tuple(
        HostPort(
            p.host_ip, p.protocol, p.host_port or (p.container_port if spec.host_network else 0)
        )
        for c in (*sidecars, *spec.containers)
        for p in c.ports
        if p.host_port > 0 or (spec.host_network and p.container_port > 0)
    )


HUGEPAGES_PREFIX = "hugepages-"


def _pod_level_effective(
    pod: Pod,
    requested: ResourceList,
    allocated: ResourceList | None,
    actuated: ResourceList | None,
) -> ResourceList:
    """kube's effectivePodLevelResources: the most of the pod-level requests and of what
    the kubelet actuated and allocated for the pod (overhead taken off those, as they
    include it), per pod-level resource; the requests do not count when the resize is
    Infeasible."""
    overhead = parse_resource_list(pod.spec.overhead)
    effective: ResourceList = {} if resize_infeasible(pod) else dict(requested)
    for reported in (actuated, allocated):
        if reported is None:
            continue
        less = {name: amount - overhead.get(name, 0) for name, amount in reported.items()}
        max_into(effective, less)
    return {
        name: amount
        for name, amount in effective.items()
        if name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)
    }


def _pod_level_requests(spec: PodSpec, containers: ResourceList) -> ResourceList:
    """The pod-level requests, defaulted as the API server does (`defaultPodRequests`):
    a resource with a pod-level limit and no pod-level request takes what the
    containers request of it, else the limit."""
    level = spec.resources
    if level is None or not (level.requests or level.limits):
        return {}
    requests = parse_resource_list(level.requests)
    for name, limit in parse_resource_list(level.limits).items():
        if name not in requests:
            requests[name] = containers.get(name, limit)
    return requests


def check_pod_totals(pod: Pod) -> None:
    """Each quantity fits in an int64 (checked when parsed); their sum (containers,
    sidecars, overhead) must too, or the pod's request vector would overflow. Run when a
    pod is read from a manifest or the API (`shoal.api.manifests.decode`), not on every
    copy the scheduler makes of it. ValueError names the field."""
    total, _ = pod_requests(pod)
    for name, amount in total.items():
        try:
            check_int64(amount, f"the pod's total {name} request")
        except QuantityError as err:
            raise ValueError(f"spec.containers: {err}") from None


class PodInfo:
    """A pod as the scheduler sees it. Read-only to plugins."""

    __slots__ = (
        "affinity_terms",
        "anti_affinity_terms",
        "attempts",
        "gpu_request",
        "host_ports",
        "initial_attempt_time",
        "key",
        "labels",
        "name",
        "namespace",
        "node_name",
        "nonzero",
        "pod",
        "preferred_affinity_terms",
        "preferred_anti_affinity_terms",
        "preferred_node_terms",
        "priority",
        "requests",
        "required_node_terms",
        "scheduler_name",
        "spread_constraints",
        "table_vector",
        "timestamp",
        "tolerations",
        "uid",
    )

    def __init__(self, pod: Pod, timestamp: float = 0.0, previous: PodInfo | None = None) -> None:
        """`previous`: the same pod's earlier PodInfo; what derives from containers and
        overhead is taken from it when those did not change (a pod's resources are
        immutable in practice: most updates, and every bind, leave them as they were)."""
        meta, spec = pod.metadata, pod.spec
        self.pod = pod
        self.namespace = meta.namespace or "default"
        self.name = meta.name
        self.key = pod_key(self.namespace, self.name)
        self.uid = meta.uid or self.key
        self.labels = meta.labels
        self.scheduler_name = spec.scheduler_name
        self.priority = spec.priority or 0
        self.node_name = spec.node_name
        # The cache's request vector for this pod, memoised by the node table that made
        # it (owner, column count, read-only vector); see NodeTable.pod_vector.
        self.table_vector: tuple[object, int, Any] | None = None
        # The parsed GPU request (or the error parsing it), memoised by
        # shoal.api.gpu.pod_gpu_request: GPU plugins, the device table and queues read it.
        self.gpu_request: object = None
        self.requests: ResourceList
        self.nonzero: tuple[int, int]
        if previous is not None and _same_resources(previous.pod, pod):
            self.requests, self.nonzero = previous.requests, previous.nonzero
            self.table_vector = previous.table_vector
            self.host_ports: tuple[HostPort, ...] = previous.host_ports
        else:
            self.requests, self.nonzero = pod_requests(pod)
            self.host_ports = _host_ports(spec)
        self.tolerations: tuple[Toleration, ...] = tuple(spec.tolerations)
        affinity = spec.affinity
        node_aff = affinity.node_affinity if affinity else None
        required = (
            node_aff.required_during_scheduling_ignored_during_execution if node_aff else None
        )
        self.required_node_terms: tuple[NodeSelectorTerm, ...] | None = (
            tuple(required.node_selector_terms) if required is not None else None
        )
        self.preferred_node_terms: tuple[PreferredSchedulingTerm, ...] = (
            tuple(node_aff.preferred_during_scheduling_ignored_during_execution) if node_aff else ()
        )
        pa = affinity.pod_affinity if affinity else None
        paa = affinity.pod_anti_affinity if affinity else None
        self.affinity_terms: tuple[PodAffinityTerm, ...] = (
            tuple(pa.required_during_scheduling_ignored_during_execution) if pa else ()
        )
        self.preferred_affinity_terms: tuple[WeightedPodAffinityTerm, ...] = (
            tuple(pa.preferred_during_scheduling_ignored_during_execution) if pa else ()
        )
        self.anti_affinity_terms: tuple[PodAffinityTerm, ...] = (
            tuple(paa.required_during_scheduling_ignored_during_execution) if paa else ()
        )
        self.preferred_anti_affinity_terms: tuple[WeightedPodAffinityTerm, ...] = (
            tuple(paa.preferred_during_scheduling_ignored_during_execution) if paa else ()
        )
        self.spread_constraints: tuple[TopologySpreadConstraint, ...] = tuple(
            spec.topology_spread_constraints
        )
        self.timestamp = timestamp
        self.initial_attempt_time: float | None = None
        self.attempts = 0

    @property
    def has_pod_affinity(self) -> bool:
        return bool(
            self.affinity_terms
            or self.anti_affinity_terms
            or self.preferred_affinity_terms
            or self.preferred_anti_affinity_terms
        )

    def tolerates(self, taint: Taint) -> bool:
        return any(t.tolerates(taint) for t in self.tolerations)

    def __repr__(self) -> str:
        return f"PodInfo({self.key})"


def _same_resources(old_pod: Pod, new_pod: Pod) -> bool:
    """Do two versions of a pod ask for the same resources and host ports (identity
    first: a bind's echo shares the containers)? The resources the kubelet reports for
    an in-place resize count too."""
    old, new = old_pod.spec, new_pod.spec
    before, after = old_pod.status, new_pod.status
    return (
        (old.containers is new.containers or old.containers == new.containers)
        and (
            old.init_containers is new.init_containers or old.init_containers == new.init_containers
        )
        and old.overhead == new.overhead
        and old.resources == new.resources
        and before.container_statuses == after.container_statuses
        and before.init_container_statuses == after.init_container_statuses
        and before.allocated_resources == after.allocated_resources
        and before.resources == after.resources
        and resize_infeasible(old_pod) == resize_infeasible(new_pod)
    )


def qos_class(pod: Pod) -> str:
    """Kubernetes QoS class: Guaranteed (cpu and memory limits equal to the requests:
    the pod-level ones when the pod sets them, else every container's), BestEffort (no
    requests or limits at all), else Burstable (kube's ComputePodQOS)."""
    level = pod.spec.resources
    if level is not None and (level.requests or level.limits):
        limits = {k: v for k, v in parse_resource_list(level.limits).items() if v}
        requests = {k: v for k, v in parse_resource_list(level.requests).items() if v}
        requests = {**{k: v for k, v in limits.items() if k not in requests}, **requests}
        requests = {k: v for k, v in requests.items() if k in (CPU, MEMORY)}
        limits = {k: v for k, v in limits.items() if k in (CPU, MEMORY)}
        if not requests and not limits:
            return "BestEffort"
        guaranteed = set(limits) == {CPU, MEMORY} and requests == limits
        return "Guaranteed" if guaranteed else "Burstable"
    containers = [*pod.spec.containers, *pod.spec.init_containers]
    requests_any = False
    guaranteed = bool(containers)
    for c in containers:
        req = parse_resource_list(c.resources.requests)
        lim = parse_resource_list(c.resources.limits)
        if req or lim:
            requests_any = True
        for res in (CPU, MEMORY):
            limit = lim.get(res)
            if not limit or req.get(res, limit) != limit:
                guaranteed = False
    if not requests_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def controlled_by_pod(meta: ObjectMeta, pod: PodInfo) -> bool:
    """Is the object's controller this pod (kube's resourceclaim.IsForPod and
    ephemeral.VolumeIsForPod: a claim made from a template for this very pod)?"""
    for ref in meta.owner_references:
        if ref.controller and ref.kind == "Pod" and ref.name == pod.name:
            return not ref.uid or not pod.uid or ref.uid == pod.uid
    return False
