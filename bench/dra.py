"""Dynamic Resource Allocation in memory: pods with one-GPU claims against ResourceSlices,
beside the same pods asking for `nvidia.com/gpu: 1` (an extended resource), in one run.

Nodes publish `--gpus` GPUs each in a ResourceSlice (and, for the baseline, the same
number as allocatable nvidia.com/gpu); every pod has a claim from one template (one device
of the class), as a Job's pods would. Prints pods/s for both and their ratio, and checks
that no device went to two claims. Usage:
  python bench/dra.py [--nodes 1000] [--gpus 8] [--pods 4000]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from shoal.framework.effects import AllocateClaims, Effect
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import claim_template, device_class, gpu_slice, with_claims

GPU = "nvidia.com/gpu"


def run_claims(nodes: int, gpus: int, pods: int) -> tuple[float, int, int]:
    """(seconds, pods bound, devices given twice)."""
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="64", memory="512Gi") for i in range(nodes)))
    h.add_dra(device_class(), claim_template("one-gpu"))
    h.add_dra(*(gpu_slice(f"n{i}", count=gpus) for i in range(nodes)))
    given: Counter[tuple[str, str, str]] = Counter()

    def record(effect: Effect) -> None:
        if isinstance(effect, AllocateClaims):
            for claim in effect.claims:
                for _, driver, pool, device in claim.results:
                    given[(driver, pool, device)] += 1

    h.effects.listeners.append(record)
    h.add_pods(
        *(
            with_claims(make_pod(f"p{i}").req(cpu="1"), templates={"gpu": "one-gpu"})
            for i in range(pods)
        )
    )
    start = time.perf_counter()
    h.run()
    seconds = time.perf_counter() - start
    bound = len(h.scheduler.cluster.placed)
    return seconds, bound, sum(1 for n in given.values() if n > 1)


def run_extended(nodes: int, gpus: int, pods: int) -> tuple[float, int]:
    h = SchedulerHarness()
    h.add_nodes(
        *(make_node(f"n{i}").capacity({GPU: gpus}, cpu="64", memory="512Gi") for i in range(nodes))
    )
    h.add_pods(*(make_pod(f"p{i}").req({GPU: 1}, cpu="1") for i in range(pods)))
    start = time.perf_counter()
    h.run()
    return time.perf_counter() - start, len(h.scheduler.cluster.placed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=4000)
    args = parser.parse_args()
    seconds, bound, twice = run_claims(args.nodes, args.gpus, args.pods)
    base_seconds, base_bound = run_extended(args.nodes, args.gpus, args.pods)
    claims_rate, base_rate = bound / seconds, base_bound / base_seconds
    print(f"DRA {args.nodes} nodes x {args.gpus} GPUs, {args.pods} pods with one-GPU claims")
    print(f"  claims: {bound} bound in {seconds:.2f} s: {claims_rate:.0f} pods/s")
    print(
        f"  extended resource: {base_bound} bound in {base_seconds:.2f} s: {base_rate:.0f} pods/s"
    )
    print(f"  ratio claims / extended resource: {claims_rate / base_rate:.2f}")
    print(f"  devices given to two claims: {twice}")


if __name__ == "__main__":
    main()
