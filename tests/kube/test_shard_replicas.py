"""Two active replicas (node shards) against the fake API server: a capped queue's max
holds across them (its pods are decided by one replica), a queue's status is written by
one replica only, and a gang is bound whole by the replica it belongs to."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml
from kubehelpers import async_test, bound_pods, eventually, fast_options, node, pod
from kubehelpers import backend as running

from shoal.drivers.kube.backend import KubeBackend
from shoal.drivers.kube.crds import render
from shoal.drivers.kube.shards import slot_of
from shoal.testing.fake_apiserver import FakeApiServer

SHOAL = "shoal.dev/v1alpha1"
QUEUE = "shoal.dev/queue"


async def _split(*replicas: KubeBackend) -> None:
    share = 16 // len(replicas)
    await eventually(
        lambda: all(r.shards is not None and len(r.shards.state.usable) == share for r in replicas),
        what=f"{share} shards each",
    )


@async_test(timeout=90)
async def test_a_capped_queue_holds_its_max_across_two_replicas(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        for text in render().values():
            api.create("apiextensions.k8s.io/v1", "customresourcedefinitions", yaml.safe_load(text))
        for i in range(8):
            api.create("v1", "nodes", node(f"n{i}", cpu="4"))
        api.create(SHOAL, "queues", {"metadata": {"name": "team"}, "spec": {"max": {"cpu": "2"}}})
        async with (
            running(api, tmp_path, fast_options("alpha")) as (alpha, _),
            running(api, tmp_path, fast_options("beta")) as (beta, _),
        ):
            await _split(alpha, beta)
            # Alone before beta joined, alpha was home to everything and may have written
            # the queue's status then: only what is written once both share the work
            # counts (a write decided before the split has had time to go out).
            await asyncio.sleep(1.0)
            shared_from = len(api.requests)
            for i in range(30):
                api.create("v1", "pods", pod(f"t{i:02d}", cpu="100m", labels={QUEUE: "team"}))
            await eventually(lambda: len(bound_pods(api)) == 20, what="20 x 100m bound")
            await asyncio.sleep(1.5)  # a 21st would break the max
            assert len(bound_pods(api)) == 20
            binders = {
                p["metadata"]["annotations"]["shoal.dev/scheduled-by"]
                for p in api.pods()
                if p["spec"].get("nodeName")
            }
            assert len(binders) == 1  # the queue's home replica decided them all
            # Its status comes from that replica alone.
            (home,) = binders
            writers = {
                r.user_agent
                for r in api.requests[shared_from:]
                if r.resource == "queues" and r.subresource == "status"
            }
            assert writers and all(f"({home})" in agent for agent in writers)


@async_test(timeout=90)
async def test_a_gang_is_bound_whole_by_one_replica(tmp_path: Path) -> None:
    name = "pod-group.scheduling.sigs.k8s.io/name"
    minimum = "pod-group.scheduling.sigs.k8s.io/min-available"
    async with FakeApiServer() as api:
        for i in range(16):
            api.create("v1", "nodes", node(f"n{i:02d}", cpu="1"))
        async with (
            running(api, tmp_path, fast_options("alpha")) as (alpha, _),
            running(api, tmp_path, fast_options("beta")) as (beta, _),
        ):
            await _split(alpha, beta)
            for i in range(4):
                api.create("v1", "pods", pod(f"g{i}", cpu="1", labels={name: "g", minimum: "4"}))
            await eventually(lambda: len(bound_pods(api)) == 4, what="the gang bound")
            binders = {p["metadata"]["annotations"]["shoal.dev/scheduled-by"] for p in api.pods()}
            assert len(binders) == 1


@async_test(timeout=120)
async def test_a_gang_larger_than_any_replicas_shards_borrows_them_and_gives_them_back(
    tmp_path: Path,
) -> None:
    """A gang that fits in no single replica's shards but in the cluster: its home asks
    for the shards it would use (a loan in the shard map), the other replica gives them
    back through its give-back path, the home takes them (fenced as any claim), binds
    the gang whole, and the shards are balanced again afterwards."""
    name = "pod-group.scheduling.sigs.k8s.io/name"
    minimum = "pod-group.scheduling.sigs.k8s.io/min-available"
    nodes = [f"n{i:02d}" for i in range(16)]
    async with FakeApiServer() as api:
        for n in nodes:
            api.create("v1", "nodes", node(n, cpu="1"))
        async with (
            running(api, tmp_path, fast_options("alpha")) as (alpha, _),
            running(api, tmp_path, fast_options("beta")) as (beta, _),
        ):
            await _split(alpha, beta)
            size = 14
            for r in (alpha, beta):
                assert r.shards is not None
                slots = r.shards.state.slots
                mine = [n for n in nodes if slot_of(n, slots) in r.shards.state.usable]
                assert len(mine) < size  # no replica can place it alone
            for i in range(size):
                api.create(
                    "v1", "pods", pod(f"g{i:02d}", cpu="1", labels={name: "g", minimum: str(size)})
                )
            await eventually(
                lambda: len(bound_pods(api)) == size, what="the gang bound whole", timeout=60
            )
            placed = bound_pods(api)
            assert len(set(placed.values())) == size  # one per node: nothing overcommitted
            binders = {p["metadata"]["annotations"]["shoal.dev/scheduled-by"] for p in api.pods()}
            assert len(binders) == 1  # its home bound it all
            (home,) = binders
            borrower = alpha if home == "alpha" else beta
            assert borrower.shards is not None and borrower.shards.loans >= 1
            # The loan ends and the shards are balanced again.
            await _split(alpha, beta)
            assert all(r.shards is not None and r.shards.state.loan is None for r in (alpha, beta))
            assert alpha.binder.conflicts == beta.binder.conflicts == 0
            # It said what it waited for.
            said = [
                e.get("note", "")
                for e in api.list_objects("events.k8s.io", "events")
                if e.get("reason") == "FailedScheduling"
            ]
            assert any("waiting for them to be lent" in m for m in said), said


@async_test(timeout=150)
async def test_two_gangs_that_both_need_loans_are_served_in_turn_by_three_replicas(
    tmp_path: Path,
) -> None:
    """One loan at a time: two gangs, each larger than any replica's share of the nodes,
    are both bound whole (in turn, whoever their homes are), with no node overcommitted,
    and the shards are balanced again afterwards."""
    name = "pod-group.scheduling.sigs.k8s.io/name"
    minimum = "pod-group.scheduling.sigs.k8s.io/min-available"
    nodes = [f"n{i:02d}" for i in range(24)]
    async with FakeApiServer() as api:
        for n in nodes:
            api.create("v1", "nodes", node(n, cpu="1"))
        async with (
            running(api, tmp_path, fast_options("alpha")) as (alpha, _),
            running(api, tmp_path, fast_options("beta")) as (beta, _),
            running(api, tmp_path, fast_options("gamma")) as (gamma, _),
        ):
            replicas = (alpha, beta, gamma)

            def balanced() -> bool:
                counts = sorted(
                    len(r.shards.state.usable) for r in replicas if r.shards is not None
                )
                # Each aims at ceil(16 / 3) = 6: 6, 6 and 4.
                return (
                    sum(counts) == 16
                    and max(counts) <= 6
                    and all(r.shards is not None and r.shards.state.loan is None for r in replicas)
                )

            await eventually(balanced, what="16 shards split at most 6 each")
            size = 11
            for r in replicas:
                assert r.shards is not None
                mine = [n for n in nodes if slot_of(n, 16) in r.shards.state.usable]
                assert len(mine) < size, len(mine)  # no replica can place a gang alone
            for gang in ("a", "b"):
                for i in range(size):
                    labels = {name: gang, minimum: str(size)}
                    api.create("v1", "pods", pod(f"{gang}{i:02d}", cpu="1", labels=labels))
            await eventually(
                lambda: len(bound_pods(api)) == 2 * size, what="both gangs bound", timeout=100
            )
            placed = bound_pods(api)
            assert len(set(placed.values())) == 2 * size  # one pod per node
            for gang in ("a", "b"):
                binders = {
                    p["metadata"]["annotations"]["shoal.dev/scheduled-by"]
                    for p in api.pods()
                    if p["metadata"]["name"].startswith(gang)
                }
                assert len(binders) == 1, (gang, binders)
            assert sum(r.shards.loans for r in replicas if r.shards is not None) >= 2
            await eventually(balanced, what="the loans over, at most 6 each again", timeout=60)
            assert all(r.binder.conflicts == 0 for r in replicas)
