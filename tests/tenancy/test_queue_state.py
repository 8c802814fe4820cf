"""Open and closed queues (Volcano's queue state, Kueue's stopPolicy Hold), and a Queue
object the scheduler rejects carrying that in its status.

A closed queue (`spec.state: Closed`) admits no new pods: they wait out of the scheduling
queue (gated, saying why and how to open it) while pods already placed keep running; its
status reads Closing until they are gone, then Closed. Closing a parent closes its
subtree. Opening it lets the waiting pods in at once.
"""

from __future__ import annotations

from shoal.testing.builders import make_node, make_pod

from .helpers import harness, queue


def pod(name: str, q: str, cpu: str = "1"):  # type: ignore[no-untyped-def]
    return make_pod(name).labels({"shoal.dev/queue": q}).req(cpu=cpu)


def test_closed_queue_holds_new_pods_and_keeps_running_ones() -> None:
    h = harness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="32Gi"))
    assert h.scheduler.apply_queues([queue("team"), queue("other")]) == []
    h.add_pods(pod("running", "team"))
    h.advance(1)
    assert h.node_of("running") == "n1"

    assert h.scheduler.apply_queues([queue("team", state="Closed")]) == []
    h.add_pods(pod("late", "team"), pod("elsewhere", "other"))
    h.advance(2)
    assert h.node_of("running") == "n1"  # placed pods keep running
    assert h.node_of("late") is None
    assert h.node_of("elsewhere") == "n1"  # other queues are not affected
    message = h.message("late")
    assert "queue team is closed" in message and "shoal queue open team" in message
    assert "gated by QueueCapacity" in message
    assert h.effects.queue_status["team"].state == "Closing"  # it still runs a pod

    h.delete_pod("running")
    h.advance(2)
    assert h.effects.queue_status["team"].state == "Closed"

    assert h.scheduler.apply_queues([queue("team")]) == []
    h.advance(2)
    assert h.node_of("late") == "n1"
    assert h.effects.queue_status["team"].state == "Open"


def test_closing_a_queue_gates_pods_already_waiting_in_it() -> None:
    h = harness()
    h.add_nodes(make_node("n1").capacity(cpu="2", memory="8Gi"))
    assert h.scheduler.apply_queues([queue("team")]) == []
    h.add_pods(pod("big", "team", cpu="4"))  # never fits: waits as unschedulable
    h.advance(1)
    assert "Insufficient cpu" in h.message("big")
    assert h.scheduler.apply_queues([queue("team", state="Closed")]) == []
    h.advance(1)
    assert "queue team is closed" in h.message("big")
    gated = {e.pod.key for e in h.scheduler.scheduling_queue.gated()}
    assert "default/big" in gated


def test_closing_a_parent_closes_its_subtree() -> None:
    h = harness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="32Gi"))
    queues = [queue("org", state="Closed"), queue("research", parent="org"), queue("batch")]
    assert h.scheduler.apply_queues(queues) == []
    h.add_pods(pod("r", "research"), pod("b", "batch"))
    h.advance(2)
    assert h.node_of("r") is None and h.node_of("b") == "n1"
    assert "queue org (above research) is closed" in h.message("r")
    assert h.effects.queue_status["research"].state == "Closed"

    assert h.scheduler.apply_queues([queue("org")]) == []
    h.advance(2)
    assert h.node_of("r") == "n1"


def test_a_closed_queue_holds_a_whole_gang() -> None:
    h = harness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="4", memory="16Gi") for i in range(2)))
    assert h.scheduler.apply_queues([queue("team", state="Closed")]) == []
    members = [
        pod(f"g-{i}", "team")
        .labels({"pod-group.scheduling.sigs.k8s.io/name": "g"})
        .annotations({"pod-group.scheduling.sigs.k8s.io/min-available": "3"})
        for i in range(3)
    ]
    h.add_pods(*members)
    h.advance(2)
    assert all(h.node_of(f"g-{i}") is None for i in range(3))
    assert h.scheduler.apply_queues([queue("team")]) == []
    h.advance(2)
    assert all(h.node_of(f"g-{i}") is not None for i in range(3))


def test_rejected_queue_says_so_in_its_status() -> None:
    h = harness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="32Gi"))
    problems = h.scheduler.apply_queues([queue("team", guaranteed={"cpu": 4}, max={"cpu": 2})])
    assert problems and problems[0].startswith("Queue team:")
    h.advance(2)
    status = h.effects.queue_status["team"]
    assert status.state == "Invalid"
    assert "exceeds spec.max.cpu" in status.problem

    # Fixed: accepted, and the problem is gone.
    assert h.scheduler.apply_queues([queue("team", guaranteed={"cpu": 2}, max={"cpu": 4})]) == []
    h.advance(2)
    status = h.effects.queue_status["team"]
    assert status.state == "Open" and status.problem == ""

    # A bad edit: the version in force stays, its status says the edit was refused.
    assert h.scheduler.apply_queues([queue("team", guaranteed={"cpu": 8}, max={"cpu": 4})])
    h.advance(2)
    status = h.effects.queue_status["team"]
    assert status.state == "Open" and "exceeds spec.max.cpu" in status.problem
    assert status.guaranteed == {"cpu": 2000}


def test_parent_without_a_guarantee_is_guaranteed_its_childrens_sum() -> None:
    # 50 children with guarantees under 5 parents that set none: every queue applies (a
    # parent's unset guarantee used to count as 0 and reject every child).
    h = harness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="64", memory="256Gi") for i in range(4)))
    queues = [queue(f"p{p}", max={"cpu": 100}) for p in range(5)]
    queues += [
        queue(f"p{p}-c{c}", parent=f"p{p}", guaranteed={"cpu": 2})
        for p in range(5)
        for c in range(10)
    ]
    assert h.scheduler.apply_queues(queues) == []
    tree = h.scheduler.tenant_queues.tree
    assert tree.defs["p0"].guaranteed == {"cpu": 20_000}
    assert tree.defs["p0-c0"].guaranteed == {"cpu": 2000}
    h.add_pods(pod("x", "p3-c7"))
    h.advance(2)
    assert h.node_of("x") is not None
    status = h.effects.queue_status["p0"]
    assert status.problem == ""
    assert "sets no cpu: guaranteed its children's sum (cpu 20)" in status.note

    # An explicit guarantee is kept, and checked against the children as before.
    problems = h.scheduler.apply_queues([queue("p4", guaranteed={"cpu": 4}, max={"cpu": 100})])
    assert problems and "children's spec.guaranteed.cpu add up to 20" in problems[0]
