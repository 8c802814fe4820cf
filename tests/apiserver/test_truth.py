"""The cluster is the truth (issue "Core v3"), against a real kube-apiserver: queue usage
rebuilt from the pods bound in the cluster after a crash and a new replica (defect 1), a
Binding whose answer is lost is read back before its room is given away (defect 2), and
binds waiting in the client's rate limiter are not sent to a node deleted meanwhile
(defect 3)."""

from __future__ import annotations

import asyncio
from typing import Any

from apihelpers import space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.client import JSON, KubeClient, RateLimiter, TransportError
from shoal.drivers.kube.resources import QUEUES


@async_test(timeout=120)
async def test_a_full_queue_stays_full_across_a_crash_and_a_new_replica(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "truthq") as s:
        await s.add_node("n1", cpu="16")
        queue = f"{s.name}-team"
        await s.create(
            QUEUES.path(),
            {
                "apiVersion": QUEUES.api_version,
                "kind": "Queue",
                "metadata": {"name": queue},
                "spec": {"max": {"cpu": "4"}},
            },
        )
        s.cluster_objects.append(QUEUES.path(name=queue))
        labels = {"shoal.dev/queue": queue}
        for i in range(4):
            await s.create_pod(f"a{i}", "1", labels=labels)
        async with s.shoal(s.options("first")) as first:

            async def full() -> bool:
                return len(await s.bound()) == 4

            await wait_for(full, what="the queue filled")
            await first.crash()  # kill -9: nothing released, nothing written on the way out
        for i in range(2):
            await s.create_pod(f"b{i}", "1", labels=labels)
        async with s.shoal(s.options("second")) as second:
            scheduler = second.kube.scheduler

            async def held() -> bool:
                uid = (await s.pods())["b0"]["metadata"]["uid"]
                return f"queue {queue} would exceed its max cpu" in scheduler.explain(uid)

            await wait_for(held, what="b0 held by the full queue")
            await asyncio.sleep(1.0)
            assert sorted(await s.bound()) == [f"a{i}" for i in range(4)]

            async def status_says_four() -> bool:
                found = await s.get(QUEUES.path(name=queue)) or {}
                allocated = (found.get("status") or {}).get("allocated") or {}
                return allocated.get("cpu") in ("4", "4000m")

            await wait_for(status_says_four, what="Queue status allocated cpu 4")


class _LaggingPodWatch:
    """Between the pod informer and the backend's intake: pod events are held back while
    `hold` is on and then delivered in order, as after a reset connection (the watch
    catches up late)."""

    def __init__(self, intake: Any) -> None:
        self.backend = intake
        self.held: list[tuple[str, tuple[Any, ...]]] = []
        self.holding = False

    def on_upsert(self, *args: Any) -> None:
        self._deliver("on_upsert", args)

    def on_delete(self, *args: Any) -> None:
        self._deliver("on_delete", args)

    def _deliver(self, method: str, args: tuple[Any, ...]) -> None:
        if self.holding:
            self.held.append((method, args))
        else:
            getattr(self.backend, method)(*args)

    async def hold(self, seconds: float) -> None:
        self.holding = True
        await asyncio.sleep(seconds)
        self.holding = False
        held, self.held = self.held, []
        for method, args in held:
            getattr(self.backend, method)(*args)


class _LosingAnswers:
    """The binder's client, losing the answers of the first `lose` Bindings after the API
    server applied them (what a reset connection or a restarting API server does); each
    loss also holds the pod watch back for a while, as a reset does."""

    def __init__(self, client: KubeClient, lose: int, watch: _LaggingPodWatch) -> None:
        self._client = client
        self.lose = lose
        self.lost = 0
        self.watch = watch
        self._holds: set[asyncio.Task[None]] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def request(self, method: str, path: str, **kw: Any) -> JSON:
        answer = await self._client.request(method, path, **kw)
        if method == "POST" and path.endswith("/binding") and self.lost < self.lose:
            self.lost += 1
            if not self.watch.holding:
                task = asyncio.get_running_loop().create_task(self.watch.hold(2.0))
                self._holds.add(task)
                task.add_done_callback(self._holds.discard)
            raise TransportError("ConnectionError", "injected: connection reset by peer")
        return answer


