"""What the volume plugins cost, in memory, on scheduler_perf's node and pod shapes.

Shapes (all on N nodes in 3 zones, each with a CSINode allowing 39 volumes of one
driver; default plugins):
  * none:      pods without volumes (the plugins must cost nothing here)
  * token:     pods with only the projected service-account token volume every pod in
               a cluster has (the plugins must cost next to nothing here too)
  * bound:     each pod's claim is bound to a CSI volume labelled with a zone
               (VolumeZone, VolumeBinding's node affinity, NodeVolumeLimits)
  * dynamic:   each pod's claim is unbound, of a WaitForFirstConsumer class whose
               allowedTopologies name two zones (provisioning, attach limits)
  * local:     each pod's claim is unbound, of a no-provisioner WaitForFirstConsumer
               class; one local volume per node (kube-scheduler's
               SchedulingWithPVC-style local-volume shape: VolumeBinding's static
               matching over N volumes with hostname node affinity)
  * local2:    like local with two claims per pod and two local volumes per node (the
               greedy choice among claims, for every node at once)
  * capacity:  each pod's claim (10Gi) is unbound, of a WaitForFirstConsumer class whose
               CSI driver tracks storage capacity; one CSIStorageCapacity per node (a
               local-storage driver), a quarter of them too small (VolumeBinding's
               capacity check over N capacity objects)

Prints pods/s per shape (scheduled pods / seconds of the driver loop); with the capacity
shape also what one CSIStorageCapacity change and the next capacity query cost together
(a driver republishing between two pods), over 1000 changes. Usage:
  python bench/volumes.py [--nodes 5000] [--pods 2000] [--shapes none,token,local2]
"""

from __future__ import annotations

import argparse
import sys
import time

from shapes import default_node, default_pod

from shoal.api.objects import PersistentVolumeClaimVolumeSource, Volume
from shoal.api.volumes import NO_PROVISIONER
from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.scheduler import CycleResult, new_scheduler
from shoal.scheduler.volumes import upsert_storage
from shoal.testing.volumes import (
    make_capacity,
    make_csi_driver,
    make_csi_node,
    make_pv,
    make_pvc,
    make_storage_class,
)

ZONE = "topology.kubernetes.io/zone"
DRIVER = "ebs.csi.aws.com"
LOCAL_DRIVER = "lvm.example.com"


