"""Gang members waiting for the rest say how many exist, brought up to date at most
every GATE_REFRESH_SECONDS per gang: a gang whose members arrive one by one no longer
makes every waiting member say it again at each arrival (about n^2/2 messages, each a
condition write and an event in a cluster: 1783 for 64 pods on a real API server)."""

from __future__ import annotations

from shoal.api.manifests import decode
from shoal.api.podgroup import PodGroup
from shoal.framework.effects import Effect, Unschedulable
from shoal.scheduler.gating import GATE_REPORT_GRACE_SECONDS
from shoal.scheduler.publishing import GATE_REFRESH_SECONDS
from shoal.testing import SchedulerHarness, make_node, make_pod

GANG = "scheduling.x-k8s.io/pod-group"


def test_members_arriving_one_by_one_are_told_a_bounded_number_of_times() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="64", memory="256Gi"))
    group = decode(
        {"metadata": {"name": "big", "namespace": "default"}, "spec": {"minMember": 65}},
        PodGroup,
    )
    h.scheduler.add_pod_group(group)
    said: list[str] = []

    def listen(effect: Effect) -> None:
        if isinstance(effect, Unschedulable) and effect.gated:
            said.append(effect.message)

    h.effects.listeners.append(listen)
    for i in range(64):
        h.add_pods(make_pod(f"w{i}").labels({GANG: "big"}).req(cpu="100m"))
        h.advance(0.05)
    # 64 first messages, plus at most one refresh per GATE_REFRESH_SECONDS of arrivals
    # (3.2 s here) for each member waiting then.
    refreshes = int(64 * 0.05 / GATE_REFRESH_SECONDS) + 2
    assert len(said) <= 64 + 64 * refreshes, len(said)
    # Once arrivals stop, the refresh put off is made: every member says 64/65.
    h.advance(GATE_REFRESH_SECONDS + 0.1)
    latest = {m for m in said[-64:]}
    assert len(latest) == 1 and "64/65" in next(iter(latest)), latest
    assert "64/65" in h.message("default/w0")


def test_members_arriving_together_say_only_what_is_still_true_after_the_grace() -> None:
    """A whole gang read in one batch, or arriving within GATE_REPORT_GRACE_SECONDS (a
    restart, a Job's pods created one after another), is let through without any member
    saying it waits; a gang still short after the grace says the count as of then, once
    per member."""
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="64", memory="256Gi"))
    said: list[tuple[str, str]] = []

    def listen(effect: Effect) -> None:
        if isinstance(effect, Unschedulable) and effect.gated:
            said.append((effect.pod.key, effect.message))

    h.effects.listeners.append(listen)
    for name, minimum in (("whole", 4), ("short", 3)):
        h.scheduler.add_pod_group(
            decode(
                {
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"minMember": minimum},
                },
                PodGroup,
            )
        )
    h.add_pods(
        *(make_pod(f"whole-{i}").labels({GANG: "whole"}).req(cpu="1") for i in range(3)),
        *(make_pod(f"short-{i}").labels({GANG: "short"}).req(cpu="1") for i in range(2)),
    )
    h.run()
    h.advance(GATE_REPORT_GRACE_SECONDS / 2)
    h.add_pods(make_pod("whole-3").labels({GANG: "whole"}).req(cpu="1"))
    h.run()
    assert all(h.node_of(f"whole-{i}") == "n1" for i in range(4))
    assert said == []  # nobody has waited the grace yet
    h.advance(GATE_REPORT_GRACE_SECONDS)
    assert sorted(key for key, _ in said) == ["default/short-0", "default/short-1"]
    assert all("2/3 members exist" in message for _, message in said), said
    assert h.node_of("short-0") is None
