"""Load openb traces: `openb_node_list_gpu_node.csv` and `openb_pod_list_<name>.csv`.

Columns (Alibaba cluster-trace-gpu-v2023/csv):

* nodes: `sn,cpu_milli,memory_mib,gpu,model`
* pods: `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,
  creation_time,deletion_time,scheduled_time]` (`gpu_milli` is per GPU; an empty
  `gpu_spec` means any model, else `|`-separated models).

Any folder with files named this way can be used (`--trace-dir`). A malformed file or
line raises `TraceError` naming the file, the line, the field and the fix: not UTF-8, not
a well-formed CSV (an open quote, a line with too few or too many fields, a huge field),
missing or repeated columns, values that are not whole numbers (NaN, inf, 1.5, 1_000),
negative or beyond what any node or pod has (`MAX_CPU_MILLI`, `MAX_MEMORY_MIB`,
`MAX_DEVICES`, `MAX_TIME`), duplicate names, a pod deleted before it was created, no GPU
node at all. Values that are legitimately ignored (GPU fields of a CPU-only pod) and pods
asking for GPU models no node has are `Trace.warnings`: the run goes on and says so.
"""

from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from shoal.api.gpu import (
    ANNOTATION_GPU_COUNT,
    ANNOTATION_GPU_MILLI,
    ANNOTATION_GPU_MODEL,
    GPU_MILLI,
    LABEL_GPU_MODEL,
    MAX_DEVICES,
    parse_models,
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
    "MAX_CPU_MILLI",
    "MAX_MEMORY_MIB",
    "MAX_TIME",
    "NODE_COLUMNS",
    "POD_COLUMNS",
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

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
"""A node list's columns, in the published trace's order (all required)."""
POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
"""A pod list's columns, in the published trace's order (`_POD_FIELDS` are required)."""
_NODE_FIELDS = NODE_COLUMNS
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
    # Values that were ignored or pods that can never be placed, each naming the file,
    # the line and the fix: printed by the commands, the run goes on.
    warnings: tuple[str, ...] = ()

    @property
    def gpu_capacity_milli(self) -> int:
        return sum(n.gpus for n in self.nodes) * GPU_MILLI


# Bounds of one row's values: what no node or pod of a real trace comes near, and what
# keeps every sum the experiment makes within 64-bit integers (Kubernetes quantities).
MAX_CPU_MILLI = 10**9  # a million cores
MAX_MEMORY_MIB = 2**30  # 1 PiB
MAX_TIME = 10**10  # seconds from the start of the trace (about 317 years)
MAX_FIELD = 1024  # characters in one field (a name, a list of GPU models)
MAX_NAME = 253  # a Kubernetes object name
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?")
_MODEL = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]")  # a label value
_TIME_FIELDS = ("creation_time", "deletion_time", "scheduled_time")

Row = tuple[int, dict[str, str]]  # (line in the file, column -> value)


def _read_rows(path: Path, required: tuple[str, ...]) -> list[Row]:
    """The rows of a trace CSV with the line each starts on; TraceError naming the file,
    the line and the fix for anything that is not a well-formed CSV with `required`."""
    if not path.is_file():
        raise TraceError(f"{path}: file not found")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark is not part of the header
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise TraceError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
            f"{err.start}): save the file as UTF-8 CSV"
        ) from None
    expected = ",".join(required)
    if not text.strip():
        raise TraceError(
            f"{path}: empty file: it needs the header line {expected} and one line per row"
        )
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    start = 1  # where the row being read begins
    rows: list[Row] = []
    try:
        header = [h.strip() for h in next(reader)]
        twice = sorted({h for h in header if h and header.count(h) > 1})
        if twice:
            raise TraceError(
                f"{path}:1: column(s) {', '.join(twice)} appear more than once in the header"
            )
        missing = [c for c in required if c not in header]
        if missing:
            found = ",".join(header)
            found = found if len(found) <= 200 else found[:200] + "..."
            raise TraceError(
                f"{path}:1: missing column(s) {', '.join(missing)}: the header must name "
                f"{expected} (comma-separated), it is {found!r}"
            )
        start = reader.line_num + 1
        for fields in reader:
            line, start = start, reader.line_num + 1
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue  # a blank line
            if len(fields) != len(header):
                raise TraceError(
                    f"{path}:{line}: {len(fields)} field(s) where the header has "
                    f"{len(header)}: give every column a value (empty for none), and quote "
                    "a value with a comma"
                )
            if not "".join(fields).isprintable() or max(map(len, fields)) > MAX_FIELD:
                for column, value in zip(header, fields, strict=True):
                    _check_field(path, line, column, value)
            rows.append((line, dict(zip(header, fields, strict=True))))
    except csv.Error as err:
        raise TraceError(
            f"{path}:{start}: not a well-formed CSV line ({err}): is a quote left open?"
        ) from None
    return rows