def run(shape: str, nodes: int, pods: int) -> tuple[int, float]:
    clock = ManualClock()
    effects = MemoryEffects()
    sched = new_scheduler(KubeSchedulerConfiguration(), clock=clock, effects=effects)
    for i in range(nodes):
        labels = {"kubernetes.io/hostname": f"node-{i}", ZONE: f"zone-{i % 3}"}
        sched.add_node(default_node(i, labels))
        upsert_storage(sched, make_csi_node(f"node-{i}").driver(DRIVER, count=39).obj())
    upsert_storage(
        sched,
        make_storage_class("dynamic")
        .wait_for_first_consumer()
        .provisioner(DRIVER)
        .allowed_topology(ZONE, "zone-0", "zone-1")
        .obj(),
    )
    upsert_storage(
        sched,
        make_storage_class("local").wait_for_first_consumer().provisioner(NO_PROVISIONER).obj(),
    )
    if shape == "capacity":
        upsert_storage(sched, make_csi_driver(LOCAL_DRIVER).obj())
        upsert_storage(
            sched,
            make_storage_class("capacity")
            .wait_for_first_consumer()
            .provisioner(LOCAL_DRIVER)
            .obj(),
        )
        for i in range(nodes):
            free = "1Gi" if i % 4 == 0 else "100Gi"
            capacity = make_capacity(f"cap-{i}").storage_class("capacity").capacity(free)
            upsert_storage(sched, capacity.on_label("kubernetes.io/hostname", f"node-{i}").obj())
    if shape in ("local", "local2"):
        for i in range(nodes):
            for j in range(1 if shape == "local" else 2):
                pv = make_pv(f"local-{i}-{j}").capacity("100Gi").storage_class("local")
                upsert_storage(sched, pv.on_nodes(f"node-{i}").obj())
    scheduled = 0

    def note(result: CycleResult) -> None:
        nonlocal scheduled
        if result.node is not None:
            scheduled += 1

    driver = Driver(sched, inbox=effects, on_cycle=note)
    for i in range(pods):
        pod = default_pod(f"p-{i}", "bench")
        if shape == "token":
            token = {"sources": [{"serviceAccountToken": {"path": "token"}}]}
            pod.spec.volumes = [Volume(name="kube-api-access", projected=token)]
        elif shape != "none":
            claim = f"c-{i}"
            if shape == "bound":
                volume = make_pv(f"v-{i}").csi(DRIVER).zone(f"zone-{i % 3}")
                upsert_storage(sched, volume.claimed_by(claim, "bench").obj())
                upsert_storage(sched, make_pvc(claim, "bench").bound_to(f"v-{i}").obj())
            elif shape == "local2":
                for j in range(2):
                    upsert_storage(
                        sched, make_pvc(f"{claim}-{j}", "bench").storage_class("local").obj()
                    )
            elif shape == "capacity":
                claim_object = make_pvc(claim, "bench").storage_class(shape).request("10Gi")
                upsert_storage(sched, claim_object.obj())
            else:
                upsert_storage(sched, make_pvc(claim, "bench").storage_class(shape).obj())
            names = [f"{claim}-0", f"{claim}-1"] if shape == "local2" else [claim]
            pod.spec.volumes = [
                Volume(
                    name=name,
                    persistent_volume_claim=PersistentVolumeClaimVolumeSource(claim_name=name),
                )
                for name in names
            ]
        sched.add_pod(pod)
    start = time.perf_counter()
    driver.run()
    return scheduled, time.perf_counter() - start


def capacity_churn(nodes: int, rounds: int = 1000) -> float:
    """Seconds per (one CSIStorageCapacity changed, then the claim's rows asked again)."""
    sched = new_scheduler(
        KubeSchedulerConfiguration(), clock=ManualClock(), effects=MemoryEffects()
    )
    for i in range(nodes):
        sched.add_node(default_node(i, {"kubernetes.io/hostname": f"node-{i}"}))
    upsert_storage(sched, make_csi_driver(LOCAL_DRIVER).obj())
    lvm = make_storage_class("lvm").provisioner(LOCAL_DRIVER).wait_for_first_consumer().obj()
    upsert_storage(sched, lvm)
    capacities = [
        make_capacity(f"cap-{i}")
        .storage_class("lvm")
        .capacity("100Gi")
        .on_label("kubernetes.io/hostname", f"node-{i}")
        .obj()
        for i in range(nodes)
    ]
    for capacity in capacities:
        upsert_storage(sched, capacity)
    binding = next(
        p for p in sched.profiles["default-scheduler"].plugins.all() if p.name == "VolumeBinding"
    )
    claim = make_pvc("c").storage_class("lvm").request("10Gi").obj()
    binding.capacity.rows(claim, lvm)  # type: ignore[attr-defined]
    start = time.perf_counter()
    for k in range(rounds):
        upsert_storage(sched, capacities[k % nodes])
        binding.capacity.rows(claim, lvm)  # type: ignore[attr-defined]
    return (time.perf_counter() - start) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--shapes", default="none,token,bound,dynamic,local,local2,capacity")
    args = parser.parse_args()
    print(f"Volumes {args.nodes} nodes / {args.pods} pods")
    for shape in args.shapes.split(","):
        scheduled, seconds = run(shape, args.nodes, args.pods)
        print(
            f"  {shape}: {scheduled} scheduled in {seconds:.2f} s: {scheduled / seconds:.0f} pods/s"
        )
        sys.stdout.flush()
        if shape == "capacity":
            cost = capacity_churn(args.nodes)
            print(f"  capacity churn: {cost * 1000:.2f} ms per change and query")


if __name__ == "__main__":
    main()
