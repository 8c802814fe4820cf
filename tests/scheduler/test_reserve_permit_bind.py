"""Reserve, Permit and Bind: Unreserve in reverse order + forget on failure, Permit
Wait/Allow/Reject/timeout, and a failed bind forgotten and retried with backoff."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.api.objects import Pod
from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.registry import PluginSpec
from shoal.framework.status import Code, Status
from shoal.scheduler import default_registry
from shoal.testing import SchedulerHarness, make_node, make_pod


class Recorder:
    """A Reserve plugin that logs calls; Reserve fails while its name is in `fail`."""

    def __init__(self, name: str, log: list[str], fail: set[str]) -> None:
        self.name = name
        self.log = log
        self.fail = fail

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        self.log.append(f"reserve {self.name}")
        if self.name in self.fail:
            return Status(Code.UNSCHEDULABLE, f"{self.name} is out of tickets")
        return Status()

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        self.log.append(f"unreserve {self.name}")


class Gate:
    """A Permit plugin: pods wait (with `timeout`) unless told to allow or reject them."""

    def __init__(self, name: str, decisions: dict[str, Any], timeout: float) -> None:
        self.name = name
        self.decisions = decisions
        self.timeout = timeout

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> tuple[Status, float]:
        decision = self.decisions.get(pod.name, "wait")
        if decision == "allow":
            return Status(), 0.0
        if decision == "reject":
            return Status(Code.UNSCHEDULABLE, f"{self.name} says no"), 0.0
        return Status(Code.WAIT), self.timeout


class World:
    def __init__(
        self,
        reserve: tuple[str, ...] = (),
        permit: tuple[str, ...] = (),
        timeout: float = 10.0,
    ) -> None:
        self.log: list[str] = []
        self.fail: set[str] = set()
        self.decisions: dict[str, Any] = {}
        specs = []
        for name in reserve:
            specs.append((name, PluginSpec(self._recorder(name))))
        for name in permit:
            specs.append((name, PluginSpec(self._gate(name, timeout))))
        registry = default_registry(include_entry_points=False).merged(specs)
        plugins: dict[str, Any] = {}
        if reserve:
            plugins["reserve"] = {"enabled": [{"name": n} for n in reserve]}
        if permit:
            plugins["permit"] = {"enabled": [{"name": n} for n in permit]}
        self.h = SchedulerHarness({"profiles": [{"plugins": plugins}]}, registry=registry)
        self.h.add_nodes(make_node("n1").capacity(cpu="2"))

    def _recorder(self, name: str) -> Any:
        return lambda args, handle: Recorder(name, self.log, self.fail)

    def _gate(self, name: str, timeout: float) -> Any:
        return lambda args, handle: Gate(name, self.decisions, timeout)

    @property
    def handle(self) -> Handle:
        return self.h.scheduler.handle

    def cpu_requested(self) -> int:
        table = self.h.scheduler.cluster.table
        return int(table.requested[table.row_of["n1"], table.resource_index["cpu"]])


def test_reserve_failure_unreserves_in_reverse_order_and_forgets() -> None:
    w = World(reserve=("R1", "R2", "R3"))
    w.fail.add("R2")
    w.h.add_pods(make_pod("p").req(cpu="1"))
    placements, messages = w.h.run()
    assert placements == {"default/p": None}
    assert messages == {"default/p": "R2 is out of tickets"}
    # kube calls Unreserve on every Reserve plugin, in reverse order.
    assert w.log == ["reserve R1", "reserve R2", "unreserve R3", "unreserve R2", "unreserve R1"]
    assert "default/p" not in w.h.scheduler.cluster.placed
    assert w.cpu_requested() == 0
    entry = w.h.scheduler.scheduling_queue.get("default/p")
    assert entry is not None and entry.rejected_by == frozenset({"R2"})
    # Once Reserve succeeds the pod is placed (after its backoff).
    w.fail.clear()
    w.log.clear()
    assert w.h.advance(300).placements == {"default/p": "n1"}
    assert w.log == ["reserve R1", "reserve R2", "reserve R3"]


def test_permit_wait_then_allow() -> None:
    w = World(permit=("Gate",))
    w.h.add_pods(make_pod("p").req(cpu="1"))
    assert w.h.run().placements == {"default/p": None}
    waiting = w.handle.waiting_pods.get("default/p")
    assert waiting is not None and waiting.node == "n1" and waiting.pending == {"Gate"}
    # The pod holds its resources while it waits.
    assert w.cpu_requested() == 1000
    assert w.h.scheduler.cluster.placed["default/p"].assumed
    waiting.allow("Gate")
    assert w.h.run().placements == {"default/p": "n1"}
    assert len(w.handle.waiting_pods) == 0
    assert w.h.effects.bound == {"default/p": "n1"}


def test_permit_wait_then_reject() -> None:
    w = World(reserve=("R",), permit=("Gate",))
    w.h.add_pods(make_pod("p").req(cpu="1"))
    w.h.run()
    waiting = w.handle.waiting_pods.get("default/p")
    assert waiting is not None
    waiting.reject("Gate", "the gang is incomplete")
    placements, messages = w.h.run()
    assert placements == {"default/p": None}
    assert messages == {"default/p": "the gang is incomplete"}
    assert w.log == ["reserve R", "unreserve R"]
    assert w.cpu_requested() == 0
    assert len(w.handle.waiting_pods) == 0
    assert w.h.scheduler.scheduling_queue.get("default/p") is not None  # back in the queue


def test_permit_timeout_rejects() -> None:
    w = World(reserve=("R",), permit=("Gate",), timeout=10.0)
    w.h.add_pods(make_pod("p").req(cpu="1"))
    w.h.run()
    assert w.h.scheduler.next_wakeup() == 10.0
    w.h.advance(9.5)
    assert w.handle.waiting_pods.get("default/p") is not None
    w.h.clock.advance_to(10.0)
    w.h.scheduler.tick()
    assert w.handle.waiting_pods.get("default/p") is None
    assert "timeout" in w.h.message("p")
    assert w.log[:2] == ["reserve R", "unreserve R"]
    assert w.cpu_requested() == 0


def test_permit_reject_immediately() -> None:
    w = World(reserve=("R",), permit=("Gate",))
    w.decisions["p"] = "reject"
    w.h.add_pods(make_pod("p").req(cpu="1"))
    assert w.h.run() == ({"default/p": None}, {"default/p": "Gate says no"})
    assert w.log == ["reserve R", "unreserve R"]
    assert w.cpu_requested() == 0


def test_every_waiting_plugin_must_allow() -> None:
    w = World(permit=("A", "B"))
    w.h.add_pods(make_pod("p").req(cpu="1"))
    w.h.run()
    waiting = w.handle.waiting_pods.get("default/p")
    assert waiting is not None and waiting.pending == {"A", "B"}
    waiting.allow("A")
    assert w.h.run().placements == {"default/p": None}
    waiting.allow("B")
    assert w.h.run().placements == {"default/p": "n1"}


def test_waiting_pod_deleted_releases_its_resources() -> None:
    w = World(reserve=("R",), permit=("Gate",))
    w.h.add_pods(make_pod("p").req(cpu="1"))
    w.h.run()
    w.h.delete_pod("p")
    assert w.handle.waiting_pods.get("default/p") is None
    assert w.log == ["reserve R", "unreserve R"]
    assert w.cpu_requested() == 0
    assert w.h.run().placements == {}


def test_bind_failure_forgets_the_pod_and_retries_with_backoff() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="2"))
    h.effects.fail.add("default/p")
    h.add_pods(make_pod("p").req(cpu="1"))
    placements, messages = h.run()
    assert placements == {"default/p": None}
    assert messages == {"default/p": "binding rejected: pod default/p: injected bind failure"}
    assert "default/p" not in h.scheduler.cluster.placed
    table = h.scheduler.cluster.table
    assert int(table.requested[0, table.resource_index["cpu"]]) == 0
    # Each failure is an error: the pod backs off 1 s, 2 s, 4 s, 8 s, then 10 s (the cap).
    h.advance(36)
    attempts = [e.time for e in h.events if e.kind == "bind_failed"]
    assert attempts == [0.0, 1.0, 3.0, 7.0, 15.0, 25.0, 35.0]
    h.effects.fail.clear()
    assert h.advance(10).placements == {"default/p": "n1"}
    assert [e.time for e in h.events if e.kind == "bound"] == [45.0]


@pytest.mark.parametrize(
    "attempts,expected", [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (6, 10.0), (50, 10.0)]
)
def test_backoff_duration(attempts: int, expected: float) -> None:
    h = SchedulerHarness()
    assert h.scheduler.scheduling_queue.backoff_duration(attempts) == expected


def test_backoff_settings_come_from_the_config() -> None:
    h = SchedulerHarness({"podInitialBackoffSeconds": 2, "podMaxBackoffSeconds": 5})
    queue = h.scheduler.scheduling_queue
    assert [queue.backoff_duration(a) for a in (1, 2, 3, 4)] == [2.0, 4.0, 5.0, 5.0]


def test_a_stale_update_of_an_assumed_pod_does_not_schedule_it_again() -> None:
    """A watch may deliver the pod without its node while its bind is in flight (a
    status write lands first): kube's IsAssumedPod check keeps it out of the queue, and
    the bind's outcome, arriving after it, ends the binding cycle."""
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="2", memory="4Gi"))
    h.add_pods(make_pod("p").req(cpu="1"))
    sched = h.scheduler
    result = sched.schedule_one()
    assert result is not None and result.node == "n1"
    assert sched.start_bindings() == 1
    (uid,) = sched.binding  # the Bind went out; its outcome has not come back
    stale = make_pod("p").req(cpu="1").obj()
    stale.metadata.annotations = {"shoal.dev/gpu-index": "0"}
    sched.update_pod(stale)
    assert not sched.has_work()
    assert sched.schedule_one() is None
    assert uid in sched.binding
    h.effects.drain(sched)  # the outcome, then the bound pod (the watch)
    assert not sched.binding
    assert sched.cluster.placed[uid].assumed is False
    assert h.pods_on("n1") == ["default/p"]


