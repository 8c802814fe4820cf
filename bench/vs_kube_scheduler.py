"""Shoal and the stock kube-scheduler side by side on the same real API server.

For every shape and every scheduler this starts a fresh control plane from the kit in
../shared/k8s (kube-apiserver + etcd; `up.sh`), creates the nodes and all the pending
pods up front, then starts the scheduler as its own process with the same
KubeSchedulerConfiguration (client QPS/burst, no leader election, one profile) and
times the binds through a watch. Both schedulers therefore get identical clusters,
identical client rate limits and the same cold start (informer list included).

Shapes:
  basic       scheduler_perf's SchedulingBasic: nodes of 4 CPU / 32Gi / 110 pods,
              pods of 100m / 500Mi (node-default.yaml, pod-default.yaml).
  gang-queue  the same nodes and pods, grouped into scheduler-plugins PodGroups of
              --gang-size pods (minMember = size) in 4 namespaces bound to 4 Queues
              (guarantee and max each big enough for a quarter of the pods). Shoal
              schedules them as gangs under its queues; kube-scheduler, which knows
              neither, places the same pods one by one (its number is the upper bound
              of what a gang-unaware scheduler does with them).
  upstream-gang  the same nodes and pods in Kubernetes' own gangs: scheduling.k8s.io
              v1alpha2 PodGroups of --gang-size (gang minCount = size), pods naming
              them in spec.schedulingGroup; the API server runs with GenericWorkload
              and kube-scheduler with its GangScheduling plugin (both alpha in v1.36).
  dra         Dynamic Resource Allocation (resource.k8s.io/v1, GA in v1.36): one
              DeviceClass, every node publishing --gpus GPUs in a ResourceSlice (one
              pool per node, as a DRA driver would), every pod (100m / 500Mi) with a
              one-GPU ResourceClaim; kube-scheduler's DynamicResources and Shoal's
              allocate the devices, write each claim's status and bind. The kit runs no
              kube-controller-manager, so no resource-claim controller turns templates
              into claims: the claims are created up front, one per pod, and named by
              the pods (spec.resourceClaims[].resourceClaimName), for both schedulers.
              Checked after the run from the claims' status: devices given to two
              claims, claims not allocated, pods bound elsewhere than their devices or
              missing from their claim's reservedFor (the bare binder allocates nothing,
              so not checked for it).
  preemption  scheduler_perf's PreemptionBasic: the same nodes, each already full with
              4 low-priority pods (priority 0, no PriorityClass, 900m / 500Mi: 3.6 of
              4 cpu; --init-pods, default 4 per node), then --pods high-priority pods
              (PriorityClass `high`, value 10, 3000m / 500Mi; default min(nodes, 1000),
              as scheduler_perf's 500 nodes / 500 and 5000 nodes / 1000) that fit
              nowhere: each must preempt 3 low pods. The low pods are created already
              bound (spec.nodeName, round-robin 4 per node: the only placement there is),
              identical for both schedulers and not timed; only the high pods are
              pending when the scheduler starts, and only their binds are timed.
              No kubelet runs, so an evicted pod (kube-scheduler DELETEs its victims
              after a DisruptionTarget status patch, Shoal POSTs pods/eviction; both with
              the pod's grace period) would stay Terminating for ever: the harness plays
              the kubelet for both sides, watching the pods and force-deleting
              (gracePeriodSeconds=0, uid precondition) every pod with a deletionTimestamp.
              Checked after the run: low pods evicted (gone or terminating; the minimum
              is 3 per preemptor), high pods deleted (must be 0), nodes overcommitted by
              bound pods that are not terminating. `bare` here evicts 3 low pods of a
              node through pods/eviction and binds a high pod there (round-robin, 64
              preemptors in flight, not waiting for the victims to go): no scheduling,
              the API server's ceiling for the writes a preemption needs.
              Also printed: when the deletions and the binds came (per second of the
              run). Compare overall rates: kube-scheduler binds its preemptors only after
              its last preemption (a retried pod queues behind those not tried yet), so
              its steady rate (first bind -> last bind) means nothing here.

Reported per run: pods/s over the whole run (scheduler start to last bind, informer
sync included), steady pods/s (first bind to last bind) and pods/s to the scheduler's
last write (its events and statuses may follow its binds); the write requests per pod
the API server served, by resource; then the ratios Shoal / kube-scheduler. CPU
milliseconds per pod, of the scheduler process and of kube-apiserver + etcd from the
start to the last write, show where the cores went (wall-clock rates depend on what else
the machine runs; CPU per pod much less). After each run every pod's requests are
summed per node against the node's allocatable: no node may be overcommitted.

  python bench/vs_kube_scheduler.py [--nodes 5000] [--pods 10000] [--qps 1000]
      [--burst 2000] [--shape basic,gang-queue] [--scheduler kube,shoal,shoal-x2,bare]
      [--repeat 1] [--gpus 8]
  python bench/vs_kube_scheduler.py --shape dra --nodes 1000 --pods 4000 \
      --scheduler kube,shoal,bare
  python bench/vs_kube_scheduler.py --shape preemption --nodes 500 --scheduler kube,shoal,bare

`shoal-x2` (x3, x4, x8) runs that many `shoal run` replicas at once, each with its own
identity and leader election off: they split the nodes into node shards and route the
pods between them (docs/kubernetes.md, "Several active replicas"); the scheduler CPU is
the sum over the replicas.

Over-subscribed runs (fewer nodes than the pods need): `--expect N` waits for N binds
(the room there is), then `--settle` seconds more; the report counts the gangs left
partly bound (some members but fewer than the gang) and the pods bound at the end.

`bare` is no scheduler: a client that only POSTs the Bindings (round-robin, 64 in
flight, the same QPS/burst), so its rate is the API server's own ceiling for binds on
this machine, printed beside each scheduler's rate.

Shoal's Python sources are compiled to bytecode (`compileall`, into their __pycache__)
before the runs, as `pip install` does for the image in deploy/Dockerfile: otherwise a
machine with PYTHONDONTWRITEBYTECODE set (this one) charges every start about 0.3 s of
compiling the sources that no deployed scheduler pays.

Needs ../shared/k8s (or SHOAL_K8S_KIT). The etcd, apiserver, scheduler and this
script share the machine's cores: compare ratios measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import shoal
from shoal.api.quantity import parse_quantity
from shoal.drivers.kube.client import (
    ApiError,
    ClientSettings,
    KubeClient,
    Undecodable,
    connect,
)
from shoal.drivers.kube.dra import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from shoal.drivers.kube.resources import (
    NAMESPACES,
    NODES,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUE_BINDINGS,
    QUEUES,
)

ROOT = Path(__file__).resolve().parents[1]
KIT = Path(os.environ.get("SHOAL_K8S_KIT") or ROOT.parent / "shared" / "k8s")
SCHEDULER_NAME = "bench"
NAMESPACE_COUNT = 4
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
MERGE = "application/merge-patch+json"
PORT_VARIABLES = ("API_PORT", "ETCD_CLIENT_PORT", "ETCD_PEER_PORT", "SCHED_PORT")
JSON = dict[str, Any]


@dataclass
class Result:
    shape: str
    scheduler: str
    pods: int
    bound: int
    total_seconds: float  # scheduler start -> last bind
    steady_seconds: float  # first bind -> last bind
    overcommitted: int
    scheduler_cpu: float  # CPU seconds the scheduler process used during the run
    control_plane_cpu: float  # CPU seconds of kube-apiserver + etcd during the run
    partial_gangs: int = 0  # gangs with some but not all members bound at the end
    bound_at_end: int = 0  # pods with a node when the run ended (after --settle)
    claims: ClaimCheck | None = None  # shape dra: what the claims' status says
    preemption: PreemptionCheck | None = None  # shape preemption: what was evicted
    # write requests the API server served during the run, by resource[/subresource]
    # (the benchmark's own writes included: its kubelet's deletes in shape preemption)
    writes: Counter[str] = field(default_factory=Counter)
    written_seconds: float = 0.0  # scheduler start -> its last write of the run (~0.5 s)

    @property
    def pods_per_second_written(self) -> float:
        """Pods per second until the scheduler's writes (events, statuses) were done too."""
        return self.bound / self.written_seconds if self.written_seconds > 0 else 0.0

    @property
    def pods_per_second(self) -> float:
        return self.bound / self.total_seconds if self.total_seconds > 0 else 0.0

    @property
    def steady_pods_per_second(self) -> float:
        return (self.bound - 1) / self.steady_seconds if self.steady_seconds > 0 else 0.0


