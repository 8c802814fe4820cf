"""Planning time of the Rescheduler (placement by migration) per waiting job.

Cluster: `--nodes` nodes of 8 GPUs (64 cpu). Most run the requirements' fragmentation,
a 4-GPU and a 3-GPU pod (1 GPU free); every `--spare-every`-th node runs a 5-GPU pod only
(3 GPUs free), the only places a 3-GPU pod can move to. Every running pod is owned by a
ReplicaSet and has run long enough. A waiting job asks for 4 GPUs: it fits nowhere, and
there is nothing of lower priority to preempt; the Rescheduler must find a 3-GPU pod to
move to a spare node.

Measured, for `--jobs` waiting jobs:
  * plan: the Rescheduler's planning alone (`Rescheduler.plan`: candidate search over the
    node table, cover, verification in a transaction), on the cluster as it is;
  * cycle: a whole scheduling cycle of a waiting job through the scheduler (Filter fails
    everywhere, DefaultPreemption finds nothing, the Rescheduler plans, the scheduler
    commits the eviction and the nominations); each job's plan is executed, so later
    jobs see the earlier moves.
Wall time in milliseconds per job (mean and p99) and process CPU time (mean; the
figure to read on a loaded machine). It checks that every job got a plan
that moves exactly one pod and was then bound, and exits 1 otherwise.
  python bench/rescheduler_planning.py [--nodes 5000] [--jobs 50] [--spare-every 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from shoal.config import parse_config
from shoal.plugins.rescheduler import Rescheduler, with_rescheduler
from shoal.testing.builders import PodBuilder, make_node, make_pod
from shoal.testing.harness import SchedulerHarness

GPU = "nvidia.com/gpu"
PROFILE = "shoal"


def running_pod(name: str, gpus: int, node: str) -> PodBuilder:
    return (
        make_pod(name)
        .req({GPU: gpus}, cpu="1")
        .scheduler_name(PROFILE)
        .owner("ReplicaSet", f"rs-{name}")
        .node(node)
    )


def waiting_pod(i: int) -> PodBuilder:
    return make_pod(f"job-{i}").req({GPU: 4}, cpu="1").scheduler_name(PROFILE)


def build(nodes: int, spare_every: int) -> SchedulerHarness:
    config = with_rescheduler(
        parse_config({"profiles": [{"schedulerName": PROFILE}]}),
        {"minRunSeconds": 0, "movesPerHour": 100_000, "movesPerHourPerQueue": 100_000},
    )
    h = SchedulerHarness(config, echo_binds=True)
    h.add_nodes(
        *(make_node(f"n{i}").capacity({GPU: 8}, cpu="64", memory="256Gi") for i in range(nodes))
    )
    pods = []
    for i in range(nodes):
        if i % spare_every == spare_every - 1:
            pods.append(running_pod(f"spare-{i}", 5, f"n{i}"))
        else:
            pods.append(running_pod(f"a-{i}", 4, f"n{i}"))
            pods.append(running_pod(f"b-{i}", 3, f"n{i}"))
    h.add_pods(*pods)
    return h


def rescheduler_of(h: SchedulerHarness) -> Rescheduler:
    framework = h.scheduler.profiles[PROFILE]
    return next(p for p in framework.plugins.post_filter if isinstance(p, Rescheduler))


def ms(samples: list[float], cpu: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return (
        f"wall mean {statistics.fmean(samples) * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms; "
        f"cpu mean {statistics.fmean(cpu) * 1e3:.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--spare-every", type=int, default=5)
    args = parser.parse_args()

    started = time.perf_counter()
    h = build(args.nodes, args.spare_every)
    print(
        f"cluster: {args.nodes} nodes, {len(h.scheduler.cluster.placed)} running pods "
        f"(built in {time.perf_counter() - started:.1f} s)"
    )
    rescheduler = rescheduler_of(h)
    now = h.clock.now()
    plans: list[float] = []
    plans_cpu: list[float] = []
    failures = 0
    for i in range(args.jobs):
        info = h.scheduler.pod_info(waiting_pod(10_000 + i).obj())
        t0, c0 = time.perf_counter(), time.process_time()
        plan = rescheduler.plan(info, None, now, 4)
        plans.append(time.perf_counter() - t0)
        plans_cpu.append(time.process_time() - c0)
        if plan is None or len(plan.moves) != 1:
            failures += 1
    print(f"plan  ({args.jobs} jobs): {ms(plans, plans_cpu)}")

    cycles: list[float] = []
    cycles_cpu: list[float] = []
    scheduler = h.scheduler
    for i in range(args.jobs):
        h.add_pods(waiting_pod(i))
        t0, c0 = time.perf_counter(), time.process_time()
        result = scheduler.schedule_one()
        cycles.append(time.perf_counter() - t0)
        cycles_cpu.append(time.process_time() - c0)
        message = result.message if result is not None else "no cycle"
        if "rescheduler: plan" not in message:
            print(f"job {i}: no plan: {message}", file=sys.stderr)
            failures += 1
        h.advance(15)  # the eviction lands; the job is bound on its retry after backoff
    print(f"cycle ({args.jobs} jobs): {ms(cycles, cycles_cpu)}")
    moved = sum(1 for r in h.evicted.values() if r.startswith("rescheduled by plan"))
    bound = sum(1 for i in range(args.jobs) if h.node_of(f"default/job-{i}"))
    print(f"moves executed: {moved}; waiting jobs bound: {bound}/{args.jobs}")
    failures += args.jobs - bound
    if failures or moved != args.jobs:
        print(f"FAILED: {failures} job(s) without a one-move plan", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