def _bound_copy(name: str, node: str, cpu: str = "1") -> Pod:
    obj = make_pod(name).req(cpu=cpu).obj()
    obj.spec.node_name = node
    return obj


def test_the_watch_showing_the_pod_bound_ends_its_binding_cycle_before_the_answer() -> None:
    """Bind outcomes are events, and the cluster is one source of them: the watch may
    show the pod on its node before the binder's answer comes back. That ends the
    binding cycle (confirmed, PostBind); the answer then finds nothing to settle."""
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="2", memory="4Gi"))
    h.add_pods(make_pod("p").req(cpu="1"))
    sched = h.scheduler
    sched.schedule_one()
    sched.start_bindings()
    (uid,) = sched.binding
    sched.update_pod(_bound_copy("p", "n1"))
    assert not sched.binding and sched.bound == 1
    assert sched.cluster.placed[uid].assumed is False
    h.effects.drain(sched)  # the binder's answer (success), then the same pod again
    assert sched.bound == 1 and h.pods_on("n1") == ["default/p"]


def test_a_pod_someone_else_bound_while_ours_was_in_flight_is_where_the_cluster_says() -> None:
    """Bound elsewhere before our answer came back (another binder won the race): our
    reservation is released, the pod counts where it is, nothing is double-counted,
    and our failed answer changes nothing."""
    h = SchedulerHarness()
    h.add_nodes(
        make_node("n1").capacity(cpu="2", memory="4Gi"),
        make_node("n2").capacity(cpu="2", memory="4Gi"),
    )
    h.add_pods(make_pod("p").req(cpu="1"))
    sched = h.scheduler
    result = sched.schedule_one()
    assert result is not None
    ours = result.node
    other = "n2" if ours == "n1" else "n1"
    h.effects.fail.add("default/p")  # our Binding will be refused (already assigned)
    sched.start_bindings()
    sched.update_pod(_bound_copy("p", other))
    assert not sched.binding
    placed = sched.cluster.placed["default/p"]
    assert (placed.node, placed.assumed) == (other, False)
    h.effects.drain(sched)
    assert not sched.has_work()
    assert h.pods_on(other) == ["default/p"] and h.pods_on(ours) == []
    row = sched.cluster.table.row_of[ours]
    assert sched.cluster.table.requested[row].tolist() == [0] * len(sched.cluster.table.resources)


def test_a_pod_deleted_while_its_bind_is_in_flight_frees_the_room_at_once() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="2", memory="4Gi"))
    h.add_pods(make_pod("p").req(cpu="2"), make_pod("q").req(cpu="2"))
    sched = h.scheduler
    first = sched.schedule_one()
    assert first is not None and first.node == "n1"
    sched.start_bindings()
    (uid,) = sched.binding
    assert uid == "default/p"
    sched.delete_pod(uid)
    assert not sched.binding and uid not in sched.cluster.placed
    h.effects.drain(sched)  # the late answer (and echo) of the deleted pod: ignored
    assert uid not in sched.cluster.placed
    h.run()
    assert h.pods_on("n1") == ["default/q"]
