"""Storage objects in simulator scenarios: read from the same manifests as nodes and
pods, placed by the same plugins (the in-memory port binds claims as the PersistentVolume
controller would)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from shoal.sim import SimOptions, load_scenario, simulate

CLUSTER = """
apiVersion: v1
kind: Node
metadata: {name: a1, labels: {topology.kubernetes.io/zone: a, kubernetes.io/hostname: a1}}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: b1, labels: {topology.kubernetes.io/zone: b, kubernetes.io/hostname: b1}}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: disk-b1}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: local
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [b1]}]
status: {phase: Available}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: default}
spec:
  storageClassName: local
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 5Gi}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: broken, namespace: default}
spec:
  resources: {requests: {storage: lots}}
"""

WORKLOAD = """
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: default}
spec:
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
"""


def test_a_scenario_declares_storage_and_the_pod_follows_its_volume(tmp_path: Path) -> None:
    cluster, workload = tmp_path / "cluster.yaml", tmp_path / "workload.yaml"
    cluster.write_text(textwrap.dedent(CLUSTER))
    workload.write_text(textwrap.dedent(WORKLOAD))
    scenario = load_scenario([cluster, workload])
    # The malformed claim is reported with its name and field; the rest loads.
    [error] = scenario.errors
    assert "PersistentVolumeClaim default/broken" in str(error)
    assert "spec.resources" in str(error)
    assert [o.kind for o in scenario.storage] == [
        "StorageClass",
        "PersistentVolume",
        "PersistentVolumeClaim",
    ]
    result = simulate(scenario, SimOptions())
    assert {r.name: r.node for r in result.records} == {"db": "b1"}
