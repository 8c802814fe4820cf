"""Read a simulation's inputs: the cluster and the workload, from files or the bundled example.

Files are YAML (multi-document), JSON or JSON Lines, or directories of them; `kind: List`
is flattened. Cluster and workload files are read the same way, in the order given:

* `Node`: present from the start; `PriorityClass` and `PodGroup` (scheduler-plugins
  `scheduling.x-k8s.io`, or Volcano `scheduling.volcano.sh`): known from the start;
* `HyperNode` (Volcano's `topology.volcano.sh`): the network tiers gangs are kept in,
  known from the start (a malformed one is a warning of the run, naming the field);
* `Topology` (Kueue's `kueue.x-k8s.io`, any version): the levels a Kueue preferred
  topology level climbs, known from the start (a malformed one is a warning of the run,
  naming the field);
* `PersistentVolumeClaim`, `PersistentVolume`, `StorageClass`, `CSINode`, `CSIDriver`,
  `CSIStorageCapacity`: known from the start (for the volume plugins, see
  docs/volumes.md);
* `DeviceClass`, `ResourceSlice`, `ResourceClaim`, `ResourceClaimTemplate`,
  `DeviceTaintRule` (resource.k8s.io): known from the start (Dynamic Resource Allocation, see
  docs/dra.md); a pod naming a template gets its claim when it arrives, as the
  resource-claim controller would make it;
* `Pod`: arrives at its `sim.shoal.dev/arrival` annotation (a pod with `spec.nodeName` is
  already bound when it arrives);
* `Workload` (sim.shoal.dev/v1alpha1): generated pods and node events;
* `Namespace`: its labels (for QueueBindings' `namespaceSelector`);
* `ClusterSnapshot` (sim.shoal.dev/v1alpha1, written by `shoal snapshot`): the other
  documents of its file are a live cluster's current state (see below).

A pod whose `status.phase` is Succeeded or Failed (as in any dump of a live cluster) is
reported finished from the start and holds nothing. Objects of a cluster's state (a
snapshot file, or the documents `shoal simulate --from-cluster` reads) may be replaced
by an object of the same kind and name from the other inputs (a proposed Queue replaces
the live one); pods are not replaced (a second pod of the name is refused as usual).

Anything malformed is reported and skipped; the rest of the scenario still runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.resources
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.api.dra import (
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from shoal.api.errors import ManifestError
from shoal.api.hypernode import HyperNode, Topology
from shoal.api.manifests import (
    READ_ERRORS,
    ListItemsError,
    api_version_problem,
    decode,
    iter_documents,
    kind_class,
    why_unreadable,
)
from shoal.api.objects import Node, ObjectMeta, Pod, PriorityClass, dns_name_problem
from shoal.api.podgroup import PodGroup, UpstreamPodGroup, VolcanoPodGroup
from shoal.api.queue import ElasticQuota, NodePool, PodDisruptionBudget, Queue, QueueBinding
from shoal.api.strict_yaml import DuplicateKey
from shoal.api.validation import labels_problem, node_problem, pod_problem
from shoal.api.volumes import (
    CSIDriver,
    CSINode,
    CSIStorageCapacity,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
)
from shoal.sim.workload import (
    WORKLOAD_API_VERSION,
    NodeChange,
    PodSource,
    expand_workload,
    pod_source,
)

__all__ = [
    "CLUSTER",
    "EXAMPLE_FILES",
    "FINISHED_PHASES",
    "SNAPSHOT_KIND",
    "ClusterOrigin",
    "Documents",
    "Scenario",
    "bundled_example",
    "load_scenario",
]

SUFFIXES = (".yaml", ".yml", ".json", ".jsonl")
EXAMPLE_FILES = ("cluster.yaml", "workload.yaml")
# The first document `shoal snapshot` writes: the others of its file are a cluster's state.
SNAPSHOT_KIND = "ClusterSnapshot"
CLUSTER = "cluster"  # PodSource.origin of a pod read from a cluster's state
FINISHED_PHASES = ("Succeeded", "Failed")
# Created by every API server (its bootstrap); pods of kube-system name them, and a dump
# of nodes and pods does not carry them.
SYSTEM_PRIORITY_CLASSES = {
    "system-node-critical": 2000001000,
    "system-cluster-critical": 2000000000,
}

Documents = tuple[str, Sequence[Mapping[str, Any]]]
"""(a name for error messages, documents): inputs that are not files (a live cluster)."""


@dataclass
class ClusterOrigin:
    """What of the scenario is a cluster's current state (snapshot files, --from-cluster)."""

    sources: list[str] = field(default_factory=list)  # "snap.yaml (context kind, taken at T)"
    nodes: int = 0  # Nodes read from the cluster's state
    proposed_nodes: int = 0  # Nodes read from the other inputs
    # Objects of the cluster's state that another input replaced: "Queue team (by w.yaml#0)".
    replaced: list[str] = field(default_factory=list)


