"""A pending pod's wait is read back from the cluster after a restart or failover: the
PodScheduled=False condition a scheduler wrote says since when it has waited, so a
reclaim delay is not started over by every new leader (before: a pod that had waited
40 s of a 30 s delay waited 30 s more after a failover)."""

from __future__ import annotations

import datetime
from pathlib import Path

from kubehelpers import async_test, eventually, node, pod
from kubehelpers import backend as running

from shoal.testing.fake_apiserver import FakeApiServer


def _since(seconds: float) -> str:
    stamp = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


@async_test(timeout=60)
async def test_a_pod_tried_before_a_restart_keeps_its_wait(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.create("v1", "nodes", node("n1", cpu="1"))
        for name in ("tried", "new"):
            api.create("v1", "pods", pod(name, cpu="4"))
        said = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 Insufficient cpu.",
            "lastTransitionTime": _since(40),
        }
        api.set_pod_status("default", "tried", conditions=[said])
        uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in api.pods()}
        async with running(api, tmp_path) as (kube, _):
            sched = kube.scheduler

            def known() -> bool:
                return all(sched.known_pod(uid) is not None for uid in uids.values())

            await eventually(known, what="both pods in the core")
            now = sched.clock.now()
            waited = {
                name: now - (sched.known_pod(uid).initial_attempt_time or now)  # type: ignore[union-attr]
                for name, uid in uids.items()
            }
            assert 39 <= waited["tried"] <= 50, waited
            assert waited["new"] < 10, waited
