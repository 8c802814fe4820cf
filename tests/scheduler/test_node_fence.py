"""The node fence (node shards): a replica places pods, chooses victims and places
gangs only on the nodes of the shards it holds; the others are named in the pod's
message, and pods get another try when it holds more."""

from __future__ import annotations

from shoal.cache.node_table import node_hash
from shoal.testing import SchedulerHarness, make_node, make_pod

SLOTS = 16


def slot(node: str) -> int:
    return node_hash(node) % SLOTS


def cluster() -> SchedulerHarness:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="2", memory="8Gi") for i in range(4)))
    return h


def hold(h: SchedulerHarness, nodes: list[str]) -> None:
    mine = frozenset(slot(n) for n in nodes)
    holders = {s: ("alpha" if s in mine else "beta") for s in range(SLOTS)}
    h.scheduler.set_node_shards(SLOTS, mine, holders)


def test_pods_go_only_to_nodes_of_held_shards_and_the_message_names_the_holder() -> None:
    h = cluster()
    hold(h, ["n0", "n1"])  # n0..n3 are in four different slots
    assert len({slot(f"n{i}") for i in range(4)}) == 4
    h.add_pods(*(make_pod(f"p{i}").req(cpu="2") for i in range(3)))
    result = h.run()
    placed = {k: v for k, v in result.placements.items() if v}
    assert sorted(placed.values()) == ["n0", "n1"]
    (pending,) = [k for k, v in result.placements.items() if not v]
    message = result.messages[pending]
    assert "2 node(s) are in node shards held by another Shoal replica (beta)" in message
    assert "2 Insufficient cpu" in message

    hold(h, ["n0", "n1", "n2", "n3"])  # more shards: the pending pod gets its try
    result = h.advance(2)  # (after its backoff)
    assert all(result.placements.values())


def test_preemption_never_chooses_victims_on_nodes_of_other_shards() -> None:
    h = cluster()
    hold(h, ["n0"])
    h.add_pods(make_pod("low-mine").req(cpu="2").node("n0"))
    h.add_pods(*(make_pod(f"low-{i}").req(cpu="2").node(f"n{i}") for i in (1, 2, 3)))
    h.run()
    h.add_pods(make_pod("high").req(cpu="2").priority(1000))
    h.run()
    h.advance(1)
    assert list(h.evicted) == ["default/low-mine"]


def test_a_gang_is_placed_whole_within_held_shards_or_not_at_all() -> None:
    h = cluster()
    hold(h, ["n0", "n1"])
    name = "pod-group.scheduling.sigs.k8s.io/name"
    minimum = "pod-group.scheduling.sigs.k8s.io/min-available"
    h.add_pods(
        *(make_pod(f"g{i}").labels({name: "g", minimum: "3"}).req(cpu="2") for i in range(3))
    )
    result = h.advance(5)
    assert not any(result.placements.values())
    hold(h, ["n0", "n1", "n2"])
    result = h.advance(5)
    assert sorted(v for v in result.placements.values() if v) == ["n0", "n1", "n2"]


def test_without_a_fence_every_node_is_used() -> None:
    h = cluster()
    h.add_pods(*(make_pod(f"p{i}").req(cpu="2") for i in range(4)))
    assert all(h.run().placements.values())


def test_routing_keys_keep_a_capped_queue_and_a_gang_with_one_replica() -> None:
    from shoal.api.manifests import decode
    from shoal.api.queue import Queue

    h = SchedulerHarness()
    capped = decode({"metadata": {"name": "team"}, "spec": {"max": {"cpu": "4"}}}, Queue)
    free = decode({"metadata": {"name": "free"}, "spec": {}}, Queue)
    assert h.scheduler.apply_queues([capped, free]) == []
    label = "shoal.dev/queue"
    gang = {"pod-group.scheduling.sigs.k8s.io/name": "g"}
    key = h.scheduler.routing_key
    assert key(make_pod("a").labels({label: "team"}).obj()) == "queue/team"
    assert key(make_pod("b").labels({label: "free", **gang}).obj()) == "gang/default/g"
    plain = make_pod("c").labels({label: "free"}).obj()
    assert key(plain) == f"pod/{plain.metadata.uid}"


def _gang(h: SchedulerHarness, size: int, cpu: str = "2") -> None:
    name = "pod-group.scheduling.sigs.k8s.io/name"
    minimum = "pod-group.scheduling.sigs.k8s.io/min-available"
    h.add_pods(
        *(
            make_pod(f"g{i}").labels({name: "g", minimum: str(size)}).req(cpu=cpu)
            for i in range(size)
        )
    )


