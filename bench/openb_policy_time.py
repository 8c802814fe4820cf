"""Run time of openb policies on one trace, side by side in one process (needs
../shared/traces/openb): each policy's run on the default trace (seed 42), as pods/s
of the run (so `bench/ab.py` can compare revisions) and its seconds, then the ratio of
each policy's time to the first one's (issue 24: FragGuard's run time <= FGD's).
  python bench/openb_policy_time.py [--policy FGD,FragGuard] [--trace default]
      [--repeat 1]
"""

from __future__ import annotations

import argparse
import time

from shoal.experiments.openb.runner import run_one
from shoal.experiments.openb.trace import find_trace_dir, load_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--policy", default="FGD,FragGuard")
    parser.add_argument("--trace", default="default")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=1, help="runs per policy, alternating")
    args = parser.parse_args()
    folder = find_trace_dir()
    if folder is None:
        raise SystemExit("openb trace not found (../shared/traces/openb)")
    trace = load_trace(folder, args.trace)
    policies = args.policy.split(",")
    seconds: dict[str, list[float]] = {p: [] for p in policies}
    for _ in range(args.repeat):
        for policy in policies:
            start = time.perf_counter()
            result = run_one(trace, policy, seed=args.seed)
            took = time.perf_counter() - start
            seconds[policy].append(took)
            print(
                f"{policy} on {args.trace}: {result.pods / took:.0f} pods/s ({took:.2f} s, "
                f"unallocated {result.unallocated:.2f} %)"
            )
    first = min(seconds[policies[0]])
    for policy in policies[1:]:
        print(f"{policy} / {policies[0]} time (best runs): {min(seconds[policy]) / first:.2f}")


if __name__ == "__main__":
    main()
