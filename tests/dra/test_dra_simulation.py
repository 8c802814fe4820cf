"""The simulator reads DeviceClasses, ResourceSlices, ResourceClaims and
ResourceClaimTemplates; a pod naming a template gets its claim as it arrives, and
pods with claims run only where the devices are."""

from __future__ import annotations

import textwrap
from pathlib import Path

from shoal.sim import SimOptions, load_scenario, simulate

CLUSTER = """
apiVersion: v1
kind: Node
metadata: {name: cpu-only}
status: {allocatable: {cpu: "16", memory: 64Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: gpu-node}
status: {allocatable: {cpu: "16", memory: 64Gi, pods: "110"}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: gpu-node-gpus}
spec:
  driver: gpu.example.com
  nodeName: gpu-node
  pool: {name: gpu-node, generation: 1, resourceSliceCount: 1}
  devices:
    - {name: gpu-0, capacity: {memory: {value: 80Gi}}}
    - {name: gpu-1, capacity: {memory: {value: 80Gi}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: default}
spec:
  spec:
    devices:
      requests:
        - name: gpu
          exactly:
            deviceClassName: gpu.example.com
            selectors:
              - cel:
                  expression: >-
                    device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0
"""

WORKLOAD = "".join(
    f"""
---
apiVersion: v1
kind: Pod
metadata:
  name: job-{i}
  namespace: default
  annotations: {{sim.shoal.dev/arrival: "{i}", sim.shoal.dev/duration: "100"}}
spec:
  containers: [{{name: c, resources: {{requests: {{cpu: "1"}}, claims: [{{name: gpu}}]}}}}]
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: one-gpu}}]
"""
    for i in range(3)
)


def test_pods_with_template_claims_run_where_the_devices_are(tmp_path: Path) -> None:
    cluster, workload = tmp_path / "cluster.yaml", tmp_path / "workload.yaml"
    cluster.write_text(textwrap.dedent(CLUSTER))
    workload.write_text(WORKLOAD)
    scenario = load_scenario([cluster, workload])
    assert not scenario.errors
    assert [o.kind for o in scenario.dra] == [
        "DeviceClass",
        "ResourceSlice",
        "ResourceClaimTemplate",
    ]
    result = simulate(scenario, SimOptions())
    records = {r.name: r for r in result.records}
    # Two GPUs: two jobs at once on gpu-node, the third when one finishes.
    assert {r.node for r in records.values()} == {"gpu-node"}
    starts = sorted(r.bound_at for r in records.values() if r.bound_at is not None)
    assert len(starts) == 3 and starts[2] >= 100
