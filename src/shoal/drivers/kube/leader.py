"""Leader election on a coordination.k8s.io/v1 Lease (client-go's algorithm).

* A candidate reads the Lease every `retry_period`. It may take the Lease when it has
  no holder, or when the holder's record has not changed for `leaseDurationSeconds` as
  measured on the candidate's own clock from when it *observed* the last change (so
  clock skew between replicas does not matter). Taking and renewing are updates with the
  Lease's resourceVersion as a precondition: when two candidates race, the API server
  lets exactly one win (409 Conflict for the other).
* The leader renews every `retry_period`. If it has not renewed successfully for
  `renew_deadline` (counted from when it *sent* its last successful renewal), it stops
  leading. Because `renew_deadline < lease_duration`, a leader that cannot reach the
  API server has stopped before any other replica may take over: at most one replica
  schedules at a time.
* The leader renews on a thread of its own, with its own event loop and client
  (`hold_on_thread`), as client-go's elector runs in a goroutine of its own: a
  scheduling pass that keeps the main loop busy (a slow HTTP extender, a huge gang)
  must not cost a replica that is alive its leadership. The main loop reads
  `lease_valid()` before each pass, so it never schedules past the renew deadline even
  if it has not yet been told that the lease is lost. Whoever stops the thread stops
  scheduling and binding first (see `KubeBackend.run`), so nothing is bound after the
  renewals end.
* On a clean shutdown the leader releases the Lease (empty holder), so a standby takes
  over at its next poll instead of waiting for the lease to expire.

Failover after a crash takes at most `lease_duration + 2 * retry_period` from the
leader's last renewal (one period for the standby to observe that renewal, one for the
poll after expiry); with kube-scheduler's defaults (15 s, 10 s, 2 s) that is 19 s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from shoal.config.load import LEADER_JITTER
from shoal.drivers.kube.client import JSON, ApiError, KubeClient
from shoal.drivers.kube.resources import LEASES
from shoal.drivers.kube.status import micro_time

__all__ = ["LeaderElector", "LeaderSettings", "LeadershipLost"]

log = logging.getLogger("shoal.kube.leader")

JITTER_FACTOR = 1.2  # client-go's leaderelection.JitterFactor


class LeadershipLost(Exception):
    """The lease could not be renewed within the renew deadline."""


@dataclass(frozen=True)
class LeaderSettings:
    name: str = "shoal"
    namespace: str = "kube-system"
    identity: str = "shoal"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        # client-go's NewLeaderElector rule, which configuration validation also applies
        # (shoal.config.leader_election_problems), so a file that passes validate-config
        # never fails here.
        jitter = LEADER_JITTER
        if not (
            self.retry_period > 0
            and self.retry_period * jitter < self.renew_deadline < self.lease_duration
        ):
            raise ValueError(
                f"leader election needs 0 < retryPeriod x {jitter} < renewDeadline < "
                f"leaseDuration, got {self.retry_period:g}s, {self.renew_deadline:g}s, "
                f"{self.lease_duration:g}s"
            )
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            # client-go's check: a renewal must get more than one (jittered) try.
            raise ValueError(
                f"leader election needs renewDeadline > {JITTER_FACTOR} * retryPeriod, got "
                f"{self.renew_deadline}s and {self.retry_period}s"
            )

    @property
    def lease_seconds(self) -> int:
        """`leaseDurationSeconds` as written to the Lease: an integer, rounded UP.

        Standbys take over `leaseDurationSeconds` after they saw the last renewal, and
        the leader steps down `renew_deadline` after it sent its last one; rounding down
        (1.4 s -> 1 with a 1.2 s deadline) would let a standby take over while the leader
        still schedules. Rounding up only makes failover up to a second slower.
        """
        return max(1, math.ceil(self.lease_duration))


async def _within(attempt: Coroutine[Any, Any, bool], seconds: float) -> bool:
    """`attempt`, or TimeoutError after `seconds`. asyncio.timeout rather than wait_for:
    on Python 3.11 wait_for can swallow a cancel that lands as the attempt finishes, and
    a cancelled renewal loop must stop."""
    async with asyncio.timeout(seconds):
        return await attempt


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        settings: LeaderSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.clock = clock
        self.on_change = on_change
        self.is_leader = False
        self.leader = ""  # who holds the lease, as last observed
        self.last_renew = 0.0  # when our last successful renewal was sent
        self._observed: tuple[str, str, str] | None = None  # holder, renewTime, rv
        self._observed_at = 0.0
        self._lease: JSON | None = None

    @property
    def path(self) -> str:
        return LEASES.path(self.settings.namespace, self.settings.name)

    def _set_leader(self, value: bool) -> None:
        if value != self.is_leader:
            self.is_leader = value
            if self.on_change is not None:
                self.on_change(value)

    async def acquire(self) -> None:
        """Return once this replica holds the lease."""
        while True:
            sent = self.clock()
            try:
                # As a renewal, an attempt may be slower than the retry period (client-go
                # gives it the HTTP client's timeout): on a slow API server a standby
                # would otherwise never take a free lease.
                acquired = await _within(self.try_acquire_or_renew(), self.settings.renew_deadline)
            except (ApiError, TimeoutError) as err:
                log.debug("acquiring the lease failed: %s", err, extra={"error": str(err)})
                acquired = False
            if acquired:
                self.last_renew = sent
                log.info(
                    "became the leader (lease %s/%s)",
                    self.settings.namespace,
                    self.settings.name,
                    extra={"identity": self.settings.identity},
                )
                self._set_leader(True)
                return
            await asyncio.sleep(self.settings.retry_period)

    async def hold(self) -> None:
        """Renew until that fails for `renew_deadline`; then raise LeadershipLost."""
        s = self.settings
        while True:
            await asyncio.sleep(s.retry_period)
            deadline = self.last_renew + s.renew_deadline
            sent = self.clock()
            try:
                # An attempt may take until the renew deadline (client-go's renew loop
                # too): a slow API server is not a lost lease. Capping it at the retry
                # period would give up on every renewal slower than that.
                renewed = await _within(self.try_acquire_or_renew(), max(0.001, deadline - sent))
            except (ApiError, TimeoutError) as err:
                log.warning("renewing the lease failed: %s", err, extra={"error": str(err)})
                renewed = False
            if renewed:
                self.last_renew = sent
            elif self.clock() >= deadline or self.leader != s.identity:
                self._set_leader(False)
                log.error(
                    "lost the lease %s/%s (now held by %r)",
                    s.namespace,
                    s.name,
                    self.leader,
                    extra={"identity": s.identity},
                )
                raise LeadershipLost(f"leadership lost; the lease is held by {self.leader!r}")

    def lease_valid(self) -> bool:
        """Is this replica the leader with a renewal sent less than `renew_deadline` ago
        (safe to read from any thread)?"""
        return self.is_leader and self.clock() < self.last_renew + self.settings.renew_deadline

    async def hold_on_thread(self, new_client: Callable[[], KubeClient]) -> None:
        """`hold` on a thread of its own, with its own event loop and a client made there
        by `new_client` (a client's HTTP session belongs to one loop); `on_change` is
        called on the caller's loop. Cancelling this coroutine stops the thread and
        returns once it has ended (the elector has its own client back then);
        LeadershipLost is raised here as from `hold`."""
        caller = asyncio.get_running_loop()
        on_change, client = self.on_change, self.client
        stop = threading.Event()
        started: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Task[None]]] = {}
        lock = threading.Lock()

        def changed(leading: bool) -> None:
            if on_change is not None:
                caller.call_soon_threadsafe(on_change, leading)

        async def renew() -> None:
            task = asyncio.current_task()
            assert task is not None
            with lock:
                if stop.is_set():  # cancelled before the thread got going
                    return
                started["at"] = (asyncio.get_running_loop(), task)
            own = new_client()
            self.client, self.on_change = own, changed
            try:
                await self.hold()
            finally:
                self.client, self.on_change = client, on_change
                await own.close()

        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lease") as pool:
            done = pool.submit(asyncio.run, renew())
            try:
                await asyncio.wrap_future(done)
            except asyncio.CancelledError:
                with lock:
                    stop.set()
                    at = started.get("at")
                if at is not None:
                    loop, task = at
                    with contextlib.suppress(RuntimeError):  # its loop already closed
                        loop.call_soon_threadsafe(task.cancel)
                with contextlib.suppress(BaseException):
                    await asyncio.shield(asyncio.wrap_future(done))
                raise

    async def release(self) -> None:
        """Give the lease up (on a clean shutdown) so a standby takes over at once."""
        if not self.is_leader or self._lease is None:
            return
        self._set_leader(False)
        identity = self.settings.identity
        # A renewal stopped mid-flight may have moved the lease on (409), or the answer
        # may be lost: read it back once and release what is still ours. Given up to
        # renewDeadline, as a renewal is: retryPeriod alone is too short on a busy
        # API server, and a standby then waits a whole leaseDuration.
        timeout = self.settings.renew_deadline
        lease: dict[str, Any] | None = dict(self._lease)
        for attempt in (1, 2):
            assert lease is not None
            spec = dict(lease.get("spec") or {})
            spec.update(
                {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": micro_time()}
            )
            try:
                await self.client.request(
                    "PUT", self.path, body={**lease, "spec": spec}, timeout=timeout
                )
                log.info("released the lease", extra={"identity": identity})
                return
            except ApiError as err:
                if attempt == 2 or not (err.conflict or err.ambiguous):
                    log.warning("releasing the lease failed: %s", err, extra={"error": str(err)})
                    return
            try:
                lease = await self.client.request("GET", self.path, timeout=timeout)
            except ApiError as err:
                log.warning("releasing the lease failed: %s", err, extra={"error": str(err)})
                return
            holder = str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
            if holder != identity:
                log.info("the lease is no longer ours", extra={"holder": holder})
                return

    async def try_acquire_or_renew(self) -> bool:
        s = self.settings
        now = micro_time()
        record = {
            "holderIdentity": s.identity,
            "leaseDurationSeconds": s.lease_seconds,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        }
        # Fast path: renew from our cached copy; a conflict means someone else wrote.
        if (
            self.is_leader
            and self._lease is not None
            and await self._update(self._lease, record, renewing=True)
        ):
            return True
        try:
            lease = await self.client.request("GET", self.path)
        except ApiError as err:
            if not err.not_found:
                raise
            return await self._create(record)
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        observed = (
            holder,
            str(spec.get("renewTime", "")),
            str((lease.get("metadata") or {}).get("resourceVersion", "")),
        )
        if observed != self._observed:
            self._observed = observed
            self._observed_at = self.clock()
        self.leader = holder
        duration = float(spec.get("leaseDurationSeconds") or s.lease_duration)
        if holder and holder != s.identity and self.clock() < self._observed_at + duration:
            return False
        return await self._update(lease, record, renewing=holder == s.identity)

    async def _create(self, record: JSON) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.settings.name, "namespace": self.settings.namespace},
            "spec": record,
        }
        try:
            lease = await self.client.request(
                "POST", LEASES.path(self.settings.namespace), body=body
            )
        except ApiError as err:
            if err.conflict:
                return False  # someone created it first
            raise
        self._accept(lease)
        return True

    async def _update(self, lease: JSON, record: JSON, *, renewing: bool) -> bool:
        spec = lease.get("spec") or {}
        if renewing:
            record["acquireTime"] = spec.get("acquireTime") or record["acquireTime"]
            record["leaseTransitions"] = int(spec.get("leaseTransitions") or 0)
        else:
            record["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        body = dict(lease)
        body["spec"] = {**spec, **record}
        try:
            updated = await self.client.request("PUT", self.path, body=body)
        except ApiError as err:
            if err.conflict:
                self._lease = None
                return False
            raise
        self._accept(updated)
        return True

    def _accept(self, lease: JSON) -> None:
        self._lease = lease
        spec = lease.get("spec") or {}
        self.leader = self.settings.identity
        self._observed = (
            str(spec.get("holderIdentity") or ""),
            str(spec.get("renewTime", "")),
            str((lease.get("metadata") or {}).get("resourceVersion", "")),
        )
        self._observed_at = self.clock()