@dataclass
class Scenario:
    nodes: list[Node] = field(default_factory=list)
    priority_classes: list[PriorityClass] = field(default_factory=list)
    pod_groups: list[PodGroup | VolcanoPodGroup | UpstreamPodGroup] = field(default_factory=list)
    hypernodes: list[HyperNode] = field(default_factory=list)  # Volcano's network topology
    kueue_topologies: list[Topology] = field(default_factory=list)  # Kueue's levels
    # Tenant capacity objects (applied together; an invalid set is reported whole).
    queues: list[Queue] = field(default_factory=list)
    elastic_quotas: list[ElasticQuota] = field(default_factory=list)
    queue_bindings: list[QueueBinding] = field(default_factory=list)
    node_pools: list[NodePool] = field(default_factory=list)
    disruption_budgets: list[PodDisruptionBudget] = field(default_factory=list)
    storage: list[
        PersistentVolumeClaim
        | PersistentVolume
        | StorageClass
        | CSINode
        | CSIDriver
        | CSIStorageCapacity
    ] = field(default_factory=list)
    dra: list[
        DeviceClass | ResourceSlice | ResourceClaim | ResourceClaimTemplate | DeviceTaintRule
    ] = field(default_factory=list)
    pods: list[PodSource] = field(default_factory=list)
    node_changes: list[NodeChange] = field(default_factory=list)
    errors: list[ManifestError] = field(default_factory=list)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> labels
    cluster: ClusterOrigin = field(default_factory=ClusterOrigin)

    def pods_from_cluster(self) -> list[PodSource]:
        return [p for p in self.pods if p.origin == CLUSTER]

    def origin_counts(self) -> dict[str, int]:
        """Pods of the cluster's state at t=0: bound, pending, finished; and the rest."""
        counts = {"bound": 0, "pending": 0, "finished": 0}
        for source in self.pods_from_cluster():
            pod = source.pod
            if pod is not None and pod.status.phase in FINISHED_PHASES:
                counts["finished"] += 1
            elif pod is not None and pod.spec.node_name:
                counts["bound"] += 1
            else:
                counts["pending"] += 1
        cluster_pods = sum(counts.values())
        return {
            "nodes": self.cluster.nodes,
            "pods": cluster_pods,
            **counts,
            "proposedNodes": self.cluster.proposed_nodes,
            "proposedPods": len(self.pods) - cluster_pods,
        }


_CAPACITY_KINDS: dict[type, str] = {
    Queue: "queues",
    ElasticQuota: "elastic_quotas",
    QueueBinding: "queue_bindings",
    NodePool: "node_pools",
    PodDisruptionBudget: "disruption_budgets",
}


_STORAGE_KINDS = (
    PersistentVolumeClaim,
    PersistentVolume,
    StorageClass,
    CSINode,
    CSIDriver,
    CSIStorageCapacity,
)
_DRA_KINDS = (DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate, DeviceTaintRule)


