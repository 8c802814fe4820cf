"""Generate members of the openb trace family from the default trace, with a seed.

The published variants (gpushare40/60, multigpu20/30, gpuspec10/20, cpu050/100) are the
default trace's tasks resampled or re-labelled so that one property changes. A family
member here sets all four at once:

* `gpu_share`: % of the GPU demand (milli-GPU) asked by GPU-sharing tasks (one device,
  < 1000 milli); default trace: 28.5 %, gpushare60: 60 %;
* `multi_gpu`: % of the GPU demand asked by multi-GPU tasks (2, 4 or 8 whole devices);
  default: 7.3 %, multigpu30: 30 %. The rest of the demand is single whole-GPU tasks,
  so `gpu_share + multi_gpu` must be <= 100;
* `constrained`: % of the GPU tasks that may only run on some GPU models (`gpu_spec`);
  gpuspec20: 20 %;
* `cpu_only`: CPU-only tasks in the unit of the published file names, per mille of all
  tasks (cpu050: 5.0 % of the tasks are CPU-only, cpu100: 10 %; default: 133).

Every task is a real task of the default trace (its cpu, memory, GPU shape, and its other
columns), drawn with replacement: each draw takes the GPU category whose share of the
demand drawn so far is furthest below its target, then a uniformly random task of that
category, until the GPU demand equals the default trace's. CPU-only tasks are then drawn
until they are `cpu_only` per mille of all tasks. Model constraints are attached to a
random `constrained` % of the GPU tasks: one model (70 %) or two to three models, drawn
among the models whose nodes can host the task, in proportion to those nodes' GPUs.
The node list is the default one, copied unchanged.
"""

from __future__ import annotations

import csv
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shoal.api.gpu import GPU_MILLI
from shoal.experiments.openb.trace import (
    DEFAULT_NODE_FILE,
    POD_COLUMNS,
    POD_FILE_PREFIX,
    NodeRow,
    PodRow,
    load_nodes,
    load_pods,
)

__all__ = [
    "FAMILY_RANGES",
    "FamilyParams",
    "FamilyStats",
    "generate",
    "grid",
    "measure",
    "write_family",
]

FAMILY_RANGES = {
    "gpu_share": (20.0, 100.0),
    "multi_gpu": (20.0, 50.0),
    "constrained": (5.0, 33.0),
    "cpu_only": (0.0, 300.0),
}
"""The ranges of the family the grid covers (units as in `FamilyParams`)."""

_CATEGORIES = ("share", "whole", "multi")


@dataclass(frozen=True)
class FamilyParams:
    """One member of the family (see the module docstring for the units)."""

    gpu_share: float
    multi_gpu: float
    constrained: float
    cpu_only: float
    seed: int

    def __post_init__(self) -> None:
        for name in ("gpu_share", "multi_gpu", "constrained"):
            value = getattr(self, name)
            if not 0 <= value <= 100:
                raise ValueError(f"{name}: {value} must be a percentage in 0..100")
        if self.gpu_share + self.multi_gpu > 100:
            raise ValueError(
                f"gpu_share + multi_gpu = {self.gpu_share + self.multi_gpu} must be <= 100 "
                "(the rest of the GPU demand is single whole-GPU tasks)"
            )
        if not 0 <= self.cpu_only < 1000:
            raise ValueError(f"cpu_only: {self.cpu_only} must be per mille of tasks in 0..999")

    @property
    def name(self) -> str:
        return (
            f"share{round(self.gpu_share):03d}-multi{round(self.multi_gpu):02d}"
            f"-spec{round(self.constrained):02d}-cpu{round(self.cpu_only):03d}-s{self.seed}"
        )


@dataclass(frozen=True)
class FamilyStats:
    """What a pod list actually has, in the units of `FamilyParams`."""

    gpu_share: float
    multi_gpu: float
    constrained: float
    cpu_only: float
    pods: int
    gpu_milli: int


def _category(pod: PodRow) -> str:
    if not pod.num_gpu:
        return "cpu"
    if pod.num_gpu >= 2:
        return "multi"
    return "share" if pod.gpu_milli < GPU_MILLI else "whole"


def measure(pods: Sequence[PodRow]) -> FamilyStats:
    """The family parameters of a pod list (for checks and the docs)."""
    demand = {c: 0 for c in (*_CATEGORIES, "cpu")}
    gpu_tasks = constrained = cpu_tasks = 0
    for pod in pods:
        cat = _category(pod)
        demand[cat] += pod.total_milli
        if cat == "cpu":
            cpu_tasks += 1
        else:
            gpu_tasks += 1
            constrained += bool(pod.gpu_spec)
    total = sum(demand.values()) or 1
    return FamilyStats(
        gpu_share=100.0 * demand["share"] / total,
        multi_gpu=100.0 * demand["multi"] / total,
        constrained=100.0 * constrained / max(gpu_tasks, 1),
        cpu_only=1000.0 * cpu_tasks / max(len(pods), 1),
        pods=len(pods),
        gpu_milli=total,
    )


def _spec_choices(pod: PodRow, nodes: Sequence[NodeRow]) -> tuple[list[str], np.ndarray]:
    """Models whose nodes can host the pod, weighted by those nodes' GPUs (so that every
    model's pool gets constrained demand in proportion to its size)."""
    counts: dict[str, int] = {}
    for node in nodes:
        if node.model:
            counts.setdefault(node.model, 0)
            if (
                node.gpus >= pod.num_gpu
                and node.cpu_milli >= pod.cpu_milli
                and node.memory_mib >= pod.memory_mib
            ):
                counts[node.model] += node.gpus
    models = sorted(m for m, c in counts.items() if c)
    weights = np.array([counts[m] for m in models], dtype=np.float64)
    return models, weights / max(weights.sum(), 1.0)


