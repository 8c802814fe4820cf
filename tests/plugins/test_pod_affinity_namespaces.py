"""Pod (anti-)affinity terms with a `namespaceSelector`, as scenarios.

kube semantics (PodAffinityTerm, interpodaffinity plugin): a term applies to the union of
`namespaces` and the namespaces whose labels match `namespaceSelector`; `{}` selects every
namespace; with neither field set, the owner's namespace. The incoming pod's selectors are
resolved against the namespaces' current labels, and placed pods' terms are evaluated
against the incoming pod's namespace labels, so a relabelled namespace changes both.
"""

from __future__ import annotations

from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import ZONE_LABEL, NodeBuilder, PodBuilder

PROD = {"env": "prod"}


def zone_node(name: str, zone: str) -> NodeBuilder:
    return make_node(name).zone(zone).hostname_label().capacity(cpu="8", memory="32Gi")


def running(name: str, namespace: str, node: str, **labels: str) -> PodBuilder:
    return make_pod(name, namespace).labels(labels).req(cpu="100m").node(node)


def ballast(node: str, cpu: str = "4") -> PodBuilder:
    """Load that makes the scheduler's resource scores prefer the other nodes."""
    return make_pod(f"ballast-{node}", "kube-system").req(cpu=cpu, memory="8Gi").node(node)


def harness(*nodes: NodeBuilder) -> SchedulerHarness:
    h = SchedulerHarness()
    h.add_nodes(*nodes)
    h.scheduler.set_namespace_labels("prod-1", PROD)
    h.scheduler.set_namespace_labels("prod-2", PROD)
    h.scheduler.set_namespace_labels("dev", {"env": "dev"})
    return h


def test_required_anti_affinity_of_the_incoming_pod_covers_selected_namespaces() -> None:
    h = harness(zone_node("n1", "a"), zone_node("n2", "b"), zone_node("n3", "c"))
    h.add_pods(
        running("db-1", "prod-1", "n1", app="db"),
        running("db-2", "prod-2", "n2", app="db"),
        running("db-3", "dev", "n3", app="db"),
        ballast("n2"),
        ballast("n3"),
    )
    h.add_pods(
        make_pod("away", "web")
        .req(cpu="100m")
        .pod_anti_affinity(ZONE_LABEL, {"app": "db"}, namespace_selector=PROD),
        # The union of `namespaces` and the selector: every zone holds one of them.
        make_pod("nowhere", "web")
        .req(cpu="100m")
        .pod_anti_affinity(ZONE_LABEL, {"app": "db"}, namespaces=["dev"], namespace_selector=PROD),
    )
    placements, messages = h.run()
    assert placements["web/away"] == "n3"
    assert placements["web/nowhere"] is None
    assert messages["web/nowhere"] == (
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
        " preemption: 0/3 nodes are available: 3 No preemption victims found for "
        "incoming pod."
    )


def test_required_affinity_of_the_incoming_pod_finds_pods_in_selected_namespaces() -> None:
    h = harness(zone_node("n1", "a"), zone_node("n2", "b"), zone_node("n3", "c"))
    h.add_pods(
        running("cache-dev", "dev", "n1", app="cache"),
        running("cache-prod", "prod-2", "n2", app="cache"),
        ballast("n2"),
    )
    h.add_pods(
        make_pod("near", "web")
        .req(cpu="100m")
        .pod_affinity(ZONE_LABEL, {"app": "cache"}, namespace_selector=PROD)
    )
    placements, _ = h.run()
    assert placements["web/near"] == "n2"


def test_existing_pods_anti_affinity_applies_to_pods_of_selected_namespaces() -> None:
    h = harness(zone_node("n1", "a"), zone_node("n2", "b"))
    h.add_pods(
        running("guard", "ops", "n1").pod_anti_affinity(
            ZONE_LABEL, {"app": "web"}, namespace_selector=PROD
        ),
        ballast("n2"),
    )
    h.add_pods(
        make_pod("web-prod", "prod-1").labels(app="web").req(cpu="100m"),
        make_pod("web-dev", "dev").labels(app="web").req(cpu="100m"),
    )
    placements, _ = h.run()
    assert placements["prod-1/web-prod"] == "n2"
    assert placements["dev/web-dev"] == "n1"


