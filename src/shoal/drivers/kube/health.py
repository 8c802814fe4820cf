"""/healthz and /readyz of a running backend, as kube-scheduler's: `healthz` says whether
the process should be restarted (ping, the lease renewed, the scheduling loop turning);
`readyz` adds whether it sees the cluster (informers synced and watching), what it
skipped (named, never a failure: one bad object must not take the scheduler out of
service), whether another scheduler binds our pods, and its node shards.

Read on the I/O loop; what the core thread writes (the intake's invalid objects) is
copied once before it is read.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from shoal.drivers.kube.informer import Informer
from shoal.drivers.kube.intake import Intake
from shoal.drivers.kube.leader import LeaderElector
from shoal.drivers.kube.shards import ShardKeeper, loan_text
from shoal.web.server import Check

__all__ = ["Health", "HealthLimits", "Supervised"]

_NAMED = 5  # invalid objects named in /readyz


class Supervised(Protocol):
    """What the checks read of the backend as it runs."""

    @property
    def leading(self) -> bool: ...

    @property
    def crashed(self) -> BaseException | None: ...

    @property
    def loop_beat(self) -> float: ...  # monotonic time the scheduling loop last turned

    @property
    def stopping(self) -> bool: ...

    @property
    def background(self) -> Sequence[asyncio.Task[Any]]: ...


@dataclass(frozen=True)
class HealthLimits:
    identity: str
    lease_overdue: float  # renewDeadline + retryPeriod: a lease (or member Lease) older fails
    loop_stalled: float = 60.0  # seconds without a scheduling-loop pass
    foreign_bind_window: float = 300.0  # how long another scheduler's bind is reported


class Health:
    def __init__(
        self,
        backend: Supervised,
        limits: HealthLimits,
        *,
        informers: Mapping[str, Informer],
        intake: Intake,
        elector: LeaderElector | None,
        shards: ShardKeeper | None,
    ) -> None:
        self.backend = backend
        self.limits = limits
        self.informers = informers
        self.intake = intake
        self.elector = elector
        self.shards = shards

    def healthz(self) -> list[Check]:
        b, limits = self.backend, self.limits
        checks = [Check("ping", True)]
        if b.crashed is not None:
            checks.append(Check("scheduler", False, f"crashed: {b.crashed}"))
        if self.elector is not None and b.leading:
            overdue = time.monotonic() - self.elector.last_renew
            checks.append(
                Check(
                    "leaderElection",
                    overdue < limits.lease_overdue,
                    f"lease not renewed for {overdue:.1f}s",
                )
            )
        if b.leading:
            stalled = time.monotonic() - b.loop_beat
            checks.append(
                Check(
                    "schedulingLoop",
                    stalled < limits.loop_stalled,
                    f"no scheduling loop pass for {stalled:.0f}s",
                )
            )
        return checks

    def readyz(self) -> list[Check]:
        waiting = [n for n, i in self.informers.items() if not i.synced.is_set()]
        down = [f"{n} ({i.down})" for n, i in self.informers.items() if i.down]
        # An informer task that ended (it should not) leaves its store frozen.
        down += [
            f"{t.get_name().removeprefix('informer-')} (stopped)"
            for t in self.backend.background
            if t.get_name().startswith("informer-") and t.done() and not self.backend.stopping
        ]
        return [
            *self.healthz(),
            Check("informerSync", not waiting, "waiting for " + ", ".join(waiting)),
            Check("informers", not down, "not watching " + "; ".join(down)),
            self._invalid_check(),
            self._exclusive_check(),
            *self._shards_check(),
        ]

    def _shards_check(self) -> list[Check]:
        if self.shards is None or not self.backend.leading:
            return []
        me = self.limits.identity
        state = self.shards.state
        others = sorted({h for h in state.holders.values() if h and h != me})
        if not state.held:
            detail = f"standing by: all {state.slots} node shards are held by " + (
                ", ".join(others) or "nobody yet"
            )
        else:
            detail = f"{len(state.usable)} of {state.slots} node shards usable here" + (
                f"; others held by {', '.join(others)}" if others else ""
            )
        detail += loan_text(state, me)
        if state.last_renew == -math.inf:
            if self.shards.error:
                return [Check("nodeShards", False, f"cannot join: {self.shards.error}")]
            return [Check("nodeShards", True, detail="joining: no node-shard round done yet")]
        renewed = time.monotonic() - state.last_renew
        ok = renewed < self.limits.lease_overdue and not self.shards.error
        why = (
            f"node shards: {self.shards.error}"
            if self.shards.error
            else f"member Lease not renewed for {renewed:.1f}s"
        )
        return [Check("nodeShards", ok, why, detail)]

    def _invalid_check(self) -> Check:
        """Objects skipped because they cannot be read: named, never a failure."""
        invalid = list(self.intake.invalid.items())  # one copy: the core thread writes it
        if not invalid:
            return Check("invalidObjects", True)
        invalid.sort(key=lambda item: item[0])
        named = [
            f"{kind.name} {key or '(name unknown)'}: {message}"
            for (_, key), (kind, _, message) in invalid[:_NAMED]
        ]
        more = len(invalid) - len(named)
        detail = f"{len(invalid)} skipped (see events InvalidObject): " + "; ".join(named)
        if more > 0:
            detail += f"; and {more} more"
        return Check("invalidObjects", True, detail=detail)

    def _exclusive_check(self) -> Check:
        last = self.intake.last_foreign_bind
        if last is None or time.monotonic() - last[0] > self.limits.foreign_bind_window:
            return Check("exclusiveScheduler", True)
        _, pod, node, binder = last
        return Check(
            "exclusiveScheduler",
            False,
            f"another scheduler ({binder}) is binding pods of our profiles: {pod} to {node}, "
            f"{self.intake.foreign_binds} such binds so far",
        )