def test_a_gang_that_fits_only_with_other_shards_asks_to_borrow_them_then_lets_go() -> None:
    h = cluster()
    asked: list[tuple[str, frozenset[int]]] = []
    h.scheduler.borrow_shards = lambda key, slots: asked.append((key, slots))
    hold(h, ["n0", "n1"])
    _gang(h, 3)
    result = h.run()  # one attempt, no time passes: the gang is backing off after it
    assert not any(result.placements.values())  # whole or nothing
    key, wanted = asked[-1]
    # The shard of one of the other two nodes (a what-if with every node: the gang
    # would use three of the four).
    assert key == "default/g"
    assert len(wanted) == 1 and wanted <= {slot("n2"), slot("n3")}
    message = h.message("default/g0")
    assert "waiting for them to be lent to this replica" in message
    assert f"node shard(s) {min(wanted)} of other Shoal replicas (beta)" in message
    # The what-if left the fence as it was, and nothing assumed.
    assert h.scheduler.cluster.fence.held == frozenset(slot(n) for n in ("n0", "n1"))
    assert not h.scheduler.cluster.placed

    # The loan comes through: the gang is tried at once (whatever its backoff: a loan
    # lasts a limited time) and placed whole, and once its binds are answered it lets
    # the shards go.
    hold(h, ["n0", "n1", *(n for n in ("n2", "n3") if slot(n) in wanted)])
    result = h.run()
    assert len([v for v in result.placements.values() if v]) == 3
    h.advance(1)
    assert asked[-1] == ("default/g", frozenset())


def test_a_gang_that_fits_nowhere_or_not_at_home_does_not_borrow() -> None:
    h = cluster()
    asked: list[tuple[str, frozenset[int]]] = []
    h.scheduler.borrow_shards = lambda key, slots: asked.append((key, slots))
    hold(h, ["n0", "n1"])
    _gang(h, 5)  # five 2-cpu members, four 2-cpu nodes: not even with every shard
    h.advance(5)
    assert asked == []
    assert "lent" not in h.message("default/g0")
    # Its retries do not run the what-if again while nothing changed (each is a whole
    # gang placement); a node added is a change.
    trials = h.scheduler.borrow_trials
    assert trials == 1
    h.advance(30)
    assert h.scheduler.borrow_trials == trials
    h.add_nodes(make_node("n9").capacity(cpu="1", memory="8Gi"))
    h.advance(30)
    assert h.scheduler.borrow_trials == trials + 1

    h = cluster()
    h.scheduler.borrow_shards = lambda key, slots: asked.append((key, slots))
    h.scheduler.writes_status = lambda key, scheduler_name: False  # handed over, not home
    hold(h, ["n0", "n1"])
    _gang(h, 3)
    h.advance(5)
    assert asked == []


def test_a_gang_that_fits_in_the_held_shards_never_asks() -> None:
    h = cluster()
    asked: list[tuple[str, frozenset[int]]] = []
    h.scheduler.borrow_shards = lambda key, slots: asked.append((key, slots))
    hold(h, ["n0", "n1"])
    _gang(h, 2)
    result = h.advance(5)
    assert len([v for v in result.placements.values() if v]) == 2
    assert asked == []


def test_an_elastic_gang_borrows_for_its_minimum_only() -> None:
    h = cluster()
    asked: list[tuple[str, frozenset[int]]] = []
    h.scheduler.borrow_shards = lambda key, slots: asked.append((key, slots))
    hold(h, ["n0"])
    name = "pod-group.scheduling.sigs.k8s.io/name"
    minimum = "pod-group.scheduling.sigs.k8s.io/min-available"
    h.add_pods(
        *(make_pod(f"g{i}").labels({name: "g", minimum: "2"}).req(cpu="2") for i in range(3))
    )
    h.advance(5)
    key, wanted = asked[-1]
    assert key == "default/g" and len(wanted) == 1  # two members, one of them on n0


def test_shards_this_replica_is_still_taking_over_are_not_blamed_on_another() -> None:
    """After a restart the shard map already names this replica for its shards, but
    they are not usable until its pod watch has caught up. Before, pods were told the
    nodes were "held by another Shoal replica (<its own identity>)"."""
    h = cluster()
    holders = dict.fromkeys(range(SLOTS), "alpha")
    h.scheduler.set_node_shards(SLOTS, frozenset(), holders, "alpha")
    h.add_pods(make_pod("p").req(cpu="1"))
    message = h.run().messages["default/p"]
    assert message == (
        "0/4 nodes are available: 4 node(s) are in node shards this replica is still taking over."
        " preemption: 0/4 nodes are available: 4 Preemption is not helpful for "
        "scheduling."
    )
    holders[slot("n3")] = "beta"
    h.scheduler.set_node_shards(SLOTS, frozenset(), holders, "alpha")
    h.add_pods(make_pod("q").req(cpu="1"))
    assert (
        "4 node(s) are in node shards held by another Shoal replica (beta)"
        in (h.run().messages["default/q"])
    )
