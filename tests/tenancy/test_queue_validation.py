"""Each Queue, ElasticQuota, QueueBinding and NodePool is validated on its own: an
invalid one is rejected and reported (with what depends on it), the valid ones apply."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.drivers.kube.resources import QUEUE_BINDINGS, QUEUES, ResourceKind
from shoal.drivers.kube.tenancy import TenancySync
from shoal.tenancy.tree import QueueDef
from shoal.testing import make_node, make_pod

from .helpers import GPU, binding, elastic_quota, harness, node_pool, queue


def gpu_pod(name: str, namespace: str = "default"):
    return make_pod(name, namespace).req({GPU: 1}, cpu="1")


def test_valid_queue_applies_next_to_invalid_ones() -> None:
    h = harness()
    h.add_nodes(make_node("n0").capacity({GPU: 4}, cpu="16", memory="64Gi"))
    assert h.scheduler.apply_queues([queue("keep", guaranteed={GPU: 1})]) == []
    problems = h.scheduler.apply_queues(
        [
            queue("x", parent="y"),
            queue("y", parent="x"),
            queue("greedy", guaranteed={GPU: 8}, max={GPU: 4}),
            queue("kid", parent="greedy"),
            queue("team-b", max={GPU: 2}),  # another team's valid new queue
        ],
        bindings=[binding("to-greedy", "greedy", "lab"), binding("b", "team-b", "team-b")],
    )
    text = "\n".join(problems)
    assert "Queue x: spec.parent forms a cycle" in text
    assert "Queue y: spec.parent forms a cycle" in text
    assert (
        "Queue greedy: spec.guaranteed.nvidia.com/gpu (8) exceeds spec.max.nvidia.com/gpu (4)"
        in text
    )
    assert "Queue kid: spec.parent 'greedy' was rejected" in text
    assert "QueueBinding to-greedy: spec.queue 'greedy' was rejected" in text
    assert len(problems) == 5, problems
    tree = h.scheduler.tenant_queues.tree
    assert {"keep", "team-b"} <= set(tree.index)
    assert not {"x", "y", "greedy", "kid"} & set(tree.index)
    h.add_pods(*(gpu_pod(f"b-{i}", "team-b") for i in range(3)))
    h.run()
    assert h.node_of("team-b/b-0") and h.node_of("team-b/b-1")
    assert "queue team-b would exceed its max nvidia.com/gpu" in h.message("team-b/b-2")


def test_bad_edit_keeps_the_version_in_force() -> None:
    h = harness()
    h.add_nodes(make_node("n0").capacity({GPU: 4}, cpu="16", memory="64Gi"))
    assert h.scheduler.apply_queues([queue("a", max={GPU: 1}), queue("b")]) == []
    problems = h.scheduler.apply_queues(
        [queue("a", guaranteed={GPU: 3}, max={GPU: 2}), queue("b", max={GPU: 3})]
    )
    assert len(problems) == 1 and problems[0].startswith("Queue a: spec.guaranteed"), problems
    tree = h.scheduler.tenant_queues.tree
    k = tree.resource_index[GPU]
    assert tree.maximum[tree.index["a"], k] == 1000  # milli-GPU: the earlier a stays in force
    assert tree.maximum[tree.index["b"], k] == 3000  # b's valid edit applies


def test_a_namespace_listed_by_two_bindings_is_refused_in_the_second() -> None:
    """A namespace has one queue: the binding listing it second is refused naming the
    first (the one in force keeps it, also when the other is added later)."""
    h = harness()
    queues = [queue("a"), queue("b")]
    assert h.scheduler.apply_queues(queues, bindings=[binding("bind-b", "b", "ml")]) == []
    problems = h.scheduler.apply_queues(
        queues, bindings=[binding("bind-a", "a", "ml", "web"), binding("bind-b", "b", "ml")]
    )
    assert problems == [
        "QueueBinding bind-a: spec.namespaces: namespace 'ml' is already bound by QueueBinding "
        "bind-b (queue b); a namespace has one queue: list it in one binding only"
    ]
    manager = h.scheduler.tenant_queues
    assert manager.binding_of("ml") is not None and manager.binding_of("ml").spec.queue == "b"
    assert manager.binding_of("web") is None  # bind-a is refused whole


def test_deleting_a_parent_waits_for_its_children() -> None:
    h = harness()
    assert h.scheduler.apply_queues([queue("org"), queue("t1", parent="org")]) == []
    problems = h.scheduler.apply_queues(deleted_queues=["org"])
    assert len(problems) == 1 and problems[0].startswith("Queue t1: spec.parent 'org'"), problems
    assert "org" in h.scheduler.tenant_queues.tree.index
    assert h.scheduler.apply_queues(deleted_queues=["org", "t1"]) == []
    assert not {"org", "t1"} & set(h.scheduler.tenant_queues.tree.index)


def test_new_child_may_not_turn_a_bound_leaf_into_a_parent() -> None:
    h = harness()
    assert h.scheduler.apply_queues([queue("team")], bindings=[binding("b", "team", "lab")]) == []
    problems = h.scheduler.apply_queues([queue("sub", parent="team")])
    assert len(problems) == 1 and problems[0].startswith("Queue sub: spec.parent 'team'"), problems
    assert h.scheduler.tenant_queues.tree.is_leaf("team")


def test_node_pool_naming_an_unknown_queue_is_rejected_alone() -> None:
    h = harness()
    problems = h.scheduler.apply_queues(
        [queue("a", pools=["mine"])],
        pools=[
            node_pool("mine", nodeSelector={"pool": "a"}, exclusiveTo=["a"]),
            node_pool("ghost", nodeSelector={"pool": "g"}, exclusiveTo=["nobody"]),
        ],
    )
    assert problems == [
        "NodePool ghost: spec.exclusiveTo queue 'nobody' does not exist; create the Queue "
        "or fix the name"
    ]
    assert set(h.scheduler.tenant_queues.pools) == {"mine"}


def test_problems_name_elastic_quotas_and_their_fields() -> None:
    h = harness()
    problems = h.scheduler.apply_queues(
        [queue("ml"), queue("ok")],
        [
            elastic_quota("ml", min={"cpu": 1}),  # namespace ml is also Queue ml's name
            elastic_quota("data", min={"cpu": 4}, max={"cpu": 2}),
            elastic_quota("web", max={"cpu": 2}),
        ],
    )
    assert sorted(problems) == [
        "ElasticQuota data/quota: spec.min.cpu (4) exceeds spec.max.cpu (2); lower the "
        "guarantee or raise the maximum",
        "ElasticQuota ml/quota: namespace ml is also the name of Queue ml, and a queue is "
        "defined once; rename the Queue or bind namespace ml to it with a QueueBinding instead",
        "Queue ml: ElasticQuota ml/quota makes namespace ml a queue of that name, and a queue "
        "is defined once; rename the Queue or remove the ElasticQuota",
    ]
    assert {"ok", "web"} <= set(h.scheduler.tenant_queues.tree.index)
    assert not {"ml", "data"} & set(h.scheduler.tenant_queues.tree.index)


# ---- the Kubernetes backend's sync ----------------------------------------------------


def _raw(obj: msgspec.Struct) -> dict[str, Any]:
    return msgspec.to_builtins(obj)  # type: ignore[no-any-return]


def test_kube_sync_reports_exactly_the_invalid_objects_and_applies_the_rest() -> None:
    h = harness()
    h.add_nodes(make_node("n0").capacity({GPU: 4}, cpu="16", memory="64Gi"))
    reported: list[tuple[str, str, str]] = []
    cleared: list[tuple[str, str]] = []

    def report(kind: ResourceKind, raw: dict[str, Any], message: str) -> None:
        reported.append((kind.kind, raw["metadata"]["name"], message))

    def clear(kind: ResourceKind, raw: dict[str, Any]) -> None:
        cleared.append((kind.kind, raw["metadata"]["name"]))

    sync = TenancySync(h.scheduler, report, clear)
    objects = [
        (QUEUES, queue("cyc-a", parent="cyc-b")),
        (QUEUES, queue("cyc-b", parent="cyc-a")),
        (QUEUES, queue("team", max={GPU: 1})),
        (QUEUE_BINDINGS, binding("team", "team", "team")),
        (QUEUE_BINDINGS, binding("lost", "cyc-a", "other")),
    ]
    for kind, obj in objects:
        sync.upsert(kind, obj, _raw(obj))
    sync.ready = True
    sync.apply()
    assert sorted((kind, name) for kind, name, _ in reported) == [
        ("Queue", "cyc-a"),
        ("Queue", "cyc-b"),
        ("QueueBinding", "lost"),
    ]
    assert "team" in h.scheduler.tenant_queues.tree.index
    h.add_pods(gpu_pod("p0", "team"), gpu_pod("p1", "team"))
    h.run()
    assert h.node_of("team/p0")
    assert "queue team would exceed its max" in h.message("team/p1")
    # Fixing the cycle clears it and the binding that depended on it.
    reported.clear()
    fixed = queue("cyc-b")
    sync.upsert(QUEUES, fixed, _raw(fixed))
    assert reported == []
    assert sorted(cleared) == [("Queue", "cyc-a"), ("Queue", "cyc-b"), ("QueueBinding", "lost")]
    assert {"cyc-a", "cyc-b"} <= set(h.scheduler.tenant_queues.tree.index)


# ---- property: every object is applied as given, or named in a problem -----------------

NAMES = ["a", "b", "c", "d", "e"]
queue_st = st.builds(
    lambda name, parent, g, extra: queue(
        name,
        parent=parent,
        guaranteed={GPU: g},
        **({} if extra is None else {"max": {GPU: max(0, g + extra)}}),
    ),
    st.sampled_from(NAMES),
    st.sampled_from(["", *NAMES]),
    st.integers(0, 4),
    st.one_of(st.none(), st.integers(-2, 4)),
)
batch_st = st.tuples(
    st.lists(queue_st, max_size=5),
    st.lists(st.sampled_from(NAMES), max_size=2),  # deleted
    st.lists(st.tuples(st.sampled_from(["x", "y"]), st.sampled_from(NAMES)), max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(batches=st.lists(batch_st, min_size=1, max_size=4))
def test_each_object_applies_or_is_named_in_a_problem(batches) -> None:  # type: ignore[no-untyped-def]
    h = harness()
    manager = h.scheduler.tenant_queues
    for queues, deleted, binds in batches:
        bindings = [binding(name, q) for name, q in binds]
        problems = h.scheduler.apply_queues(queues, bindings=bindings, deleted_queues=deleted)
        named = {p.split(":")[0] for p in problems}
        tree = manager.tree  # builds: the set in force is valid
        # deletions apply first, then the objects (the last of a name wins)
        latest = {q.metadata.name: q for q in queues}
        latest_bindings = {b.metadata.name: b for b in bindings}
        gone = set(deleted) - set(latest)
        rejected = False
        for name, q in latest.items():
            if tree.defs.get(name) != QueueDef.from_queue(q):
                rejected = True
                assert f"Queue {name}" in named, (name, problems)
        for name, b in latest_bindings.items():
            if manager.bindings.get(name) != b:
                rejected = True
                assert f"QueueBinding {name}" in named, (name, problems)
            else:
                assert tree.is_leaf(b.spec.queue)
        # a deletion waits only for a dependent, which is told
        rejected |= bool(gone & set(tree.index))
        assert bool(problems) == rejected, problems
