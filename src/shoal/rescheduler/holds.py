"""Migration holds: the room a rescheduling plan keeps for the pods it moves.

A plan (`shoal.rescheduler.planner`) evicts running pods and says where each one goes.
The evicted pod is gone for good; its controller creates a *new* pod (new name, new
uid). Until that pod arrives, the room on its planned node is held by a stand-in: a copy
of the moved pod with the uid `shoal-hold/<plan>/<uid>`, nominated to the planned node
the way a preemptor is (kube's nominator). Other pods of equal or lower priority than
the stand-in treat that room as taken; the stand-in carries the priority of the pod
the plan was made for, so the rest of a gang being placed in the same decision does not
take it either.

A new pod *claims* a hold when it has the same controller (owner reference) and the same
requests as the moved pod, or names the plan in its `shoal.dev/migration-plan`
annotation. The scheduler then moves the nomination from the stand-in to the new pod,
which is tried first on that node. A hold nobody claims ends after `hold_seconds`.

The registry also remembers when each controller last had a pod moved (a cool-down so
that nothing is moved back and forth) and the moves made in the last hour (the
disruption budget). A hold counts as a move once its stand-in has been nominated, i.e.
once the scheduler committed the plan's evictions.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import msgspec

from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import ClusterState
from shoal.framework.handle import Handle

__all__ = [
    "ANNOTATION_MIGRATION_PLAN",
    "ANNOTATION_MOVABLE",
    "ANNOTATION_RESTART_COST",
    "HOLD_PREFIX",
    "RESCHEDULED",
    "SERVICE_KEY",
    "Hold",
    "MigrationHolds",
    "is_hold",
    "owner_key",
]

SERVICE_KEY = "shoal.migration_holds"
HOLD_PREFIX = "shoal-hold/"
ANNOTATION_MIGRATION_PLAN = "shoal.dev/migration-plan"
ANNOTATION_MOVABLE = "shoal.dev/movable"
ANNOTATION_RESTART_COST = "shoal.dev/restart-cost"
HOUR = 3600.0
# How the reason of a migration plan's eviction starts (the pod's event is `Rescheduled`).
RESCHEDULED = "rescheduled by plan "


def is_hold(pod: PodInfo) -> bool:
    """Is this a migration hold's stand-in (never a real pod)?"""
    return pod.uid.startswith(HOLD_PREFIX)


def owner_key(pod: PodInfo) -> str | None:
    """`namespace/kind/name` of the pod's controller, or None when no controller
    re-creates it (a bare pod cannot be moved: evicting it would lose it)."""
    for ref in pod.pod.metadata.owner_references:
        if ref.controller:
            return f"{pod.namespace}/{ref.kind}/{ref.name}"
    return None


@dataclass(eq=False)
class Hold:
    plan: str
    moved: PodInfo  # the pod the plan evicts
    node: str  # where its replacement goes
    stand_in: PodInfo  # nominated to `node` until claimed or expired
    owner: str
    queue: str  # the moved pod's queue, for the per-queue budget
    proposed_at: float
    expires: float
    live: bool = False  # the stand-in was nominated: the plan was committed