def generate(
    default_pods: Sequence[PodRow], nodes: Sequence[NodeRow], params: FamilyParams
) -> list[PodRow]:
    """A family member's pods, named `openb-pod-0000`... (deterministic per params)."""
    rng = np.random.default_rng(params.seed)
    pools = {c: [p for p in default_pods if _category(p) == c] for c in (*_CATEGORIES, "cpu")}
    target = {
        "share": params.gpu_share / 100.0,
        "multi": params.multi_gpu / 100.0,
        "whole": 1.0 - (params.gpu_share + params.multi_gpu) / 100.0,
    }
    for cat, share in target.items():
        if share > 0 and not pools[cat]:
            raise ValueError(f"the default trace has no {cat} GPU tasks to draw from")
    goal = sum(p.total_milli for p in default_pods)
    drawn: list[PodRow] = []
    demand = dict.fromkeys(_CATEGORIES, 0)
    total = 0
    while total < goal:
        # The category furthest below its target share of the demand so far.
        cat = max(_CATEGORIES, key=lambda c: target[c] * (total + 1) - demand[c])
        pod = pools[cat][int(rng.integers(len(pools[cat])))]
        drawn.append(pod)
        demand[cat] += pod.total_milli
        total += pod.total_milli
    gpu_tasks = len(drawn)
    fraction = params.cpu_only / 1000.0
    cpu_tasks = round(fraction / (1.0 - fraction) * gpu_tasks) if fraction else 0
    if cpu_tasks and not pools["cpu"]:
        raise ValueError("the default trace has no CPU-only tasks to draw from")
    drawn += [pools["cpu"][int(i)] for i in rng.integers(len(pools["cpu"]) or 1, size=cpu_tasks)]
    # Model constraints on a random subset of the GPU tasks.
    specs = [""] * len(drawn)
    n_constrained = round(params.constrained / 100.0 * gpu_tasks)
    choices: dict[tuple[int, int, int], tuple[list[str], np.ndarray]] = {}
    for i in sorted(int(i) for i in rng.choice(gpu_tasks, n_constrained, replace=False)):
        pod = drawn[i]
        key = (pod.num_gpu, pod.cpu_milli, pod.memory_mib)
        if key not in choices:
            choices[key] = _spec_choices(pod, nodes)
        models, weights = choices[key]
        if not models:
            continue  # no model can host it alone; it stays unconstrained
        k = 1 if rng.random() < 0.7 else int(rng.integers(2, 4))
        k = min(k, len(models))
        picked = rng.choice(len(models), k, replace=False, p=weights)
        specs[i] = "|".join(sorted(models[int(j)] for j in picked))
    order = rng.permutation(len(drawn))
    out: list[PodRow] = []
    for n, i in enumerate(order):
        pod = drawn[int(i)]
        out.append(
            PodRow(
                f"openb-pod-{n:05d}",
                pod.cpu_milli,
                pod.memory_mib,
                pod.num_gpu,
                pod.gpu_milli,
                specs[int(i)],
                pod.creation_time,
                pod.deletion_time,
                pod.scheduled_time,
                pod.phase,
                pod.qos,
            )
        )
    return out


def _write_pods(path: Path, pods: Sequence[PodRow]) -> None:
    def text(value: int | None) -> str:
        return "" if value is None else str(value)

    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(POD_COLUMNS)
        for p in pods:
            writer.writerow(
                (
                    p.name,
                    p.cpu_milli,
                    p.memory_mib,
                    p.num_gpu,
                    p.gpu_milli,
                    p.gpu_spec,
                    p.qos,
                    p.phase,
                    text(p.creation_time),
                    text(p.deletion_time),
                    text(p.scheduled_time),
                )
            )


def grid(seed: int, size: int = 24) -> list[FamilyParams]:
    """`size` family members spread over FAMILY_RANGES (a Latin hypercube drawn with
    `seed`; members whose sharing and multi-GPU shares add up to more than 100 % take
    the multi-GPU share down to 100 - sharing share, so the top of the sharing range
    comes with less multi-GPU demand than 20 %)."""
    if size < 1:
        raise ValueError("grid size must be >= 1")
    rng = np.random.default_rng([seed, 7])
    columns = []
    for lo, hi in FAMILY_RANGES.values():
        strata = (rng.permutation(size) + rng.random(size)) / size
        columns.append(lo + strata * (hi - lo))
    members = []
    for i in range(size):
        share, multi, spec, cpu = (float(np.round(c[i])) for c in columns)
        multi = min(multi, 100.0 - share)
        members.append(FamilyParams(share, multi, spec, cpu, seed * 1000 + i))
    return members


def write_family(
    source_dir: Path, out_dir: Path, members: Sequence[FamilyParams]
) -> list[tuple[FamilyParams, FamilyStats]]:
    """Write each member's pod list and the default node list into `out_dir`."""
    default_pods = load_pods(source_dir / f"{POD_FILE_PREFIX}default.csv")
    nodes = load_nodes(source_dir / DEFAULT_NODE_FILE)
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source_dir / DEFAULT_NODE_FILE, out_dir / DEFAULT_NODE_FILE)
    written = []
    for params in members:
        pods = generate(default_pods, nodes, params)
        _write_pods(out_dir / f"{POD_FILE_PREFIX}{params.name}.csv", pods)
        written.append((params, measure(pods)))
    return written
