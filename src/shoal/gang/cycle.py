"""The gang cycle: decide a group's minimum members in one transaction.

When the queue yields a member of a group, the scheduler takes every pending member of
that group out of the queue and places them one after another against the cluster
state, each seeing the ones placed before it (like Volcano's Statement). If at least
the still-needed number of members (minMember minus those already running) fits, every
placement is kept and sent to binding; otherwise every placement is rolled back
(Unreserve + forget) before anything is bound, so a gang that does not fit holds
nothing and two large gangs can never deadlock each other half-placed. Members beyond
the minimum that do not fit stay queued on their own (elastic members, e.g. Spark
executors above the minimum).

Starvation: a failed gang does not hold resources, so smaller work keeps flowing
(backfill). To keep a large gang from waiting forever behind a stream of small pods,
a gang that has failed for longer than `reservation_after` seconds takes a head-of-line
reservation: pods of lower or equal priority outside the gang are held back until the
gang is placed or `reservation_max` seconds pass; the same gang cannot reserve again for
another `reservation_max` seconds. See docs/gang-scheduling.md.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from shoal.api.objects import Container, ObjectMeta, Pod, ResourceRequirements
from shoal.api.podinfo import PodInfo
from shoal.api.resources import CPU, MEMORY
from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import Diagnosis
from shoal.framework.runtime import Framework
from shoal.framework.status import Code, Status
from shoal.framework.types import Candidates
from shoal.gang.manager import GangManager, Group
from shoal.gang.topology import choose_domains, members_per_node
from shoal.scheduling_queue.queue import QueuedPod

if TYPE_CHECKING:
    from shoal.scheduler.scheduler import CycleResult, Scheduler

__all__ = ["GangConfig", "schedule_gang"]


@dataclass(frozen=True)
class GangConfig:
    reservation_after: float = 120.0
    reservation_max: float = 300.0


def _fmt(resource: str, amount: int) -> str:
    if resource == CPU:
        return f"{amount / 1000:g} {resource}"
    if resource == MEMORY:
        return f"{amount / 2**30:.1f}Gi {resource}"
    return f"{amount} {resource}"


def _shortfall(unplaced: list[PodInfo], diagnoses: list[Diagnosis | None]) -> str:
    """ "needs 16 nvidia.com/gpu more": what the members that did not fit ask for, of the
    resources the filters found insufficient."""
    short: Counter[str] = Counter()
    for diag in diagnoses:
        if diag is None:
            continue
        for reason in diag.reasons:
            if reason.startswith("Insufficient "):
                short[reason.removeprefix("Insufficient ")] += 1
    if not short:
        return ""
    parts = []
    for resource, _ in short.most_common(2):
        total = sum(p.requests.get(resource, 0) for p in unplaced)
        if total:
            parts.append(_fmt(resource, total))
    return f", needs {' and '.join(parts)} more" if parts else ""


def schedule_gang(
    sched: Scheduler, entry: QueuedPod, group: Group, fwk: Framework, config: GangConfig
) -> CycleResult:
    from shoal.scheduler.scheduler import CycleResult

    manager: GangManager = sched.gangs
    now = sched.clock.now()
    others = [uid for uid in group.members if uid != entry.pod.uid and uid not in group.bound]
    entries = [entry, *sched.queue.take(others)]
    entries.sort(key=lambda e: (-e.pod.priority, e.pod.timestamp, e.pod.key))
    need = group.needed()

    def fail(message: str, status: Status, rejectors: frozenset[str]) -> CycleResult:
        manager.attempt_failed(group, message, now)
        for e in entries:
            e.attempts = max(e.attempts, group.attempts)
            sched.queue.requeue_unschedulable(e, now, rejectors, status, message)
            sched.listener.pod_unschedulable(e.pod, status, message)
        return CycleResult(entry.pod, None, status, message)

    gate = manager.gate(group)
    if gate:
        return fail(gate, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, gate), frozenset())

    snap = sched.snapshot
    snap.refresh()
    restrict = None
    if need > 0 and group.min_resources:
        n = snap.n
        for resource, amount in group.min_resources.items():
            col = snap.resource_index.get(resource)
            free = 0 if col is None else int(snap.free[:n, col].sum())
            if free < amount:
                message = (
                    f"gang {group.key}: minResources {_fmt(resource, amount)} exceed the "
                    f"cluster's free {_fmt(resource, max(free, 0))}"
                )
                status = Status(Code.UNSCHEDULABLE, message, plugin="Coscheduling")
                return fail(message, status, frozenset({"Coscheduling"}))
    if need > 0 and group.topology_key:
        representative = entries[0].pod
        state = CycleState()
        fwk.run_pre_filter(state, representative)
        outcome = fwk.run_filters(state, representative, Candidates.all(snap.n))
        shape = np.max([snap.pod_vector(e.pod) for e in entries[:need]], axis=0)
        capacity = np.where(outcome.passed, members_per_node(snap, shape), 0)
        choice = choose_domains(snap, group.topology_key, capacity, need, group.topology_required)
        if choice.rows is None:
            message = f"gang {group.key}: {choice.message}"
            status = Status(Code.UNSCHEDULABLE, message, plugin="Coscheduling")
            return fail(message, status, frozenset({"Coscheduling"}))
        restrict = choice.rows

    placed: list[tuple[QueuedPod, str, CycleState]] = []
    failed: list[tuple[QueuedPod, Status, Diagnosis | None]] = []
    for i, e in enumerate(entries):
        if len(placed) < need and len(placed) + len(entries) - i < need:
            failed.extend((rest, Status(Code.UNSCHEDULABLE), None) for rest in entries[i:])
            break  # the minimum can no longer be reached
        pod = e.pod
        if pod.initial_attempt_time is None:
            pod.initial_attempt_time = now
        state = CycleState()
        restrict_now = restrict if len(placed) < need else None
        try:
            node, status, diagnosis = sched._schedule_pod(fwk, state, pod, restrict_now)
        except Exception as err:  # a plugin bug must not stop the scheduler
            node, diagnosis = None, None
            status = Status.error(f"scheduling cycle failed: {type(err).__name__}: {err}")
        if node is None:
            failed.append((e, status, diagnosis))
            continue
        sched.cluster.clear_nomination(pod.uid)
        sched.cluster.assume(pod, node)
        status = fwk.run_reserve(state, pod, node)
        if not status.ok:
            fwk.run_unreserve(state, pod, node)
            sched.cluster.forget(pod)
            failed.append((e, status, None))
            continue
        placed.append((e, node, state))

    if len(placed) < need:
        # Roll back: nothing of this gang stays assumed.
        for e, node, state in reversed(placed):
            fwk.run_unreserve(state, e.pod, node)
            sched.cluster.forget(e.pod)
        first = next((d for _, _, d in failed if d is not None), None)
        unplaced = [e.pod for e, _, _ in failed][: need - len(placed)]
        message = (
            f"gang {group.key}: {len(placed)}/{need} members placeable"
            f"{_shortfall(unplaced, [d for _, _, d in failed])}"
        )
        if first is not None:
            message += f"; {first.message()}"
        rejectors = frozenset(p for _, _, d in failed if d for p in d.unschedulable_plugins)
        return fail(message, Status(Code.UNSCHEDULABLE, message), rejectors)

    if group.min_executors and placed:
        missing = _missing_executors(sched, group, placed)
        if missing:
            for e, node, state in reversed(placed):
                fwk.run_unreserve(state, e.pod, node)
                sched.cluster.forget(e.pod)
            message = f"gang {group.key}: {missing}"
            return fail(message, Status(Code.UNSCHEDULABLE, message), frozenset({"Coscheduling"}))

    # Commit: Permit, then hand every placed member to binding.
    for e, node, state in placed:
        status, timeout, waiting_on = fwk.run_permit(state, e.pod, node)
        sched._admit(e, node, state, fwk, status, timeout, waiting_on, now)
        if status.code in (Code.SUCCESS, Code.WAIT):
            group.bound.add(e.pod.uid)
    manager.attempt_succeeded(group)
    for e, status, diagnosis in failed:
        message = diagnosis.message() if diagnosis is not None else status.message
        rejectors = frozenset(diagnosis.unschedulable_plugins) if diagnosis else frozenset()
        sched.queue.requeue_unschedulable(e, now, rejectors, status, message)
        sched.listener.pod_unschedulable(e.pod, status, message)
    first_node = placed[0][1] if placed else None
    return CycleResult(entry.pod, first_node, Status())


def update_reservation(manager: GangManager, config: GangConfig, now: float) -> None:
    """Start or end the head-of-line reservation. O(1): only the group that has been
    failing the longest can take it."""
    if manager.blocking is not None:
        group = manager.groups.get(manager.blocking)
        over = now >= manager.blocking_until
        if group is None or over or group.phase in ("Running", "Finished"):
            manager.no_block_until[manager.blocking] = now + config.reservation_max
            manager.release()
        else:
            return
    oldest = next(iter(manager.failing), None)
    if oldest is None:
        return
    since = manager.failing[oldest]
    if now - since < config.reservation_after or now < manager.no_block_until.get(oldest, 0.0):
        return
    manager.blocking = oldest
    manager.blocking_until = now + config.reservation_max


def held_by_reservation(manager: GangManager, pod: PodInfo, now: float, config: GangConfig) -> str:
    """Why a pod outside the reserving gang is held back ("" if it is not)."""
    update_reservation(manager, config, now)
    if manager.blocking is None:
        return ""
    group = manager.groups[manager.blocking]
    member = manager.group_of_uid(pod.uid)
    if member is group or pod.priority > group.priority:
        return ""
    return (
        f"held back: gang {group.key} has a head-of-line reservation until "
        f"t={manager.blocking_until:g}s"
    )


def _missing_executors(
    sched: Scheduler, group: Group, placed: list[tuple[QueuedPod, str, CycleState]]
) -> str:
    """Spark driver-first what-if: would `min_executors` executors of the shape left in
    minResources fit next to what was just placed? Phantom executors are placed through
    the normal filters and scores, then forgotten. Returns why not ("" if they fit)."""
    existing = len(group.members) - 1  # members other than the driver already exist
    count = group.min_executors - max(0, existing)
    if count <= 0 or not group.min_resources:
        return ""
    driver = placed[0][0].pod
    left = {
        r: max(0, amount - sum(e.pod.requests.get(r, 0) for e, _, _ in placed))
        for r, amount in group.min_resources.items()
    }
    shape = {r: -(-amount // count) for r, amount in left.items() if amount}
    spec = msgspec.structs.replace(
        driver.pod.spec,
        containers=[
            Container(
                name="executor",
                resources=ResourceRequirements(
                    requests={r: (f"{v}m" if r == CPU else v) for r, v in shape.items()}
                ),
            )
        ],
        init_containers=[],
        overhead={},
        node_name="",
    )
    fwk = sched.profiles[driver.scheduler_name]
    phantoms: list[PodInfo] = []
    try:
        for i in range(count):
            meta = ObjectMeta(
                name=f"{group.name}-phantom-executor-{i}",
                namespace=group.namespace,
                uid=f"shoal-phantom/{group.key}/{i}",
                labels=dict(driver.labels),
            )
            phantom = PodInfo(Pod(metadata=meta, spec=spec), timestamp=driver.timestamp)
            node, _, _ = sched._schedule_pod(fwk, CycleState(), phantom)
            if node is None:
                return (
                    f"the driver fits but only {i}/{count} minimum executors would fit "
                    f"(each {', '.join(f'{r}={v}' for r, v in shape.items())})"
                )
            sched.cluster.assume(phantom, node)
            phantoms.append(phantom)
    finally:
        for phantom in phantoms:
            sched.cluster.forget(phantom)
    return ""
