"""GPU shares (`alibabacloud.com/gpu-milli`) against a real kube-apiserver: the default
profile places them only on devices with room and writes the device through the Binding,
queues count their fraction of a GPU (status in milli-GPU), and a share preempting a share
keeps the device its victim freed while a controller re-creates the victim (no eviction
livelock)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from apihelpers import JSON, Space, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import QUEUES

GPU = "nvidia.com/gpu"
MILLI = "alibabacloud.com/gpu-milli"
INDEX = "shoal.dev/gpu-index"
QUEUE_LABEL = "shoal.dev/queue"


async def create_share(s: Space, name: str, milli: int, cpu: str = "500m", **kw: Any) -> JSON:
    """A pod asking for `milli` milli-GPU of one device (annotation set at creation)."""
    return await s.create_pod(name, cpu, annotations={MILLI: str(milli)}, **kw)


def scheduled_condition(pod: JSON) -> dict[str, str]:
    conditions = (pod.get("status") or {}).get("conditions") or []
    found = [c for c in conditions if c.get("type") == "PodScheduled"]
    return found[0] if found else {}


def annotations_of(pod: JSON) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


@async_test(timeout=60)
async def test_default_profile_puts_a_share_only_on_a_device_with_room(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "gpushare") as s:
        await s.add_node("cpu-only", cpu="64", memory="256Gi")
        one_gpu = await s.add_node("one-gpu", cpu="64", memory="256Gi", gpus=1)
        for name in ("a", "b"):
            await create_share(s, name, 600)
        # s.options() without a scheduler_config: the default profile (no --config).
        async with s.watching_pods() as seen, s.shoal(s.options("gpushare")) as shoal:

            async def one_bound_one_refused() -> bool:
                pods = await s.pods()
                bound = [n for n, p in pods.items() if p["spec"].get("nodeName")]
                refused = [
                    n
                    for n, p in pods.items()
                    if scheduled_condition(p).get("status") == "False"
                    and not p["spec"].get("nodeName")
                ]
                return len(bound) == 1 and len(refused) == 1

            await wait_for(one_bound_one_refused, what="one share bound, the other refused")
            await asyncio.sleep(1.0)  # settle: nothing more may bind
            pods = await s.pods()
            bound = {n: p["spec"]["nodeName"] for n, p in pods.items() if p["spec"].get("nodeName")}
            assert list(bound.values()) == [one_gpu], bound
            placed = next(iter(bound))
            waiting = next(n for n in pods if n != placed)
            # The device index arrived with the node, in the Binding's write.
            assert annotations_of(pods[placed]).get(INDEX) == "0", pods[placed]["metadata"]
            for version in seen:
                if version["spec"].get("nodeName"):
                    assert annotations_of(version).get(INDEX) == "0", version["metadata"]
            condition = scheduled_condition(pods[waiting])
            assert condition["reason"] == "Unschedulable", condition
            message = condition["message"]
            assert message.startswith("0/2 nodes are available:"), message
            assert "1 Insufficient GPU milli on any single device" in message, message
            assert "1 node(s) didn't have any GPU" in message, message
            assert "Insufficient GPU milli" in shoal.kube.scheduler.explain(
                pods[waiting]["metadata"]["uid"]
            )
            assert shoal.failed_binds() == 0
            assert shoal.kube.metrics.evictions.labels("evicted")._value.get() == 0


@async_test(timeout=60)
async def test_a_queue_of_one_gpu_admits_two_400_milli_shares_and_reports_800m(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "gpuqueue") as s:
        await s.add_node("g", cpu="16", memory="64Gi", gpus=2)
        queue = f"{s.name}-team"
        await s.create(
            QUEUES.path(),
            {
                "apiVersion": QUEUES.api_version,
                "kind": "Queue",
                "metadata": {"name": queue},
                "spec": {"max": {GPU: "1"}},
            },
        )
        s.cluster_objects.append(QUEUES.path(name=queue))
        for i in range(4):
            await create_share(s, f"s{i}", 400, labels={QUEUE_LABEL: queue})
        async with s.shoal(s.options("gpuqueue")) as shoal:

            async def two() -> bool:
                return len(await s.bound()) == 2

            await wait_for(two, what="two shares admitted")
            left = [n for n, node in (await s.placements()).items() if not node]
            assert len(left) == 2, left

            async def held() -> bool:
                uid = (await s.pods())[left[0]]["metadata"]["uid"]
                return f"queue {queue} would exceed its max {GPU}" in (
                    shoal.kube.scheduler.explain(uid)
                )

            await wait_for(held, what=f"{left[0]} held by its queue")

            async def status_says_800m() -> bool:
                found = await s.get(QUEUES.path(name=queue)) or {}
                allocated = (found.get("status") or {}).get("allocated") or {}
                return allocated.get(GPU) == "800m"

            await wait_for(status_says_800m, what="Queue status allocated nvidia.com/gpu 800m")
            await asyncio.sleep(1.0)  # settle: the queue stays at two
            assert len(await s.bound()) == 2
            pods = await s.pods()
            for name in await s.bound():
                assert annotations_of(pods[name]).get(INDEX) in ("0", "1"), pods[name]["metadata"]
            allocated = ((await s.get(QUEUES.path(name=queue)) or {}).get("status") or {})[
                "allocated"
            ]
            assert allocated[GPU] == "800m" and allocated["cpu"] in ("1", "1000m"), allocated
            assert shoal.failed_binds() == 0


@async_test(timeout=90)
async def test_a_share_preempting_a_share_keeps_the_device_from_its_victims_replacements(
    control_plane: dict[str, str],
) -> None:
    """A controller re-creates every evicted priority-0 share at once; the priority-100
    share that evicted it gets the device, and the replacements do not take it back (no
    endless evict / re-create cycle)."""
    async with space(control_plane["KUBECONFIG"], "gpupreempt") as s:
        node = await s.add_node("g", cpu="8", memory="32Gi", gpus=1)
        await create_share(s, "low", 600)
        async with s.shoal(s.options("gpupreempt")) as shoal:

            async def low_bound() -> bool:
                return (await s.bound()).get("low") == node

            await wait_for(low_bound, what="low bound")
            high_class = await s.add_priority_class("high", 100)
            replacements: list[str] = []
            current = ["low"]  # the low pod the controller keeps alive

            async def controller() -> None:
                """A ReplicaSet's work: a gone low pod is re-created (new name) at once."""
                while True:
                    if current[0] not in await s.pods():
                        name = f"low-r{len(replacements) + 1}"
                        await create_share(s, name, 600)
                        replacements.append(name)
                        current[0] = name
                    await asyncio.sleep(0.1)

            playing = asyncio.create_task(controller())
            try:
                await create_share(s, "high", 600, priority_class=high_class)

                async def high_bound() -> bool:
                    return (await s.bound()).get("high") == node

                try:
                    await wait_for(high_bound, timeout=30, what="high bound after preemption")
                except AssertionError as err:
                    raise AssertionError(f"{err}; low re-created {len(replacements)}x") from None
                await asyncio.sleep(3.0)  # settle: no further eviction may follow
            finally:
                if playing.done() and not playing.cancelled():
                    playing.result()  # the controller failed: say why
                playing.cancel()
                with contextlib.suppress(BaseException):
                    await playing
            pods = await s.pods()
            assert pods["high"]["spec"]["priority"] == 100
            assert annotations_of(pods["high"]).get(INDEX) == "0", pods["high"]["metadata"]
            assert "low" not in pods
            assert 1 <= len(replacements) <= 2, replacements
            evictions = shoal.kube.metrics.evictions.labels("evicted")._value.get()
            assert evictions == len(replacements), (evictions, replacements)
            last = replacements[-1]
            assert last in pods and not pods[last]["spec"].get("nodeName"), pods[last]
            assert (await s.bound()) == {"high": node}
            assert await s.events("low", "Preempted")