def _check_field(path: Path, line: int, column: str, value: str) -> None:
    if len(value) > MAX_FIELD:
        raise TraceError(
            f"{path}:{line}: field {column!r} is {len(value)} characters long (at most "
            f"{MAX_FIELD}): is a quote left open, or a line break missing?"
        )
    if not value.isprintable():
        bad = next(c for c in value if not c.isprintable())
        what = "a line break" if bad in "\r\n" else f"the control character U+{ord(bad):04X}"
        raise TraceError(
            f"{path}:{line}: field {column!r} contains {what}: is a quote left open? "
            "(trace values are plain text)"
        )


def _int(
    path: Path,
    line: int,
    row: dict[str, str],
    field: str,
    *,
    at_most: int,
    unit: str = "",
    optional: bool = False,
) -> int | None:
    """A whole, non-negative number of at most `at_most` (None for an empty `optional`
    field); TraceError naming the file, line, field and the fix otherwise."""
    text = (row.get(field) or "").strip()
    if text.isascii() and text.isdigit():
        value = int(text)  # the common case
        if value <= at_most:
            return value
    where = f"{path}:{line}: field {field!r}"
    if not text:
        if optional:
            return None
        raise TraceError(f"{where} is empty: write a whole number (0 for none)")
    body = text[1:] if text[0] in "+-" else text
    if not _NUMBER.fullmatch(body):
        raise TraceError(f"{where}: {text!r} is not a whole number: write digits only, e.g. 1000")
    number = Decimal(body)
    if number != number.to_integral_value():
        raise TraceError(f"{where}: {text!r} is not a whole number: round it, e.g. 1000")
    if text[0] == "-" and number:
        raise TraceError(f"{where}: {text} must not be negative")
    if number.adjusted() > 30:  # 1e400: not worth turning into digits
        raise TraceError(f"{where}: {text} is more than {at_most}{unit}")
    value = int(number)
    if value > at_most:
        raise TraceError(f"{where}: {value} is more than {at_most}{unit}")
    return value


def _name(path: Path, line: int, row: dict[str, str], field: str, what: str) -> str:
    name = (row.get(field) or "").strip()
    if not name:
        raise TraceError(f"{path}:{line}: field {field!r} is empty: every {what} needs a name")
    if len(name) > MAX_NAME:
        raise TraceError(
            f"{path}:{line}: field {field!r}: a name of {len(name)} characters is longer "
            f"than {MAX_NAME} (a Kubernetes object name)"
        )
    return name


def _cpu_memory(path: Path, line: int, row: dict[str, str], what: str) -> tuple[int, int]:
    cpu = _int(
        path,
        line,
        row,
        "cpu_milli",
        at_most=MAX_CPU_MILLI,
        unit=f" (a million cores) on one {what}: cpu_milli is in thousandths of a core, "
        "1000 = one core",
    )
    memory = _int(
        path,
        line,
        row,
        "memory_mib",
        at_most=MAX_MEMORY_MIB,
        unit=f" (1 PiB) on one {what}: memory_mib is in MiB (is the column in bytes?)",
    )
    assert cpu is not None and memory is not None
    return cpu, memory


