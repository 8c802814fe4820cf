"""Head-of-line reservation for gangs that keep failing.

A failed gang holds nothing (the gang cycle discards its transaction), so smaller work
keeps flowing (backfill). To keep a large gang from waiting forever behind a stream of
small pods, a gang that has failed for longer than `reservation_after` seconds takes a
head-of-line reservation of the nodes it could use: while it lasts, pods of lower or
equal priority outside the gang may not be placed on those nodes (the Coscheduling
plugin's Filter rejects them there), until the gang is placed or `reservation_max`
seconds pass; the same gang cannot reserve again for another `reservation_max` seconds.
Nodes the gang could never use (no GPUs for a GPU gang, taints it does not tolerate,
outside its node affinity) are not reserved, so unrelated work keeps flowing on them.
The settings are per profile (`GangConfig`, from the Coscheduling args). See
docs/gang-scheduling.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import msgspec
import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.api.resources import CPU
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code
from shoal.framework.types import Candidates
from shoal.gang.manager import GangConfig, GangManager, Group

__all__ = ["GangConfig", "reservation_due", "update_reservation", "usable_nodes"]


def reservation_due(manager: GangManager) -> float | None:
    """When `update_reservation` next has something to do: the current reservation's
    end, else the earliest time a failing group may take one (None: no group can)."""
    if manager.reservation is not None:
        return manager.reservation.until
    if manager.reservation_stale:
        due: float | None = None
        for key, since in manager.failing.items():
            group = manager.groups.get(key)
            if group is None or not group.config.head_of_line_reservation:
                continue
            at = max(since + group.config.reservation_after, manager.no_block_until.get(key, 0.0))
            due = at if due is None else min(due, at)
        manager.reservation_due = due
        manager.reservation_stale = False
    return manager.reservation_due


def update_reservation(
    manager: GangManager,
    handle: Handle,
    now: float,
    quota_limit: Callable[[list[PodInfo]], str] | None = None,
) -> None:
    """End the reservation when its gang is placed or its time is up; else let the
    group that has been failing the longest (among those allowed to reserve now) take
    it, unless it could never start: more than the nodes it can use hold, or (given
    `quota_limit`, why these pods would exceed their queues' max with nothing else in
    them) more than its queue allows. Cheap when nothing is due (`reservation_due` is
    cached)."""
    held = manager.reservation
    if held is not None:
        group = manager.groups.get(held.group)
        if group is not None and now < held.until and group.phase not in ("Running", "Finished"):
            return
        cooldown = group.config.reservation_max if group is not None else 0.0
        manager.no_block_until[held.group] = now + cooldown
        manager.release()
    due = reservation_due(manager)
    if due is None or now < due:
        return
    for key, since in list(manager.failing.items()):
        group = manager.groups.get(key)
        if group is None:
            continue
        config = group.config
        if (
            not config.head_of_line_reservation
            or now - since < config.reservation_after
            or now < manager.no_block_until.get(key, 0.0)
        ):
            continue
        pending = list(manager.members_pending(group)) or list(group.members.values())
        usable = _usable_mask(handle, pending)
        why = _impossible(handle, group, pending, usable)
        if not why and quota_limit is not None:
            why = quota_limit(_smallest(handle, pending, group.needed()))
        if why != group.impossible:
            base = group.reason.split("; the gang ", 1)[0]
            group.impossible = why
            group.reason = f"{base}; the gang {why}" if why else base
            manager.dirty.add(key)  # its PodGroup status says why
        if usable.any() and not why:
            manager.reserve(key, now + config.reservation_max, _names(handle, usable))
            return
        # Nothing it could use, or more than it could ever get: holding nodes would only
        # keep others from them (and from reserving). Looked at again after a while: the
        # cluster may grow, the queue's max may rise.
        manager.no_block_until[key] = now + config.reservation_max
        manager.reservation_changed()


def _smallest(handle: Handle, pending: list[PodInfo], needed: int) -> list[PodInfo]:
    """The `needed` pending members with the smallest requests (by total over the
    node table's columns, normalised by the cluster's allocatable)."""
    if needed >= len(pending):
        return pending
    snap = handle.snapshot
    n = snap.n
    total = np.maximum(snap.allocatable[:n].sum(axis=0), 1).astype(np.float64)
    size = [float((snap.pod_vector(p) / total).sum()) for p in pending]
    order = np.argsort(size, kind="stable")[:needed]
    return [pending[int(i)] for i in order]


def _impossible(
    handle: Handle, group: Group, pending: list[PodInfo], usable: NDArray[np.bool_]
) -> str:
    """Why the gang could not start even if nothing else ran ("" if it might): its
    remaining members need more of some resource than the nodes it can use hold in all,
    or, for members of one shape, more slots than those nodes have. Necessary
    conditions only (never a false "impossible"), vectorised over the nodes."""
    needed = group.needed()
    if not needed or not pending:
        return ""
    snap = handle.snapshot
    n = snap.n
    if not usable.any():
        return f"no node could run any of its {len(pending)} pending member(s)"
    capacity = snap.allocatable[:n][usable]
    vectors = np.stack([snap.pod_vector(p) for p in pending])
    # The smallest `needed` requests of each resource, against the nodes' total.
    wanted = np.sort(vectors, axis=0)[: min(needed, len(pending))].sum(axis=0)
    have = capacity.sum(axis=0)
    short = np.flatnonzero(wanted > have)
    if short.size:
        k = int(short[0])
        res = snap.resources[k]
        unit = "m" if res == CPU else ""
        return (
            f"needs {needed} more member(s) asking {int(wanted[k])}{unit} {res} in all, more "
            f"than the {int(usable.sum())} node(s) it can use hold ({int(have[k])}{unit}) "
            "even with nothing else running"
        )
    if len(pending) >= needed and (vectors == vectors[0]).all():
        asked = vectors[0] > 0
        if asked.any():
            slots = (capacity[:, asked] // vectors[0][asked]).min(axis=1).sum()
            if slots < needed:
                return (
                    f"needs {needed} more member(s), but the {int(usable.sum())} node(s) it "
                    f"can use fit only {int(slots)} of them even with nothing else running"
                )
    return ""


def _names(handle: Handle, usable: NDArray[np.bool_]) -> frozenset[str]:
    snap = handle.snapshot
    return frozenset(str(name) for name in snap.names[: snap.n][usable])


def _signature(pod: PodInfo) -> bytes:
    """What decides where a member may run apart from other work: members that differ
    only in name, labels or annotations share one filter run."""
    spec = pod.pod.spec
    return msgspec.json.encode(
        (
            pod.scheduler_name,
            sorted(pod.requests.items()),
            spec.node_selector,
            spec.affinity,
            spec.tolerations,
            spec.topology_spread_constraints,
        )
    )


def usable_nodes(handle: Handle, members: Iterable[PodInfo]) -> frozenset[str]:
    """The nodes some member could run on if the node held no other work: nodes no
    PreFilter or Filter rejects as unresolvable (UnschedulableAndUnresolvable: wrong
    labels, untolerated taints, cordoned...) and whose allocatable holds the member's
    requests. Rejections that other pods cause (insufficient free resources, ports,
    pod (anti-)affinity, spread skew) do not count: those nodes are what the gang waits
    for."""
    return _names(handle, _usable_mask(handle, members))


def _usable_mask(handle: Handle, members: Iterable[PodInfo]) -> NDArray[np.bool_]:
    snap = handle.snapshot
    snap.refresh()
    n = snap.n
    usable = np.zeros(n, dtype=bool)
    seen: set[bytes] = set()
    for pod in members:
        signature = _signature(pod)
        if signature in seen:
            continue
        seen.add(signature)
        try:
            usable |= _usable_for(handle, pod)
        except Exception:  # a plugin bug must not stop the scheduler: hold every node
            usable[:] = True
        if usable.all():
            break
    return usable


def _usable_for(handle: Handle, pod: PodInfo) -> NDArray[np.bool_]:
    fwk = handle.runner(pod)
    snap = handle.snapshot
    n = snap.n
    allowed = np.ones(n, dtype=bool)
    state = CycleState(dry_run=True)
    # Like Framework.run_pre_filter, but a resolvable rejection (e.g. a queue at its
    # limit) says nothing about nodes: that plugin's Filter is left out instead of the
    # whole answer.
    for plugin in fwk.plugins.pre_filter:
        narrowed, status = plugin.pre_filter(state, pod)
        if status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return np.zeros(n, dtype=bool)
        if not status.ok:
            state.skip_filter.add(plugin.name)
            continue
        if narrowed is not None and narrowed.node_names is not None:
            allowed &= np.isin(snap.names[:n], list(narrowed.node_names))
    outcome = fwk.run_filters(state, pod, Candidates.all(n))
    for _, result in outcome.results:
        for failure in result.failures:
            if failure.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                allowed &= ~failure.nodes
    vector = snap.pod_vector(pod)
    allowed &= (snap.allocatable[:n] >= vector).all(axis=1)
    return allowed


def reserving_group(manager: GangManager, pod: PodInfo) -> Group | None:
    """The group whose reservation keeps `pod` off the reserved nodes (None: no
    reservation applies: there is none, the pod belongs to that group, or it has a
    higher priority)."""
    held = manager.reservation
    if held is None:
        return None
    group = manager.groups.get(held.group)
    if group is None or pod.uid in group.members or pod.priority > group.priority:
        return None
    return group
