"""A preemptor whose victims are still terminating waits for them without a doubling
backoff: the last victim gone wakes it at once (in a cluster, victims take their grace
period; before, the preemptor retried at 1, 3, 7, 15 s... and bound up to 10 s after its
last victim was gone: the real-API-server PreemptionBasic's tail)."""

from __future__ import annotations

from shoal.testing import SchedulerHarness, make_node, make_pod


def test_the_last_victim_gone_wakes_the_preemptor_at_once() -> None:
    h = SchedulerHarness()
    h.effects.hold_evictions = True  # the test plays the kubelet
    h.add_nodes(make_node("n0").capacity(cpu="4", memory="32Gi"))
    h.add_pods(*(make_pod(f"low{i}").req(cpu="900m").priority(0) for i in range(4)))
    h.run()
    h.add_pods(make_pod("high").req(cpu="3").priority(10))
    h.advance(1)
    victims = [e.pod for e in h.effects.evictions]
    assert len(victims) == 3
    h.advance(19)  # the victims take their time
    assert h.node_of("high") is None
    assert h.message("high").endswith("preemption: evicting 3 pod(s) on n0.")
    (high,) = [p for p in h.scheduler.scheduling_queue.pending() if p.pod.name == "high"]
    # Not retried while they terminate (before: retried after its backoff, told again
    # "waiting for 3 preempted pod(s) on node n0 to terminate", one more
    # FailedScheduling event each time), as kube's preemptor waits.
    assert high.attempts == 1
    for key in victims[:2]:
        h.delete_pod(key)
    h.run()
    assert h.node_of("high") is None  # one victim left
    h.delete_pod(victims[2])
    h.run()  # no time passes
    assert h.node_of("high") == "n0"
    assert len(h.effects.evictions) == 3  # nobody else was taken


def test_a_failed_eviction_wakes_the_preemptor_to_preempt_again() -> None:
    h = SchedulerHarness()
    h.effects.hold_evictions = True
    h.add_nodes(make_node("n0").capacity(cpu="4", memory="32Gi"))
    h.add_pods(*(make_pod(f"low{i}").req(cpu="900m").priority(0) for i in range(4)))
    h.run()
    h.add_pods(make_pod("high").req(cpu="3").priority(10))
    h.advance(1)
    first = [e.uid for e in h.effects.evictions]
    for uid in first:
        h.scheduler.eviction_failed(uid)  # refused (a disruption budget, an error)
    h.run()
    assert len(h.effects.evictions) == 6  # it preempted again, at once


def test_a_gang_awaiting_its_victims_binds_once_the_last_is_gone() -> None:
    h = SchedulerHarness()
    h.effects.hold_evictions = True
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="4", memory="32Gi") for i in range(2)))
    h.add_pods(
        *(make_pod(f"low{i}").req(cpu="900m").priority(0).node(f"n{i % 2}") for i in range(8))
    )
    h.run()
    labels = {
        "pod-group.scheduling.sigs.k8s.io/name": "g",
        "pod-group.scheduling.sigs.k8s.io/min-available": "2",
    }
    h.add_pods(*(make_pod(f"m{i}").labels(labels).req(cpu="3").priority(10) for i in range(2)))
    h.advance(1)
    victims = [e.pod for e in h.effects.evictions]
    assert len(victims) == 6
    h.advance(19)  # the victims take their time
    assert h.node_of("m0") is None and h.node_of("m1") is None
    queued = {p.pod.name: p.attempts for p in h.scheduler.scheduling_queue.pending()}
    assert max(queued.values()) == 1, queued  # not retried while they terminate
    assert "preempting 6 pod(s) to place 2 member(s)" in h.message("m0")
    for key in victims:
        h.delete_pod(key)
    h.run()  # no time passes
    assert h.node_of("m0") is not None and h.node_of("m1") is not None
    assert len(h.effects.evictions) == 6
