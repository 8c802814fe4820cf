"""The scheduler's picture is the cluster's, whatever order objects arrive in (issue
"Core v3"): nodes, Queues, pods already bound (by an earlier replica, or anyone) and
pending pods and gangs arrive shuffled, the scheduler runs after every arrival, and at a
random point the replica restarts: a new scheduler receives everything that exists then
(bound pods with their nodes) in another random order and carries on. Throughout:

* every queue's usage equals the requests of the pods bound in it, exactly;
* no scheduling pass overcommits a node or takes a queue over its max (pods bound
  before they reached the scheduler are truth, not its decision: a node or queue that
  the truth alone fills is simply full);
* no scheduling pass binds a gang below minMember.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.api.manifests import decode
from shoal.api.podgroup import SCHEDULER_PLUGINS_LABEL, PodGroup
from shoal.api.queue import Queue
from shoal.testing import SchedulerHarness, make_node, make_pod

QUEUE_LABEL = "shoal.dev/queue"
LIGHT_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LIGHT_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"


@dataclass(frozen=True)
class PodSpec:
    name: str
    queue: str
    cpu: int  # millicores
    node: str = ""  # bound before it reaches the scheduler
    group: str = ""
    min_member: int = 0
    group_object: bool = False  # a scheduler-plugins PodGroup object, arriving on its own


# ("node", (name, millicores)) | ("queue", Queue) | ("group", PodGroup) | ("pod", PodSpec)
Arrival = tuple[str, object]


def _queue(name: str, max_cpu: int | None) -> Queue:
    spec: dict[str, object] = {} if max_cpu is None else {"max": {"cpu": f"{max_cpu}m"}}
    return decode({"metadata": {"name": name}, "spec": spec}, Queue)


class Replica:
    """One scheduler and what it has been told."""

    def __init__(self, nodes: dict[str, int], maxima: dict[str, int | None]) -> None:
        self.h = SchedulerHarness()
        self.capacity = nodes
        self.maxima = maxima
        self.queues: list[Queue] = []
        self.groups: list[PodGroup] = []
        self.specs: dict[str, PodSpec] = {}  # pod key -> spec

    def arrive(self, arrival: Arrival) -> None:
        kind, obj = arrival
        if kind == "node":
            name, cpu = obj  # type: ignore[misc]
            self.h.add_nodes(make_node(name).capacity(cpu=f"{cpu}m", memory="64Gi"))
        elif kind == "queue":
            assert isinstance(obj, Queue)
            self.queues.append(obj)
            assert self.h.scheduler.apply_queues([obj]) == []
        elif kind == "group":
            assert isinstance(obj, PodGroup)
            self.groups.append(obj)
            self.h.scheduler.add_pod_group(obj)
        else:
            assert isinstance(obj, PodSpec)
            pod = make_pod(obj.name).labels({QUEUE_LABEL: obj.queue}).req(cpu=f"{obj.cpu}m")
            if obj.group_object:
                pod = pod.labels({SCHEDULER_PLUGINS_LABEL: obj.group})
            elif obj.group:
                pod = pod.labels({LIGHT_NAME: obj.group, LIGHT_MIN: str(obj.min_member)})
            if obj.node:
                pod = pod.node(obj.node)
            self.h.add_pods(pod)
            self.specs[f"default/{obj.name}"] = obj

    def placed(self) -> dict[str, str]:
        """pod key -> node, for every pod the cache holds on a node (bound or assumed)."""
        return {r.pod.key: r.node for r in self.h.scheduler.cluster.placed.values()}

    def run_and_check(self) -> None:
        before = self.placed()
        self.h.run()
        after = self.placed()
        new = {key: node for key, node in after.items() if before.get(key) != node}
        on_node: Counter[str] = Counter()
        in_queue: Counter[str] = Counter()
        in_group: Counter[str] = Counter()
        for key, node in after.items():
            spec = self.specs[key]
            on_node[node] += spec.cpu
            in_queue[spec.queue] += spec.cpu
            if spec.group:
                in_group[spec.group] += 1
        # The scheduler's own placements of this pass never overcommit.
        for node in {node for node in new.values()}:
            assert on_node[node] <= self.capacity[node], f"{node} overcommitted: {on_node}"
        for queue in {self.specs[key].queue for key in new}:
            maximum = self.maxima.get(queue)
            if maximum is not None and any(q.metadata.name == queue for q in self.queues):
                assert in_queue[queue] <= maximum, f"queue {queue} over max: {in_queue}"
        # Usage is what is bound, exactly, for every queue that exists.
        manager = self.h.scheduler.tenant_queues
        cpu = manager.tree.resource_index.get("cpu")
        for q in self.queues:
            name = q.metadata.name
            index = manager.tree.index[name]
            usage = int(manager.usage[index, cpu]) if cpu is not None else 0
            assert usage == in_queue[name], f"queue {name}: usage {usage} != bound {in_queue}"
        # A gang the scheduler placed members of in this pass is bound whole (bound members
        # relisted one by one after a restart are truth, not a decision).
        for group in {self.specs[key].group for key in new} - {""}:
            count = in_group[group]
            need = next(s.min_member for s in self.specs.values() if s.group == group)
            assert count >= need, f"gang {group}: {count} bound < minMember {need}"

    def truth(self) -> list[Arrival]:
        """Everything that exists now, as a new replica's informers would list it."""
        placed = self.placed()
        items: list[Arrival] = [("node", (n, c)) for n, c in self.capacity.items()]
        items += [("queue", q) for q in self.queues]
        items += [("group", g) for g in self.groups]
        for key, spec in self.specs.items():
            node = placed.get(key, "")
            items.append(("pod", PodSpec(**{**spec.__dict__, "node": node})))
        return [a for a in items if a[0] != "node" or a[1][0] in self._nodes_seen()]  # type: ignore[index]

    def _nodes_seen(self) -> set[str]:
        return set(self.h.scheduler.cluster.table.row_of)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    node_cpus=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    queue_max=st.lists(st.one_of(st.none(), st.integers(1, 6)), min_size=1, max_size=3),
    running=st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 3), st.integers(0, 3)), max_size=6
    ),
    pending=st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 4), st.integers(0, 4), st.integers(1, 2)),
        max_size=5,
    ),
    data=st.data(),
)
def test_usage_is_what_is_bound_in_any_arrival_order_across_a_restart(
    node_cpus: list[int],
    queue_max: list[int | None],
    running: list[tuple[int, int, int]],
    pending: list[tuple[int, int, int, int]],
    data: st.DataObject,
) -> None:
    nodes = {f"n{i}": cpu * 1000 for i, cpu in enumerate(node_cpus)}
    maxima = {f"q{i}": None if m is None else m * 1000 for i, m in enumerate(queue_max)}
    arrivals: list[Arrival] = [("node", item) for item in nodes.items()]
    arrivals += [("queue", _queue(name, m)) for name, m in maxima.items()]
    # Pods bound before the scheduler sees them: the truth, fitting their nodes and queues.
    room = dict(nodes)
    queue_room = {q: m for q, m in maxima.items()}
    for k, (q, cpu, n) in enumerate(running):
        queue, node, millis = f"q{q % len(maxima)}", f"n{n % len(nodes)}", cpu * 500
        left = queue_room[queue]
        if room[node] >= millis and (left is None or left >= millis):
            room[node] -= millis
            queue_room[queue] = None if left is None else left - millis
            arrivals.append(("pod", PodSpec(f"r{k}", queue, millis, node=node)))
    for k, (q, size, min_member, cpu) in enumerate(pending):
        queue, millis = f"q{q % len(maxima)}", cpu * 500
        group, need = (f"g{k}", min(min_member, size)) if min_member else ("", 0)
        backed = bool(group) and k % 2 == 0
        if backed:
            raw = {"metadata": {"name": group, "namespace": "default"}, "spec": {"minMember": need}}
            arrivals.append(("group", decode(raw, PodGroup)))
        for m in range(size):
            spec = PodSpec(
                f"p{k}-{m}", queue, millis, group=group, min_member=need, group_object=backed
            )
            arrivals.append(("pod", spec))
    order = data.draw(st.permutations(arrivals), label="arrival order")
    restart_at = data.draw(st.one_of(st.none(), st.integers(0, len(order))), label="restart")

    replica = Replica(nodes, maxima)
    for i, arrival in enumerate(order):
        if i == restart_at:
            truth = replica.truth()
            replica = Replica(nodes, maxima)
            for item in data.draw(st.permutations(truth), label="relisted order"):
                replica.arrive(item)
                replica.run_and_check()
        replica.arrive(arrival)
        replica.run_and_check()
