"""What keeps a pod out of the active queue (PreEnqueue), and how it says why.

The scheduling queue asks `pre_enqueue` before a pod may be tried: the profile's
PreEnqueue plugins (scheduling gates, Coscheduling's incomplete gang or missing PodGroup
or dependency, DynamicResources' missing claims), plus one check of the core's own: a
pod asking for devices through ResourceClaims in a profile without DynamicResources
would be placed as if it asked for nothing, so it waits, saying what to enable. A gated
pod tells the cluster why, like an unschedulable one (`gated`), and a new leader says it
again for every gated pod (`announce`), since a standby wrote nothing.

A pod says it only once it has been gated for `GATE_REPORT_GRACE_SECONDS` and still is
(`say`, called by the scheduler's tick and at the end of every driver pass; the
scheduler wakes for the next one due): the members of a gang that arrive together (every
gang pending at a restart, a Job's pods created one request after another) complete it
before any of them could say "3/8 members exist", which was false by then and cost a
condition write and an event each (2100 of them at every start for 300 pending gangs of
8 on a real API server). kube-scheduler writes nothing for a pod its PreEnqueue plugins
hold; Shoal writes why, but only what is still true. A new leader says it at once
(`announce`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from shoal.api.podinfo import PodInfo
from shoal.framework.effects import Effects, Unschedulable
from shoal.framework.runtime import Framework
from shoal.framework.status import Code, Status
from shoal.scheduling_queue.queue import QueuedPod

__all__ = ["GATE_REPORT_GRACE_SECONDS", "QueueGate"]

GATE_REPORT_GRACE_SECONDS = 1.0
"""How long a pod waits at PreEnqueue before it says why (see the module docstring)."""


class QueueGate:
    def __init__(
        self,
        profiles: Mapping[str, Framework],
        effects: Effects,
        still_gated: Callable[[str], QueuedPod | None],
        clock: Callable[[], float],
        grace: float = GATE_REPORT_GRACE_SECONDS,
    ) -> None:
        self.profiles = profiles
        self.effects = effects
        self.still_gated = still_gated
        self.clock = clock
        self.grace = grace
        # uid -> (why, since when), for pods gated (or gated for a new reason) and not
        # said yet; in the order of `since` (an entry keeps its place and time when its
        # reason changes), so the first is the next due.
        self._unsaid: dict[str, tuple[Status, float]] = {}

    def pre_enqueue(self, pod: PodInfo) -> Status:
        fwk = self.profiles.get(pod.scheduler_name)
        claims = pod.pod.spec.resource_claims
        if claims and (fwk is None or not fwk.has_pre_enqueue("DynamicResources")):
            # Placing it as if it asked for nothing would start it on a node without
            # its devices (the kubelet waits for an allocation that never comes).
            names = ", ".join(c.name or "?" for c in claims)
            return Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                f"the pod asks for devices through ResourceClaims (spec.resourceClaims: "
                f"{names}), and its profile does not enable DynamicResources, the plugin "
                "that allocates Dynamic Resource Allocation claims: enable it (it is in the "
                "default profile), or ask for whole GPUs or a GPU share with resource "
                "requests (docs/gpu-sharing.md)",
                plugin="DynamicResources",
            )
        # Gangs gate here through Coscheduling's PreEnqueue, when the profile has it.
        return fwk.run_pre_enqueue(pod) if fwk is not None else Status()

    def gated(self, entry: QueuedPod, status: Status) -> None:
        """A pod kept out of the queue by PreEnqueue (scheduling gates, an incomplete
        gang, a missing PodGroup or dependency) will say why, like an unschedulable one,
        if it still waits for that once its grace is over."""
        uid = entry.pod.uid
        unsaid = self._unsaid.get(uid)
        self._unsaid[uid] = (status, self.clock() if unsaid is None else unsaid[1])

    def next_due(self) -> float | None:
        """When the next pod gated and not said yet is due to say why (None: none)."""
        for _, since in self._unsaid.values():
            return since + self.grace
        return None

    def say(self, at_once: bool = False) -> None:
        """Every pod gated for the grace (any, `at_once`) and still gated says why, the
        reason last recorded (one `Unschedulable` effect with `gated`). A changed
        reason is recorded by `gated` as it happens, so the one here is current."""
        if not self._unsaid:
            return
        cutoff = float("inf") if at_once else self.clock() - self.grace
        due: list[tuple[str, Status]] = []
        for uid, (status, since) in self._unsaid.items():
            if since > cutoff:
                break
            due.append((uid, status))
        for uid, status in due:
            del self._unsaid[uid]
            entry = self.still_gated(uid)
            if entry is None:
                continue  # let through since
            message = (
                f"pod is gated by {status.plugin}: {status.message}"
                if status.plugin
                else status.message
            )
            self.effects.emit(Unschedulable(entry.pod, status, message, gated=True))

    def announce(self, gated: Iterable[QueuedPod]) -> None:
        """Say again why every gated pod waits (a new leader writes what a standby
        could not)."""
        for entry in gated:
            status = Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE, entry.message, plugin=entry.gated_by
            )
            self.gated(entry, status)
