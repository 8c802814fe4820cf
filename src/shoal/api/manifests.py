"""Decode manifests (dicts, YAML or JSON files) into typed objects.

Decoding errors carry the object's kind and name and the dotted path of the bad field,
e.g. `Pod default/web-1: field spec.containers[0].resources: requests.cpu: quantity
'-1' must not be negative`. Multi-document readers return good objects and errors side by
side so a caller can keep the good ones and report the rest.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

from shoal.api import strict_yaml
from shoal.api.dra import (
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from shoal.api.errors import ManifestError
from shoal.api.gpu import check_node_gpus
from shoal.api.hypernode import HyperNode, Topology
from shoal.api.objects import Node, Pod, PriorityClass
from shoal.api.podgroup import PodGroup, UpstreamPodGroup, VolcanoPodGroup
from shoal.api.podinfo import check_pod_totals
from shoal.api.queue import (
    ElasticQuota,
    NodePool,
    PodDisruptionBudget,
    Queue,
    QueueBinding,
)
from shoal.api.volumes import (
    CSIDriver,
    CSINode,
    CSIStorageCapacity,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
)

__all__ = [
    "GROUP_KINDS",
    "KINDS",
    "ListItemsError",
    "api_version_problem",
    "decode",
    "iter_documents",
    "kind_class",
    "load_objects",
    "prepare_decoders",
    "unknown_field",
]

T = TypeVar("T", bound=msgspec.Struct)

KINDS: dict[str, type[msgspec.Struct]] = {"Pod": Pod, "Node": Node, "PriorityClass": PriorityClass}
KINDS["PersistentVolumeClaim"] = PersistentVolumeClaim
KINDS["PersistentVolume"] = PersistentVolume

# Kinds whose meaning depends on the API group (two projects both call theirs PodGroup).
GROUP_KINDS: dict[tuple[str, str], type[msgspec.Struct]] = {
    ("scheduling.x-k8s.io", "PodGroup"): PodGroup,
    ("scheduling.sigs.k8s.io", "PodGroup"): PodGroup,
    ("scheduling.volcano.sh", "PodGroup"): VolcanoPodGroup,
    ("scheduling.k8s.io", "PodGroup"): UpstreamPodGroup,
    ("topology.volcano.sh", "HyperNode"): HyperNode,
    ("kueue.x-k8s.io", "Topology"): Topology,
    ("shoal.dev", "Queue"): Queue,
    ("shoal.dev", "QueueBinding"): QueueBinding,
    ("shoal.dev", "NodePool"): NodePool,
    ("scheduling.x-k8s.io", "ElasticQuota"): ElasticQuota,
    ("scheduling.sigs.k8s.io", "ElasticQuota"): ElasticQuota,
    ("policy", "PodDisruptionBudget"): PodDisruptionBudget,
    ("storage.k8s.io", "StorageClass"): StorageClass,
    ("storage.k8s.io", "CSINode"): CSINode,
    ("storage.k8s.io", "CSIDriver"): CSIDriver,
    ("storage.k8s.io", "CSIStorageCapacity"): CSIStorageCapacity,
    ("resource.k8s.io", "DeviceClass"): DeviceClass,
    ("resource.k8s.io", "ResourceSlice"): ResourceSlice,
    ("resource.k8s.io", "ResourceClaim"): ResourceClaim,
    ("resource.k8s.io", "ResourceClaimTemplate"): ResourceClaimTemplate,
    ("resource.k8s.io", "DeviceTaintRule"): DeviceTaintRule,
}


def kind_class(doc: Mapping[str, Any]) -> type[msgspec.Struct] | None:
    """The model for a manifest, by apiVersion group and kind (None: not ours)."""
    kind = str(doc.get("kind", ""))
    group = str(doc.get("apiVersion", "")).rpartition("/")[0]
    return GROUP_KINDS.get((group, kind)) or KINDS.get(kind)


# Core kinds the simulator reads without a model (a Namespace's labels).
_READ_UNMODELLED = {"Namespace": "v1"}


def _default_api_version(cls: type[msgspec.Struct]) -> str:
    for field in msgspec.structs.fields(cls):
        if field.name == "api_version" and isinstance(field.default, str):
            return field.default
    return ""


def api_version_problem(doc: Mapping[str, Any]) -> str:
    """Why an API server would not take `doc`'s apiVersion for its kind (a kind this
    module models), or "": core kinds exist in one version, custom resources in any
    version of their group. A missing apiVersion is left to the caller."""
    kind = doc.get("kind")
    version = doc.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(version, str) or not version:
        return ""
    group = version.rpartition("/")[0]
    if (group, kind) in GROUP_KINDS:
        return ""
    core = KINDS.get(kind)
    if kind in _READ_UNMODELLED:
        served = [_READ_UNMODELLED[kind]]
    elif core is not None:
        served = [_default_api_version(core)]
    else:
        served = sorted({_default_api_version(c) for (_, k), c in GROUP_KINDS.items() if k == kind})
    if not served or version in served:
        return ""
    return f"{version!r} does not serve kind {kind}; use {' or '.join(served)}"


_PATH = re.compile(r"^(?P<msg>.*) - at `\$(?P<path>[^`]*)`$", re.S)


def _display_name(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        return ""
    name = str(meta.get("name", ""))
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace and name else name


def prepare_decoders(models: Iterable[type[msgspec.Struct]] = ()) -> None:
    """Build msgspec's type information for `models` (and every kind in KINDS and
    GROUP_KINDS) on the calling thread. msgspec 0.22 on Python 3.11 can crash the
    interpreter (SIGSEGV in typing._eval_type) when two threads convert to the same
    Struct type for the first time at once: the core thread and the I/O loop (webhooks,
    a second backend in one process) both decode, so a backend prepares first."""
    for model in {*KINDS.values(), *GROUP_KINDS.values(), *models}:
        with contextlib.suppress(msgspec.ValidationError):
            msgspec.convert({}, model, strict=False)


def unknown_field(raw: object, cls: type, path: str = "") -> str:
    """The path of the first field in `raw` that the struct `cls` (a Kubernetes API
    type) does not have ("" when there is none). API objects read from a cluster keep
    fields they do not know (a newer server); a scheduler configuration is decoded
    strictly, as kube-scheduler does, so a typo is an error, not a value dropped."""
    import msgspec.inspect as mi

    def walk(value: object, info: mi.Type, at: str) -> str:
        if isinstance(info, mi.UnionType):
            for member in info.types:
                found = walk(value, member, at)
                if not found:
                    return ""
            return found
        if isinstance(info, mi.StructType) and isinstance(value, dict):
            fields = {f.encode_name: f for f in info.fields}
            for key, item in value.items():
                field = fields.get(key)
                if field is None:
                    return f"{at}.{key}" if at else str(key)
                found = walk(item, field.type, f"{at}.{key}" if at else str(key))
                if found:
                    return found
        if isinstance(info, mi.ListType) and isinstance(value, list):
            for i, item in enumerate(value):
                found = walk(item, info.item_type, f"{at}[{i}]")
                if found:
                    return found
        return ""

    return walk(raw, mi.type_info(cls), path)


def decode(
    raw: Mapping[str, Any], cls: type[T], source: str = "", *, strict_spec: bool = False
) -> T:
    """Convert one manifest into `cls`; raise ManifestError naming object and field.
    `strict_spec`: a field of `spec` that `cls` does not have is an error too (objects
    written by hand for a kind whose schema Shoal knows, as kubectl's strict field
    validation refuses them; objects read from a cluster, or a dump of a newer one, keep
    fields Shoal does not know)."""
    kind = cls.__name__
    if not isinstance(raw, Mapping):
        raise ManifestError(kind, "", "", f"expected a mapping, got {type(raw).__name__}", source)
    if strict_spec and isinstance(raw.get("spec"), Mapping):
        stray = unknown_field({"spec": raw["spec"]}, cls)
        if stray:
            raise ManifestError(
                kind, _display_name(raw), stray, "unknown field (check its spelling)", source
            )
    try:
        # Strict, as the API server's JSON decoding: "5" is not an integer nor "true" a
        # boolean (a quantity takes a number or a string, as kube's does).
        obj = msgspec.convert(raw, cls, strict=True)
    except msgspec.ValidationError as err:
        text = str(err)
        match = _PATH.match(text)
        problem, path = (match["msg"], match["path"].lstrip(".")) if match else (text, "")
        raise ManifestError(kind, _display_name(raw), path, problem, source) from None
    # Whole-object checks too costly for every copy (see check_pod_totals).
    try:
        if isinstance(obj, Pod):
            check_pod_totals(obj)
        elif isinstance(obj, Node):
            check_node_gpus(obj)
    except ValueError as err:
        path, _, problem = str(err).partition(": ")
        raise ManifestError(kind, _display_name(raw), path, problem, source) from None
    return obj


# What reading a manifest or configuration file may raise besides OSError and YAML's own
# errors: text that is not UTF-8, bad JSON (both ValueError), and nesting deeper than the
# parsers' recursion allows (RecursionError).
READ_ERRORS = (OSError, yaml.YAMLError, ValueError, RecursionError)


def why_unreadable(err: BaseException) -> str:
    """A file's read error, said for a user (`cannot be read: ...`)."""
    if isinstance(err, RecursionError):
        return "cannot be read: nested too deeply (lists or mappings thousands of levels deep)"
    if isinstance(err, UnicodeDecodeError):
        return f"cannot be read: not UTF-8 text (byte {err.start}: {err.reason})"
    return f"cannot be read: {err}"


