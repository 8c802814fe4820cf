"""Where a policy's unallocated GPUs are at arrived = 100 %, and how far its share
leftovers are from what any packing of the same shared pods must leave.

    .venv/bin/python bench/openb_share_leftovers.py --trace all --policy FragGuard --seed 42

For each trace: one run of the openb protocol (`run_one`), split of the free GPU when
arrived first reaches 100 % (`runner.stranded`: left over on devices holding shared pods,
whole idle devices), and for the shared pods placed by then (one device, < 1000 milli):

* `offline BFD`: the leftovers if those same pods were packed offline, largest first,
  each into the device with the least room that fits (best-fit decreasing), ignoring
  cpu, memory and nodes: a packing no online policy is promised, for scale;
* `lower bound`: (B x 1000 - their milli) where B is a lower bound on the number of
  1000-milli devices they need (`devices_needed_lower_bound`): no placement of those
  pods leaves less.

All in % of the cluster's GPU capacity. `--workers` runs traces in parallel.
"""

from __future__ import annotations

import argparse
import bisect
import math
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from shoal.api.gpu import GPU_MILLI
from shoal.experiments.openb.runner import run_one
from shoal.experiments.openb.trace import PodRow, find_trace_dir, list_traces, load_trace


def best_fit_decreasing_leftover(sizes: list[int], room: int = GPU_MILLI) -> int:
    """Milli left free on the devices that best-fit decreasing opens for `sizes`."""
    gaps: list[int] = []  # free milli of the open devices, ascending
    for size in sorted(sizes, reverse=True):
        at = bisect.bisect_left(gaps, size)
        free = gaps.pop(at) if at < len(gaps) else room
        if free > size:
            bisect.insort(gaps, free - size)
    return sum(gaps)


def devices_needed_lower_bound(sizes: list[int], room: int = GPU_MILLI) -> int:
    """A lower bound on the number of bins of `room` for `sizes`: the best of Martello and
    Toth's L2 and Fekete and Schepers' dual feasible functions u_k, k = 1..20 (an item
    of size x counts floor((k+1)x)/k bins, or x when (k+1)x is whole)."""
    items = np.asarray(sizes, dtype=np.int64)
    best = math.ceil(int(items.sum()) / room)
    for k in range(1, 21):
        whole = ((k + 1) * items) % room == 0
        units = np.where(whole, items * k, ((k + 1) * items // room) * room)  # x k x room
        best = max(best, math.ceil(int(units.sum()) / (k * room) - 1e-9))
    for alpha in sorted({0, *(int(x) for x in items if x <= room // 2)}):
        big = items[items > room - alpha]
        middle = items[(items > room / 2) & (items <= room - alpha)]
        small = items[(items >= alpha) & (items <= room / 2)]
        spare = len(middle) * room - int(middle.sum())
        best = max(
            best,
            len(big) + len(middle) + max(0, math.ceil((int(small.sum()) - spare) / room)),
        )
    return best


def one(trace_dir: str, name: str, policy: str, seed: int) -> str:
    trace = load_trace(Path(trace_dir), name)
    shares: list[int] = []
    crossed = False

    def on_pod(row: PodRow, placed: bool, arrived: float) -> None:
        nonlocal crossed
        if crossed:
            return
        if placed and row.num_gpu == 1 and 0 < row.gpu_milli < GPU_MILLI:
            shares.append(row.gpu_milli)
        crossed = arrived >= 100.0

    run = run_one(trace, policy, seed, on_pod=on_pod)
    capacity = trace.gpu_capacity_milli
    offline = best_fit_decreasing_leftover(shares)
    bound = devices_needed_lower_bound(shares) * GPU_MILLI - sum(shares) if shares else 0
    return (
        f"| {name} | {run.policy} | {seed} | {run.unallocated:.2f} | {run.leftover or 0:.2f} | "
        f"{run.idle or 0:.2f} | {len(shares)} | {100 * offline / capacity:.2f} | "
        f"{100 * bound / capacity:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace-dir", type=Path, default=None)
    parser.add_argument("--trace", default="default", help="names, comma-separated, or all")
    parser.add_argument("--policy", default="FragGuard")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    folder = find_trace_dir(args.trace_dir)
    if folder is None:
        raise SystemExit("no openb trace found; pass --trace-dir")
    names = list_traces(folder) if args.trace == "all" else args.trace.split(",")
    print(
        "| trace | policy | seed | unallocated % | share leftovers % | idle GPUs % | "
        "shared pods | offline BFD % | lower bound % |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with ProcessPoolExecutor(max(1, args.workers)) as pool:
        jobs = [pool.submit(one, str(folder), n, args.policy, args.seed) for n in names]
        for job in jobs:
            print(job.result(), flush=True)


if __name__ == "__main__":
    main()
