"""Load openb traces: `openb_node_list_gpu_node.csv` and `openb_pod_list_<name>.csv`.

Columns (Alibaba cluster-trace-gpu-v2023/csv):

* nodes: `sn,cpu_milli,memory_mib,gpu,model`
* pods: `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,
  creation_time,deletion_time,scheduled_time]` (`gpu_milli` is per GPU; an empty
  `gpu_spec` means any model, else `|`-separated models).

Any folder with files named this way can be used (`--trace-dir`). A malformed line raises
`TraceError` naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from shoal.api.gpu import (
    ANNOTATION_GPU_COUNT,
    ANNOTATION_GPU_MILLI,
    ANNOTATION_GPU_MODEL,
    GPU_MILLI,
    LABEL_GPU_MODEL,
    MAX_DEVICES,
)
from shoal.api.objects import (
    Container,
    Node,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodSpec,
    ResourceRequirements,
)
from shoal.api.resources import GPU

__all__ = [
    "DEFAULT_NODE_FILE",
    "ENV_TRACE_DIR",
    "NodeRow",
    "PodRow",
    "Trace",
    "TraceError",
    "find_trace_dir",
    "list_traces",
    "load_nodes",
    "load_pods",
    "load_trace",
    "node_manifest",
    "pod_manifest",
]

DEFAULT_NODE_FILE = "openb_node_list_gpu_node.csv"
POD_FILE_PREFIX = "openb_pod_list_"
ENV_TRACE_DIR = "SHOAL_OPENB_TRACE_DIR"
NAMESPACE = "openb"

_NODE_FIELDS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_POD_FIELDS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    """A trace file is missing or malformed."""


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class PodRow:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU, 0..1000 (0 for CPU-only pods)
    gpu_spec: str = ""
    creation_time: int | None = None
    deletion_time: int | None = None
    scheduled_time: int | None = None
    phase: str = ""
    qos: str = ""  # the trace's QoS class (LS, BE, ...), carried through, not scheduled on

    @property
    def total_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    def renamed(self, name: str) -> PodRow:
        return PodRow(
            name,
            self.cpu_milli,
            self.memory_mib,
            self.num_gpu,
            self.gpu_milli,
            self.gpu_spec,
            self.creation_time,
            self.deletion_time,
            self.scheduled_time,
            self.phase,
            self.qos,
        )


@dataclass(frozen=True)
class Trace:
    name: str
    nodes: tuple[NodeRow, ...]
    pods: tuple[PodRow, ...]

    @property
    def gpu_capacity_milli(self) -> int:
        return sum(n.gpus for n in self.nodes) * GPU_MILLI


def _open_rows(path: Path, required: tuple[str, ...]) -> tuple[list[dict[str, str]], int]:
    if not path.is_file():
        raise TraceError(f"{path}: file not found")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(f"{path}:1: missing column(s) {', '.join(missing)}")
        return list(reader), len(header)


def _int(path: Path, line: int, row: dict[str, str], field: str, *, optional: bool = False) -> int:
    text = (row.get(field) or "").strip()
    if not text and optional:
        return -1
    try:
        value = int(text)
    except ValueError:
        try:
            as_float = float(text)
        except ValueError:
            raise TraceError(
                f"{path}:{line}: field {field!r}: {text!r} is not an integer"
            ) from None
        if not as_float.is_integer():
            raise TraceError(
                f"{path}:{line}: field {field!r}: {text!r} is not an integer"
            ) from None
        value = int(as_float)
    if value < 0:
        raise TraceError(f"{path}:{line}: field {field!r}: {value} must not be negative")
    return value


def load_nodes(path: Path) -> tuple[NodeRow, ...]:
    rows, width = _open_rows(path, _NODE_FIELDS)
    out = []
    names: set[str] = set()
    for i, row in enumerate(rows, start=2):
        if None in row or len(row) != width:
            raise TraceError(f"{path}:{i}: expected {width} fields")
        name = (row["sn"] or "").strip()
        if not name:
            raise TraceError(f"{path}:{i}: field 'sn' is empty")
        if name in names:
            raise TraceError(f"{path}:{i}: field 'sn': duplicate node {name!r}")
        names.add(name)
        gpus = _int(path, i, row, "gpu")
        if gpus > MAX_DEVICES:
            raise TraceError(
                f"{path}:{i}: field 'gpu': {gpus} GPUs on one node is more than {MAX_DEVICES}"
            )
        out.append(
            NodeRow(
                name,
                _int(path, i, row, "cpu_milli"),
                _int(path, i, row, "memory_mib"),
                gpus,
                (row["model"] or "").strip(),
            )
        )
    return tuple(out)


def load_pods(path: Path) -> tuple[PodRow, ...]:
    rows, width = _open_rows(path, _POD_FIELDS)
    out = []
    names: set[str] = set()
    for i, row in enumerate(rows, start=2):
        if None in row or len(row) != width:
            raise TraceError(f"{path}:{i}: expected {width} fields")
        name = (row["name"] or "").strip()
        if not name:
            raise TraceError(f"{path}:{i}: field 'name' is empty")
        if name in names:
            raise TraceError(f"{path}:{i}: field 'name': duplicate pod {name!r}")
        names.add(name)
        num_gpu = _int(path, i, row, "num_gpu")
        if num_gpu > MAX_DEVICES:
            raise TraceError(
                f"{path}:{i}: field 'num_gpu': {num_gpu} GPUs for one pod is more than "
                f"{MAX_DEVICES} (a pod's GPUs are on one node)"
            )
        milli = _int(path, i, row, "gpu_milli")
        if milli > GPU_MILLI:
            raise TraceError(f"{path}:{i}: field 'gpu_milli': {milli} is more than 1000")
        if num_gpu and not milli:
            raise TraceError(f"{path}:{i}: field 'gpu_milli': 0 for a pod with {num_gpu} GPU(s)")
        if not num_gpu:
            milli = 0
        times = {
            f: (None if (v := _int(path, i, row, f, optional=True)) < 0 else v)
            for f in ("creation_time", "deletion_time", "scheduled_time")
        }
        out.append(
            PodRow(
                name,
                _int(path, i, row, "cpu_milli"),
                _int(path, i, row, "memory_mib"),
                num_gpu,
                milli,
                (row.get("gpu_spec") or "").strip() if num_gpu else "",
                times["creation_time"],
                times["deletion_time"],
                times["scheduled_time"],
                (row.get("pod_phase") or "").strip(),
                (row.get("qos") or "").strip(),
            )
        )
    return tuple(out)


def list_traces(trace_dir: Path) -> list[str]:
    """Trace names (`default`, `gpushare40`, ...) of the pod files in a folder."""
    names = [p.name[len(POD_FILE_PREFIX) : -4] for p in trace_dir.glob(POD_FILE_PREFIX + "*.csv")]
    return sorted(names, key=lambda n: (n != "default", n))


def load_trace(trace_dir: Path, name: str, node_file: str = DEFAULT_NODE_FILE) -> Trace:
    pod_path = trace_dir / f"{POD_FILE_PREFIX}{name}.csv"
    if not pod_path.is_file():
        known = ", ".join(list_traces(trace_dir)) or "none"
        raise TraceError(f"{pod_path}: file not found (traces in {trace_dir}: {known})")
    nodes, pods = load_nodes(trace_dir / node_file), load_pods(pod_path)
    # An empty file would give 0/0 = NaN for every result: say so instead.
    if not nodes:
        raise TraceError(f"{trace_dir / node_file}: no nodes (only the header): nothing to fill")
    if not pods:
        raise TraceError(f"{pod_path}: no pods (only the header): nothing to place")
    return Trace(name, nodes, pods)


def find_trace_dir(explicit: str | Path | None = None) -> Path | None:
    """The openb folder: `explicit`, else $SHOAL_OPENB_TRACE_DIR, else
    `../shared/traces/openb` (from the working directory or this checkout), else the
    download cache `~/.cache/shoal/openb`. None when no candidate has the node file."""
    candidates: list[Path] = []
    if explicit:
        return Path(explicit)
    if os.environ.get(ENV_TRACE_DIR):
        candidates.append(Path(os.environ[ENV_TRACE_DIR]))
    candidates.append(Path.cwd().parent / "shared" / "traces" / "openb")
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file():
            candidates.append(parent.parent / "shared" / "traces" / "openb")
            break
    candidates.append(Path.home() / ".cache" / "shoal" / "openb")
    for path in candidates:
        if (path / DEFAULT_NODE_FILE).is_file():
            return path
    return None


def node_manifest(row: NodeRow) -> Node:
    resources: dict[str, str | int | float] = {
        "cpu": f"{row.cpu_milli}m",
        "memory": f"{row.memory_mib}Mi",
        "pods": "1001",
        GPU: row.gpus,
    }
    labels = {"kubernetes.io/hostname": row.name}
    if row.model:
        labels[LABEL_GPU_MODEL] = row.model
    return Node(
        metadata=ObjectMeta(name=row.name, labels=labels),
        status=NodeStatus(capacity=resources, allocatable=dict(resources)),
    )


def pod_manifest(
    row: PodRow, uid: str | None = None, scheduler_name: str = "default-scheduler"
) -> Pod:
    annotations: dict[str, str] = {}
    if row.num_gpu:
        annotations[ANNOTATION_GPU_MILLI] = str(row.gpu_milli)
        annotations[ANNOTATION_GPU_COUNT] = str(row.num_gpu)
        if row.gpu_spec:
            annotations[ANNOTATION_GPU_MODEL] = row.gpu_spec
    requests: dict[str, str | int | float] = {
        "cpu": f"{row.cpu_milli}m",
        "memory": f"{row.memory_mib}Mi",
    }
    return Pod(
        metadata=ObjectMeta(
            name=row.name, namespace=NAMESPACE, uid=uid or row.name, annotations=annotations
        ),
        spec=PodSpec(
            containers=[Container(name="main", resources=ResourceRequirements(requests=requests))],
            scheduler_name=scheduler_name,
        ),
    )