@dataclass
class ClaimCheck:
    """Shape dra, after the run, from the claims' status and the pods' nodes."""

    claims: int  # ResourceClaims in the cluster
    allocated: int  # with status.allocation
    devices: int  # devices named by all allocations
    double_allocated: int  # devices named by more than one claim's allocation
    misplaced: int  # bound pods whose claim is unallocated, on other nodes' devices,
    #                 or whose status.reservedFor does not name the pod


@dataclass
class PreemptionCheck:
    """Shape preemption, after the run, from the pods left and the harness's deletes."""

    init_pods: int  # low-priority pods created (bound) before the run
    evicted: int  # of those, gone or terminating at the end
    high_deleted: int  # high-priority pods gone or terminating (must be 0)
    terminating: int  # pods still terminating at the end (the harness had not caught up)
    force_deleted: int  # pods the harness (the kubelet's stand-in) finalised
    # seconds after the scheduler's start: first and last deletion seen, first and last
    # preemptor bound; and per second of the run, deletions seen and preemptors bound
    first_eviction: float = 0.0
    last_eviction: float = 0.0
    first_bind: float = 0.0
    last_bind: float = 0.0
    evictions_per_second: list[int] = field(default_factory=list)
    binds_per_second: list[int] = field(default_factory=list)


# ---- the control plane ------------------------------------------------------------------


# Kubernetes' own gang API (v1.36 alpha): served by the API server, used by
# kube-scheduler's GangScheduling plugin.
WORKLOAD_GATES = "GenericWorkload=true,GangScheduling=true"
WORKLOAD_API = "--runtime-config=scheduling.k8s.io/v1alpha2=true"


@contextlib.contextmanager
def control_plane(workload_api: bool = False) -> Iterator[tuple[Path, dict[str, str]]]:
    with tempfile.TemporaryDirectory(prefix="shoal-vs-kube-") as tmp:
        state = Path(tmp) / "k8s"
        env = {k: v for k, v in os.environ.items() if k not in PORT_VARIABLES}
        env["OWNER_PID"] = str(os.getpid())
        if workload_api:
            env["APISERVER_EXTRA_ARGS"] = f"--feature-gates={WORKLOAD_GATES} {WORKLOAD_API}"
        started = subprocess.run(
            [str(KIT / "up.sh"), str(state)], env=env, capture_output=True, text=True
        )
        if started.returncode != 0:
            raise SystemExit(f"up.sh failed:\n{started.stdout}{started.stderr}")
        try:
            values = dict(
                line.split("=", 1)
                for line in (state / "env").read_text().splitlines()
                if "=" in line and not line.startswith("#")
            )
            yield state, values
        finally:
            subprocess.run([str(KIT / "down.sh"), str(state)], capture_output=True)


def kubectl(env: dict[str, str], *args: str) -> str:
    """Run the kit's kubectl; its output, or SystemExit with what it said."""
    done = subprocess.run(
        [str(Path(env["K8S_BIN_DIR"]) / "kubectl"), *args],
        env={**os.environ, "KUBECONFIG": env["KUBECONFIG"]},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})


def api_writes(env: dict[str, str]) -> Counter[str]:
    """The API server's own count of write requests so far (`apiserver_request_total`,
    read with the kit's kubectl), by resource[/subresource]: what a run asked of it."""
    writes: Counter[str] = Counter()
    for line in kubectl(env, "get", "--raw", "/metrics").splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, _, value = line.rpartition(" ")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
        if labels.get("verb") not in WRITE_VERBS:
            continue
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        writes[resource] += int(float(value))
    return writes


