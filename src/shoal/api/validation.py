"""What the API server's validation would refuse in the fields the scheduler reads, for
objects that did not come from an API server (the simulator's files).

Objects read from a cluster were validated when they were created; files written by
hand were not, and a scheduler that silently takes a label key kube refuses, a resource
name no kubelet could report or two containers of one name would simulate a cluster
that cannot exist. Each check returns (field, why) with kube's words and the fix, or
None; the caller names the object and skips it, as `kubectl apply` would fail on it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from shoal.api.objects import Container, Node, NodeSelectorTerm, Pod

__all__ = [
    "Problem",
    "extended_resource_problem",
    "label_value_problem",
    "labels_problem",
    "node_problem",
    "pod_problem",
    "qualified_name_problem",
]

Problem = tuple[str, str]
"""(field, why)."""

# validation.IsQualifiedName: an optional DNS-subdomain prefix and "/", then a name of
# at most 63 characters, alphanumerics at both ends, '-', '_' or '.' between.
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_RULE = (
    "a name of at most 63 characters: alphanumerics, '-', '_' or '.', starting and ending "
    "with an alphanumeric"
)


def qualified_name_problem(value: str, what: str = "name") -> str:
    """Why kube's IsQualifiedName refuses `value` (a label key, a taint or toleration key,
    a resource name: `what`), or ""."""
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
        return (
            f"{what} {value!r}: the prefix before '/' must be a lowercase DNS subdomain "
            "(RFC 1123, at most 253 characters)"
        )
    if not name or len(name) > 63 or not _NAME.fullmatch(name):
        return f"{what} {value!r} is not valid: {_NAME_RULE}, optionally after 'prefix/'"
    return ""


def label_value_problem(value: str) -> str:
    """Why kube refuses `value` as a label value (empty is allowed), or ""."""
    if value and (len(value) > 63 or not _NAME.fullmatch(value)):
        return f"label value {value!r} is not valid: empty, or {_NAME_RULE}"
    return ""


def labels_problem(labels: Mapping[str, str], at: str) -> Problem | None:
    """The first label whose key or value kube refuses, as (field, why), or None."""
    for key, value in labels.items():
        if why := qualified_name_problem(key, "label key"):
            return f"{at}[{key}]", why
        if why := label_value_problem(value):
            return f"{at}[{key}]", why
    return None


# IsStandardContainerResourceName: what a container may ask for besides extended
# resources.
_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})


def extended_resource_problem(name: str) -> str:
    """Why kube's IsExtendedResourceName refuses `name`, or ""."""
    if "/" not in name or "kubernetes.io/" in name:
        return (
            f"{name!r} is not a standard resource (cpu, memory, ephemeral-storage, "
            "hugepages-<size>) and not an extended resource fully qualified outside the "
            "kubernetes.io domain, e.g. 'example.com/gpu'"
        )
    if name.startswith("requests."):
        return f"{name!r}: an extended resource name must not start with 'requests.'"
    return qualified_name_problem(f"requests.{name}", "extended resource name")


def _container_resource_problem(name: str) -> str:
    if why := qualified_name_problem(name, "resource name"):
        return why
    if name in _CONTAINER_RESOURCES or name.startswith("hugepages-"):
        return ""
    return extended_resource_problem(name)


def _containers(pod: Pod) -> Problem | None:
    spec = pod.spec
    names: set[str] = set()  # unique across init and regular containers
    listed: list[tuple[str, list[Container]]] = [
        ("spec.initContainers", spec.init_containers),
        ("spec.containers", spec.containers),
    ]
    for at, containers in listed:
        ports: dict[tuple[int, str, str], str] = {}  # per list, as kube accumulates them
        for i, container in enumerate(containers):
            here = f"{at}[{i}]"
            if not container.name:
                return f"{here}.name", "a container needs a name (Required value)"
            if container.name in names:
                return (
                    f"{here}.name",
                    f"duplicate container name {container.name!r} (Duplicate value); rename one",
                )
            names.add(container.name)
            resources = container.resources
            for part, values in (("requests", resources.requests), ("limits", resources.limits)):
                for name in values:
                    if why := _container_resource_problem(name):
                        return f"{here}.resources.{part}[{name}]", why
            for j, port in enumerate(container.ports):
                host_port = port.host_port or (port.container_port if spec.host_network else 0)
                if not host_port:
                    continue
                key = (host_port, port.protocol, port.host_ip)
                if key in ports:
                    return (
                        f"{here}.ports[{j}].hostPort",
                        f"host port {host_port}/{port.protocol} is already taken by "
                        f"{ports[key]} (Duplicate value); a pod uses each host port once",
                    )
                ports[key] = f"{here}.ports[{j}]"
    return None


def _node_selector_term(term: NodeSelectorTerm, at: str) -> Problem | None:
    for j, req in enumerate(term.match_expressions):
        if why := qualified_name_problem(req.key, "label key"):
            return f"{at}.matchExpressions[{j}].key", why
    for j, req in enumerate(term.match_fields):
        here = f"{at}.matchFields[{j}]"
        if req.key != "metadata.name":
            return (
                f"{here}.key",
                f"{req.key!r} is not a supported field selector key (only metadata.name)",
            )
        if req.operator in ("In", "NotIn") and len(req.values) != 1:
            return (
                f"{here}.values",
                "must be only one value when `operator` is 'In' or 'NotIn' for node "
                "field selector (Required value); use one term per node name",
            )
    return None


def _scheduling_fields(pod: Pod) -> Problem | None:
    spec = pod.spec
    if found := labels_problem(spec.node_selector, "spec.nodeSelector"):
        return found
    for i, toleration in enumerate(spec.tolerations):
        if toleration.key and (why := qualified_name_problem(toleration.key, "taint key")):
            return f"spec.tolerations[{i}].key", why
    node_affinity = spec.affinity.node_affinity if spec.affinity else None
    if node_affinity is not None:
        at = "spec.affinity.nodeAffinity"
        required = node_affinity.required_during_scheduling_ignored_during_execution
        terms = f"{at}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        for i, term in enumerate(required.node_selector_terms if required else ()):
            if found := _node_selector_term(term, f"{terms}[{i}]"):
                return found
        preferred = node_affinity.preferred_during_scheduling_ignored_during_execution
        for i, weighted in enumerate(preferred):
            term_at = f"{at}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"
            if found := _node_selector_term(weighted.preference, term_at):
                return found
    return None


def pod_problem(pod: Pod) -> Problem | None:
    """The first thing in the pod the API server would refuse, or None."""
    return (
        labels_problem(pod.metadata.labels, "metadata.labels")
        or _containers(pod)
        or _scheduling_fields(pod)
    )


def node_problem(node: Node) -> Problem | None:
    """The first thing in the node the API server would refuse, or None."""
    if found := labels_problem(node.metadata.labels, "metadata.labels"):
        return found
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(node.spec.taints):
        if why := qualified_name_problem(taint.key, "taint key"):
            return f"spec.taints[{i}].key", why
        if why := label_value_problem(taint.value):
            return f"spec.taints[{i}].value", why.replace("label value", "taint value", 1)
        if (taint.key, taint.effect) in seen:
            return (
                f"spec.taints[{i}]",
                f"taints must be unique by key and effect pair ({taint.key}:{taint.effect} "
                "is listed twice)",
            )
        seen.add((taint.key, taint.effect))
    status = node.status
    for part, values in (("capacity", status.capacity), ("allocatable", status.allocatable)):
        for name in values:
            if why := qualified_name_problem(name, "resource name"):
                return f"status.{part}[{name}]", why
    return None