@async_test(timeout=120)
async def test_binds_whose_answers_are_lost_never_overcommit(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "truthb") as s:
        for i in range(2):
            await s.add_node(f"n{i}", cpu="4")
        async with s.shoal(s.options("lossy")) as shoal:
            kube = shoal.kube
            watch = _LaggingPodWatch(kube.intake)
            kube.pods.handler = watch
            losing = _LosingAnswers(kube.binder.client, lose=3, watch=watch)
            kube.binder.client = losing  # type: ignore[assignment]
            for i in range(10):  # room for 8
                await s.create_pod(f"p{i}", "1")

            async def eight() -> bool:
                return len(await s.bound()) == 8

            await wait_for(eight, what="eight pods bound")
            await asyncio.sleep(4.0)  # nothing more may squeeze in, the watch caught up
            assert losing.lost == 3
            placements = await s.bound()
            assert len(placements) == 8
            for node in s.nodes:
                assert sum(1 for n in placements.values() if n == node) == 4
            assert kube.foreign_binds == 0  # our own binds, read back, are ours
            assert all(c.ok for c in kube.readyz()), [c for c in kube.readyz() if not c.ok]
            assert shoal.binds("bound") == 8


@async_test(timeout=120)
async def test_binds_queued_for_deleted_nodes_are_not_sent(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "truthn") as s:
        for i in range(6):
            await s.add_node(f"n{i}", cpu="16")
        async with s.shoal(s.options("slowbinds")) as shoal:
            kube = shoal.kube
            await wait_for(lambda: _true(kube.synced), what="informers synced")
            kube.client.limiter = RateLimiter(4.0, 1)  # from now on binds wait in it
            for i in range(16):
                await s.create_pod(f"p{i}", "1")

            async def started() -> bool:
                return len(await s.bound()) >= 1

            await wait_for(started, what="a first bind")
            doomed = s.nodes[:2]
            for node in doomed:
                await s.client.request("DELETE", f"/api/v1/nodes/{node}")
            store = kube.informers["nodes"].store
            await wait_for(
                lambda: _true(not any(n in store for n in doomed)), what="the deletes seen"
            )
            before = await s.bound()

            async def all_bound() -> bool:
                return len(await s.bound()) == 16

            await wait_for(all_bound, timeout=60, what="every pod bound")
            later = {p: n for p, n in (await s.bound()).items() if p not in before}
            assert later, "every bind went out before the deletes were seen"
            assert not set(later.values()) & set(doomed), later


async def _true(value: bool) -> bool:
    return value


@async_test(timeout=120)
async def test_a_gang_whose_member_is_deleted_while_binding_waits_whole(
    control_plane: dict[str, str],
) -> None:
    gang = {
        "pod-group.scheduling.sigs.k8s.io/name": "train",
        "pod-group.scheduling.sigs.k8s.io/min-available": "6",
    }
    async with space(control_plane["KUBECONFIG"], "truthg") as s:
        await s.add_node("n1", cpu="16")
        async with s.shoal(s.options("gangbinds")) as shoal:
            kube = shoal.kube
            await wait_for(lambda: _true(kube.synced), what="informers synced")
            kube.client.limiter = RateLimiter(2.0, 1)  # from now on binds wait in it
            for i in range(6):
                await s.create_pod(f"w{i}", "1", labels=gang)

            async def started() -> bool:
                return len(await s.bound()) >= 1

            await wait_for(started, what="the gang starts binding")
            victim = next(name for name, node in (await s.placements()).items() if not node)
            await s.client.request("DELETE", f"/api/v1/namespaces/{s.name}/pods/{victim}")
            await asyncio.sleep(4.0)  # every queued bind would have gone out by now
            short = len(await s.bound())
            assert short < 5, f"{short} of the 5 remaining members bound: the binds went on"
            await s.create_pod("w6", "1", labels=gang)  # a controller's replacement

            async def whole() -> bool:
                return len(await s.bound()) == 6

            await wait_for(whole, timeout=60, what="the gang bound whole again")
