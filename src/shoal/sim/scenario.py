"""Read a simulation's inputs: the cluster and the workload, from files or the bundled example.

Files are YAML (multi-document), JSON or JSON Lines, or directories of them; `kind: List`
is flattened. Cluster and workload files are read the same way, in the order given:

* `Node`: present from the start; `PriorityClass` and `PodGroup` (scheduler-plugins
  `scheduling.x-k8s.io`, or Volcano `scheduling.volcano.sh`): known from the start;
* `PersistentVolumeClaim`, `PersistentVolume`, `StorageClass`, `CSINode`: known from
  the start (for the volume plugins, see docs/volumes.md);
* `Pod`: arrives at its `sim.shoal.dev/arrival` annotation (a pod with `spec.nodeName` is
  already bound when it arrives);
* `Workload` (sim.shoal.dev/v1alpha1): generated pods and node events.

Anything malformed is reported and skipped; the rest of the scenario still runs.
"""

from __future__ import annotations

import contextlib
import importlib.resources
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.api.errors import ManifestError
from shoal.api.manifests import READ_ERRORS, decode, iter_documents, kind_class, why_unreadable
from shoal.api.objects import Node, ObjectMeta, Pod, PriorityClass, dns_name_problem
from shoal.api.podgroup import PodGroup, UpstreamPodGroup, VolcanoPodGroup
from shoal.api.queue import ElasticQuota, NodePool, PodDisruptionBudget, Queue, QueueBinding
from shoal.api.volumes import CSINode, PersistentVolume, PersistentVolumeClaim, StorageClass
from shoal.sim.workload import NodeChange, PodSource, expand_workload, pod_source

__all__ = [
    "EXAMPLE_FILES",
    "Scenario",
    "bundled_example",
    "load_scenario",
]

SUFFIXES = (".yaml", ".yml", ".json", ".jsonl")
EXAMPLE_FILES = ("cluster.yaml", "workload.yaml")


@dataclass
class Scenario:
    nodes: list[Node] = field(default_factory=list)
    priority_classes: list[PriorityClass] = field(default_factory=list)
    pod_groups: list[PodGroup | VolcanoPodGroup | UpstreamPodGroup] = field(default_factory=list)
    # Tenant capacity objects (applied together; an invalid set is reported whole).
    queues: list[Queue] = field(default_factory=list)
    elastic_quotas: list[ElasticQuota] = field(default_factory=list)
    queue_bindings: list[QueueBinding] = field(default_factory=list)
    node_pools: list[NodePool] = field(default_factory=list)
    disruption_budgets: list[PodDisruptionBudget] = field(default_factory=list)
    storage: list[PersistentVolumeClaim | PersistentVolume | StorageClass | CSINode] = field(
        default_factory=list
    )
    pods: list[PodSource] = field(default_factory=list)
    node_changes: list[NodeChange] = field(default_factory=list)
    errors: list[ManifestError] = field(default_factory=list)


_CAPACITY_KINDS: dict[type, str] = {
    Queue: "queues",
    ElasticQuota: "elastic_quotas",
    QueueBinding: "queue_bindings",
    NodePool: "node_pools",
    PodDisruptionBudget: "disruption_budgets",
}


_STORAGE_KINDS = (PersistentVolumeClaim, PersistentVolume, StorageClass, CSINode)


def load_scenario(paths: Iterable[Path], seed: int = 0) -> Scenario:
    """Read every file (or directory) in order; the seed drives generated workloads."""
    scenario = Scenario()
    node_names: set[str] = set()
    pod_keys: set[str] = set()
    # (kind, namespace/name) -> where the first object of that name was: a second one is
    # refused naming both (the API server would refuse to create it).
    first_seen: dict[tuple[str, str], str] = {}
    default_class = ""  # where the globalDefault PriorityClass is, if any

    def unique(obj: Any, where: str) -> None:
        meta = obj.metadata
        kind = type(obj).__name__
        _check_name(kind, meta, where)
        key = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
        first = first_seen.setdefault((kind, key), where)
        if first != where:
            raise ManifestError(
                kind, key, "metadata.name", f"duplicate of {first}; rename one (skipped)", where
            )

    for where, doc in _documents(paths, scenario.errors):
        kind = doc.get("kind")
        cls = kind_class(doc)
        try:
            if cls in _CAPACITY_KINDS:
                obj = decode(doc, cls, where)
                unique(obj, where)
                getattr(scenario, _CAPACITY_KINDS[cls]).append(obj)
            elif cls is PodGroup or cls is VolcanoPodGroup or cls is UpstreamPodGroup:
                group = decode(doc, cls, where)
                assert isinstance(group, PodGroup | VolcanoPodGroup | UpstreamPodGroup)
                unique(group, where)
                scenario.pod_groups.append(group)
            elif cls is Node:
                node = decode(doc, Node, where)
                name = node.metadata.name
                if not name:
                    raise ManifestError("Node", "", "metadata.name", "a node needs a name", where)
                _check_name("Node", node.metadata, where)
                if name in node_names:
                    raise ManifestError(
                        "Node", name, "metadata.name", "duplicate node name; rename one", where
                    )
                node_names.add(name)
                scenario.nodes.append(node)
            elif cls in _STORAGE_KINDS:
                scenario.storage.append(decode(doc, cls, where))  # type: ignore[arg-type]
            elif cls is PriorityClass:
                pc = decode(doc, PriorityClass, where)
                _check_name("PriorityClass", pc.metadata, where)
                unique(pc, where)
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
                _add_pods(scenario, pod_keys, [pod_source(doc, where)], where)
            elif kind == "Workload":
                pods, changes, errors = expand_workload(doc, where, seed)
                scenario.errors.extend(errors)
                _add_pods(scenario, pod_keys, pods, where)
                scenario.node_changes.extend(changes)
            else:
                meta = doc.get("metadata")
                name = str(meta.get("name", "")) if isinstance(meta, Mapping) else ""
                raise ManifestError(
                    str(kind or "object"),
                    name,
                    "kind",
                    "not simulated (the simulator reads Node, PriorityClass, PodGroup, Queue, "
                    "QueueBinding, NodePool, ElasticQuota, PodDisruptionBudget, Pod and "
                    "Workload); skipped — describe replicated pods with a Workload",
                    where,
                )
        except ManifestError as err:
            scenario.errors.append(err)
    _refuse_unknown_priority_classes(scenario)
    return scenario


def _refuse_unknown_priority_classes(scenario: Scenario) -> None:
    """A pod naming a PriorityClass the scenario does not declare is refused, as the API
    server's Priority admission plugin refuses to create it (it would otherwise run at
    priority 0 without a word)."""
    declared = {pc.metadata.name for pc in scenario.priority_classes}
    kept: list[PodSource] = []
    for source in scenario.pods:
        name = _spec_field(source, "priorityClassName", "priority_class_name")
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
        kept.append(source)
    scenario.pods = kept


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
    schedulerName, or no containers at all."""
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
    paths: Iterable[Path], errors: list[ManifestError]
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for path in _expand(paths, errors):
        try:
            documents = list(iter_documents(path))
        except READ_ERRORS as err:
            errors.append(ManifestError("file", str(path), "", why_unreadable(err)))
            continue
        for index, doc in enumerate(documents):
            where = f"{path}#{index}"
            if not isinstance(doc, Mapping):
                errors.append(
                    ManifestError("document", "", "", "expected a mapping (an object)", where)
                )
                continue
            yield where, doc


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
