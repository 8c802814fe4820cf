"""GpuShare (PreFilter, Filter, Reserve): device-level GPU feasibility.

A pod asking for `count` devices with `milli` milli-GPU each (see `shoal.api.gpu`) fits a
node whose model is allowed and which has `count` devices with at least `milli` free each:
a GPU share needs one device with enough free milli, a k-GPU pod k fully free devices.

The devices are picked when the pod is assumed on the chosen node (`GpuDevices`, following
the plan of the GPU placement policy that scored the node); Reserve checks that it got
them; the core writes them on the pod with its binding as `shoal.dev/gpu-index: "0,3"`
(through the effects port, in every profile), so that the device plugin on the node
can expose exactly those devices and a restarted scheduler reads them back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import GpuRequest, GpuRequestError, pod_gpu_request
from shoal.api.podinfo import PodInfo
from shoal.api.resources import GPU
from shoal.cache.dra import SERVICE_KEY as DRA_SERVICE
from shoal.cache.dra import DeviceCatalog
from shoal.cache.gpu_devices import GpuDevices, remember_request, request_of
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    Failure,
    FilterResult,
    PreFilterResult,
)

__all__ = [
    "NAME",
    "REASON_MEMORY",
    "REASON_MODEL",
    "REASON_NO_GPU",
    "REASON_NO_MEMORY",
    "REASON_SHARE",
    "REASON_WHOLE",
    "GpuShare",
]

NAME = "GpuShare"
REASON_NO_GPU = "node(s) didn't have any GPU"
REASON_MODEL = "node(s) didn't have the requested GPU model"
REASON_SHARE = "Insufficient GPU milli on any single device"
REASON_WHOLE = "Insufficient free GPU devices"
REASON_MEMORY = "Insufficient GPU memory on any single device"
REASON_BLOCKED = (
    "Insufficient GPU on any usable device (devices registered unhealthy or at their "
    "vGPU split count take no more pods)"
)
REASON_NO_MEMORY = "node(s) didn't report GPU memory per device"


class GpuShare:
    name = NAME
    # Optimistic workers may decide with it: its verdict reads only the node's row and
    # the pod (shoal.scheduler.optimistic).
    row_local = True
    # Its verdict on a node depends only on that node's pods and only improves as pods
    # leave: preemption may judge all candidate nodes at once (shoal.preemption).
    preemption_local = True

    def __init__(self, handle: Handle) -> None:
        # The device table is the cache's (created with the first node that has GPUs),
        # read when a GPU pod is filtered: a profile with GpuShare costs a cluster
        # without GPUs nothing but PreFilter's look at the pod's annotations.
        self.handle = handle

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        try:
            request = pod_gpu_request(pod)
        except GpuRequestError as err:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, f"invalid GPU request: {err}")
        remember_request(state, pod, request)
        if not request:
            return None, Status(Code.SKIP)
        return None, Status()

    def _to_dra(self, pod: PodInfo, request: GpuRequest) -> bool:
        """Whole GPUs asked for through the `nvidia.com/gpu` resource, which a
        DeviceClass stands for: on a node whose allocatable lists no GPU,
        DynamicResources allocates DRA devices for them (KEP-5004), not this plugin."""
        if request.shared or pod.requests.get(GPU, 0) != request.count:
            return False
        catalog = self.handle.services.get(DRA_SERVICE)
        return isinstance(catalog, DeviceCatalog) and GPU in catalog.extended_mapping()

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        request = request_of(state, pod)
        devices = self.handle.snapshot.gpu_devices
        to_dra = self._to_dra(pod, request)
        if devices is None:  # no node lists a GPU
            if to_dra:
                return FilterResult(np.ones(nodes.size, dtype=bool))
            none = np.zeros(nodes.size, dtype=bool)
            return FilterResult(
                none, [Failure(REASON_NO_GPU, ~none, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)]
            )
        idx = nodes.index
        count = devices.count[idx]
        enough = devices.enough(request, idx)
        if self.handle.snapshot.nominations:
            enough = self._leave_room_for_nominated(pod, request, devices, nodes, enough)
        has_gpu = count > 0
        allowed = devices.model_allowed(request, idx)
        passed = enough & has_gpu
        if allowed is not None:
            passed &= allowed
        if to_dra:
            passed |= ~has_gpu  # DynamicResources judges those nodes
            has_gpu = np.ones_like(has_gpu)
        if passed.all():
            return FilterResult(passed)
        failures = []
        no_gpu = ~has_gpu
        if no_gpu.any():
            failures.append(Failure(REASON_NO_GPU, no_gpu, Code.UNSCHEDULABLE_AND_UNRESOLVABLE))
        wrong_model = has_gpu & ~allowed if allowed is not None else np.zeros_like(has_gpu)
        if wrong_model.any():
            failures.append(Failure(REASON_MODEL, wrong_model, Code.UNSCHEDULABLE_AND_UNRESOLVABLE))
        no_memory = (
            has_gpu & ~wrong_model & (devices.mem[idx] <= 0)
            if request.memory
            else np.zeros_like(has_gpu)
        )
        if no_memory.any():
            failures.append(
                Failure(REASON_NO_MEMORY, no_memory, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
            )
        short = has_gpu & ~wrong_model & ~no_memory & ~enough
        if devices.blocked_devices and short.any():
            # Nodes whose device plugin keeps some devices from new pods are told so.
            blocked = short & devices.blocked[idx].any(axis=1)
            if blocked.any():
                failures.append(Failure(REASON_BLOCKED, blocked, Code.UNSCHEDULABLE))
                short &= ~blocked
        if short.any():
            if request.memory:
                reason = REASON_MEMORY
            else:
                reason = REASON_SHARE if request.shared else REASON_WHOLE
            failures.append(Failure(reason, short, Code.UNSCHEDULABLE))
        return FilterResult(passed, failures)

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        request = request_of(state, pod)
        if not request:
            return Status()
        devices = self.handle.snapshot.gpu_devices
        held = devices.devices_of(pod.uid) if devices is not None else None
        if not held:
            row = self.handle.snapshot.row_of.get(node)
            listed = devices is not None and row is not None and int(devices.count[row]) > 0
            if not listed and self._to_dra(pod, request):
                return Status()  # DRA devices, allocated by DynamicResources
            return Status(Code.UNSCHEDULABLE, f"no GPU device on {node} can hold the pod")
        return Status()

    def _leave_room_for_nominated(
        self,
        pod: PodInfo,
        request: GpuRequest,
        devices: GpuDevices,
        nodes: Candidates,
        enough: NDArray[np.bool_],
    ) -> NDArray[np.bool_]:
        """Nominated GPU pods (preemptors waiting for the devices they freed) keep their
        devices from pods of lower or equal priority, as kube's addNominatedPods does for
        resources: otherwise a lower-priority pod (a victim's re-created replacement)
        takes a freed device back before the preemptor's retry, and preemption repeats
        forever. On a row with nominated GPU pods, the pod passes only if, after it takes
        the devices the cache would give it (`GpuDevices.choice_in` on the real free
        milli: the tightest fit), every nominated pod still finds its devices; while
        their victims still hold the devices, that is never (the node looks full, as in
        kube)."""
        rows = nodes.rows
        by_row = devices.nominated(pod) if devices.nominated is not None else {}
        if not by_row:
            return enough
        enough = enough.copy()
        positions = {int(r): i for i, r in enumerate(rows)} if len(by_row) > 8 else None
        for row, nominated in by_row.items():
            if positions is not None:
                at = positions.get(row)
            else:
                found = np.flatnonzero(rows == row)
                at = int(found[0]) if found.size else None
            if at is None or not enough[at]:
                continue
            free = devices.free[row, : devices.count[row]]
            taken = devices.choice_in(row, free, request)
            enough[at] = devices.leaves_room(row, taken, request, nominated)
        return enough

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        # The devices go back when the scheduler forgets the assumed pod (pod_unplaced).
        return None

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE),
            ClusterEvent(
                EventResource.NODE,
                ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE | ActionType.UPDATE_NODE_LABEL,
            ),
        ]

    @classmethod
    def new(cls, args: Any, handle: Handle) -> GpuShare:
        return cls(handle)
