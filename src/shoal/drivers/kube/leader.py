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
* On a clean shutdown the leader releases the Lease (empty holder), so a standby takes
  over at its next poll instead of waiting for the lease to expire.

Failover after a crash takes at most `lease_duration + 2 * retry_period` from the
leader's last renewal (one period for the standby to observe that renewal, one for the
poll after expiry); with kube-scheduler's defaults (15 s, 10 s, 2 s) that is 19 s.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

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
                acquired = await asyncio.wait_for(
                    self.try_acquire_or_renew(), self.settings.retry_period
                )
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
                renewed = await asyncio.wait_for(
                    self.try_acquire_or_renew(), max(0.001, min(s.retry_period, deadline - sent))
                )
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

    async def release(self) -> None:
        """Give the lease up (on a clean shutdown) so a standby takes over at once."""
        if not self.is_leader or self._lease is None:
            return
        self._set_leader(False)
        lease = dict(self._lease)
        spec = dict(lease.get("spec") or {})
        spec.update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": micro_time()})
        lease["spec"] = spec
        try:
            await self.client.request(
                "PUT", self.path, body=lease, timeout=self.settings.retry_period
            )
            log.info("released the lease", extra={"identity": self.settings.identity})
        except ApiError as err:
            log.warning("releasing the lease failed: %s", err, extra={"error": str(err)})

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
