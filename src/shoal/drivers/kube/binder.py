"""Binding through `pods/binding` and evicting through `pods/eviction`.

`KubeBinder` carries out the effects port's `bind`. Binds run concurrently, at most
`concurrency` at a time, and each goes through the scheduler client's rate limiter
(QPS/burst). Right before it posts (after the wait for a slot and for the rate limiter)
it checks the latest truth: the informer's copy of the pod (gone, replaced or already
bound: not bound again), of the node (deleted or being deleted: not bound there), and
whether the core withdrew the bind (a gang member vanished while the gang was binding).
The Binding carries the pod's UID as a precondition, and the API server refuses to bind
a pod that already has a node (409 Conflict), so a pod can never be bound twice, by us
or anyone else, whatever our cache says. Annotations the core asked for (e.g.
`shoal.dev/gpu-index`) travel in the Binding itself: the API server copies a Binding's
annotations onto the pod in the same write that sets its node, so a device plugin never
sees the pod on its node without them, and Shoal needs no permission to patch pods.

An ambiguous outcome (no answer: reset, timeout; a 5xx; or 409 "already assigned") is
not guessed: the binder reads the pod back from the API server until it knows. Bound to
our node: success (our Binding landed, its answer was lost). Bound elsewhere, gone or
replaced: failure. Not bound: the Binding did not land, and it is sent again (after the
same checks). Meanwhile the bind stays in flight, so the core keeps the room held and
gives it to nobody else. Every failure raises `BindError`; the core then forgets the
assumed pod and requeues it (or drops it, when the informer says it is bound or gone).

`KubeEvictor` carries out `Evict` effects: evictions go through the Eviction API so the
API server enforces PodDisruptionBudgets; a 429 (the budget allows no disruption now)
is retried a few times with a delay, then given up and reported.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping

from shoal.api.podinfo import PodInfo
from shoal.drivers.kube.client import JSON, ApiError, KubeClient
from shoal.drivers.kube.resources import PODS
from shoal.drivers.kube.status import EventRecorder, pod_ref
from shoal.framework.effects import BindError
from shoal.rescheduler.holds import RESCHEDULED
from shoal.web.metrics import SchedulerMetrics

__all__ = ["KubeBinder", "KubeEvictor"]

log = logging.getLogger("shoal.kube.binder")


# On every pod Shoal binds: the binding replica's identity (its Lease identity). A pod
# of one of our profiles bound without our identity here was bound by someone else.
SCHEDULED_BY = "shoal.dev/scheduled-by"


class _BoundAlready(BindError):
    def __init__(self, pod: PodInfo, node: str) -> None:
        super().__init__(f"pod {pod.key} is already bound to {node}")
        self.node = node


class KubeBinder:
    def __init__(
        self,
        client: KubeClient,
        lookup: Callable[[str], JSON | None],
        metrics: SchedulerMetrics,
        *,
        concurrency: int = 64,
        timeout: float = 10.0,
        identity: str = "",
        lookup_node: Callable[[str], JSON | None] | None = None,
        settle_delays: tuple[float, float] = (0.1, 5.0),
    ) -> None:
        self.identity = identity
        self.client = client
        self.lookup = lookup
        self.lookup_node = lookup_node
        self.metrics = metrics
        self.timeout = timeout
        self.settle_delays = settle_delays  # first and largest pause between read-backs
        # uid -> why the core withdrew the bind ("" when it stands); wired by the backend.
        self.withdrawn: Callable[[str], str] = lambda uid: ""
        # Why this replica may not bind now ("" when it may): with leader election, a
        # lease past its renew deadline. Checked before every send, like `withdrawn`:
        # the core runs on its own thread and may still be finishing a decision when
        # the lease goes, and a standby may already be binding.
        self.not_allowed: Callable[[str], str] = lambda node: ""
        # Pod uids this process sent a Binding for, until the watch shows them bound
        # (the intake tells our binds from another scheduler's by it).
        self.issued: set[str] = set()
        self._slots = asyncio.Semaphore(concurrency)
        self.in_flight = 0
        self.conflicts = 0  # Bindings the API server refused as conflicting (409)
        self.in_flight_nodes: Counter[str] = Counter()  # node -> Bindings sent, unanswered
        # node -> Bindings accepted and not finished (waiting for a slot, or sent): a
        # node shard is given back only once none is left for its nodes.
        self.pending_nodes: Counter[str] = Counter()
        self.settling = 0  # binds whose outcome is being read back

    def _precheck(self, pod: PodInfo, node: str) -> None:
        latest = self.lookup(pod.key)
        if latest is None:
            raise BindError(f"pod {pod.key} no longer exists")
        meta = latest.get("metadata") or {}
        if meta.get("uid") != pod.uid:
            raise BindError(f"pod {pod.key} was replaced (uid {meta.get('uid')})")
        if meta.get("deletionTimestamp"):
            raise BindError(f"pod {pod.key} is being deleted")
        bound_to = (latest.get("spec") or {}).get("nodeName")
        if bound_to:
            raise _BoundAlready(pod, str(bound_to))
        why = self.withdrawn(pod.uid) or self.not_allowed(node)
        if why:
            raise BindError(why)
        if self.lookup_node is not None:
            target = self.lookup_node(node)
            if target is None:
                raise BindError(f"node {node} no longer exists")
            if (target.get("metadata") or {}).get("deletionTimestamp"):
                raise BindError(f"node {node} is being deleted")

    async def bind(
        self, pod: PodInfo, node: str, annotations: Mapping[str, str] | None = None
    ) -> None:
        started = time.monotonic()
        result = "error"
        pending = False
        try:
            self._precheck(pod, node)
            self.pending_nodes[node] += 1
            pending = True
            async with self._slots:
                self._precheck(pod, node)  # the wait for a slot may have been long
                self.in_flight += 1
                self.in_flight_nodes[node] += 1
                try:
                    try:
                        await self._post_binding(pod, node, annotations)
                    except ApiError as err:
                        if not (err.ambiguous or err.conflict):
                            raise
                        await self._settle(pod, node, annotations, err)
                finally:
                    self.in_flight -= 1
                    self.in_flight_nodes[node] -= 1
                    if not self.in_flight_nodes[node]:
                        del self.in_flight_nodes[node]
            result = "bound"
        except BindError:
            result = "skipped"
            raise
        except ApiError as err:
            result = "conflict" if err.conflict else "gone" if err.not_found else "error"
            self.conflicts += err.conflict
            raise BindError(
                f"pod {pod.key} to {node}: {err.status} {err.reason}: {err.message}"
            ) from None
        finally:
            if pending:
                self.pending_nodes[node] -= 1
                if not self.pending_nodes[node]:
                    del self.pending_nodes[node]
            self.metrics.binds.labels(result).inc()
            self.metrics.bind_duration.labels(result).observe(time.monotonic() - started)

    async def _post_binding(
        self, pod: PodInfo, node: str, annotations: Mapping[str, str] | None
    ) -> None:
        self.issued.add(pod.uid)
        await self.client.request(
            "POST",
            PODS.path(pod.namespace, pod.name, "binding"),
            body={
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {
                    "name": pod.name,
                    "namespace": pod.namespace,
                    "uid": pod.uid,
                    # The API server copies a Binding's annotations onto the pod, in
                    # the same write as the node: who bound it, and what the core
                    # asked for (GPU device indices), with no pods/patch permission
                    # and no moment where the pod is on its node without them.
                    "annotations": {**(annotations or {}), SCHEDULED_BY: self.identity},
                },
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            },
            timeout=self.timeout,
            before_send=lambda: self._precheck(pod, node),
        )

    async def _settle(
        self,
        pod: PodInfo,
        node: str,
        annotations: Mapping[str, str] | None,
        first: ApiError,
    ) -> None:
        """The Binding's outcome is unknown (`first`): read the pod back until the
        cluster says; send the Binding again if it did not land. Returns when the pod is
        bound to `node`; raises BindError when it is not and will not be."""
        log.warning(
            "bind of pod %s to %s: outcome unknown (%s); reading it back",
            pod.key,
            node,
            first,
            extra={"pod": pod.key, "node": node, "error": str(first)},
        )
        delay, largest = self.settle_delays
        self.settling += 1
        try:
            while True:
                try:
                    latest = await self.client.request(
                        "GET", PODS.path(pod.namespace, pod.name), timeout=self.timeout
                    )
                except ApiError as err:
                    if err.not_found:
                        raise BindError(f"pod {pod.key} no longer exists") from None
                    if not err.retryable:
                        raise
                    await asyncio.sleep(delay)  # the cluster cannot say yet: keep the room
                    delay = min(largest, delay * 2)
                    continue
                meta = latest.get("metadata") or {}
                if meta.get("uid") != pod.uid:
                    raise BindError(f"pod {pod.key} was replaced (uid {meta.get('uid')})")
                bound_to = (latest.get("spec") or {}).get("nodeName")
                if bound_to == node:
                    log.info(
                        "pod %s is bound to %s (the lost answer was a success)",
                        pod.key,
                        node,
                        extra={"pod": pod.key, "node": node},
                    )
                    return
                if bound_to:
                    raise BindError(f"pod {pod.key} was bound to {bound_to}, not {node}")
                if first.conflict and not first.ambiguous:
                    # 409 on an unbound pod: the UID precondition failed (replaced).
                    raise BindError(f"pod {pod.key} to {node}: {first.message}")
                try:  # not bound: the Binding did not land; send it again
                    await self._post_binding(pod, node, annotations)
                    return
                except _BoundAlready as err:
                    if err.node == node:
                        return
                    raise
                except ApiError as err:
                    if not (err.ambiguous or err.conflict):
                        raise
                    first = err
                await asyncio.sleep(delay)
                delay = min(largest, delay * 2)
        finally:
            self.settling -= 1


class KubeEvictor:
    def __init__(
        self,
        client: KubeClient,
        events: EventRecorder,
        metrics: SchedulerMetrics,
        *,
        retries: int = 3,
        retry_delay: float = 5.0,
        concurrency: int = 64,
    ) -> None:
        self.client = client
        self.events = events
        self.metrics = metrics
        self.retries = retries
        self.retry_delay = retry_delay
        self._tasks: set[asyncio.Task[str]] = set()
        # Evictions in flight at once (as binds): a preemption wave of thousands sent at
        # once waited in the client and API server past the request timeout.
        self._slots = asyncio.Semaphore(concurrency)

    def evict(
        self, pod: PodInfo, reason: str, on_failed: Callable[[PodInfo], None] | None = None
    ) -> None:
        """Start an eviction (fire-and-forget); `on_failed` runs if it did not happen
        (refused by a budget or an error), so the core stops treating the pod as leaving."""
        task = asyncio.get_running_loop().create_task(self.evict_now(pod, reason))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if on_failed is not None:

            def done(finished: asyncio.Task[str]) -> None:
                if finished.cancelled() or finished.result() not in ("evicted", "gone"):
                    on_failed(pod)

            task.add_done_callback(done)

    async def evict_now(self, pod: PodInfo, reason: str) -> str:
        """Evict; returns `evicted`, `blocked` (by a PodDisruptionBudget), `gone` or
        `error`."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {"preconditions": {"uid": pod.uid}},
        }
        result = "error"
        for attempt in range(self.retries + 1):
            try:
                async with self._slots:
                    await self.client.request(
                        "POST", PODS.path(pod.namespace, pod.name, "eviction"), body=body
                    )
                result = "evicted"
                moved = reason.startswith(RESCHEDULED)  # a migration plan's move
                self.events.record(
                    pod_ref(pod),
                    "Normal",
                    "Rescheduled" if moved else "Preempted",
                    "Rescheduling" if moved else "Preempting",
                    reason,
                    pod.scheduler_name,
                )
                break
            except ApiError as err:
                if err.not_found or err.conflict:
                    result = "gone"
                    break
                result = "blocked" if err.status == 429 else "error"
                if not err.retryable or attempt == self.retries:
                    log.warning(
                        "evicting pod %s failed: %s",
                        pod.key,
                        err,
                        extra={"pod": pod.key, "error": str(err)},
                    )
                    self.events.record(
                        pod_ref(pod),
                        "Warning",
                        "EvictionFailed",
                        "Preempting",
                        f"{reason}: eviction refused: {err.message}",
                        pod.scheduler_name,
                    )
                    break
                await asyncio.sleep(self.retry_delay)
        self.metrics.evictions.labels(result).inc()
        return result
