"""Suspending and resuming a gang (`shoal suspend podgroup` / `shoal resume podgroup`,
the annotation `shoal.dev/suspended: "true"` on its PodGroup), as kueuectl stop/resume
and vcctl job suspend/resume: a suspended gang runs nothing. Its pending members wait
out of the queue saying why, its placed members are evicted all together (never leaving
it running short), replacements its controller creates wait too, and resuming lets the
whole gang start again."""

from __future__ import annotations

from shoal.api.objects import ObjectMeta
from shoal.api.podgroup import SUSPENDED, PodGroup, PodGroupSpec
from shoal.testing import SchedulerHarness, make_node, make_pod


def group(suspended: bool) -> PodGroup:
    annotations = {SUSPENDED: "true"} if suspended else {}
    return PodGroup(
        metadata=ObjectMeta(name="train", namespace="ml", annotations=annotations),
        spec=PodGroupSpec(min_member=3),
    )


def member(i: int):  # type: ignore[no-untyped-def]
    return (
        make_pod(f"train-{i}")
        .namespace("ml")
        .labels({"scheduling.x-k8s.io/pod-group": "train"})
        .req(cpu="2")
    )


def placed(h: SchedulerHarness) -> int:
    return sum(1 for i in range(3) if h.node_of(f"ml/train-{i}") is not None)


def cluster() -> SchedulerHarness:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="4", memory="16Gi") for i in range(2)))
    return h


def test_suspended_gang_waits_and_resumes_whole() -> None:
    h = cluster()
    h.scheduler.add_pod_group(group(suspended=True))
    h.add_pods(*(member(i) for i in range(3)))
    h.advance(5)
    assert placed(h) == 0
    message = h.message("ml/train-0")
    assert "gang ml/train is suspended" in message
    assert "shoal resume podgroup ml/train" in message
    assert h.scheduler.gangs.groups["ml/train"].phase == "Pending"

    h.scheduler.add_pod_group(group(suspended=False))
    h.advance(5)
    assert placed(h) == 3
    assert h.scheduler.gangs.groups["ml/train"].phase == "Running"


def test_suspending_a_running_gang_evicts_every_member() -> None:
    h = cluster()
    h.scheduler.add_pod_group(group(suspended=False))
    h.add_pods(*(member(i) for i in range(3)))
    h.advance(5)
    assert placed(h) == 3

    h.scheduler.add_pod_group(group(suspended=True))
    h.advance(5)
    evicted = h.evicted
    assert sorted(evicted) == [f"ml/train-{i}" for i in range(3)]
    assert all("gang ml/train was suspended" in why for why in evicted.values())
    assert not h.scheduler.cluster.placed

    # Its controller creates the members again: they wait while the gang is suspended.
    h.add_pods(*(member(i) for i in range(3)))
    h.advance(5)
    assert placed(h) == 0
    assert "gang ml/train is suspended" in h.message("ml/train-1")

    h.scheduler.add_pod_group(group(suspended=False))
    h.advance(5)
    assert placed(h) == 3
    assert h.scheduler.gangs.groups["ml/train"].reason == ""


def test_suspending_twice_evicts_once() -> None:
    h = cluster()
    h.scheduler.add_pod_group(group(suspended=False))
    h.add_pods(*(member(i) for i in range(3)))
    h.advance(5)
    h.scheduler.add_pod_group(group(suspended=True))
    h.scheduler.add_pod_group(group(suspended=True))  # e.g. a relist
    h.advance(5)
    assert len(h.effects.evictions) == 3


def test_suspended_while_binds_are_out_leaves_nothing_running() -> None:
    from shoal.framework.effects import Bind, Effect

    h = cluster()
    h.scheduler.add_pod_group(group(suspended=False))
    suspended = []

    def on_effect(effect: Effect) -> None:
        # The operator's suspend arrives while the gang's first Binding is out.
        if isinstance(effect, Bind) and not suspended:
            suspended.append(effect.pod.key)
            h.scheduler.add_pod_group(group(suspended=True))

    h.effects.listeners.append(on_effect)
    h.add_pods(*(member(i) for i in range(3)))
    h.advance(5)
    assert suspended
    assert placed(h) == 0
    assert not h.scheduler.cluster.placed
    h.effects.listeners.remove(on_effect)
    h.scheduler.add_pod_group(group(suspended=False))
    # The evicted members come back from their controller; the withdrawn ones waited.
    h.add_pods(*(member(i) for i in range(3) if f"ml/train-{i}" in h.evicted))
    h.advance(5)
    assert placed(h) == 3


def test_gated_members_say_how_many_members_exist_now() -> None:
    # A member gated at "1/3 members exist" says "2/3" once the second one arrived (in
    # its PodScheduled condition, which kubectl describe shows).
    h = cluster()
    h.scheduler.add_pod_group(group(suspended=False))
    h.add_pods(member(0))
    h.advance(1)
    assert "1/3 members exist" in h.message("ml/train-0")
    h.add_pods(member(1))
    h.advance(1)

    def last_said(key: str) -> str:  # what the pod's PodScheduled condition says
        return [e.message for e in h.events if e.kind == "unschedulable" and e.pod == key][-1]

    assert "2/3 members exist" in last_said("ml/train-0")
    assert "2/3 members exist" in last_said("ml/train-1")


def test_one_phase_word_for_bound_and_running() -> None:
    # Bound but not started (no kubelet answers here: echo_binds=False keeps the pods
    # unstarted): Scheduled, as scheduler-plugins says; Running once they run. The
    # PodGroup status, the CLI and the dashboard all take this phase.
    h = SchedulerHarness(echo_binds=False)
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="4", memory="16Gi") for i in range(2)))
    h.scheduler.add_pod_group(group(suspended=False))
    h.add_pods(*(member(i) for i in range(3)))
    h.advance(5)
    gangs = h.scheduler.gangs
    g = gangs.groups["ml/train"]
    assert len(g.bound) == 3 and gangs.started(g) == 0
    assert gangs.observed_phase(g) == "Scheduled"
    assert h.effects.group_status["ml/train"].phase == "Scheduled"
    assert gangs.status()["ml/train"]["phase"] == "Scheduled"

    h2 = cluster()  # the in-memory API starts a pod when it is bound
    h2.scheduler.add_pod_group(group(suspended=False))
    h2.add_pods(*(member(i) for i in range(3)))
    h2.advance(5)
    g2 = h2.scheduler.gangs.groups["ml/train"]
    assert h2.scheduler.gangs.observed_phase(g2) == "Running"
    assert h2.effects.group_status["ml/train"].running == 3
