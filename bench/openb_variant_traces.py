"""Write synthetic members of the openb trace family, resampled from `default`, to check
that a placement policy generalises beyond the nine published files.

Each variant draws pods (with replacement, seeded) from the default trace until its GPU
demand equals the default's, drawing from one task category whenever that category's
share of the GPU demand so far is below the target share:
  multigpu50  50 % of GPU demand from multi-GPU tasks
  gpushare80  80 % from GPU-sharing (< 1 GPU) tasks
  whole70     70 % from single whole-GPU tasks

  python bench/openb_variant_traces.py OUT_DIR
  shoal experiment openb --trace-dir OUT_DIR --trace all --policy FGD,FragBlend
"""

from __future__ import annotations

import argparse
import csv
import random
import shutil
from pathlib import Path

from shoal.experiments.openb.trace import find_trace_dir

VARIANTS = {  # name -> (category, share of GPU demand, seed)
    "multigpu50": ("multi", 0.5, 1),
    "gpushare80": ("share", 0.8, 2),
    "whole70": ("whole", 0.7, 3),
}


def gpu_milli(row: dict[str, str]) -> int:
    return int(row["num_gpu"]) * int(row["gpu_milli"])


def category(row: dict[str, str]) -> str:
    count, milli = int(row["num_gpu"]), int(row["gpu_milli"])
    if count == 0:
        return "cpu"
    if count >= 2:
        return "multi"
    return "share" if milli < 1000 else "whole"


def variant(rows: list[dict[str, str]], cat: str, share: float, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    inside = [r for r in rows if category(r) == cat]
    outside = [r for r in rows if category(r) != cat]
    total = sum(gpu_milli(r) for r in rows)
    picked: list[dict[str, str]] = []
    in_cat = so_far = 0
    while so_far < total:
        below = so_far == 0 or in_cat / so_far < share
        row = rng.choice(inside if below else outside)
        picked.append(row)
        so_far += gpu_milli(row)
        in_cat += gpu_milli(row) if category(row) == cat else 0
    return [{**r, "name": f"openb-pod-{i:04d}"} for i, r in enumerate(picked)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args()
    source = find_trace_dir()
    if source is None:
        raise SystemExit("openb trace not found (../shared/traces/openb)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(source / "openb_node_list_gpu_node.csv", args.out_dir)
    with (source / "openb_pod_list_default.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    for name, (cat, share, seed) in VARIANTS.items():
        pods = variant(rows, cat, share, seed)
        with (args.out_dir / f"openb_pod_list_{name}.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(pods)
        print(f"{name}: {len(pods)} pods")


if __name__ == "__main__":
    main()