async def writes_done(
    env: dict[str, str], before: Counter[str], settle: float = 0.0, limit: float = 60.0
) -> float:
    """When the writes of the run stopped (monotonic): a scheduler may put its events and
    status writes after its binds, so what it asked of the API server is not all done at
    its last bind. Polled every 0.5 s until two polls agree and `settle` seconds have
    passed (Lease renewals, periodic by design, left out)."""
    last: Counter[str] | None = None
    start = changed = time.monotonic()
    while time.monotonic() < start + settle + limit:
        now = await asyncio.to_thread(api_writes, env)
        now.subtract(before)
        now.pop("leases", None)
        if now == last and time.monotonic() >= start + settle:
            break
        if now != last:
            last, changed = now, time.monotonic()
        await asyncio.sleep(0.5)
    return changed


# ---- objects ----------------------------------------------------------------------------

CAPACITY = {"cpu": "4", "memory": "32Gi", "pods": "110"}
REQUESTS = {"cpu": "100m", "memory": "500Mi"}
# shape preemption (scheduler_perf's pod-low-priority.yaml and pod-high-priority.yaml)
LOW_REQUESTS = {"cpu": "900m", "memory": "500Mi"}
HIGH_REQUESTS = {"cpu": "3000m", "memory": "500Mi"}
LOW_PER_NODE = 4  # 4 x 900m = 3.6 of 4 cpu; a fifth does not fit
HIGH_CLASS = "high"
HIGH_PRIORITY = 10


async def gather_limited(jobs: list[Any], limit: int = 64) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(job: Any) -> None:
        async with gate:
            await job

    await asyncio.gather(*(one(job) for job in jobs))


async def create_node(client: KubeClient, i: int) -> None:
    name = f"node-{i}"
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    await client.request("POST", NODES.path(), body=body)
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench"}
    status = {"capacity": CAPACITY, "allocatable": CAPACITY, "conditions": [ready]}
    await client.request(
        "PATCH",
        NODES.path(name=name, subresource="status"),
        body={"status": status},
        content_type=MERGE,
    )


def pod(
    namespace: str,
    name: str,
    group: str = "",
    upstream: bool = False,
    claim: str = "",
    requests: dict[str, str] = REQUESTS,
    priority_class: str = "",
    node: str = "",
) -> JSON:
    labels = {GROUP_LABEL: group} if group and not upstream else {}
    extra: JSON = {"schedulerName": SCHEDULER_NAME}
    if upstream:
        extra["schedulingGroup"] = {"podGroupName": group}
    if priority_class:
        extra["priorityClassName"] = priority_class
    if node:
        extra["nodeName"] = node  # created bound: no scheduler involved
    resources: JSON = {"requests": requests}
    if claim:
        extra["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        resources["claims"] = [{"name": "gpu"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            **extra,
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.9", "resources": resources}
            ],
        },
    }


# ---- shape dra: what a DRA driver publishes, and one claim per pod ----------------------

DRIVER = "gpu.example.com"
GPU_MEMORY = "80Gi"


def device_class() -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def gpu_slice(node: str, gpus: int) -> JSON:
    """The ResourceSlice a driver on `node` publishes: its GPUs, one pool per node."""
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "index": {"int": i},
                "model": {"string": "bench-gpu"},
                "uuid": {"string": f"GPU-{node}-{i}"},
            },
            "capacity": {"memory": {"value": GPU_MEMORY}},
        }
        for i in range(gpus)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def one_gpu_claim(namespace: str, name: str) -> JSON:
    """What the resource-claim controller would make from a one-GPU template."""
    exactly = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


async def create_dra_objects(client: KubeClient, nodes: int, gpus: int) -> None:
    await client.request("POST", DEVICE_CLASSES.path(), body=device_class())
    await gather_limited(
        [
            client.request("POST", RESOURCE_SLICES.path(), body=gpu_slice(f"node-{i}", gpus))
            for i in range(nodes)
        ]
    )


def check_claims(claim_list: list[JSON], pod_list: list[JSON]) -> ClaimCheck:
    """Devices given twice, and bound pods not where their claim's devices are."""
    owners: dict[tuple[str, str, str], int] = defaultdict(int)
    claims: dict[tuple[str, str], JSON] = {}
    allocated = 0
    for obj in claim_list:
        meta = obj["metadata"]
        claims[(meta["namespace"], meta["name"])] = obj
        allocation = (obj.get("status") or {}).get("allocation")
        if not allocation:
            continue
        allocated += 1
        for r in (allocation.get("devices") or {}).get("results") or []:
            owners[(r["driver"], r["pool"], r["device"])] += 1
    misplaced = 0
    for item in pod_list:
        node = (item.get("spec") or {}).get("nodeName")
        if not node:
            continue
        meta = item["metadata"]
        for entry in item["spec"].get("resourceClaims") or []:
            claim = claims.get((meta["namespace"], entry.get("resourceClaimName", "")))
            status = (claim or {}).get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results")
            reserved = {r.get("uid") for r in status.get("reservedFor") or []}
            # one pool per node, named after it (gpu_slice)
            elsewhere = not results or any(r["pool"] != node for r in results)
            if elsewhere or meta["uid"] not in reserved:
                misplaced += 1
    return ClaimCheck(
        claims=len(claim_list),
        allocated=allocated,
        devices=len(owners),
        double_allocated=sum(1 for n in owners.values() if n > 1),
        misplaced=misplaced,
    )


