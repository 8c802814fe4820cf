"""Leader election on a coordination.k8s.io/v1 Lease, and two replicas of the scheduler."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubehelpers import async_test, bound_pods, eventually, fast_options, node, pod
from kubehelpers import backend as running

from shoal.drivers.kube.client import ClientSettings, KubeClient, connect
from shoal.drivers.kube.leader import LeaderElector, LeaderSettings, LeadershipLost
from shoal.testing.fake_apiserver import FakeApiServer, Fault

LEASE = dict(lease_duration=1.0, renew_deadline=0.6, retry_period=0.1)


@contextlib.asynccontextmanager
async def clients(
    api: FakeApiServer, tmp_path: Path, *names: str
) -> AsyncIterator[list[KubeClient]]:
    connection = await connect(str(api.kubeconfig(tmp_path / "kubeconfig")))
    try:
        yield [
            connection.client(n, ClientSettings(qps=0, timeout=0.5, user_agent=f"shoal ({n})"))
            for n in names
        ]
    finally:
        await connection.close()


def elector(client: KubeClient, identity: str) -> LeaderElector:
    return LeaderElector(
        client, LeaderSettings(identity=identity, namespace="kube-system", **LEASE)
    )


def holder(api: FakeApiServer) -> str:
    lease = api.get("coordination.k8s.io", "leases", "kube-system", "shoal")
    return str((lease or {}).get("spec", {}).get("holderIdentity", ""))


def test_settings_must_leave_room_between_renew_deadline_and_lease_duration() -> None:
    with pytest.raises(ValueError, match="renewDeadline < leaseDuration"):
        LeaderSettings(lease_duration=10, renew_deadline=10, retry_period=2)


@async_test()
async def test_exactly_one_of_two_candidates_leads(tmp_path: Path) -> None:
    async with FakeApiServer() as api, clients(api, tmp_path, "a", "b") as (ca, cb):
        a, b = elector(ca, "a"), elector(cb, "b")
        tasks = [asyncio.create_task(e.acquire()) for e in (a, b)]
        done, pending = await asyncio.wait(tasks, timeout=2, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.sleep(0.5)  # several more polls: the other must not get it
        assert len(done) == 1 and len(pending) == 1
        leader = a if a.is_leader else b
        assert [a.is_leader, b.is_leader].count(True) == 1
        assert holder(api) == leader.settings.identity
        lease = api.get("coordination.k8s.io", "leases", "kube-system", "shoal")
        assert lease is not None and lease["spec"]["leaseDurationSeconds"] == 1
        for t in tasks:
            t.cancel()


@async_test()
async def test_failover_after_a_crash_within_lease_duration_plus_two_polls(tmp_path: Path) -> None:
    async with FakeApiServer() as api, clients(api, tmp_path, "a", "b") as (ca, cb):
        a, b = elector(ca, "a"), elector(cb, "b")
        await a.acquire()
        hold = asyncio.create_task(a.hold())
        standby = asyncio.create_task(b.acquire())
        await asyncio.sleep(0.8)  # a keeps renewing: b stays standby
        assert not standby.done() and holder(api) == "a"
        hold.cancel()  # crash: no more renewals, no release
        crashed = time.monotonic()
        await asyncio.wait_for(standby, 3)
        took = time.monotonic() - crashed
        assert holder(api) == "b" and b.is_leader
        assert took <= LEASE["lease_duration"] + 2 * LEASE["retry_period"] + 0.3, took
        lease = api.get("coordination.k8s.io", "leases", "kube-system", "shoal")
        assert lease is not None and lease["spec"]["leaseTransitions"] == 1


@async_test()
async def test_release_on_shutdown_hands_over_at_once(tmp_path: Path) -> None:
    async with FakeApiServer() as api, clients(api, tmp_path, "a", "b") as (ca, cb):
        a, b = elector(ca, "a"), elector(cb, "b")
        await a.acquire()
        standby = asyncio.create_task(b.acquire())
        await asyncio.sleep(0.3)
        released = time.monotonic()
        await a.release()
        await asyncio.wait_for(standby, 2)
        assert time.monotonic() - released < 3 * LEASE["retry_period"] + 0.2
        assert holder(api) == "b"


@async_test()
async def test_a_standby_on_a_slow_api_server_takes_a_released_lease(tmp_path: Path) -> None:
    """The standby's requests answer 0.2 s late, more than the retry period (0.1 s): it
    still takes the lease the leader gives back (its attempts were cut off at the retry
    period, so it never did)."""
    async with FakeApiServer() as api, clients(api, tmp_path, "a", "b") as (ca, cb):
        a, b = elector(ca, "a"), elector(cb, "b")
        await a.acquire()
        api.inject(Fault(user_agent="(b)", status=0, delay=0.2, times=None))
        standby = asyncio.create_task(b.acquire())
        await asyncio.sleep(0.3)
        await a.release()
        await asyncio.wait_for(standby, 3)
        assert b.is_leader and holder(api) == "b"


@async_test()
async def test_release_reads_the_lease_back_when_a_renewal_moved_it_on(tmp_path: Path) -> None:
    """A renewal that landed while its answer was lost (or that was in flight when the
    renewals stopped) leaves the elector a stale resourceVersion: the release gets 409,
    reads the lease back, and releases it since it is still its own."""
    async with FakeApiServer() as api, clients(api, tmp_path, "a", "b") as (ca, cb):
        a, b = elector(ca, "a"), elector(cb, "b")
        await a.acquire()
        lease = api.get("coordination.k8s.io", "leases", "kube-system", "shoal")
        assert lease is not None
        renewed = {**lease, "spec": {**lease["spec"], "renewTime": "2026-01-01T00:00:00.000000Z"}}
        api.update("coordination.k8s.io", "leases", renewed)  # a's renewal, answer lost
        standby = asyncio.create_task(b.acquire())
        await asyncio.sleep(0.3)
        released = time.monotonic()
        await a.release()
        await asyncio.wait_for(standby, 2)
        # At once, not after the lease ran out (leaseDuration 1 s).
        assert time.monotonic() - released < 3 * LEASE["retry_period"] + 0.2
        assert holder(api) == "b"


@async_test()
async def test_a_partitioned_leader_steps_down_before_anyone_else_takes_over(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api, clients(api, tmp_path, "a", "b") as (ca, cb):
        a, b = elector(ca, "a"), elector(cb, "b")
        await a.acquire()
        hold = asyncio.create_task(a.hold())
        standby = asyncio.create_task(b.acquire())
        await asyncio.sleep(0.3)
        # a can no longer reach the API server (its requests time out or fail).
        api.inject(Fault(user_agent="(a)", status=503, times=None))
        with pytest.raises(LeadershipLost):
            await asyncio.wait_for(hold, 3)
        stepped_down = time.monotonic()
        assert not a.is_leader
        await asyncio.wait_for(standby, 3)
        took_over = time.monotonic()
        assert took_over > stepped_down  # never two leaders at once
        assert holder(api) == "b"


@async_test()
async def test_a_leader_on_a_slow_api_server_keeps_the_lease(tmp_path: Path) -> None:
    """Every request of the leader answers 0.2 s late, so a renewal (read, then write)
    takes about 0.4 s: longer than the retry period (0.1 s), shorter than the renew
    deadline (1.2 s). It keeps renewing and stays the leader; the standby never takes
    over. (A renewal cut off at the retry period never succeeded, and the leader
    stepped down.)"""
    settings = dict(lease_duration=2.0, renew_deadline=1.2, retry_period=0.1)
    async with FakeApiServer() as api, clients(api, tmp_path, "a", "b") as (ca, cb):
        a, b = (
            LeaderElector(c, LeaderSettings(identity=n, namespace="kube-system", **settings))
            for c, n in ((ca, "a"), (cb, "b"))
        )
        await a.acquire()
        hold = asyncio.create_task(a.hold())
        standby = asyncio.create_task(b.acquire())
        api.inject(Fault(user_agent="(a)", status=0, delay=0.2, times=None))
        await asyncio.sleep(3.0)
        assert not hold.done(), hold
        assert a.is_leader and not standby.done()
        assert holder(api) == "a"
        for task in (hold, standby):
            task.cancel()
        await asyncio.gather(hold, standby, return_exceptions=True)


@async_test()
async def test_a_fractional_lease_duration_is_written_rounded_up_so_leaders_never_overlap(
    tmp_path: Path,
) -> None:
    # 1.4 s rounded down would be a 1 s lease: the standby would take over 1 s after the
    # last renewal while the leader keeps leading until 1.2 s after it.
    fractional = dict(lease_duration=1.4, renew_deadline=1.2, retry_period=0.1)
    changes: list[tuple[float, str, bool]] = []

    def candidate(client: KubeClient, identity: str) -> LeaderElector:
        return LeaderElector(
            client,
            LeaderSettings(identity=identity, namespace="kube-system", **fractional),
            on_change=lambda leading: changes.append((time.monotonic(), identity, leading)),
        )

    async with FakeApiServer() as api, clients(api, tmp_path, "a", "b") as (ca, cb):
        a, b = candidate(ca, "a"), candidate(cb, "b")
        await a.acquire()
        lease = api.get("coordination.k8s.io", "leases", "kube-system", "shoal")
        assert lease is not None and lease["spec"]["leaseDurationSeconds"] == 2
        hold = asyncio.create_task(a.hold())
        standby = asyncio.create_task(b.acquire())
        await asyncio.sleep(0.3)
        api.inject(Fault(user_agent="(a)", status=503, times=None))
        with pytest.raises(LeadershipLost):
            await asyncio.wait_for(hold, 4)
        await asyncio.wait_for(standby, 4)
        a_down = next(t for t, who, leading in changes if who == "a" and not leading)
        b_up = next(t for t, who, leading in changes if who == "b" and leading)
        assert b_up > a_down, f"b led {a_down - b_up:.2f}s before a stepped down"


def test_settings_need_more_than_one_jittered_retry_before_the_renew_deadline() -> None:
    with pytest.raises(ValueError, match="renewDeadline"):
        LeaderSettings(lease_duration=3, renew_deadline=1.1, retry_period=1)
    assert (
        LeaderSettings(lease_duration=15.2, renew_deadline=10, retry_period=2).lease_seconds == 16
    )


@async_test()
async def test_lease_conflicts_are_refused_with_409(tmp_path: Path) -> None:
    async with FakeApiServer() as api, clients(api, tmp_path, "a") as (ca,):
        a = elector(ca, "a")
        await a.acquire()
        lease = api.get("coordination.k8s.io", "leases", "kube-system", "shoal")
        assert lease is not None
        stale = {**lease, "metadata": {**lease["metadata"]}}
        await a.try_acquire_or_renew()  # bumps the resourceVersion
        stale["spec"] = {**stale["spec"], "holderIdentity": "intruder"}
        with pytest.raises(Exception, match="409"):
            await ca.request("PUT", a.path, body=stale)
        assert holder(api) == "a"


# ---- two replicas of the scheduler --------------------------------------------------------


@async_test(timeout=60)
async def test_two_replicas_only_the_leader_schedules_and_a_standby_takes_over(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        for i in range(4):
            api.create("v1", "nodes", node(f"n{i}", cpu="8"))
        for i in range(10):
            api.create("v1", "pods", pod(f"early{i}"))
        # One member of a gang of two: gated as long as the run lasts.
        gang = {
            "pod-group.scheduling.sigs.k8s.io/name": "g",
            "pod-group.scheduling.sigs.k8s.io/min-available": "2",
        }
        api.create("v1", "pods", pod("lonely", labels=gang))
        options = {
            "leader_elect": True,
            "leader": LeaderSettings(identity="x", namespace="kube-system", **LEASE),
        }
        async with (
            running(api, tmp_path, fast_options("one", **options), graceful=False) as (
                one,
                one_task,
            ),
            running(api, tmp_path, fast_options("two", **options)) as (two, _),
        ):
            await eventually(lambda: len(bound_pods(api)) == 10, what="early pods bound")
            leader, standby = (one, two) if one.leading else (two, one)
            assert leader.leading and not standby.leading
            assert standby.synced  # a warm standby: caches full, not scheduling
            agents = {b.user_agent for b in api.bindings}
            assert agents == {f"shoal/0.1.0 ({leader.options.identity})"}
            assert standby.cycles == 0
            if leader is one:
                one_task.cancel()  # crash the leader
                # A cancel is delivered at the task's next step, and the core thread
                # learns of it after that: pods created before then may still be
                # decided and bound by `one` (a real crash has no such window). The late
                # pods below are created once `one` is gone.
                with contextlib.suppress(asyncio.CancelledError):
                    await one_task
            else:
                api.inject(Fault(user_agent="(two)", status=503, times=None))  # partition it
            crashed = time.monotonic()
            for i in range(10):
                api.create("v1", "pods", pod(f"late{i}"))
            await eventually(lambda: standby.leading, timeout=5, what="failover")
            took = time.monotonic() - crashed
            assert took <= LEASE["lease_duration"] + 2 * LEASE["retry_period"] + 0.5, took
            await eventually(lambda: len(bound_pods(api)) == 20, what="late pods bound")

            def said_by(identity: str) -> bool:
                return any(
                    e.get("reason") == "SchedulingGated"
                    and e.get("reportingInstance") == identity
                    and (e.get("regarding") or {}).get("name") == "lonely"
                    for e in api.list_objects("events.k8s.io", "events")
                )

            # The new leader says again why the gated pod waits (a standby wrote nothing).
            await eventually(
                lambda: said_by(standby.options.identity), what="the new leader's gated event"
            )
            assert len({b.uid for b in api.bindings}) == len(api.bindings) == 20
            late = [b for b in api.bindings if "late" in b.key]
            assert {b.user_agent for b in late} == {f"shoal/0.1.0 ({standby.options.identity})"}
