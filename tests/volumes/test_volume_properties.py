"""Properties of the volume plugins over random clusters, claims and churn:

* no node ever uses more distinct volumes of a CSI driver than its CSINode allows,
  recounted from the pods the cache places on it;
* the incrementally kept attachment counts equal a fresh recount;
* every placed pod's bound volume allows its node (node affinity), and no static volume
  is given to two claims.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.api.volumes import NO_PROVISIONER, pod_claims
from shoal.cache.volumes import VolumeCatalog
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.volumes import make_csi_node, make_pv, make_pvc, make_storage_class

DRIVER = "csi.example.com"

case_st = st.fixed_dictionaries(
    {
        "nodes": st.lists(st.integers(0, 3), min_size=1, max_size=5),  # attach limit each
        "local_volumes": st.lists(st.integers(0, 4), max_size=6),  # node index of each
        "pods": st.lists(
            st.tuples(
                st.lists(st.integers(0, 7), min_size=1, max_size=3),  # dynamic claims
                st.booleans(),  # plus a local (static) claim
            ),
            max_size=12,
        ),
        "deletions": st.lists(st.integers(0, 11), max_size=4),
    }
)


def recount(h: SchedulerHarness) -> dict[str, int]:
    catalog = VolumeCatalog.of(h.scheduler.handle)
    used: dict[str, set[str]] = defaultdict(set)
    for record in h.scheduler.cluster.placed.values():
        for claim, _ in catalog.attachable(record.pod):
            used[record.node].add(claim)
    return {node: len(claims) for node, claims in used.items()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case_st)
def test_volume_invariants(case: dict[str, list]) -> None:  # type: ignore[type-arg]
    h = SchedulerHarness()
    nodes = [f"n{i}" for i in range(len(case["nodes"]))]
    h.add_nodes(*(make_node(n).capacity(cpu="64", memory="64Gi").hostname_label() for n in nodes))
    h.add_storage(
        make_storage_class("dyn").wait_for_first_consumer().provisioner(DRIVER),
        make_storage_class("local").wait_for_first_consumer().provisioner(NO_PROVISIONER),
        *(
            make_csi_node(n).driver(DRIVER, count=c)
            for n, c in zip(nodes, case["nodes"], strict=True)
        ),
    )
    for i, where in enumerate(case["local_volumes"]):
        h.add_storage(make_pv(f"pv{i}").storage_class("local").on_nodes(nodes[where % len(nodes)]))
    for c in range(8):
        h.add_storage(make_pvc(f"d{c}").storage_class("dyn").access_modes("ReadWriteMany"))
    for i, (claims, local) in enumerate(case["pods"]):
        pod = make_pod(f"p{i}")
        for c in sorted(set(claims)):
            pod = pod.pvc(f"d{c}")
        if local:
            h.add_storage(make_pvc(f"local{i}").storage_class("local"))
            pod = pod.pvc(f"local{i}")
        h.add_pods(pod)
    h.run()
    for i in case["deletions"]:
        h.delete_pod(f"p{i}")
    h.advance(30)

    catalog = VolumeCatalog.of(h.scheduler.handle)
    limits = dict(zip(nodes, case["nodes"], strict=True))
    counts = recount(h)
    table = h.scheduler.cluster.table
    for node, used in counts.items():
        assert used <= limits[node], (node, used)
        row = table.row_of[node]
        assert catalog.attached_on(DRIVER, [row])[0] == used  # type: ignore[arg-type]
    for node in set(nodes) - set(counts):
        assert catalog.attached_on(DRIVER, [table.row_of[node]])[0] == 0  # type: ignore[arg-type]
    owners: dict[str, str] = {}
    for record in h.scheduler.cluster.placed.values():
        for use in pod_claims(record.pod.pod):
            claim = catalog.claims[use.key]
            name = claim.spec.volume_name
            if not name:
                continue
            assert owners.setdefault(name, use.key) == use.key, "a volume given to two claims"
            volume = catalog.volumes[name]
            affinity = volume.spec.node_affinity
            assert affinity is not None and affinity.required is not None
            [term] = affinity.required.node_selector_terms
            assert record.node in term.match_expressions[0].values
