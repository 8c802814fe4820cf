"""The binder counts a Binding from the moment it is accepted until it is answered
(`pending_nodes`), also while it waits for a slot: a node shard being given back is
written free only once none is left for its nodes (`ShardKeeper.may_bind`), so the
Bindings of a gang decided there are all sent."""

from __future__ import annotations

import asyncio
from typing import Any

from shoal.api.podinfo import PodInfo
from shoal.drivers.kube.binder import KubeBinder
from shoal.testing import make_pod
from shoal.web.metrics import SchedulerMetrics


class _SlowClient:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.posted: list[str] = []

    async def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        self.posted.append(path)
        await self.release.wait()
        return {}


def test_a_binding_waiting_for_a_slot_counts_for_its_node() -> None:
    async def main() -> None:
        client = _SlowClient()
        pods = {
            f"default/p{i}": {"metadata": {"uid": f"u{i}", "name": f"p{i}"}, "spec": {}}
            for i in range(2)
        }
        binder = KubeBinder(
            client,  # type: ignore[arg-type]
            pods.get,
            SchedulerMetrics(),
            concurrency=1,
        )
        first = PodInfo(make_pod("p0").uid("u0").obj())
        second = PodInfo(make_pod("p1").uid("u1").obj())
        tasks = [
            asyncio.ensure_future(binder.bind(first, "n1")),
            asyncio.ensure_future(binder.bind(second, "n2")),
        ]
        await asyncio.sleep(0.01)
        assert dict(binder.in_flight_nodes) == {"n1": 1}  # sent
        assert dict(binder.pending_nodes) == {"n1": 1, "n2": 1}  # n2 waits for a slot
        client.release.set()
        await asyncio.gather(*tasks)
        assert not binder.pending_nodes and not binder.in_flight_nodes

    asyncio.run(main())