def load_nodes(path: Path) -> tuple[NodeRow, ...]:
    out = []
    names: dict[str, int] = {}
    for i, row in _read_rows(path, _NODE_FIELDS):
        name = _name(path, i, row, "sn", "node")
        if name in names:
            raise TraceError(
                f"{path}:{i}: field 'sn': duplicate node {name!r} (first on line "
                f"{names[name]}): node names must be unique"
            )
        names[name] = i
        gpus = _int(
            path,
            i,
            row,
            "gpu",
            at_most=MAX_DEVICES,
            unit=" GPUs on one node: give the node's real device count",
        )
        assert gpus is not None
        model = (row["model"] or "").strip()
        if model and not _MODEL.fullmatch(model):
            raise TraceError(
                f"{path}:{i}: field 'model': {model!r} is not a GPU model name: one model "
                "per node, letters, digits, '-', '_' and '.' only (at most 63), e.g. V100M16"
            )
        cpu, memory = _cpu_memory(path, i, row, "node")
        out.append(NodeRow(name, cpu, memory, gpus, model))
    return tuple(out)


def load_pods(path: Path) -> tuple[PodRow, ...]:
    return _load_pods(path)[0]


def _load_pods(path: Path) -> tuple[tuple[PodRow, ...], list[int], list[str]]:
    """The pods, the line of each, and warnings about values that are ignored."""
    out: list[PodRow] = []
    lines: list[int] = []
    names: dict[str, int] = {}
    ignored_milli: list[tuple[int, str]] = []
    ignored_spec: list[tuple[int, str]] = []
    for i, row in _read_rows(path, _POD_FIELDS):
        name = _name(path, i, row, "name", "pod")
        if name in names:
            raise TraceError(
                f"{path}:{i}: field 'name': duplicate pod {name!r} (first on line "
                f"{names[name]}): pod names must be unique"
            )
        names[name] = i
        num_gpu = _int(
            path,
            i,
            row,
            "num_gpu",
            at_most=MAX_DEVICES,
            unit=" GPUs for one pod (a pod's GPUs are on one node)",
        )
        milli = _int(
            path,
            i,
            row,
            "gpu_milli",
            at_most=GPU_MILLI,
            unit=" (milli-GPU per GPU: 1000 is a whole GPU)",
        )
        assert num_gpu is not None and milli is not None
        if num_gpu and not milli:
            raise TraceError(
                f"{path}:{i}: field 'gpu_milli': 0 for a pod with {num_gpu} GPU(s): give "
                "the milli-GPU per GPU (1000 = whole GPUs), or num_gpu 0 for a CPU-only pod"
            )
        spec = (row.get("gpu_spec") or "").strip()
        if not num_gpu:
            if milli:
                ignored_milli.append((i, name))
            if spec:
                ignored_spec.append((i, name))
            milli, spec = 0, ""
        models = spec.split("|") if spec else []
        if any(not _MODEL.fullmatch(m.strip()) for m in models):
            raise TraceError(
                f"{path}:{i}: field 'gpu_spec': {spec!r} is not a list of GPU models: "
                "write models separated by '|' (e.g. V100M16|V100M32), or leave it empty "
                "for any model"
            )
        cpu, memory = _cpu_memory(path, i, row, "pod")
        times = {
            f: _int(
                path,
                i,
                row,
                f,
                at_most=MAX_TIME,
                unit=" s: trace times are seconds from the start of the trace",
                optional=True,
            )
            for f in _TIME_FIELDS
        }
        created, deleted = times["creation_time"], times["deletion_time"]
        if created is not None and deleted is not None and deleted < created:
            raise TraceError(
                f"{path}:{i}: field 'deletion_time': {deleted} is before creation_time "
                f"{created}: a pod cannot end before it starts; fix the row, or leave "
                "deletion_time empty for a pod that never ends"
            )
        out.append(
            PodRow(
                name,
                cpu,
                memory,
                num_gpu,
                milli,
                spec,
                created,
                deleted,
                times["scheduled_time"],
                (row.get("pod_phase") or "").strip(),
                (row.get("qos") or "").strip(),
            )
        )
        lines.append(i)
    warnings = []
    for found, what in (
        (ignored_milli, "gpu_milli"),
        (ignored_spec, "gpu_spec"),
    ):
        if found:
            line, name = found[0]
            warnings.append(
                f"{path}:{line}: field {what!r} is ignored for {len(found)} pod(s) with "
                f"num_gpu 0 (first: {name!r}): they are CPU-only pods; set num_gpu if they "
                "use GPUs"
            )
    return tuple(out), lines, warnings


