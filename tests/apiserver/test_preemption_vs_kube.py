"""PreemptionBasic in miniature (bench/vs_kube_scheduler.py --shape preemption), given
once to Shoal and once to the stock kube-scheduler (the kit's v1.36 binary) on the real
API server: both must pass the same checks.

Each side gets a namespace, three nodes of 4 cpu and a scheduler name of its own. Every
node already holds 4 low-priority pods (priority 0, 900m: 3.6 of 4 cpu; created bound,
with the default 30 s grace period), then 3 high-priority pods (a PriorityClass of
value 10, 3000m) are created; each fits nowhere and must preempt 3 low pods of a node.

No kubelet runs, so the test plays it: a pod being deleted (kube-scheduler DELETEs its
victims, Shoal POSTs pods/eviction; both leave them Terminating with their grace
period) is force-deleted once it has been Terminating for LINGER seconds, longer than
the first retry's backoff (1 s): a preemptor retried while its victims still terminate
must wait for them, not preempt again.

Checked: every high pod bound, on a node of its own; exactly 9 pods evicted (the
minimum: 3 per preemptor), all of them low-priority, 3 from each node; no node's
requests of bound pods that are not terminating above its allocatable.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from apihelpers import JSON, Space, scheduling, space, wait_for
from kubehelpers import async_test

from shoal.api.quantity import parse_quantity
from shoal.drivers.kube.client import ApiError
from shoal.drivers.kube.resources import PODS

NODES = 3
LOW_PER_NODE = 4
LINGER = 1.5  # seconds a victim stays Terminating before the stand-in kubelet removes it


def low_pod(s: Space, name: str, node: str) -> JSON:
    body = s.pod(name, "900m", node_name=node)
    del body["spec"]["terminationGracePeriodSeconds"]  # the default 30 s: Terminating
    return body


@contextlib.asynccontextmanager
async def kubelet(s: Space) -> AsyncIterator[set[str]]:
    """Force-deletes (grace 0) this namespace's pods LINGER seconds after they started
    terminating; yields the names of every pod seen terminating."""
    terminating: dict[str, float] = {}

    async def loop() -> None:
        while True:
            for name, p in (await s.pods()).items():
                if not p["metadata"].get("deletionTimestamp"):
                    continue
                since = terminating.setdefault(name, time.monotonic())
                if time.monotonic() - since >= LINGER:
                    with contextlib.suppress(ApiError):
                        await s.client.request(
                            "DELETE", PODS.path(s.name, name), query={"gracePeriodSeconds": "0"}
                        )
            await asyncio.sleep(0.1)

    task = asyncio.create_task(loop())
    try:
        seen: set[str] = set()
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        seen.update(terminating)


def overcommitted(pods: dict[str, JSON]) -> list[str]:
    cpu: Counter[str] = Counter()
    for p in pods.values():
        node = p["spec"].get("nodeName")
        if node and not p["metadata"].get("deletionTimestamp"):
            requests = p["spec"]["containers"][0]["resources"]["requests"]
            cpu[node] += int(parse_quantity(requests["cpu"]) * 1000)
    return sorted(node for node, milli in cpu.items() if milli > 4000)


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=110)
async def test_the_same_preemptions_pass_the_same_checks_with_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "prevs") as s:
        nodes = [await s.add_node(f"n{i}", cpu="4", memory="32Gi") for i in range(NODES)]
        for i in range(NODES * LOW_PER_NODE):
            node = nodes[i // LOW_PER_NODE]
            await s.create(PODS.path(s.name), low_pod(s, f"low-{i}", node))
        low_nodes = {f"low-{i}": nodes[i // LOW_PER_NODE] for i in range(NODES * LOW_PER_NODE)}
        high = await s.add_priority_class("high", 10)
        for i in range(NODES):
            await s.create_pod(f"high-{i}", "3000m", priority_class=high)

        async def all_bound() -> bool:
            bound = await s.bound()
            return all(f"high-{i}" in bound for i in range(NODES))

        async with (
            kubelet(s) as evicted,
            scheduling(control_plane, s, tmp_path, scheduler, "prevs"),
        ):
            await wait_for(all_bound, timeout=60, what="every preemptor bound")
            await asyncio.sleep(2 * LINGER)  # would anything more be evicted?
        pods = await s.pods()
        evicted |= {name for name in low_nodes if name not in pods}
        bound = {f"high-{i}": pods[f"high-{i}"]["spec"]["nodeName"] for i in range(NODES)}
        assert sorted(bound.values()) == sorted(nodes), bound
        assert all(
            not p["metadata"].get("deletionTimestamp") for n, p in pods.items() if n in bound
        )
        assert evicted <= set(low_nodes), f"not low-priority: {sorted(evicted - set(low_nodes))}"
        assert len(evicted) == 3 * NODES, f"{len(evicted)} evicted: {sorted(evicted)}"
        assert Counter(low_nodes[name] for name in evicted) == Counter(
            {node: LOW_PER_NODE - 1 for node in nodes}
        )
        assert not overcommitted(pods)


@async_test(timeout=150)
async def test_the_same_victim_and_node_as_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path
) -> None:
    """kube's victim choice, with no ties for the random start of its dry run to break:
    on n1 the preemptor needs one of two pods gone and keeps the more important one (its
    reprieve); on n2 it would take a priority-3 pod; n1's victim has the lower highest
    priority (0), so n1 it is, and only "low0" goes. n3 runs nothing it may take."""
    outcomes: dict[str, tuple[set[str], str]] = {}
    for scheduler in ("kube-scheduler", "shoal"):
        async with space(control_plane["KUBECONFIG"], f"pvic{scheduler[:4]}") as s:
            n1, n2, n3 = [await s.add_node(f"n{i}", cpu="4") for i in (1, 2, 3)]
            classes = {v: await s.add_priority_class(f"p{v}", v) for v in (0, 1, 3, 5, 10, 100)}
            for name, cpu, value, node in (
                ("low1", "2", 1, n1),
                ("low0", "2", 0, n1),
                ("mid", "2", 5, n2),
                ("three", "2", 3, n2),
                ("top", "4", 100, n3),
            ):
                await s.create_pod(name, cpu, priority_class=classes[value], node_name=node)
            async with scheduling(control_plane, s, tmp_path, scheduler, "pvic"):
                await s.create_pod("p", "2", priority_class=classes[10])

                async def bound() -> bool:
                    return "p" in await s.bound()

                await wait_for(bound, what="the preemptor bound", timeout=60)
                pods = await s.pods()
                placed = (await s.bound())["p"]
                outcomes[scheduler] = (set(pods), placed.removeprefix(f"{s.name}-"))
    gone = {"low1", "low0", "mid", "three", "top", "p"} - outcomes["kube-scheduler"][0]
    assert gone == {"low0"} and outcomes["kube-scheduler"][1] == "n1", outcomes
    assert outcomes["shoal"] == outcomes["kube-scheduler"], outcomes