async def create_with_class(client: KubeClient, namespace: str, body: JSON) -> None:
    """POST a pod naming a PriorityClass created a moment ago: the Priority admission
    plugin reads the classes from its own cache, which may not have it yet (403)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            await client.request("POST", PODS.path(namespace), body=body)
            return
        except ApiError as err:
            if err.status != 403 or "PriorityClass" not in err.message:
                raise
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def namespaces() -> list[str]:
    return [f"team-{i}" for i in range(NAMESPACE_COUNT)]


async def create_workload(
    client: KubeClient, shape: str, pods: int, gang_size: int, init_pods: int = 0
) -> None:
    spaces = namespaces()
    for ns in spaces:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        await client.request("POST", NAMESPACES.path(), body=body)
    jobs: list[Any] = []
    if shape == "gang-queue":
        share = -(-pods // NAMESPACE_COUNT)
        cpu = f"{share * 100 + 1000}m"  # a quarter of the pods, and room to spare
        memory = f"{share * 500 + 4000}Mi"
        for ns in spaces:
            quota = {"cpu": cpu, "memory": memory}
            queue = {
                "apiVersion": QUEUES.api_version,
                "kind": "Queue",
                "metadata": {"name": ns},
                "spec": {"guaranteed": quota, "max": quota},
            }
            await client.request("POST", QUEUES.path(), body=queue)
            binding = {
                "apiVersion": QUEUE_BINDINGS.api_version,
                "kind": "QueueBinding",
                "metadata": {"name": ns},
                "spec": {"queue": ns, "namespaces": [ns]},
            }
            await client.request("POST", QUEUE_BINDINGS.path(), body=binding)
        groups = -(-pods // gang_size)
        for g in range(groups):
            ns = spaces[g % NAMESPACE_COUNT]
            group = {
                "apiVersion": PODGROUPS.api_version,
                "kind": "PodGroup",
                "metadata": {"name": f"job-{g}", "namespace": ns},
                "spec": {"minMember": min(gang_size, pods - g * gang_size)},
            }
            jobs.append(client.request("POST", PODGROUPS.path(ns), body=group))
        await gather_limited(jobs)
        jobs = []
        for i in range(pods):
            g = i // gang_size
            ns = spaces[g % NAMESPACE_COUNT]
            jobs.append(client.request("POST", PODS.path(ns), body=pod(ns, f"pod-{i}", f"job-{g}")))
    elif shape == "upstream-gang":
        # Kubernetes' own PodGroups (scheduling.k8s.io/v1alpha2, gang minCount = size):
        # kube-scheduler places them with its GangScheduling plugin, Shoal as gangs.
        groups = -(-pods // gang_size)
        for g in range(groups):
            ns = spaces[g % NAMESPACE_COUNT]
            size = min(gang_size, pods - g * gang_size)
            group = {
                "apiVersion": "scheduling.k8s.io/v1alpha2",
                "kind": "PodGroup",
                "metadata": {"name": f"job-{g}", "namespace": ns},
                "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
            }
            path = f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{ns}/podgroups"
            jobs.append(client.request("POST", path, body=group))
        await gather_limited(jobs)
        jobs = []
        for i in range(pods):
            g = i // gang_size
            ns = spaces[g % NAMESPACE_COUNT]
            body = pod(ns, f"pod-{i}", f"job-{g}", upstream=True)
            jobs.append(client.request("POST", PODS.path(ns), body=body))
    elif shape == "dra":
        # The claims first (a pod naming a missing claim just waits, but this way the
        # schedulers start from the same complete state).
        await gather_limited(
            [
                client.request(
                    "POST",
                    RESOURCE_CLAIMS.path(spaces[i % NAMESPACE_COUNT]),
                    body=one_gpu_claim(spaces[i % NAMESPACE_COUNT], f"pod-{i}-gpu"),
                )
                for i in range(pods)
            ]
        )
        for i in range(pods):
            ns = spaces[i % NAMESPACE_COUNT]
            body = pod(ns, f"pod-{i}", claim=f"pod-{i}-gpu")
            jobs.append(client.request("POST", PODS.path(ns), body=body))
    elif shape == "preemption":
        # The low-priority pods already bound, 4 per node (the only way 4 x nodes of
        # them fit): the same start for every scheduler, not timed. Low pods have no
        # PriorityClass (priority 0: no class is the global default).
        klass = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": HIGH_CLASS},
            "value": HIGH_PRIORITY,
        }
        await client.request("POST", PRIORITY_CLASSES.path(), body=klass)
        for i in range(init_pods):
            ns = spaces[i % NAMESPACE_COUNT]
            body = pod(ns, f"low-{i}", requests=LOW_REQUESTS, node=f"node-{i // LOW_PER_NODE}")
            jobs.append(client.request("POST", PODS.path(ns), body=body))
        await gather_limited(jobs)
        jobs = []
        for i in range(pods):
            ns = spaces[i % NAMESPACE_COUNT]
            body = pod(ns, f"high-{i}", requests=HIGH_REQUESTS, priority_class=HIGH_CLASS)
            jobs.append(create_with_class(client, ns, body))
    else:
        for i in range(pods):
            ns = spaces[i % NAMESPACE_COUNT]
            jobs.append(client.request("POST", PODS.path(ns), body=pod(ns, f"pod-{i}")))
    await gather_limited(jobs)


# ---- the schedulers ---------------------------------------------------------------------


def write_config(state: Path, env: dict[str, str], qps: float, burst: int) -> Path:
    path = state / "bench-scheduler.yaml"
    path.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "leaderElection: {leaderElect: false}\n"
        f"clientConnection: {{kubeconfig: {env['KUBECONFIG']}, qps: {qps}, burst: {burst}}}\n"
        f"profiles: [{{schedulerName: {SCHEDULER_NAME}}}]\n"
    )
    return path


def replicas(name: str) -> int:
    """`shoal-x2` -> 2 replicas of `shoal run` (node shards), anything else -> 1."""
    return int(name.removeprefix("shoal-x")) if name.startswith("shoal-x") else 1


def scheduler_command(
    name: str, config: Path, env: dict[str, str], replica: int = 0, shape: str = ""
) -> list[str]:
    if name == "kube":
        gates = [f"--feature-gates={WORKLOAD_GATES}"] if shape == "upstream-gang" else []
        return [
            str(Path(env["K8S_BIN_DIR"]) / "kube-scheduler"),
            f"--config={config}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            *gates,
        ]
    if name == "bare":
        # No scheduling at all: list the pending pods and POST their Bindings, with the
        # same client QPS/burst and bind concurrency as Shoal (64). Its rate is what the
        # API server and etcd allow on this machine: the ceiling beside the ratios.
        # Shape preemption: evict 3 low pods of the node first (see bare_binder).
        preempt = ["--preempt"] if shape == "preemption" else []
        return [
            sys.executable,
            str(Path(__file__).resolve()),
            "--bare-binder",
            str(config),
            *preempt,
        ]
    shoal = Path(sys.executable).parent / "shoal"
    return [
        str(shoal),
        "run",
        "--config",
        str(config),
        "--leader-elect=false",
        "--bind-address",
        "",
        "--log-level",
        "warning",
        "--identity",
        f"shoal-{replica}",
    ]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def control_plane_cpu(state: Path) -> float:
    total = 0.0
    for name in ("kube-apiserver", "etcd"):
        pid_file = state / "run" / f"{name}.pid"
        if pid_file.exists():
            total += cpu_seconds(int(pid_file.read_text().strip()))
    return total


@contextlib.asynccontextmanager
async def running(command: list[str], log: Path) -> AsyncIterator[subprocess.Popen[bytes]]:
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        # SHOAL_BENCH_PYSPY=FILE: sample Shoal's threads with py-spy (`pip install py-spy`,
        # attached, without pausing it) into FILE as folded stacks: where its CPU goes.
        profile = os.environ.get("SHOAL_BENCH_PYSPY")
        sampler = None
        if profile and Path(command[0]).name == "shoal":
            pyspy = str(Path(sys.executable).parent / "py-spy")
            record = ["record", "--pid", str(process.pid), "--nonblocking", "--threads"]
            sampler = subprocess.Popen(
                [pyspy, *record, "--format", "raw", "--rate", "100", "--output", profile],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        try:
            yield process
        finally:
            if sampler is not None:
                sampler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
                sampler.wait(timeout=30)
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def watch_binds(
    client: KubeClient, pods: int, resource_version: str, timeout: float, prefix: str = ""
) -> list[float]:
    """Times (monotonic) at which pods (those whose name starts with `prefix`) got a
    node, until all `pods` have one."""
    seen: set[str] = set()
    times: list[float] = []
    deadline = time.monotonic() + timeout
    query = {
        "watch": "1",
        "resourceVersion": resource_version,
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(int(timeout) + 10),
    }
    while len(seen) < pods and time.monotonic() < deadline:
        async with client.stream(PODS.path(), query, read_timeout=60) as events:
            async for event in events:
                if isinstance(event, Undecodable):
                    continue  # not a pod this benchmark created
                if event.get("type") == "BOOKMARK":
                    query["resourceVersion"] = event["object"]["metadata"]["resourceVersion"]
                    continue
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                query["resourceVersion"] = meta.get("resourceVersion", query["resourceVersion"])
                if (
                    (obj.get("spec") or {}).get("nodeName")
                    and meta.get("uid") not in seen
                    and str(meta.get("name", "")).startswith(prefix)
                ):
                    seen.add(meta["uid"])
                    times.append(time.monotonic())
                    if len(seen) >= pods:
                        break
                if time.monotonic() > deadline:
                    break
    return times


@dataclass
class Kubelet:
    """The kubelets' part in a preemption, for every node at once: a pod being deleted
    (deletionTimestamp set, by an eviction or a DELETE with the pod's grace period) is
    finalised at once with a DELETE of grace period 0, as a kubelet does once the
    containers have stopped. Without it the victims would stay Terminating for ever and
    keep their room on the node."""

    client: KubeClient
    force_deleted: int = 0
    evictions: list[float] = field(default_factory=list)  # when each deletion was seen

    async def run(self, resource_version: str) -> None:
        gate = asyncio.Semaphore(64)
        pending: set[asyncio.Task[None]] = set()
        asked: set[str] = set()  # being finalised (again after a failed DELETE)
        noted: set[str] = set()  # deletions seen (each counted once)

        async def finalise(meta: JSON) -> None:
            body = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]},
            }
            async with gate:
                try:
                    await self.client.request(
                        "DELETE",
                        PODS.path(meta["namespace"], meta["name"]),
                        query={"gracePeriodSeconds": "0"},
                        body=body,
                    )
                    self.force_deleted += 1
                except ApiError as err:
                    if not (err.not_found or err.conflict):
                        asked.discard(meta["uid"])  # try again on its next event
                        print(f"  kubelet stand-in: {err}", flush=True)

        def seen(obj: JSON) -> None:
            meta = obj.get("metadata") or {}
            if meta.get("deletionTimestamp") and meta.get("uid") not in asked:
                asked.add(meta["uid"])
                if meta["uid"] not in noted:
                    noted.add(meta["uid"])
                    self.evictions.append(time.monotonic())
                task = asyncio.get_running_loop().create_task(finalise(meta))
                pending.add(task)
                task.add_done_callback(pending.discard)

        query = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true"}
        try:
            while True:
                try:
                    async with self.client.stream(PODS.path(), query, read_timeout=120) as events:
                        async for event in events:
                            if isinstance(event, Undecodable):
                                continue
                            obj = event.get("object") or {}
                            if event.get("type") == "ERROR":
                                raise ApiError(int(obj.get("code", 0)), "Watch", str(obj))
                            version = (obj.get("metadata") or {}).get("resourceVersion")
                            query["resourceVersion"] = version or query["resourceVersion"]
                            if event.get("type") in ("ADDED", "MODIFIED"):
                                seen(obj)
                except ApiError as err:
                    if not err.gone:
                        print(f"  kubelet stand-in: watch failed: {err}; again", flush=True)
                        await asyncio.sleep(0.5)
                        continue
                    # too old: list again, finalise what is terminating, watch from there
                    items, query["resourceVersion"] = await list_pods(self.client)
                    for item in items:
                        seen(item)
        finally:
            for task in list(pending):
                task.cancel()


def check_preemption(
    pod_list: list[JSON], init_pods: int, pods: int, force_deleted: int
) -> PreemptionCheck:
    """Low pods evicted (gone, or still terminating), high pods deleted."""
    live_low = live_high = terminating = 0
    for item in pod_list:
        meta = item.get("metadata") or {}
        name = str(meta.get("name", ""))
        leaving = bool(meta.get("deletionTimestamp"))
        terminating += leaving
        if name.startswith("low-"):
            live_low += not leaving
        elif name.startswith("high-"):
            live_high += not leaving
    return PreemptionCheck(
        init_pods=init_pods,
        evicted=init_pods - live_low,
        high_deleted=pods - live_high,
        terminating=terminating,
        force_deleted=force_deleted,
    )


def add_timeline(
    check: PreemptionCheck, start: float, evictions: list[float], binds: list[float]
) -> None:
    """When the deletions and the binds came, in seconds after the scheduler's start."""
    deleted = sorted(max(0.0, t - start) for t in evictions)
    bound = sorted(max(0.0, t - start) for t in binds)
    if deleted:
        check.first_eviction, check.last_eviction = deleted[0], deleted[-1]
    if bound:
        check.first_bind, check.last_bind = bound[0], bound[-1]
    seconds = int(max([*deleted, *bound, 0.0])) + 1
    check.evictions_per_second = [0] * seconds
    check.binds_per_second = [0] * seconds
    for t in deleted:
        check.evictions_per_second[int(t)] += 1
    for t in bound:
        check.binds_per_second[int(t)] += 1


def partial_gangs(pod_list: list[JSON], gang_size: int) -> int:
    """Gangs with some members bound and fewer than the gang's size (every gang here
    is all-or-nothing: minimum = size)."""
    bound: dict[str, int] = defaultdict(int)
    members: dict[str, int] = defaultdict(int)
    for item in pod_list:
        spec = item.get("spec") or {}
        meta = item.get("metadata") or {}
        group = (spec.get("schedulingGroup") or {}).get("podGroupName") or (
            meta.get("labels") or {}
        ).get(GROUP_LABEL)
        if not group:
            continue
        key = f"{meta.get('namespace')}/{group}"
        members[key] += 1
        bound[key] += 1 if spec.get("nodeName") else 0
    return sum(1 for key, n in bound.items() if 0 < n < min(gang_size, members[key]))


def overcommitted(pod_list: list[JSON]) -> int:
    limit_cpu = parse_quantity(CAPACITY["cpu"])
    limit_mem = parse_quantity(CAPACITY["memory"])
    limit_pods = int(CAPACITY["pods"])
    # Exact sums (Fractions): 40 x 0.1 in floats is more than 4.
    cpu: dict[str, Fraction] = defaultdict(Fraction)
    mem: dict[str, Fraction] = defaultdict(Fraction)
    count: dict[str, int] = defaultdict(int)
    for item in pod_list:
        node = (item.get("spec") or {}).get("nodeName")
        if not node or (item.get("metadata") or {}).get("deletionTimestamp"):
            continue  # pending, or leaving (a preemption's victim the harness is deleting)
        for container in item["spec"]["containers"]:
            requests = (container.get("resources") or {}).get("requests") or {}
            cpu[node] += parse_quantity(requests.get("cpu", "0"))
            mem[node] += parse_quantity(requests.get("memory", "0"))
        count[node] += 1
    return sum(
        1
        for node in count
        if cpu[node] > limit_cpu or mem[node] > limit_mem or count[node] > limit_pods
    )


async def list_pods(client: KubeClient, path: str = "") -> tuple[list[JSON], str]:
    """Every pod (or every object at `path`) and the list's resourceVersion."""
    items: list[JSON] = []
    query = {"limit": "5000"}
    while True:
        page = await client.request("GET", path or PODS.path(), query=query, timeout=120)
        items += page.get("items") or []
        meta = page.get("metadata") or {}
        if not meta.get("continue"):
            return items, str(meta.get("resourceVersion", ""))
        query = {"limit": "5000", "continue": meta["continue"]}


def shape_sizes(shape: str, args: argparse.Namespace) -> tuple[int, int]:
    """(pods to schedule, pods created bound before the run) for one shape."""
    if shape != "preemption":
        return (args.pods or 10000), 0
    pods = args.pods or min(args.nodes, 1000)
    init_pods = args.init_pods or LOW_PER_NODE * args.nodes
    if pods > args.nodes:
        raise SystemExit(f"--pods {pods} > --nodes {args.nodes}: one preemptor fits per node")
    if init_pods > LOW_PER_NODE * args.nodes:
        raise SystemExit(f"--init-pods {init_pods}: at most {LOW_PER_NODE} per node fit")
    return pods, init_pods


async def one_run(shape: str, scheduler: str, args: argparse.Namespace) -> Result:
    pods, init_pods = shape_sizes(shape, args)
    prefix = "high-" if shape == "preemption" else ""  # the pods whose binds are timed
    with control_plane(workload_api=shape == "upstream-gang") as (state, env):
        if shape == "gang-queue":
            kubectl(env, "apply", "-f", str(ROOT / "deploy" / "crds"))
            kubectl(
                env,
                "wait",
                "--for=condition=Established",
                "customresourcedefinitions",
                "--all",
                "--timeout=60s",
            )
        connection = await connect(env["KUBECONFIG"])
        client = connection.client("bench", ClientSettings(qps=0, burst=1, timeout=120))
        try:
            started = time.monotonic()
            await gather_limited([create_node(client, i) for i in range(args.nodes)])
            if shape == "dra":
                await create_dra_objects(client, args.nodes, args.gpus)
            await create_workload(client, shape, pods, args.gang_size, init_pods)
            print(
                f"  {shape}/{scheduler}: {args.nodes} nodes and {pods} pods created in "
                f"{time.monotonic() - started:.0f} s"
                + (f" ({init_pods} low-priority pods already bound)" if init_pods else ""),
                flush=True,
            )
            _, resource_version = await list_pods(client)
            config = write_config(state, env, args.qps, args.burst)
            log = state / f"{scheduler}.log"
            kubelet = None
            kubelet_task = None
            if shape == "preemption":
                # the same stand-in for every scheduler, its own client (no rate limit)
                kubelet = Kubelet(
                    connection.client("kubelet", ClientSettings(qps=0, burst=1, timeout=120))
                )
                kubelet_task = asyncio.get_running_loop().create_task(kubelet.run(resource_version))
            plane_before = control_plane_cpu(state)
            writes_before = api_writes(env)
            # what else the machine runs shows in the rates: say so beside them
            print(f"  load average at the start: {os.getloadavg()[0]:.1f}", flush=True)
            async with contextlib.AsyncExitStack() as stack:
                processes = [
                    await stack.enter_async_context(
                        running(
                            scheduler_command(scheduler, config, env, i, shape),
                            log.with_suffix(f".{i}.log") if i else log,
                        )
                    )
                    for i in range(replicas(scheduler))
                ]
                start = time.monotonic()
                expect = args.expect or pods
                times = await watch_binds(client, expect, resource_version, args.timeout, prefix)
                # With --expect, watch for `settle` seconds more: would anything more be
                # bound? (the writes are polled meanwhile)
                written = await writes_done(env, writes_before, args.settle if args.expect else 0.0)
                scheduler_cpu = sum(cpu_seconds(p.pid) for p in processes)
                plane_cpu = control_plane_cpu(state) - plane_before
            preemption = None
            if kubelet is not None and kubelet_task is not None:
                # a moment for the last victims' deletes (CPU already counted above)
                await asyncio.sleep(2)
                kubelet_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await kubelet_task
            pod_list, _ = await list_pods(client)
            bound_now = sum(
                1
                for p in pod_list
                if (p.get("spec") or {}).get("nodeName")
                and str(p["metadata"]["name"]).startswith(prefix)
            )
            if kubelet is not None:
                preemption = check_preemption(pod_list, init_pods, pods, kubelet.force_deleted)
                add_timeline(preemption, start, kubelet.evictions, times)
            claims = None
            if shape == "dra" and scheduler != "bare":  # the bare binder allocates nothing
                claim_list, _ = await list_pods(client, RESOURCE_CLAIMS.path())
                claims = check_claims(claim_list, pod_list)
            writes = api_writes(env)
            writes.subtract(writes_before)
            if len(times) < expect:
                tail = log.read_text()[-2000:]
                print(f"  only {len(times)}/{pods} bound; log tail:\n{tail}", flush=True)
            return Result(
                shape=shape,
                scheduler=scheduler,
                pods=pods,
                bound=len(times),
                total_seconds=(times[-1] - start) if times else 0.0,
                steady_seconds=(times[-1] - times[0]) if len(times) > 1 else 0.0,
                overcommitted=overcommitted(pod_list),
                scheduler_cpu=scheduler_cpu,
                control_plane_cpu=plane_cpu,
                partial_gangs=partial_gangs(pod_list, args.gang_size)
                if shape in ("gang-queue", "upstream-gang")
                else 0,
                bound_at_end=bound_now,
                claims=claims,
                preemption=preemption,
                writes=+writes,
                written_seconds=max(written - start, (times[-1] - start) if times else 0.0),
            )
        finally:
            await connection.close()


NAMES = {
    "kube": "kube-scheduler",
    "shoal": "Shoal",
    "bare": "bare binder",
    **{f"shoal-x{n}": f"Shoal x{n}" for n in (2, 3, 4, 8)},
}


def report(results: list[Result]) -> None:
    print()
    print(
        f"{'shape':<11} {'scheduler':<15} {'bound':>11} {'pods/s':>8} {'steady':>8} "
        f"{'overcommitted':>13} {'partial gangs':>13} {'sched CPU ms/pod':>16} "
        f"{'apiserver+etcd ms/pod':>21}"
    )
    for r in results:
        per_pod = 1000 / max(1, r.bound)
        print(
            f"{r.shape:<11} {NAMES[r.scheduler]:<15} {r.bound:>5}/{r.pods:<5} "
            f"{r.pods_per_second:>8.0f} {r.steady_pods_per_second:>8.0f} "
            f"{r.overcommitted:>13} {r.partial_gangs:>13} {r.scheduler_cpu * per_pod:>16.2f} "
            f"{r.control_plane_cpu * per_pod:>21.2f}"
        )
    print()
    print(
        "API writes per bound pod, until they were done (apiserver_request_total, by "
        "resource), and pods/s counted to the last write instead of the last bind:"
    )
    for r in results:
        per_pod = 1 / max(1, r.bound)
        parts = ", ".join(f"{k} {v * per_pod:.2f}" for k, v in r.writes.most_common())
        total = sum(r.writes.values()) * per_pod
        print(
            f"  {r.shape} {NAMES[r.scheduler]}: {total:.2f} ({parts}); "
            f"{r.pods_per_second_written:.0f} pods/s to the last write"
        )
    checked = [r for r in results if r.claims is not None]
    if checked:
        print()
        print(
            f"{'shape':<11} {'scheduler':<15} {'claims':>7} {'allocated':>9} {'devices':>7} "
            f"{'double-allocated':>16} {'misplaced':>9}"
        )
        for r in checked:
            c = r.claims
            assert c is not None
            print(
                f"{r.shape:<11} {NAMES[r.scheduler]:<15} {c.claims:>7} {c.allocated:>9} "
                f"{c.devices:>7} {c.double_allocated:>16} {c.misplaced:>9}"
            )
    preempting = [r for r in results if r.preemption is not None]
    if preempting:
        print()
        print(
            f"{'shape':<11} {'scheduler':<15} {'preemptors':>10} {'low pods':>8} "
            f"{'evicted':>7} {'per preemptor':>13} {'high deleted':>12} "
            f"{'terminating':>11} {'force-deleted':>13} {'evictions from-to s':>19} "
            f"{'binds from-to s':>15}"
        )
        for r in preempting:
            e = r.preemption
            assert e is not None
            print(
                f"{r.shape:<11} {NAMES[r.scheduler]:<15} {r.bound:>10} {e.init_pods:>8} "
                f"{e.evicted:>7} {e.evicted / max(1, r.bound):>13.2f} {e.high_deleted:>12} "
                f"{e.terminating:>11} {e.force_deleted:>13} "
                f"{f'{e.first_eviction:.1f}-{e.last_eviction:.1f}':>19} "
                f"{f'{e.first_bind:.1f}-{e.last_bind:.1f}':>15}"
            )
        for r in preempting:
            e = r.preemption
            assert e is not None
            print(f"  {NAMES[r.scheduler]}, per second from its start:")
            print(f"    deletions seen  {' '.join(map(str, e.evictions_per_second))}")
            print(f"    preemptors bound {' '.join(map(str, e.binds_per_second))}")
    print()
    for shape in dict.fromkeys(r.shape for r in results):
        kube = [r for r in results if r.shape == shape and r.scheduler == "kube"]
        shoal = [r for r in results if r.shape == shape and r.scheduler == "shoal"]
        bare = [r for r in results if r.shape == shape and r.scheduler == "bare"]
        for k, s in zip(kube, shoal, strict=False):
            if shape == "preemption" and k.pods_per_second and k.preemption and s.preemption:
                # kube-scheduler binds its preemptors only after its last preemption (a
                # retried pod goes behind the ones not tried yet), so first bind -> last
                # bind says nothing there: compare whole runs.
                print(
                    f"{shape}: Shoal / kube-scheduler = "
                    f"{s.pods_per_second / k.pods_per_second:.2f}x overall (steady rates "
                    f"not comparable); low pods evicted: Shoal {s.preemption.evicted}, "
                    f"kube-scheduler {k.preemption.evicted}"
                )
            elif k.pods_per_second and k.steady_pods_per_second:
                print(
                    f"{shape}: Shoal / kube-scheduler = "
                    f"{s.pods_per_second / k.pods_per_second:.2f}x overall, "
                    f"{s.steady_pods_per_second / k.steady_pods_per_second:.2f}x steady, "
                    f"{s.pods_per_second_written / k.pods_per_second_written:.2f}x counted "
                    "to the last write"
                )
        sharded = [r for r in results if r.shape == shape and r.scheduler.startswith("shoal-x")]
        for k, r in ((k, r) for k in kube[:1] for r in sharded):
            if k.pods_per_second:
                print(
                    f"{shape}: {NAMES[r.scheduler]} (node shards) / kube-scheduler = "
                    f"{r.pods_per_second / k.pods_per_second:.2f}x overall"
                )
        for b in bare:
            for r in (*kube, *shoal, *sharded):
                if shape == "preemption" and b.pods_per_second:
                    print(
                        f"{shape}: {NAMES[r.scheduler]} at "
                        f"{r.pods_per_second / b.pods_per_second:.0%} of the bare "
                        f"preemptor's overall rate ({b.pods_per_second:.0f} preemptors/s: "
                        "3 evictions and a bind each, nothing decided)"
                    )
                elif b.steady_pods_per_second:
                    print(
                        f"{shape}: {NAMES[r.scheduler]} at "
                        f"{r.steady_pods_per_second / b.steady_pods_per_second:.0%} of the bare "
                        f"binder's steady rate ({b.steady_pods_per_second:.0f} binds/s)"
                    )


async def bare_binder(config: Path, preempt: bool = False) -> None:
    """`--bare-binder CONFIG [--preempt]`: bind every pending pod of SCHEDULER_NAME
    round-robin over the nodes, 64 Bindings in flight, the configuration's client
    QPS/burst. With --preempt (shape preemption) each pod first evicts (pods/eviction,
    as Shoal does) all but one of the low-priority pods on its node, then is bound
    without waiting for them to go: the writes a preemption needs, nothing decided."""
    import yaml

    settings = yaml.safe_load(config.read_text())["clientConnection"]
    connection = await connect(settings["kubeconfig"])
    client = connection.client(
        "bare", ClientSettings(qps=float(settings["qps"]), burst=int(settings["burst"]))
    )
    try:
        nodes = [
            n["metadata"]["name"] for n in (await client.request("GET", NODES.path()))["items"]
        ]
        pods, _ = await list_pods(client)
        pending = [p for p in pods if not p["spec"].get("nodeName")]
        placed: dict[str, list[JSON]] = defaultdict(list)
        for p in pods:
            if p["spec"].get("nodeName"):
                placed[p["spec"]["nodeName"]].append(p)
        slots = asyncio.Semaphore(64)

        async def evict(victim: JSON) -> None:
            meta = victim["metadata"]
            body = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "deleteOptions": {"preconditions": {"uid": meta["uid"]}},
            }
            await client.request(
                "POST", PODS.path(meta["namespace"], meta["name"], "eviction"), body=body
            )

        async def bind(i: int, pod: JSON) -> None:
            meta = pod["metadata"]
            node = nodes[i % len(nodes)]
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            async with slots:
                if preempt:
                    await asyncio.gather(*(evict(v) for v in placed[node][1:]))
                await client.request(
                    "POST", PODS.path(meta["namespace"], meta["name"], "binding"), body=body
                )

        await asyncio.gather(*(bind(i, p) for i, p in enumerate(pending)))
    finally:
        await connection.close()


