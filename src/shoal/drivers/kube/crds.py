"""CustomResourceDefinitions generated from Shoal's models.

The OpenAPI v3 schema of each CRD is derived from the msgspec model that decodes the
object (`msgspec.json.schema`), turned into a Kubernetes *structural* schema: references
inlined, every node typed, `T | None` as `nullable`, enumerations typed, quantities as
`x-kubernetes-int-or-string` with Kubernetes' quantity pattern, `metadata` left to the
API server. Constraints the models check in code (e.g. `minMember >= 1`) are declared
next to the model in `CRDS` so the API server rejects such objects up front.

`CRDS` is the list of generated definitions: adding a kind (Queue, QueueBinding) is one
`CrdSpec(...)` entry. `python -m shoal.drivers.kube.crds deploy/crds` writes the
manifests; `--check` fails when the checked-in files are stale (tests run it).
"""

from __future__ import annotations

import argparse
import copy
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import yaml

from shoal.drivers.kube.resources import (
    ELASTIC_QUOTAS,
    NODE_POOLS,
    PODGROUPS,
    QUEUE_BINDINGS,
    QUEUES,
    ResourceKind,
)

__all__ = ["CRDS", "QUANTITY_PATTERN", "CrdSpec", "crd_manifest", "render", "structural_schema"]

# k8s.io/apimachinery resource.Quantity, as controller-gen emits it.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

Schema = dict[str, Any]


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    json_path: str
    type: str = "string"
    priority: int = 0  # > 0: shown by `kubectl get -o wide` only


@dataclass(frozen=True)
class CrdSpec:
    resource: ResourceKind
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ("shoal",)
    # Extra OpenAPI constraints by dotted field path, e.g. {"spec.minMember": {"minimum": 1}}.
    validation: dict[str, Schema] = field(default_factory=dict)
    columns: tuple[PrinterColumn, ...] = ()
    status_subresource: bool = True


CRDS: list[CrdSpec] = [
    CrdSpec(
        PODGROUPS,
        short_names=("pg", "pgs"),
        validation={
            "spec.minMember": {"minimum": 1},
            "spec.scheduleTimeoutSeconds": {"minimum": 1},
        },
        columns=(
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("MinMember", ".spec.minMember", "integer"),
            PrinterColumn("Scheduled", ".status.scheduled", "integer"),
            PrinterColumn("Running", ".status.running", "integer"),
            PrinterColumn("Succeeded", ".status.succeeded", "integer"),
            PrinterColumn("Failed", ".status.failed", "integer"),
            PrinterColumn("Age", ".metadata.creationTimestamp", "date"),
        ),
    ),
    CrdSpec(
        QUEUES,
        short_names=("sq",),
        validation={"spec.weight": {"minimum": 1}},
        columns=(
            PrinterColumn("State", ".status.state"),
            PrinterColumn("Parent", ".spec.parent"),
            PrinterColumn("Weight", ".spec.weight", "integer"),
            PrinterColumn("CPU", ".status.allocated.cpu"),
            PrinterColumn("GPU", r".status.allocated.nvidia\.com/gpu"),
            PrinterColumn("Guaranteed-CPU", ".status.guaranteed.cpu", priority=1),
            PrinterColumn("FairShare-CPU", ".status.fairShare.cpu", priority=1),
            PrinterColumn("Borrowed-CPU", ".status.borrowed.cpu", priority=1),
            PrinterColumn("Bound", ".status.boundPods", "integer"),
            PrinterColumn("Running", ".status.runningPods", "integer"),
            PrinterColumn("Pending", ".status.pendingPods", "integer"),
            PrinterColumn("Jobs", ".status.runningJobs", "integer"),
            PrinterColumn("PendingJobs", ".status.pendingJobs", "integer"),
            PrinterColumn("Age", ".metadata.creationTimestamp", "date"),
            PrinterColumn(
                "Message", '.status.conditions[?(@.type=="Accepted")].message', priority=1
            ),
        ),
    ),
    CrdSpec(
        QUEUE_BINDINGS,
        short_names=("qb",),
        validation={
            "spec.queue": {"minLength": 1},
            "spec.maxPods": {"minimum": 0},
            "spec.maxRunningJobs": {"minimum": 0},
        },
        columns=(
            PrinterColumn("Queue", ".spec.queue"),
            PrinterColumn("Pods", ".status.pods", "integer"),
            PrinterColumn("MaxPods", ".spec.maxPods", "integer"),
            PrinterColumn("Jobs", ".status.runningJobs", "integer"),
            PrinterColumn("MaxJobs", ".spec.maxRunningJobs", "integer"),
            PrinterColumn("Age", ".metadata.creationTimestamp", "date"),
        ),
    ),
    CrdSpec(
        NODE_POOLS,
        short_names=("np",),
        validation={"spec.nodeSelector": {"minProperties": 1}},
        status_subresource=False,
    ),
    CrdSpec(
        ELASTIC_QUOTAS,
        short_names=("eq", "eqs"),
        columns=(
            PrinterColumn("Used-CPU", ".status.used.cpu"),
            PrinterColumn("Min-CPU", ".spec.min.cpu"),
            PrinterColumn("Max-CPU", ".spec.max.cpu"),
            PrinterColumn("Age", ".metadata.creationTimestamp", "date"),
        ),
    ),
]


