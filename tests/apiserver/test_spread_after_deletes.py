"""Topology spread on the real API server counts only pods that exist: a bound pod
deleted at grace 0 reaches the informer as an update (deletionTimestamp set) and then
a deletion. Before, such a pod stayed in spread's counts forever; after four probes
were bound and deleted, the fifth broke maxSkew (found by differential testing against
kube-scheduler, which bound every probe to the one node that keeps the skew).

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

from apihelpers import space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.client import ApiError
from shoal.drivers.kube.resources import NODES, PODS

ZONE = "topology.kubernetes.io/zone"
MERGE = "application/merge-patch+json"


@async_test(timeout=90)
async def test_deleted_pods_leave_topology_spread_counts(control_plane: dict[str, str]) -> None:
    async with space(control_plane["KUBECONFIG"], "spreaddel") as s:
        nodes = {}
        for name, zone in (("m1", "z1"), ("m2", "z1"), ("m3", "z2"), ("m4", "z2")):
            nodes[name] = await s.add_node(name, cpu="8", memory="16Gi")
            await s.client.request(
                "PATCH",
                NODES.path(name=nodes[name]),
                body={"metadata": {"labels": {ZONE: zone}}},
                content_type=MERGE,
            )
        for name, node in (("f0", "m2"), ("f1", "m3"), ("f2", "m3"), ("f3", "m4")):
            await s.create_pod(name, "100m", labels={"app": "c"}, node_name=nodes[node])
        spread = {
            "maxSkew": 2,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "c"}},
        }
        async with s.shoal(s.options("spreaddel")):
            for i in range(6):
                body = s.pod(f"t{i}", "100m", labels={"app": "c"})
                body["spec"]["topologySpreadConstraints"] = [spread]
                await s.client.request("POST", PODS.path(s.name), body=body)

                async def bound(name: str = f"t{i}") -> bool:
                    return name in await s.bound()

                await wait_for(bound, what=f"t{i} bound")
                # Zone z1 holds 1 pod and z2 3: only z1 keeps the skew within 2.
                assert (await s.bound())[f"t{i}"] in (nodes["m1"], nodes["m2"]), f"t{i}"
                await s.client.request(
                    "DELETE", PODS.path(s.name, f"t{i}"), query={"gracePeriodSeconds": "0"}
                )

                async def gone(name: str = f"t{i}") -> bool:
                    try:
                        await s.client.request("GET", PODS.path(s.name, name))
                    except ApiError as err:
                        return err.not_found
                    return False

                await wait_for(gone, what=f"t{i} deleted")