def list_traces(trace_dir: Path) -> list[str]:
    """Trace names (`default`, `gpushare40`, ...) of the pod files in a folder."""
    names = [p.name[len(POD_FILE_PREFIX) : -4] for p in trace_dir.glob(POD_FILE_PREFIX + "*.csv")]
    return sorted(names, key=lambda n: (n != "default", n))


def load_trace(trace_dir: Path, name: str, node_file: str = DEFAULT_NODE_FILE) -> Trace:
    if not trace_dir.is_dir():
        raise TraceError(f"{trace_dir}: no such folder (the trace folder, --trace-dir)")
    pod_path = trace_dir / f"{POD_FILE_PREFIX}{name}.csv"
    if not pod_path.is_file():
        known = ", ".join(list_traces(trace_dir)) or "none"
        raise TraceError(f"{pod_path}: file not found (traces in {trace_dir}: {known})")
    node_path = trace_dir / node_file
    if not node_path.is_file():
        raise TraceError(
            f"{node_path}: file not found (every trace folder needs its node list beside the "
            "pod lists)"
        )
    nodes = load_nodes(node_path)
    pods, lines, warnings = _load_pods(pod_path)
    # An empty file would give 0/0 = NaN for every result: say so instead.
    if not nodes:
        raise TraceError(f"{node_path}: no nodes (only the header): nothing to fill")
    if not pods:
        raise TraceError(f"{pod_path}: no pods (only the header): nothing to place")
    if not any(n.gpus for n in nodes):
        raise TraceError(
            f"{node_path}: no node has a GPU (field 'gpu' is 0 on all {len(nodes)} nodes): "
            "the experiment measures GPU allocation; use a node list with GPU nodes"
        )
    warnings += _unknown_models(pod_path, node_path, nodes, pods, lines)
    return Trace(name, nodes, pods, tuple(warnings))


def _unknown_models(
    pod_path: Path,
    node_path: Path,
    nodes: tuple[NodeRow, ...],
    pods: tuple[PodRow, ...],
    lines: list[int],
) -> list[str]:
    """Warnings for GPU models pods ask for that no GPU node has (a typo, or the node list
    of another trace): such a pod can never be placed, and the run says so."""
    known = {n.model for n in nodes if n.gpus and n.model}
    named: dict[str, list[tuple[int, str, bool]]] = {}
    for pod, line in zip(pods, lines, strict=True):
        models = parse_models(pod.gpu_spec) if pod.num_gpu else None
        if not models or models <= known:
            continue
        hopeless = not models & known
        for model in sorted(models - known):
            named.setdefault(model, []).append((line, pod.name, hopeless))
    out = []
    for model, uses in sorted(named.items()):
        line, first, _ = uses[0]
        never = sum(1 for *_, hopeless in uses if hopeless)
        out.append(
            f"{pod_path}:{line}: field 'gpu_spec': GPU model {model!r} is on no GPU node of "
            f"{node_path.name} (models there: {', '.join(sorted(known)) or 'none'}); "
            f"{len(uses)} pod(s) name it (first: {first!r}), {never} of them no model a node "
            "has: those can never be placed and count as dropped. A typo?"
        )
    return out


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
