"""Gangs (scheduler-plugins PodGroup) and tenant queues (Queue CRD) against a real
kube-apiserver with Shoal's CRDs installed."""

from __future__ import annotations

from typing import Any

from apihelpers import space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import PODGROUPS, QUEUE_BINDINGS, QUEUES

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


@async_test(timeout=90)
async def test_gangs_bind_all_or_nothing_and_their_pod_group_status_is_written(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "gang") as s:
        for i in range(2):
            await s.add_node(f"n{i}", cpu="4")
        for group, minimum in (("train", 3), ("too-big", 2)):
            await s.add_pod_group(group, minimum)
        for i in range(2):
            await s.create_pod(f"train-{i}", "2", labels={GROUP_LABEL: "train"})
        for i in range(2):  # 5 cpu on 4-cpu nodes: never fits
            await s.create_pod(f"too-big-{i}", "5", labels={GROUP_LABEL: "too-big"})

        async def status(group: str) -> dict[str, Any]:
            found = await s.get(PODGROUPS.path(s.name, group)) or {}
            return dict(found.get("status") or {})

        async with s.shoal(s.options("gang")) as shoal:
            scheduler = shoal.kube.scheduler

            async def gated() -> bool:
                uid = (await s.pods())["train-0"]["metadata"]["uid"]
                return "train" in scheduler.explain(uid)

            await wait_for(gated, what="train-0 waiting for its gang")

            async def condition_written() -> bool:
                pod = (await s.pods())["train-0"]
                return any(
                    c.get("type") == "PodScheduled"
                    and c.get("status") == "False"
                    and c.get("reason") == "SchedulingGated"
                    and "train" in c.get("message", "")
                    for c in (pod.get("status") or {}).get("conditions") or []
                )

            # The waiting member says so in the API, as an unschedulable pod would.
            await wait_for(condition_written, what="train-0's PodScheduled=False condition")
            assert await s.bound() == {}  # 2 of 3 members: none bound
            await s.create_pod("train-2", "2", labels={GROUP_LABEL: "train"})

            async def whole() -> bool:
                return set(await s.bound()) == {f"train-{i}" for i in range(3)}

            await wait_for(whole, what="the whole gang bound")

            async def phase_is(phase: str) -> bool:
                return (await status("train")).get("phase") == phase

            # Bound, not started (no kubelet here): Scheduled, as scheduler-plugins says.
            await wait_for(lambda: phase_is("Scheduled"), what="PodGroup train Scheduled")
            written = await status("train")
            assert written["scheduled"] == 3 and written["running"] == 0
            assert written["scheduleStartTime"]
            for i in range(3):
                await s.set_running(f"train-{i}")  # what the kubelets would report
            await wait_for(lambda: phase_is("Running"), what="PodGroup train Running")
            assert (await status("train"))["running"] == 3

            async def refused() -> bool:
                return (await status("too-big")).get("phase") == "Scheduling"

            await wait_for(refused, what="PodGroup too-big Scheduling")
            why = next(
                c for c in (await status("too-big"))["conditions"] if c["type"] == "Scheduled"
            )
            assert why["status"] == "False" and why["reason"] == "Unschedulable"
            assert "too-big" in why["message"]
            assert not {"too-big-0", "too-big-1"} & set(await s.bound())


@async_test(timeout=90)
async def test_a_queues_max_is_respected_and_raising_it_admits_more(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "queue") as s:
        await s.add_node("n1", cpu="8")
        queue = f"{s.name}-research"
        await s.create(
            QUEUES.path(),
            {
                "apiVersion": QUEUES.api_version,
                "kind": "Queue",
                "metadata": {"name": queue},
                "spec": {"max": {"cpu": "2"}},
            },
        )
        s.cluster_objects.append(QUEUES.path(name=queue))
        await s.create(
            QUEUE_BINDINGS.path(),
            {
                "apiVersion": QUEUE_BINDINGS.api_version,
                "kind": "QueueBinding",
                "metadata": {"name": s.name},
                "spec": {"queue": queue, "namespaces": [s.name]},
            },
        )
        s.cluster_objects.append(QUEUE_BINDINGS.path(name=s.name))
        for i in range(3):
            await s.create_pod(f"a{i}", "1")
        async with s.shoal(s.options("queue")) as shoal:

            async def two() -> bool:
                return len(await s.bound()) == 2

            await wait_for(two, what="two pods admitted")
            left = next(n for n, node in (await s.placements()).items() if not node)

            async def held() -> bool:
                uid = (await s.pods())[left]["metadata"]["uid"]
                return queue in shoal.kube.scheduler.explain(uid)

            await wait_for(held, what=f"{left} held by its queue")
            assert len(await s.bound()) == 2
            await s.client.request(
                "PATCH",
                QUEUES.path(name=queue),
                body={"spec": {"max": {"cpu": "4"}}},
                content_type="application/merge-patch+json",
            )

            async def three() -> bool:
                return len(await s.bound()) == 3

            await wait_for(three, what="the third admitted once the max is raised")
            assert shoal.failed_binds() == 0


@async_test(timeout=90)
async def test_gangs_whole_when_shoal_starts_are_bound_without_a_gated_word(
    control_plane: dict[str, str],
) -> None:
    """Every member of a gang read in one batch (all pending gangs at a start or a
    failover) or created one after another completes it before any member could say
    "k/n members exist": no member of a whole gang gets a SchedulingGated event (it was
    one false event and one condition write per member at every start); a gang still
    short says so."""
    async with space(control_plane["KUBECONFIG"], "gangstart") as s:
        await s.add_node("n0", cpu="16")
        for group, minimum in (("whole-a", 4), ("whole-b", 4), ("short", 3)):
            await s.add_pod_group(group, minimum)
        members = {"whole-a": 4, "whole-b": 4, "short": 2}
        for group, count in members.items():
            for i in range(count):
                await s.create_pod(f"{group}-{i}", "1", labels={GROUP_LABEL: group})
        async with s.shoal(s.options("gangstart")):

            async def whole_bound() -> bool:
                bound = set(await s.bound())
                return {f"whole-{g}-{i}" for g in "ab" for i in range(4)} <= bound

            await wait_for(whole_bound, what="both whole gangs bound")

            async def short_said() -> bool:
                return bool(await s.events("short-0", "SchedulingGated"))

            await wait_for(short_said, what="the short gang's member saying it waits")
            said = await s.events("short-0", "SchedulingGated")
            assert "2/3 members exist" in said[0]["note"], said[0]["note"]
            # A gang created while Shoal runs, one request after another, as a Job
            # controller creates its pods: complete within the grace, it says nothing.
            await s.add_pod_group("whole-c", 4)
            for i in range(4):
                await s.create_pod(f"whole-c-{i}", "1", labels={GROUP_LABEL: "whole-c"})

            async def third_bound() -> bool:
                return {f"whole-c-{i}" for i in range(4)} <= set(await s.bound())

            await wait_for(third_bound, what="the gang created while Shoal runs bound")
            for g in "abc":
                for i in range(4):
                    name = f"whole-{g}-{i}"
                    assert await s.events(name, "SchedulingGated") == [], name
                    assert await s.events(name, "Scheduled"), name
            assert not {"short-0", "short-1"} & set(await s.bound())