def structural_schema(model: type[msgspec.Struct], validation: dict[str, Schema]) -> Schema:
    """The CRD schema of a top-level object model."""
    raw = msgspec.json.schema(model)
    defs: dict[str, Schema] = raw.get("$defs", {})
    root = _convert(raw, defs)
    properties = root.setdefault("properties", {})
    properties["apiVersion"] = {"type": "string"}
    properties["kind"] = {"type": "string"}
    properties["metadata"] = {"type": "object"}
    for path, extra in validation.items():
        node = root
        for part in path.split("."):
            node = node["properties"][part]
        node.update(extra)
    root.pop("default", None)
    return root


def _convert(node: Schema, defs: dict[str, Schema]) -> Schema:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        merged = {**copy.deepcopy(defs[name]), **{k: v for k, v in node.items() if k != "$ref"}}
        return _convert(merged, defs)
    out: Schema = {}
    any_of = node.get("anyOf")
    if any_of is not None:
        options = [o for o in any_of if o.get("type") != "null"]
        nullable = len(options) < len(any_of)
        types = {o.get("type") for o in options}
        if (
            types
            and types <= {"string", "integer", "number"}
            and "string" in types
            and len(types) > 1
        ):
            out = {
                "x-kubernetes-int-or-string": True,
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "pattern": QUANTITY_PATTERN,
            }
        elif len(options) == 1:
            out = _convert(options[0], defs)
        else:
            out = {"x-kubernetes-preserve-unknown-fields": True}
        if nullable:
            out["nullable"] = True
    for key, value in node.items():
        if key in ("title", "$defs", "anyOf", "required"):
            continue
        if key == "properties":
            out["properties"] = {k: _convert(v, defs) for k, v in value.items()}
        elif key == "items":
            out["items"] = _convert(value, defs)
        elif key == "additionalProperties" and isinstance(value, dict):
            out["additionalProperties"] = _convert(value, defs)
        elif key == "default":
            if value not in (None, "", {}, []):
                out["default"] = value
        elif key == "description" and isinstance(value, str):
            # msgspec 0.23 dedents docstrings, earlier versions do not: the same text
            # whatever version generated it (`--check` compares the checked-in files).
            out[key] = inspect.cleandoc(value)
        else:
            out[key] = value
    if node.get("required"):
        out["required"] = list(node["required"])
    if "enum" in out and "type" not in out:
        kinds = {type(v) for v in out["enum"]}
        out["type"] = "string" if kinds == {str} else "integer" if kinds == {int} else "string"
    return out


def crd_manifest(spec: CrdSpec) -> Schema:
    resource = spec.resource
    if resource.model is None:
        raise ValueError(f"{resource.name} has no model to generate a schema from")
    version: Schema = {
        "name": resource.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": structural_schema(resource.model, spec.validation)},
    }
    if spec.status_subresource:
        version["subresources"] = {"status": {}}
    if spec.columns:
        version["additionalPrinterColumns"] = [
            {"name": c.name, "type": c.type, "jsonPath": c.json_path}
            | ({"priority": c.priority} if c.priority else {})
            for c in spec.columns
        ]
    names: Schema = {
        "kind": resource.kind,
        "listKind": f"{resource.kind}List",
        "plural": resource.plural,
        "singular": resource.kind.lower(),
    }
    if spec.short_names:
        names["shortNames"] = list(spec.short_names)
    if spec.categories:
        names["categories"] = list(spec.categories)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{resource.plural}.{resource.group}",
            "annotations": {"shoal.dev/generated-by": "python -m shoal.drivers.kube.crds"},
        },
        "spec": {
            "group": resource.group,
            "names": names,
            "scope": "Namespaced" if resource.namespaced else "Cluster",
            "versions": [version],
        },
    }


def render() -> dict[str, str]:
    """File name -> YAML text, one file per CRD."""
    out = {}
    for spec in CRDS:
        manifest = crd_manifest(spec)
        text = yaml.safe_dump(manifest, sort_keys=False, width=100)
        out[f"{manifest['metadata']['name']}.yaml"] = "# Generated; do not edit.\n" + text
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write (or check) Shoal's CRD manifests.")
    parser.add_argument("directories", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="fail if the files are stale")
    args = parser.parse_args(argv)
    stale = []
    for directory in args.directories:
        for name, text in render().items():
            path = directory / name
            if args.check:
                if not path.exists() or path.read_text() != text:
                    stale.append(str(path))
            else:
                directory.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    if stale:
        print("stale CRD manifests (run python -m shoal.drivers.kube.crds):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