class MigrationHolds:
    """The holds of every plan, the controllers' last moves and the budget's ledger.
    Shared by the Rescheduler plugin (which proposes plans) and the scheduler (which
    commits them, lets new pods claim them and expires them on its tick)."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.holds: dict[str, Hold] = {}  # stand-in uid -> hold
        self.last_moved: dict[str, float] = {}  # owner key -> time of its last move
        self.ledger: deque[tuple[float, str]] = deque()  # (time, queue) of committed moves
        self.plans = 0  # plans proposed so far (plan ids)
        self.committed_plans = 0
        self.committed_moves = 0
        self.claimed = 0
        self.expired = 0
        # Bumped by every placement change (PlacementObserver), except while `muted`
        # (a plan's own what-if, always undone): "has the cluster changed since?"
        self.version = 0
        self.muted = False
        cluster.observers.append(self)

    @classmethod
    def of(cls, handle: Handle) -> MigrationHolds:
        found = handle.services.get(SERVICE_KEY)
        if found is None:
            found = handle.services[SERVICE_KEY] = cls(handle.cluster)
        assert isinstance(found, MigrationHolds)
        return found

    @staticmethod
    def find(services: dict[str, object]) -> MigrationHolds | None:
        """The registry, if a Rescheduler created one (None: nothing to do)."""
        found = services.get(SERVICE_KEY)
        return found if isinstance(found, MigrationHolds) else None

    # ---- PlacementObserver ------------------------------------------------------------

    def pod_placed(self, row: int, pod: PodInfo) -> None:
        if not self.muted:
            self.version += 1

    def pod_unplaced(self, row: int, pod: PodInfo) -> None:
        if not self.muted:
            self.version += 1

    def row_moved(self, src: int, dst: int) -> None:
        self.version += 1

    def node_changed(self, row: int) -> None:
        self.version += 1

    # ---- plans --------------------------------------------------------------------

    def next_plan_id(self) -> str:
        self.plans += 1
        return f"migration-{self.plans}"

    def propose(
        self,
        plan: str,
        moved: PodInfo,
        node: str,
        *,
        queue: str,
        priority: int,
        now: float,
        hold_seconds: float,
    ) -> PodInfo:
        """Register the hold for one move; returns the stand-in the scheduler nominates
        to `node` when it commits the plan. It holds the room at `priority` (that of the
        pod the plan is for) or the moved pod's own, whichever is higher."""
        owner = owner_key(moved) or moved.key
        meta = msgspec.structs.replace(
            moved.pod.metadata, uid=f"{HOLD_PREFIX}{plan}/{moved.uid}", name=f"{moved.name}.hold"
        )
        spec = msgspec.structs.replace(moved.pod.spec, node_name="")
        stand_in = PodInfo(msgspec.structs.replace(moved.pod, metadata=meta, spec=spec), now)
        stand_in.priority = max(moved.priority, priority)
        hold = Hold(plan, moved, node, stand_in, owner, queue, now, now + hold_seconds)
        self.holds[stand_in.uid] = hold
        return stand_in

    def refresh(self, now: float) -> list[Hold]:
        """Note the holds whose plan was committed since the last call (their stand-ins
        are nominated); returns those that just went live."""
        nominations = self.cluster.nominations
        fresh = []
        committed_plans = set()
        for hold in self.holds.values():
            if not hold.live and hold.stand_in.uid in nominations:
                hold.live = True
                fresh.append(hold)
                committed_plans.add(hold.plan)
                self.last_moved[hold.owner] = now
                self.ledger.append((now, hold.queue))
        self.committed_plans += len(committed_plans)
        self.committed_moves += len(fresh)
        return fresh

    # ---- claims and expiry -----------------------------------------------------------

    def claim(self, pod: PodInfo, now: float) -> Hold | None:
        """The live hold a new pod takes over (its controller's, same requests, or the
        plan its annotation names), or None. The caller moves the nomination."""
        if is_hold(pod):
            return None
        self.refresh(now)
        plan = pod.pod.metadata.annotations.get(ANNOTATION_MIGRATION_PLAN, "")
        owner = owner_key(pod)
        best: Hold | None = None
        for hold in self.holds.values():
            if not hold.live or hold.stand_in.uid not in self.cluster.nominations:
                continue
            if plan and hold.plan == plan and hold.moved.requests == pod.requests:
                best = hold
                break
            if owner is not None and hold.owner == owner and hold.moved.requests == pod.requests:
                best = best or hold
        if best is not None:
            del self.holds[best.stand_in.uid]
            self.last_moved[best.owner] = now
            self.claimed += 1
        return best

    def expire(self, now: float) -> list[Hold]:
        """Holds past their time (claimed by nobody, or never committed); the caller
        clears the nominations of those that were live."""
        self.refresh(now)
        gone = [h for h in self.holds.values() if h.expires <= now]
        for hold in gone:
            del self.holds[hold.stand_in.uid]
            if hold.live:
                self.expired += 1
        return [h for h in gone if h.live]

    def next_expiry(self) -> float | None:
        return min((h.expires for h in self.holds.values()), default=None)

    # ---- budget and cool-down --------------------------------------------------------

    def moves_in_last_hour(self, now: float, queue: str | None = None) -> int:
        ledger = self.ledger
        while ledger and ledger[0][0] <= now - HOUR:
            ledger.popleft()
        if queue is None:
            return len(ledger)
        return sum(1 for _, q in ledger if q == queue)

    def cooling(self, pod: PodInfo, now: float, seconds: float) -> bool:
        """Was a pod of the same controller moved less than `seconds` ago?"""
        owner = owner_key(pod)
        if owner is None:
            return False
        last = self.last_moved.get(owner)
        return last is not None and now - last < seconds
