"""`shoal extender`: Shoal's policies as an HTTP extender for a stock kube-scheduler.

kube-scheduler keeps scheduling (its queue, its plugins, preemption); for each pod it
POSTs to this server (wire types in `shoal.api.extender`):

* `filter`: the nodes that passed kube-scheduler's own filters; Shoal runs its profile's
  PreFilter and Filter on them, against its own cache of the cluster (informers: nodes,
  bound pods with their GPU devices, queues, PodGroups, ...), not against what the
  request says. So a GPU share fits only where a device has enough free milli-GPU
  (GpuShare), a gang member is refused while its gang cannot start (Coscheduling's
  PreFilter: too few members, minResources beyond the free capacity), a pod is refused
  while its queue is at its maximum (QueueCapacity). Node-level reasons come back as
  FailedNodes, UnschedulableAndUnresolvable ones as FailedAndUnresolvableNodes (kube's
  preemption then leaves those nodes alone); a PreFilter rejection applies to every node.
* `prioritize`: Shoal's PreScore and Score (e.g. GpuFragmentation, FGD) on the nodes,
  the totals mapped onto the extender range 0..10 so that Shoal's best node gets 10
  and its worst 0 (kube-scheduler multiplies by the extender's weight and by 10).
* `bind`: only for pods of the profiles' schedulerNames (it binds with Shoal's
  credentials); the node kube-scheduler chose is checked once more (PreFilter, Filter) and
  scored, so the GPU policy plans the devices; the pod is assumed in Shoal's cache
  (Reserve), then bound with `shoal.dev/gpu-index` carried in the Binding (the API server
  copies it onto the pod), exactly as `shoal run` binds. A bind that fails is undone and reported in
  `Error`; kube-scheduler then retries the pod.

What cannot be done per pod is not pretended: a gang is not placed all-or-nothing
(kube-scheduler binds its members one by one; the filter only refuses members while the
gang cannot start), and queue reclaim and fair-share ordering need Shoal's own queue
(`shoal run`).

Assumed pods: kube-scheduler assumes its choice in its own cache before binding; Shoal
learns of it at the bind call. Between a pod's prioritize and its bind, another pod's
filter may still see the devices free; the bind re-checks and refuses if they were
taken, so a device is never handed out twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np
from aiohttp import web

from shoal.api.errors import ManifestError
from shoal.api.extender import (
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    HostPriority,
    NodeList,
    decode_wire,
    encode_wire,
)
from shoal.api.gpu import ANNOTATION_GPU_INDEX, format_gpu_index
from shoal.api.manifests import decode
from shoal.api.objects import Pod
from shoal.api.podinfo import PodInfo, pod_key
from shoal.cache.transaction import Transaction
from shoal.drivers.kube.backend import KubeBackend
from shoal.drivers.kube.resources import PODS
from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import Diagnosis
from shoal.framework.effects import BindError
from shoal.framework.runtime import Framework
from shoal.framework.status import Code
from shoal.framework.types import Candidates

__all__ = ["ExtenderService", "scale_scores"]

log = logging.getLogger("shoal.extender")


def scale_scores(totals: np.ndarray) -> list[int]:
    """Shoal's total scores onto 0..MAX_EXTENDER_PRIORITY: the best node gets the
    maximum, the worst 0, the others in proportion (all the maximum when equal)."""
    if not totals.size:
        return []
    low, high = float(totals.min()), float(totals.max())
    if high == low:
        return [MAX_EXTENDER_PRIORITY] * int(totals.size)
    scaled = (totals.astype(np.float64) - low) * MAX_EXTENDER_PRIORITY / (high - low)
    # Rounded down, so only the best node(s) reach the maximum.
    return [int(v) for v in np.floor(scaled + 1e-9)]


class ExtenderService:
    """The verbs, over a passive `KubeBackend` (its informers keep the cache)."""

    def __init__(self, backend: KubeBackend) -> None:
        self.backend = backend
        self.scheduler = backend.scheduler
        self.calls: dict[str, int] = {}

    # ---- helpers ---------------------------------------------------------------------

    def _framework(self, info: PodInfo) -> Framework:
        profiles = self.scheduler.profiles
        return profiles.get(info.scheduler_name) or next(iter(profiles.values()))

    def _pod(self, raw: dict[str, Any] | None) -> PodInfo:
        if raw is None:
            raise ValueError("the request has no Pod")
        pod = decode(raw, Pod)
        info = self.scheduler.pod_info(pod)
        # The cache's copy knows the pod's group and queue (it came through the informer).
        known = self.scheduler.known_pod(info.uid)
        return known if known is not None and not known.node_name else info

    @staticmethod
    def _names(args: ExtenderArgs) -> list[str]:
        if args.node_names is not None:
            return list(args.node_names)
        items = (args.nodes.items if args.nodes is not None else None) or []
        names = []
        for item in items:
            meta = item.get("metadata")
            names.append(str(meta.get("name", "")) if isinstance(meta, dict) else "")
        return names

    def _rows(self, names: list[str]) -> tuple[np.ndarray, list[str]]:
        row_of = self.scheduler.cluster.table.row_of
        known = [n for n in names if n in row_of]
        missing = [n for n in names if n not in row_of]
        rows = np.array(sorted(row_of[n] for n in known), dtype=np.intp)
        return rows, missing

    # ---- filter ----------------------------------------------------------------------

    def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        info = self._pod(args.pod)
        names = self._names(args)
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        passed: list[str] = []
        self.scheduler.snapshot.refresh()
        fwk = self._framework(info)
        gate = fwk.run_pre_enqueue(info)
        if not gate.ok:
            # Shoal would not even try the pod yet (an incomplete gang, a missing
            # PodGroup or dependency): no node will do until that changes.
            why = f"pod is gated by {gate.plugin}: {gate.message}" if gate.plugin else gate.message
            return self._filtered(args, [], {}, dict.fromkeys(names, why))
        state = CycleState()
        pre, status = fwk.run_pre_filter(state, info)
        if not status.ok:
            if not status.rejected:
                return ExtenderFilterResult(error=f"{info.key}: {status.message}")
            hopeless = status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            target = unresolvable if hopeless else failed
            for name in names:
                target[name] = status.message
            return self._filtered(args, [], failed, unresolvable)
        rows, missing = self._rows(names)
        for name in missing:
            failed[name] = "node is not in Shoal's cache (yet)"
        if pre is not None and pre.node_names is not None:
            allowed = set(pre.node_names)
            plugins = " ".join(sorted(pre.plugins))
            names_of = self.scheduler.snapshot.names
            keep = np.array([str(names_of[r]) in allowed for r in rows], dtype=bool)
            for r in rows[~keep]:
                unresolvable[str(names_of[r])] = f"node(s) didn't satisfy plugin(s) [{plugins}]"
            rows = rows[keep]
        if rows.size:
            candidates = Candidates.of(rows)
            outcome = fwk.run_filters(state, info, candidates)
            diagnosis = Diagnosis.from_filters(len(names), candidates, outcome.results)
            names_of = self.scheduler.snapshot.names
            hopeless_rows = diagnosis.unresolvable
            for i, row in enumerate(rows):
                name = str(names_of[row])
                if outcome.passed[i]:
                    passed.append(name)
                    continue
                reason = ", ".join(diagnosis.node_reasons[i]) or (
                    f"rejected by {diagnosis.rejected_by[i]}"
                )
                if hopeless_rows is not None and hopeless_rows[i]:
                    unresolvable[name] = reason
                else:
                    failed[name] = reason
        order = {n: i for i, n in enumerate(names)}
        passed.sort(key=lambda n: order.get(n, 0))
        return self._filtered(args, passed, failed, unresolvable)

    @staticmethod
    def _filtered(
        args: ExtenderArgs,
        passed: list[str],
        failed: dict[str, str],
        unresolvable: dict[str, str],
    ) -> ExtenderFilterResult:
        result = ExtenderFilterResult(
            failed_nodes=failed, failed_and_unresolvable_nodes=unresolvable
        )
        if args.node_names is not None:
            result.node_names = passed
        else:
            keep = set(passed)
            items = (args.nodes.items if args.nodes is not None else None) or []
            result.nodes = NodeList(
                items=[i for i in items if (i.get("metadata") or {}).get("name") in keep]
            )
        return result

    # ---- prioritize ------------------------------------------------------------------

    def prioritize(self, args: ExtenderArgs) -> list[HostPriority]:
        info = self._pod(args.pod)
        names = self._names(args)
        self.scheduler.snapshot.refresh()
        fwk = self._framework(info)
        rows, missing = self._rows(names)
        out = [HostPriority(host=name, score=0) for name in missing]
        if not rows.size:
            return out
        state = CycleState()
        _, status = fwk.run_pre_filter(state, info)
        candidates = Candidates.of(rows)
        if status.ok:
            status = fwk.run_pre_score(state, info, candidates)
        if not status.ok:
            # Nothing to say about this pod: no preference among the nodes.
            return out + [HostPriority(host=n, score=0) for n in names if n not in missing]
        totals = np.asarray(fwk.run_score(state, info, candidates))
        names_of = self.scheduler.snapshot.names
        for row, score in zip(rows, scale_scores(totals), strict=True):
            out.append(HostPriority(host=str(names_of[row]), score=score))
        return out

    # ---- bind ------------------------------------------------------------------------

    async def _bound_pod(self, args: ExtenderBindingArgs) -> PodInfo:
        key = pod_key(args.pod_namespace, args.pod_name)
        raw = self.backend.lookup_pod(key)
        if raw is None or str((raw.get("metadata") or {}).get("uid", "")) != args.pod_uid:
            # kube-scheduler's informer may be ahead of ours: ask the API server.
            raw = await self.backend.client.request(
                "GET", PODS.path(args.pod_namespace or "default", args.pod_name)
            )
        if str((raw.get("metadata") or {}).get("uid", "")) != args.pod_uid:
            raise ValueError(f"pod {key} has another UID than {args.pod_uid!r}: it was recreated")
        info = self.scheduler.pod_info(decode(raw, Pod))
        known = self.scheduler.known_pod(info.uid)
        return known if known is not None and not known.node_name else info

    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        node = args.node
        try:
            info = await self._bound_pod(args)
        except (ValueError, ManifestError) as err:
            return ExtenderBindingResult(error=str(err))
        except Exception as err:  # the API server could not be asked
            return ExtenderBindingResult(error=f"cannot read pod: {err}")
        if info.node_name:
            return ExtenderBindingResult(
                error=f"pod {info.key} is already bound to {info.node_name}"
            )
        if not self.scheduler.is_ours(info):
            # Binding is done with Shoal's credentials: only for the schedulers it
            # serves (the profiles' schedulerNames), never for whoever asks.
            served = ", ".join(sorted(self.scheduler.profiles))
            return ExtenderBindingResult(
                error=f"pod {info.key} has schedulerName {info.scheduler_name!r}, not one of "
                f"this extender's profiles ({served}): not bound"
            )
        cluster = self.scheduler.cluster
        row = cluster.table.row_of.get(node)
        if row is None:
            return ExtenderBindingResult(error=f"node {node} is not in Shoal's cache")
        self.scheduler.snapshot.refresh()
        fwk = self._framework(info)
        state = CycleState()
        one = Candidates.of(np.array([row], dtype=np.intp))
        _, status = fwk.run_pre_filter(state, info)
        if status.ok:
            outcome = fwk.run_filters(state, info, one)
            if not outcome.passed[0]:
                diagnosis = Diagnosis.from_filters(1, one, outcome.results)
                reasons = ", ".join(diagnosis.node_reasons[0]) or "rejected by Shoal's filters"
                return ExtenderBindingResult(
                    error=f"pod {info.key} no longer fits {node}: {reasons}"
                )
            # Scoring the one node lets the GPU policy plan the devices the pod takes.
            if fwk.run_pre_score(state, info, one).ok:
                fwk.run_score(state, info, one)
        elif status.rejected:
            return ExtenderBindingResult(error=f"pod {info.key}: {status.message}")
        with Transaction(cluster) as tx:
            tx.assume(info, node)
            status = fwk.run_reserve(state, info, node)
            if not status.ok:
                fwk.run_unreserve(state, info, node)
                tx.discard()
                return ExtenderBindingResult(
                    error=f"pod {info.key} cannot be reserved on {node}: {status.message}"
                )
            tx.commit()
        devices = cluster.gpu_devices
        held = devices.devices_of(info.uid) if devices is not None else None
        annotations = {ANNOTATION_GPU_INDEX: format_gpu_index(held)} if held else {}
        try:
            await self.backend.effects.bind(info, node, annotations)
        except BindError as err:
            fwk.run_unreserve(state, info, node)
            cluster.forget(info)
            return ExtenderBindingResult(error=str(err))
        cluster.confirm(info.uid)
        log.info(
            "bound pod %s to %s%s",
            info.key,
            node,
            f" with GPU devices {format_gpu_index(held)}" if held else "",
            extra={"pod": info.key, "node": node},
        )
        return ExtenderBindingResult()

    # ---- HTTP ------------------------------------------------------------------------

    def app(self, prefix: str = "", middlewares: Sequence[Any] = ()) -> web.Application:
        """The verbs under `prefix`; `middlewares` (client certificates, authorization:
        `shoal.servers.auth`) run before each."""
        app = web.Application(client_max_size=256 * 1024 * 1024, middlewares=middlewares)
        base = prefix.rstrip("/")
        app.router.add_post(f"{base}/filter", self._route("filter", ExtenderArgs, self.filter))
        app.router.add_post(
            f"{base}/prioritize", self._route("prioritize", ExtenderArgs, self.prioritize)
        )
        app.router.add_post(f"{base}/bind", self._bind_route)
        return app

    def _route(
        self, verb: str, kind: type[ExtenderArgs], handler: Callable[[ExtenderArgs], object]
    ) -> Callable[[web.Request], Any]:
        async def serve(request: web.Request) -> web.Response:
            self.calls[verb] = self.calls.get(verb, 0) + 1
            body = await request.read()
            try:
                args = decode_wire(body, kind)
            except (msgspec.DecodeError, msgspec.ValidationError) as err:
                return web.Response(status=400, text=f"{verb}: unreadable request: {err}")
            if not self.backend.synced:
                return web.Response(status=503, text="Shoal's caches are not synced yet")
            try:
                answer = handler(args)
            except (ValueError, ManifestError) as err:
                if verb == "filter":
                    answer = ExtenderFilterResult(error=str(err))
                else:
                    return web.Response(status=400, text=f"{verb}: {err}")
            return web.Response(body=encode_wire(answer), content_type="application/json")

        return serve

    async def _bind_route(self, request: web.Request) -> web.Response:
        self.calls["bind"] = self.calls.get("bind", 0) + 1
        try:
            args = decode_wire(await request.read(), ExtenderBindingArgs)
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            return web.Response(status=400, text=f"bind: unreadable request: {err}")
        if not self.backend.synced:
            answer = ExtenderBindingResult(error="Shoal's caches are not synced yet")
        else:
            answer = await self.bind(args)
        if answer.error:
            log.warning("bind failed: %s", answer.error, extra={"node": args.node})
        return web.Response(body=encode_wire(answer), content_type="application/json")
