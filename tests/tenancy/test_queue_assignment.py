"""Which queue a pod belongs to: Shoal's label, Volcano's pod annotation, the Volcano
PodGroup's spec.queue, the namespace's QueueBinding, its ElasticQuota, the default queue."""

from __future__ import annotations

from shoal.api.queue import QUEUE_LABEL
from shoal.testing import make_node, make_pod

from .helpers import binding, elastic_quota, harness, queue, volcano_group

VOLCANO_GROUP = "scheduling.k8s.io/group-name"
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"


def volcano_pod(name: str, group: str, namespace: str = "ml"):
    return make_pod(name, namespace).annotations({VOLCANO_GROUP: group}).req(cpu="1")


def placed(h) -> set[str]:
    return {key for key, node in h.result().placements.items() if node}


def test_volcano_podgroup_queue_caps_its_job() -> None:
    """A Volcano job names its queue on its PodGroup (spec.queue); the queue's max holds."""
    h = harness()
    h.add_nodes(make_node("n0").capacity(cpu="16", memory="64Gi"))
    assert h.scheduler.apply_queues([queue("research", max={"cpu": 2})]) == []
    h.scheduler.add_pod_group(volcano_group("ml", "train", "research"))
    h.add_pods(*(volcano_pod(f"w-{i}", "train") for i in range(4)))
    h.run()
    assert len(placed(h)) == 2
    waiting = sorted({"ml/w-0", "ml/w-1", "ml/w-2", "ml/w-3"} - placed(h))
    for key in waiting:
        assert "queue research would exceed its max cpu" in h.scheduler.explain(key)


def test_volcano_queue_name_annotation_on_pod() -> None:
    h = harness()
    h.add_nodes(make_node("n0").capacity(cpu="16", memory="64Gi"))
    assert h.scheduler.apply_queues([queue("small", max={"cpu": 1})]) == []
    h.add_pods(
        *(
            make_pod(f"p{i}", "ml").annotations({VOLCANO_QUEUE_ANNOTATION: "small"}).req(cpu="1")
            for i in range(3)
        )
    )
    h.run()
    assert len(placed(h)) == 1
    assert "queue small would exceed its max cpu" in h.message("ml/p2") + h.message("ml/p1")


def test_running_pods_move_to_their_podgroup_queue_when_it_arrives_late() -> None:
    """After a restart, informers may deliver the job's running pods before its PodGroup.
    When the PodGroup arrives, the running pods count toward its queue, so new work of
    that queue is held to the max."""
    h = harness()
    h.add_nodes(make_node("n0").capacity(cpu="16", memory="64Gi"))
    assert h.scheduler.apply_queues([queue("research", max={"cpu": 2})]) == []
    h.add_pods(*(volcano_pod(f"w-{i}", "train").node("n0") for i in range(2)))
    research = h.scheduler.tenant_queues.tree.index["research"]
    assert h.scheduler.tenant_queues.usage[research].sum() == 0  # charged to the default queue
    h.scheduler.add_pod_group(volcano_group("ml", "train", "research", min_member=2))
    cpu = h.scheduler.tenant_queues.tree.resource_index["cpu"]
    assert h.scheduler.tenant_queues.usage[research, cpu] == 2000
    h.add_pods(volcano_pod("w-2", "train"))
    h.run()
    assert "ml/w-2" not in placed(h)
    assert "queue research would exceed its max cpu" in h.message("ml/w-2")


def test_pending_pods_follow_a_podgroup_queue_change() -> None:
    h = harness()
    h.add_nodes(make_node("n0").capacity(cpu="16", memory="64Gi"))
    assert h.scheduler.apply_queues([queue("a", max={"cpu": 1}), queue("b")]) == []
    h.scheduler.add_pod_group(volcano_group("ml", "train", "a"))
    h.add_pods(*(volcano_pod(f"w-{i}", "train") for i in range(3)))
    h.run()
    assert len(placed(h)) == 1
    queues = h.scheduler.tenant_queues
    assert queues.pending[queues.tree.index["a"]] == 2
    h.scheduler.add_pod_group(volcano_group("ml", "train", "b"))
    assert queues.pending[queues.tree.index["a"]] == 0
    assert queues.pending[queues.tree.index["b"]] == 2
    h.run()
    assert len(placed(h)) == 3


def test_queue_precedence() -> None:
    h = harness()
    names = ["by-label", "by-annotation", "by-group", "by-binding"]
    problems = h.scheduler.apply_queues(
        [queue(n) for n in names],
        [elastic_quota("quota-ns", max={"cpu": 4}), elastic_quota("eq-ns")],
        [binding("bind", "by-binding", "ml", "quota-ns")],
    )
    assert problems == []
    h.scheduler.add_pod_group(volcano_group("ml", "train", "by-group"))
    label = {QUEUE_LABEL: "by-label"}
    annotation = {VOLCANO_QUEUE_ANNOTATION: "by-annotation", VOLCANO_GROUP: "train"}
    cases = [
        (make_pod("a", "ml").labels(label).annotations(annotation), "by-label"),
        (make_pod("b", "ml").annotations(annotation), "by-annotation"),
        (make_pod("c", "ml").annotations({VOLCANO_GROUP: "train"}), "by-group"),
        (make_pod("d", "ml"), "by-binding"),
        (make_pod("e", "quota-ns"), "by-binding"),  # a binding wins over an ElasticQuota
        (make_pod("f", "eq-ns"), "eq-ns"),
        (make_pod("g", "other"), "default"),
    ]
    queues = h.scheduler.tenant_queues
    for builder, expected in cases:
        leaf, error = queues.queue_of(builder.info())
        assert error == ""
        assert queues.tree.names[leaf] == expected, builder.obj().metadata.name


def test_unknown_volcano_queue_is_explained() -> None:
    h = harness()
    h.add_nodes(make_node("n0").capacity(cpu="16", memory="64Gi"))
    h.scheduler.add_pod_group(volcano_group("ml", "train", "nope"))
    h.add_pods(volcano_pod("w-0", "train"))
    h.run()
    message = h.message("ml/w-0")
    assert "queue 'nope' does not exist" in message
    assert "PodGroup ml/train" in message