def main() -> None:
    if len(sys.argv) in (3, 4) and sys.argv[1] == "--bare-binder":
        asyncio.run(bare_binder(Path(sys.argv[2]), preempt=sys.argv[3:] == ["--preempt"]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument(
        "--pods",
        type=int,
        default=0,
        help="pods to schedule (0: 10000; shape preemption: min(nodes, 1000) preemptors)",
    )
    parser.add_argument(
        "--init-pods",
        type=int,
        default=0,
        help="shape preemption: low-priority pods bound before the run (0: 4 per node)",
    )
    parser.add_argument("--qps", type=float, default=1000)
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--gang-size", type=int, default=8)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (shape dra)")
    parser.add_argument("--shape", default="basic,gang-queue")
    parser.add_argument("--scheduler", default="kube,shoal")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--expect",
        type=int,
        default=0,
        help="binds to wait for when not every pod fits (over-subscribed runs; 0: all pods)",
    )
    parser.add_argument(
        "--settle", type=float, default=10.0, help="seconds to watch on after --expect binds"
    )
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds to wait for all binds of one run"
    )
    args = parser.parse_args()
    if not (KIT / "up.sh").exists():
        raise SystemExit(f"no Kubernetes kit at {KIT} (set SHOAL_K8S_KIT)")
    # As installed (see the docstring): compiled once, read by every scheduler process.
    compileall.compile_dir(Path(shoal.__file__).parent, quiet=1)
    results: list[Result] = []
    for _ in range(args.repeat):
        for shape in args.shape.split(","):
            for scheduler in args.scheduler.split(","):
                result = asyncio.run(one_run(shape, scheduler, args))
                print(
                    f"  {shape}/{NAMES[scheduler]}: {result.bound} bound, "
                    f"{result.pods_per_second:.0f} pods/s "
                    f"({result.steady_pods_per_second:.0f} steady), "
                    f"{result.overcommitted} overcommitted nodes, "
                    f"{result.partial_gangs} partly bound gangs, "
                    f"{result.bound_at_end} bound at the end"
                    + (
                        f", {result.preemption.evicted} low pods evicted "
                        f"({result.preemption.high_deleted} high pods deleted, "
                        f"{result.preemption.force_deleted} finalised by the harness)"
                        if result.preemption
                        else ""
                    )
                    + (
                        f", {result.claims.double_allocated} devices given twice, "
                        f"{result.claims.allocated}/{result.claims.claims} claims allocated, "
                        f"{result.claims.misplaced} pods not where their devices are"
                        if result.claims
                        else ""
                    ),
                    flush=True,
                )
                results.append(result)
    report(results)


if __name__ == "__main__":
    main()
