"""Speed of the openb experiment on the real scheduler (needs ../shared/traces/openb).

Prints the seconds of one run (default trace, ~10.6k pods after inflation, 1213 nodes,
FGD, then FragBlend) and of the whole 6 policies x 10 seeds sweep on default with local workers.
  python bench/openb_experiment.py [--sweep] [--workers 2]
"""

from __future__ import annotations

import argparse
import time

from shoal.experiments.openb.runner import run_one, run_sweep
from shoal.experiments.openb.trace import find_trace_dir, load_trace

POLICIES = ["Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sweep", action="store_true", help="also time the 60-run sweep")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    folder = find_trace_dir()
    if folder is None:
        raise SystemExit("openb trace not found (../shared/traces/openb)")
    trace = load_trace(folder, "default")
    start = time.perf_counter()
    result = run_one(trace, "FGD", seed=42)
    one = time.perf_counter() - start
    print(
        f"one run: default / FGD / seed 42: {result.pods} pods, {len(trace.nodes)} nodes, "
        f"{one:.1f} s (target < 10 s), unallocated {result.unallocated:.2f} %"
    )
    start = time.perf_counter()
    blend = run_one(trace, "FragBlend", seed=42)
    print(
        f"one run: default / FragBlend / seed 42: {time.perf_counter() - start:.1f} s, "
        f"unallocated {blend.unallocated:.2f} %"
    )
    if args.sweep:
        start = time.perf_counter()
        results = run_sweep(folder, ["default"], POLICIES, range(42, 52), workers=args.workers)
        sweep = time.perf_counter() - start
        print(
            f"sweep: default x 6 policies x 10 seeds = {len(results)} runs on "
            f"{args.workers} workers: {sweep:.0f} s (target < 300 s)"
        )


if __name__ == "__main__":
    main()