class ListItemsError(ValueError):
    """A `kind: List` document whose `items` is not a list."""


def iter_documents(path: Path) -> Iterator[Any]:
    """Documents in a YAML (multi-document) or JSON file; `kind: List` is flattened."""
    text = path.read_text()
    docs: Iterable[Any]
    if path.suffix == ".json":
        docs = [strict_yaml.load_json(text)]
    elif path.suffix == ".jsonl":
        docs = [strict_yaml.load_json(line) for line in text.splitlines() if line.strip()]
    else:
        # A document with a key given twice yields a `DuplicateKey` (reported by the
        # reader as that document's error); the others are read on.
        docs = strict_yaml.load_documents(text)
    for doc in docs:
        if doc is None:
            continue
        kind = doc.get("kind") if isinstance(doc, Mapping) else None
        if isinstance(kind, str) and kind.endswith("List"):
            items = doc.get("items") or []
            if isinstance(items, list):
                yield from items
            else:  # a string would be read character by character
                yield ListItemsError(
                    f"{kind}: items must be a list of objects, got {type(items).__name__}"
                )
        elif isinstance(doc, list):
            yield from doc
        else:
            yield doc


def load_objects(
    paths: Iterable[Path],
) -> tuple[list[msgspec.Struct], list[ManifestError]]:
    """Read every known object from files (or directories of files).

    Returns the decoded objects and the errors; one bad document never hides the others.
    """
    objects: list[msgspec.Struct] = []
    errors: list[ManifestError] = []
    for path in _expand(paths):
        try:
            documents = list(iter_documents(path))
        except READ_ERRORS as err:
            errors.append(ManifestError("file", str(path), "", why_unreadable(err)))
            continue
        for index, doc in enumerate(documents):
            where = f"{path}#{index}"
            if isinstance(doc, (strict_yaml.DuplicateKey, ListItemsError)):
                errors.append(ManifestError("document", "", "", str(doc), where))
                continue
            if not isinstance(doc, Mapping):
                errors.append(ManifestError("document", "", "", "expected a mapping", where))
                continue
            kind = doc.get("kind")
            if not isinstance(kind, str) or not kind:
                errors.append(
                    ManifestError(
                        "document",
                        str((doc.get("metadata") or {}).get("name", "")) or "<unnamed>",
                        "kind",
                        f"expected the object's kind as a string (e.g. Pod), got {kind!r}",
                        where,
                    )
                )
                continue
            cls = kind_class(doc)
            if cls is None:
                continue  # other kinds are some other component's business
            try:
                objects.append(decode(doc, cls, where))
            except ManifestError as err:
                errors.append(err)
    return objects, errors


def _expand(paths: Iterable[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            for child in sorted(path.iterdir()):
                if child.suffix in (".yaml", ".yml", ".json", ".jsonl"):
                    yield child
        else:
            yield path