def load_scenario(
    paths: Iterable[Path], seed: int = 0, *, documents: Sequence[Documents] = ()
) -> Scenario:
    """Read every file (or directory) in order; the seed drives generated workloads.

    `documents` are read first, as files would be: (name, documents) pairs, e.g. a live
    cluster's objects with a `ClusterSnapshot` document in front (`shoal snapshot`)."""
    scenario = Scenario()
    pod_keys: set[str] = set()
    # (kind, namespace/name) -> (where the first object of that name was, whether it is
    # of a cluster's state): a second one is refused naming both (the API server would
    # refuse to create it), unless it replaces the cluster's (a proposed change).
    first_seen: dict[tuple[str, str], tuple[str, bool]] = {}
    default_class = ""  # where the globalDefault PriorityClass is, if any

    def unique(obj: Any, where: str, live: bool) -> bool:
        """True: `obj` replaces an object of the cluster's state (the caller drops it)."""
        meta = obj.metadata
        kind = type(obj).__name__
        _check_name(kind, meta, where)
        key = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
        first, first_live = first_seen.setdefault((kind, key), (where, live))
        if first == where:
            return False
        if first_live and not live:
            first_seen[(kind, key)] = (where, live)
            scenario.cluster.replaced.append(f"{_KIND_NAMES.get(kind, kind)} {key} (by {where})")
            return True
        if kind == "Node":
            why = "duplicate node name; rename one"
        else:
            why = f"duplicate of {first}; rename one (skipped)"
        raise ManifestError(_KIND_NAMES.get(kind, kind), key, "metadata.name", why, where)

    for where, doc, live in _documents(paths, documents, scenario):
        kind = doc.get("kind")
        cls = kind_class(doc)
        try:
            if why := api_version_problem(doc):
                raise ManifestError(
                    str(kind), _doc_name(doc), "apiVersion", f"{why} (skipped)", where
                )
            if cls in _CAPACITY_KINDS:
                # Objects written by hand for a schema Shoal knows: a spec typo is an
                # error. Core kinds (a PodDisruptionBudget in a kubectl dump) and a live
                # cluster's state keep fields Shoal does not model.
                strict = not live and cls is not PodDisruptionBudget
                obj = decode(doc, cls, where, strict_spec=strict)
                items = getattr(scenario, _CAPACITY_KINDS[cls])
                if unique(obj, where, live):
                    _drop(items, obj)
                items.append(obj)
            elif cls is PodGroup or cls is VolcanoPodGroup or cls is UpstreamPodGroup:
                group = decode(doc, cls, where, strict_spec=not live)
                assert isinstance(group, PodGroup | VolcanoPodGroup | UpstreamPodGroup)
                if unique(group, where, live):
                    _drop(scenario.pod_groups, group)
                scenario.pod_groups.append(group)
            elif cls is HyperNode:
                hypernode = decode(doc, HyperNode, where)
                if unique(hypernode, where, live):
                    _drop(scenario.hypernodes, hypernode)
                scenario.hypernodes.append(hypernode)
            elif cls is Topology:
                topology = decode(doc, Topology, where)
                if unique(topology, where, live):
                    _drop(scenario.kueue_topologies, topology)
                scenario.kueue_topologies.append(topology)
            elif cls is Node:
                node = decode(doc, Node, where)
                if not node.metadata.name:
                    raise ManifestError("Node", "", "metadata.name", "a node needs a name", where)
                if not live and (found := node_problem(node)):
                    raise ManifestError(
                        "Node", node.metadata.name, found[0], f"{found[1]} (skipped)", where
                    )
                if unique(node, where, live):
                    _drop(scenario.nodes, node)
                scenario.nodes.append(node)
                if live:
                    scenario.cluster.nodes += 1
                else:
                    scenario.cluster.proposed_nodes += 1
            elif cls in _STORAGE_KINDS:
                scenario.storage.append(decode(doc, cls, where))  # type: ignore[arg-type]
            elif cls in _DRA_KINDS:
                scenario.dra.append(decode(doc, cls, where))  # type: ignore[arg-type]
            elif cls is PriorityClass:
                pc = decode(doc, PriorityClass, where)
                _check_name("PriorityClass", pc.metadata, where)
                name = pc.metadata.name
                if name.startswith("system-") and SYSTEM_PRIORITY_CLASSES.get(name) != pc.value:
                    # The API server keeps the prefix for its own two classes.
                    raise ManifestError(
                        "PriorityClass",
                        name,
                        "metadata.name",
                        "priority class names with 'system-' prefix are reserved for system "
                        "use only (the API server's own are system-node-critical and "
                        "system-cluster-critical, with their values); rename it (skipped)",
                        where,
                    )
                if unique(pc, where, live):
                    old = _drop(scenario.priority_classes, pc)
                    if isinstance(old, PriorityClass) and old.global_default:
                        default_class = ""
                if pc.global_default:
                    if default_class:
                        raise ManifestError(
                            "PriorityClass",
                            pc.metadata.name,
                            "globalDefault",
                            f"a second global default (the first is {default_class}); the "
                            "API server allows one (skipped)",
                            where,
                        )
                    default_class = where
                scenario.priority_classes.append(pc)
            elif cls is Pod:
                source = pod_source(doc, where)
                if live:
                    source = dataclasses.replace(source, origin=CLUSTER)
                _add_pods(scenario, pod_keys, [source], where)
            elif kind == "Workload":
                pods, changes, errors = expand_workload(doc, where, seed)
                scenario.errors.extend(errors)
                _add_pods(scenario, pod_keys, pods, where)
                scenario.node_changes.extend(changes)
            elif kind == "Namespace":
                namespace = _namespace(doc, where)
                unique(namespace, where, live)  # a second one replaces only a live one
                scenario.namespaces[namespace.metadata.name] = namespace.labels
            elif kind == SNAPSHOT_KIND:
                scenario.cluster.sources.append(_snapshot_source(doc, where))
            else:
                raise ManifestError(
                    str(kind or "object"),
                    _doc_name(doc),
                    "kind",
                    "not simulated (the simulator reads Node, PriorityClass, PodGroup, "
                    "HyperNode, Topology, Queue, QueueBinding, NodePool, ElasticQuota, "
                    "PodDisruptionBudget, Namespace, Pod and Workload); skipped — describe "
                    "replicated pods with a Workload",
                    where,
                )
        except ManifestError as err:
            scenario.errors.append(err)
    _refuse_unknown_priority_classes(scenario)
    return scenario