def test_existing_pods_anti_affinity_with_an_empty_selector_covers_every_namespace() -> None:
    h = harness(zone_node("n1", "a"), zone_node("n2", "b"))
    h.add_pods(
        running("guard", "ops", "n1").pod_anti_affinity(
            ZONE_LABEL, {"app": "web"}, namespace_selector={}
        ),
        ballast("n2"),
    )
    h.add_pods(make_pod("web-unlabelled", "scratch").labels(app="web").req(cpu="100m"))
    placements, _ = h.run()
    assert placements["scratch/web-unlabelled"] == "n2"


def test_preferred_terms_of_the_incoming_pod_count_selected_namespaces() -> None:
    h = harness(zone_node("n1", "a"), zone_node("n2", "b"), zone_node("n3", "c"))
    h.add_pods(
        running("db-prod", "prod-1", "n1", app="db"),
        running("db-dev", "dev", "n2", app="db"),
        running("cache-prod", "prod-2", "n3", app="cache"),
        ballast("n2", cpu="2"),
        ballast("n3", cpu="2"),
    )
    h.add_pods(
        make_pod("shy", "web")
        .req(cpu="100m")
        .pod_anti_affinity(ZONE_LABEL, {"app": "db"}, weight=100, namespace_selector=PROD)
        .pod_affinity(ZONE_LABEL, {"app": "cache"}, weight=100, namespace_selector=PROD)
    )
    placements, _ = h.run()
    # n1 is the least loaded but holds a prod db; n3 holds the prod cache.
    assert placements["web/shy"] == "n3"


def test_existing_pods_preferred_terms_count_for_pods_of_selected_namespaces() -> None:
    h = harness(zone_node("n1", "a"), zone_node("n2", "b"), zone_node("n3", "c"))
    h.add_pods(
        running("avoider", "ops", "n1").pod_anti_affinity(
            ZONE_LABEL, {"app": "web"}, weight=100, namespace_selector=PROD
        ),
        running("attractor", "ops", "n3").pod_affinity(
            ZONE_LABEL, {"app": "web"}, weight=100, namespace_selector=PROD
        ),
        ballast("n2", cpu="2"),
        ballast("n3", cpu="2"),
    )
    h.add_pods(make_pod("web-prod", "prod-1").labels(app="web").req(cpu="100m"))
    placements, _ = h.run()
    assert placements["prod-1/web-prod"] == "n3"


def test_relabelled_namespace_changes_both_incoming_and_existing_terms() -> None:
    h = harness(zone_node("n1", "a"), zone_node("n2", "b"))
    h.add_pods(
        running("db-dev", "dev", "n1", app="db"),
        running("guard", "ops", "n1").pod_anti_affinity(
            ZONE_LABEL, {"app": "web"}, namespace_selector=PROD
        ),
        ballast("n2"),
    )

    def anti_db(name: str) -> PodBuilder:
        return (
            make_pod(name, "web")
            .req(cpu="100m")
            .pod_anti_affinity(ZONE_LABEL, {"app": "db"}, namespace_selector=PROD)
        )

    h.add_pods(anti_db("before"), make_pod("web-1", "dev").labels(app="web").req(cpu="100m"))
    placements, _ = h.run()
    assert placements["web/before"] == "n1"  # the db in "dev" is not selected yet
    assert placements["dev/web-1"] == "n1"  # nor is "dev" for the guard's term

    h.scheduler.set_namespace_labels("dev", PROD)
    h.add_pods(anti_db("after"), make_pod("web-2", "dev").labels(app="web").req(cpu="100m"))
    placements, _ = h.run()
    assert placements["web/after"] == "n2"
    assert placements["dev/web-2"] == "n2"

    h.scheduler.set_namespace_labels("dev", {"env": "dev"})
    h.add_pods(anti_db("again"), make_pod("web-3", "dev").labels(app="web").req(cpu="100m"))
    placements, _ = h.run()
    assert placements["web/again"] == "n1"
    assert placements["dev/web-3"] == "n1"
