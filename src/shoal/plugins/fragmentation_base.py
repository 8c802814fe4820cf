"""Shared machinery of the fragmentation-driven GPU policies (GpuFragmentation and
GpuFragBlend): plugin args (the target workload), learning the workload online when none
is given, the cached scorer and the device plans of GPU shares. Not a plugin itself.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from shoal.api.dra import pod_claim_names
from shoal.api.gpu import GpuRequest
from shoal.api.podinfo import PodInfo
from shoal.cache.dra import SERVICE_KEY as DRA_SERVICE
from shoal.cache.dra import DeviceCatalog
from shoal.cache.gpu_devices import GpuDevices, request_of
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.types import MAX_NODE_SCORE, Candidates
from shoal.gpu.dra_gpus import DraGpuView, dra_gpu_request
from shoal.gpu.fragmentation import (
    FragmentationModel,
    FragScorer,
    StateClasses,
    TargetShape,
    TargetWorkload,
)

__all__ = [
    "FragmentationPolicy",
    "GpuFragmentationArgs",
    "TargetShapeArgs",
    "pod_shape",
]


class _Args(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class TargetShapeArgs(_Args):
    """One task shape of the target workload (`weight`: its popularity, e.g. a count)."""

    cpu_milli: int = Field(ge=0)
    gpu_milli: int = Field(default=0, ge=0, le=1000)
    gpu_count: int = Field(default=0, ge=0)
    models: list[str] = Field(default_factory=list)
    memory_mib: int = Field(default=0, ge=0)
    weight: float = Field(default=1.0, ge=0)

    def shape(self) -> TargetShape:
        return TargetShape(
            self.cpu_milli,
            self.gpu_milli,
            self.gpu_count,
            tuple(sorted(self.models)),
            self.memory_mib * 2**20,
        )


class GpuFragmentationArgs(_Args):
    target_workload: list[TargetShapeArgs] = Field(default_factory=list)
    coverage: float = Field(default=0.95, gt=0, le=1)

    def workload(self) -> TargetWorkload | None:
        if not self.target_workload:
            return None
        return TargetWorkload.from_weights((t.shape(), t.weight) for t in self.target_workload)


def pod_shape(pod: PodInfo, request: GpuRequest, memory: bool = False) -> TargetShape:
    """The pod as a task shape (cpu as kube scores it: 100m when unset)."""
    models = tuple(sorted(request.models)) if request.models else ()
    mem = int(pod.requests.get("memory", 0)) if memory else 0
    return TargetShape(int(pod.nonzero[0]), request.milli, request.count, models, mem)


class FragmentationPolicy:
    """Shared machinery of the fragmentation-driven policies: target workload (given or
    learned), the cached scorer, and device plans for GPU shares."""

    measure = "fgd"
    use_memory = False

    def __init__(self, handle: Handle, args: GpuFragmentationArgs) -> None:
        self.handle = handle
        self.devices = GpuDevices.of(handle)
        self.args = args
        workload = args.workload()
        self._learning = workload is None
        self._seen: Counter[TargetShape] = Counter()
        self._refit_at = 1
        # Node state ids, kept across refits (each refit builds a new scorer).
        self.state_classes = StateClasses()
        self.scorer = self._scorer(workload or TargetWorkload((), ()))

    def _scorer(self, workload: TargetWorkload) -> FragScorer:
        model = FragmentationModel(workload, self.devices.models, self.measure)
        return FragScorer(
            self.devices, self.handle.snapshot, model, self.score_of, self.state_classes
        )

    def score_of(self, gain: NDArray[np.float64]) -> NDArray[np.int64]:
        raise NotImplementedError

    def _learn(self, shape: TargetShape) -> None:
        self._seen[shape] += 1
        total = self._seen.total()
        if total >= self._refit_at:
            self._refit_at = total * 2
            self.scorer = self._scorer(TargetWorkload.from_counts(self._seen, self.args.coverage))

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        request, view = self.gpu_request(state, pod)
        if not request and not pod.requests:
            return np.full(nodes.size, MAX_NODE_SCORE, dtype=np.int64)
        shape = pod_shape(pod, request, self.use_memory)
        if self._learning:
            self._learn(shape)
        per_device = request.shared and request.count == 1
        rows = nodes.rows
        scores, devices = self.gpu_scores(rows, shape, per_device, view, pod.uid)
        if per_device:
            self.devices.plan(pod.uid, rows, devices)
        return scores

    def gpu_request(self, state: CycleState, pod: PodInfo) -> tuple[GpuRequest, DraGpuView | None]:
        """The pod's GPU request, and the GPUs published through DRA when there are
        any: a pod asking for none through `nvidia.com/gpu` or annotations may ask for
        them through its ResourceClaims (`shoal.gpu.dra_gpus`)."""
        request = request_of(state, pod)
        catalog = self.handle.services.get(DRA_SERVICE)
        if not isinstance(catalog, DeviceCatalog) or not catalog.classes:
            return request, None
        view = DraGpuView.of(catalog)
        if view is None:
            return request, None
        if not request and (pod.pod.spec.resource_claims or catalog.extended_key(pod)):
            keys = [u.key for u in pod_claim_names(pod.pod) if u.key]
            claims = [catalog.claims[k] for k in keys if k in catalog.claims]
            request = dra_gpu_request(claims, catalog, view)
        return request, view

    def _model_codes(
        self, rows: NDArray[np.intp], use: NDArray[np.bool_], view: DraGpuView
    ) -> NDArray[np.int64]:
        """Model codes of the rows (in the device table's model list): a node's model
        label where it has one, else on DRA rows the model of its first DRA GPU."""
        devices = self.devices
        codes = (
            devices.model[rows].astype(np.int64)
            if devices.model.size
            else np.full(rows.size, -1, dtype=np.int64)
        )
        unknown = np.flatnonzero(use & (codes < 0))
        if unknown.size:
            first = view.device_matrix(rows[unknown])
            if first.shape[1]:
                position = {int(d): i for i, d in enumerate(view.device.tolist())}
                for j, device in zip(unknown.tolist(), first[:, 0].tolist(), strict=True):
                    if device >= 0:
                        codes[j] = devices.register_model(view.model[position[device]])
        return codes

    def gpu_scores(
        self,
        rows: NDArray[np.intp],
        shape: TargetShape,
        per_device: bool,
        view: DraGpuView | None,
        pod_uid: str = "",
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(score, device) per row. Rows whose GPUs are published through DRA (none in
        their allocatable) are scored on those devices' state, afresh; the others from
        the device table, cached. The device is -1 on DRA rows: DynamicResources picks
        the device there."""
        if view is not None:
            on_dra = np.isin(rows, view.row)
            devices = self.devices
            listed = devices.count[rows] > 0 if devices.count.size else np.zeros(rows.size, bool)
            use = on_dra & ~listed
            if use.any():
                dra_free = view.free_matrix(rows)
                native = devices.free[rows] if devices.free.size else np.zeros((rows.size, 0))
                width = max(dra_free.shape[1], native.shape[1])
                merged = np.zeros((rows.size, width), dtype=np.int64)
                merged[:, : native.shape[1]] = native
                merged[use] = 0
                merged[use, : dra_free.shape[1]] = dra_free[use]
                model = self._model_codes(rows, use, view)
                states = self.scorer.with_free(rows, merged, model)
                scores, chosen = self.scorer.score_states(states, shape, per_device)
                if per_device and pod_uid:
                    # The share's device on DRA rows: DynamicResources tries it first.
                    table_index = view.device_matrix(rows)
                    picked = np.where(
                        use & (chosen >= 0) & (chosen < table_index.shape[1]),
                        table_index[np.arange(rows.size), np.clip(chosen, 0, None)]
                        if table_index.shape[1]
                        else -1,
                        -1,
                    )
                    view_catalog = self.handle.services.get(DRA_SERVICE)
                    if isinstance(view_catalog, DeviceCatalog):
                        view_catalog.prefer(pod_uid, rows[picked >= 0], picked[picked >= 0])
                return scores, np.where(use, -1, chosen)
        return self.scorer.score(rows, shape, per_device)