_KIND_NAMES = {"VolcanoPodGroup": "PodGroup", "UpstreamPodGroup": "PodGroup"}


def _doc_name(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""


def _drop(items: list[Any], obj: Any) -> Any:
    """Remove (and return) the object of `items` with obj's namespace and name."""
    meta = obj.metadata
    for i, old in enumerate(items):
        if (old.metadata.namespace, old.metadata.name) == (meta.namespace, meta.name):
            return items.pop(i)
    return None


@dataclass
class Namespace:
    """What the simulator reads of a Namespace: its labels (QueueBindings select by
    them)."""

    metadata: ObjectMeta
    labels: dict[str, str]


def _namespace(doc: Mapping[str, Any], where: str) -> Namespace:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ManifestError("Namespace", "", "metadata.name", "a Namespace needs a name", where)
    if why := dns_name_problem(name, label=True):
        raise ManifestError("Namespace", name, "metadata.name", f"{why} (skipped)", where)
    labels = meta.get("labels") or {} if isinstance(meta, Mapping) else {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise ManifestError(
            "Namespace", name, "metadata.labels", "expected a map of strings (skipped)", where
        )
    if found := labels_problem(labels, "metadata.labels"):
        raise ManifestError("Namespace", name, found[0], f"{found[1]} (skipped)", where)
    return Namespace(ObjectMeta(name=name), dict(labels))


def _snapshot_source(doc: Mapping[str, Any], where: str) -> str:
    """How a ClusterSnapshot document names its cluster: `file (context C, taken at T)`."""
    if doc.get("apiVersion") != WORKLOAD_API_VERSION:
        raise ManifestError(
            SNAPSHOT_KIND,
            "",
            "apiVersion",
            f"{doc.get('apiVersion')!r} is not supported; use {WORKLOAD_API_VERSION}",
            where,
        )
    spec = doc.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    parts = [
        f"{label} {spec[key]}"
        for key, label in (("context", "context"), ("server", "server"), ("takenAt", "taken at"))
        if spec.get(key)
    ]
    name = where.rpartition("#")[0] or where
    return f"{name} ({', '.join(parts)})" if parts else name


def _refuse_unknown_priority_classes(scenario: Scenario) -> None:
    """A pod naming a PriorityClass the scenario does not declare is refused, as the API
    server's Priority admission plugin refuses to create it (it would otherwise run at
    priority 0 without a word). The two system classes every API server has are known
    without being declared (a dump of nodes and pods does not carry them)."""
    declared = {pc.metadata.name for pc in scenario.priority_classes}
    kept: list[PodSource] = []
    for source in scenario.pods:
        name = _spec_field(source, "priorityClassName", "priority_class_name")
        if name in SYSTEM_PRIORITY_CLASSES and name not in declared:
            value = SYSTEM_PRIORITY_CLASSES[name]
            scenario.priority_classes.append(
                PriorityClass(metadata=ObjectMeta(name=name), value=value)
            )
            declared.add(name)
        if name and name not in declared:
            scenario.errors.append(
                ManifestError(
                    "Pod",
                    source.key,
                    "spec.priorityClassName",
                    f"no PriorityClass {name!r} in the scenario (the API server refuses such a "
                    "pod); declare it in the cluster files (skipped)",
                )
            )
            continue
        if source.origin != CLUSTER and (why := _given_priority_problem(scenario, source, name)):
            scenario.errors.append(ManifestError("Pod", source.key, "spec.priority", why))
            continue
        kept.append(source)
    scenario.pods = kept


def _given_priority_problem(scenario: Scenario, source: PodSource, class_name: str) -> str:
    """The Priority admission plugin computes a pod's priority from its PriorityClass
    (the global default's, else 0, without one) and refuses a pod whose spec gives
    another value. Pods of a cluster's state were admitted already."""
    if source.pod is not None:
        given: object = source.pod.spec.priority
    else:
        spec = (source.template or {}).get("spec")
        given = spec.get("priority") if isinstance(spec, Mapping) else None
    if given is None:
        return ""
    classes = scenario.priority_classes
    if class_name:
        chosen = next((pc for pc in classes if pc.metadata.name == class_name), None)
    else:
        chosen = next((pc for pc in classes if pc.global_default), None)
    computed = chosen.value if chosen is not None else 0
    if given == computed:
        return ""
    origin = f"PriorityClass {chosen.metadata.name}" if chosen is not None else "no PriorityClass"
    return (
        f"the integer value of priority ({given}) must not be provided in pod spec; priority "
        f"admission controller computed {computed} from {origin}: set priorityClassName to "
        "a PriorityClass with that value instead (skipped)"
    )


def _spec_field(source: PodSource, key: str, attribute: str) -> str:
    """A string field of the pod's spec, from the decoded pod (`attribute`) or else from
    the template's spec (`key`); "" when absent."""
    if source.pod is not None:
        return str(getattr(source.pod.spec, attribute) or "")
    spec = (source.template or {}).get("spec")
    return str(spec.get(key) or "") if isinstance(spec, Mapping) else ""


def _check_name(kind: str, meta: ObjectMeta, where: str) -> None:
    """Names the API server would refuse (none at all, unicode, zero-width, right-to-left,
    capitals) are refused here too, where files come in: for built-in kinds and custom
    resources alike (the API server holds both to RFC 1123 subdomains)."""
    if not meta.name:
        raise ManifestError(kind, "", "metadata.name", f"a {kind} needs a name (skipped)", where)
    if why := meta.name_problem():
        raise ManifestError(kind, meta.name, "metadata.name", f"{why} (skipped)", where)


def _pod_name_problem(pod: PodSource) -> tuple[str, str]:
    """(field, why) when the API server would refuse the pod: its name, its
    schedulerName, no containers at all, or what `pod_problem` finds (a template's
    first pod was checked when its group was read)."""
    if why := dns_name_problem(pod.name):
        return "metadata.name", why
    scheduler = _spec_field(pod, "schedulerName", "scheduler_name")
    if scheduler and (why := dns_name_problem(scheduler)):
        return "spec.schedulerName", why
    if pod.pod is not None:
        containers: object = pod.pod.spec.containers
    else:
        spec = (pod.template or {}).get("spec")
        containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if not containers:
        return "spec.containers", "a pod needs at least one container (Required value)"
    if pod.pod is not None and (found := pod_problem(pod.pod)):
        return found
    return "", ""


def _add_pods(scenario: Scenario, keys: set[str], pods: Iterable[PodSource], where: str) -> None:
    for pod in pods:
        field_name, why = _pod_name_problem(pod)
        if why:
            scenario.errors.append(
                ManifestError("Pod", pod.key, field_name, f"{why} (skipped)", where)
            )
            continue
        for field_name, value in (("metadata.name", pod.key), ("metadata.uid", pod.uid)):
            if value in keys:
                scenario.errors.append(
                    ManifestError(
                        "Pod",
                        pod.key,
                        field_name,
                        f"duplicate {field_name.split('.')[1]} {value!r}; rename one (skipped)",
                        where,
                    )
                )
                break
        else:
            keys.update((pod.key, pod.uid))
            scenario.pods.append(pod)


def _documents(
    paths: Iterable[Path], named: Sequence[Documents], scenario: Scenario
) -> Iterator[tuple[str, Mapping[str, Any], bool]]:
    """(where, document, of a cluster's state) for the named documents, then the files'.
    A file (or set of documents) with a ClusterSnapshot document is a cluster's state."""
    errors = scenario.errors
    sets: Iterable[tuple[str, Sequence[Any]]] = named
    for name, documents in itertools.chain(sets, _read(paths, errors)):
        live = any(isinstance(d, Mapping) and d.get("kind") == SNAPSHOT_KIND for d in documents)
        for index, doc in enumerate(documents):
            where = f"{name}#{index}"
            if isinstance(doc, (DuplicateKey, ListItemsError)):
                errors.append(ManifestError("document", "", "", str(doc), where))
                continue
            if not isinstance(doc, Mapping):
                errors.append(
                    ManifestError("document", "", "", "expected a mapping (an object)", where)
                )
                continue
            yield where, doc, live


def _read(paths: Iterable[Path], errors: list[ManifestError]) -> Iterator[tuple[str, list[Any]]]:
    for path in _expand(paths, errors):
        try:
            yield str(path), list(iter_documents(path))
        except READ_ERRORS as err:
            errors.append(ManifestError("file", str(path), "", why_unreadable(err)))


def _expand(paths: Iterable[Path], errors: list[ManifestError]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            for child in sorted(path.iterdir()):
                if child.suffix in SUFFIXES:
                    yield child
        elif path.exists():
            yield path
        else:
            errors.append(ManifestError("file", str(path), "", "does not exist"))


@contextlib.contextmanager
def bundled_example() -> Iterator[Sequence[Path]]:
    """Paths of the bundled example (cluster first, then workload), as real files."""
    root = importlib.resources.files("shoal.sim") / "examples"
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(importlib.resources.as_file(root / name)) for name in EXAMPLE_FILES
        ]
