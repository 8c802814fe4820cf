"""Cluster events wake exactly the pods they can help."""

from __future__ import annotations

from shoal.testing import SchedulerHarness, make_node, make_pod


def test_a_bound_pod_wakes_pods_waiting_for_affinity() -> None:
    h = SchedulerHarness()
    h.add_nodes(
        make_node("n1").capacity(cpu="4", memory="8Gi").labels({"kubernetes.io/hostname": "n1"})
    )
    web = make_pod("web").req(cpu="100m").pod_affinity_in("app", ["db"], "kubernetes.io/hostname")
    h.add_pods(web)
    h.run()
    assert h.node_of("web") is None
    assert "didn't match pod affinity rules" in h.scheduler.explain("default/web")
    h.add_pods(make_pod("db").labels(app="db").req(cpu="100m"))
    h.run()
    assert h.node_of("db") == "n1"
    # The bind event moves web out of the unschedulable set (which it would otherwise
    # leave only after 5 minutes); it retries once its 1 s backoff is over.
    assert h.scheduler.scheduling_queue.counts()["unschedulable"] == 0
    h.advance(2)
    assert h.node_of("web") == "n1"


def test_pods_rejected_for_resources_ignore_unrelated_events() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="1", memory="8Gi"))
    h.add_pods(make_pod("big").req(cpu="2"))
    h.run()
    attempts = h.scheduler.scheduling_queue.get("default/big").attempts  # type: ignore[union-attr]
    h.add_pods(make_pod("small").req(cpu="100m"))  # binds: an "assigned pod added" event
    h.run()
    assert h.scheduler.scheduling_queue.get("default/big").attempts == attempts  # type: ignore[union-attr]
    assert h.scheduler.scheduling_queue.counts()["unschedulable"] == 1


def test_pod_deleted_while_binding_is_unreserved() -> None:
    calls: list[str] = []

    class Recorder:
        name = "RecordReserve"

        def reserve(self, state, pod, node):  # type: ignore[no-untyped-def]
            from shoal.framework.status import Status

            calls.append(f"reserve {pod.key}")
            return Status()

        def unreserve(self, state, pod, node) -> None:  # type: ignore[no-untyped-def]
            calls.append(f"unreserve {pod.key}")

    from shoal.framework.registry import PluginSpec
    from shoal.scheduler import default_registry

    registry = default_registry(include_entry_points=False)
    registry.register("RecordReserve", PluginSpec(lambda args, handle: Recorder()))
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"plugins": {"reserve": {"enabled": [{"name": "RecordReserve"}]}}}],
    }
    h = SchedulerHarness(config, registry=registry)
    h.add_nodes(make_node("n1").capacity(cpu="4", memory="8Gi"))
    h.add_pods(make_pod("p").req(cpu="1"))
    sched = h.scheduler
    sched.schedule_one()
    (uid,) = sched.binding
    sched.delete_pod(uid)  # deleted between Reserve and the bind
    assert calls == ["reserve default/p", "unreserve default/p"]
    assert not sched.cluster.placed and not sched.binding
    assert sched.start_bindings() == 0  # nothing is bound for a deleted pod
    assert not h.effects.bound
