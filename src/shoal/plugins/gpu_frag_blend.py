"""GpuFragBlend (Score): fragmentation-aware placement that also sees cpu and memory.

(Experimental variant knobs are plugin args; see docs/gpu-sharing.md for the policy.)
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from shoal.framework.handle import Handle
from shoal.framework.types import MAX_NODE_SCORE
from shoal.plugins.fragmentation_base import FragmentationPolicy, GpuFragmentationArgs

__all__ = ["NAME", "GpuFragBlend", "GpuFragBlendArgs"]

NAME = "GpuFragBlend"


class GpuFragBlendArgs(GpuFragmentationArgs):
    measure: Literal["fgd", "fill", "blend", "blend-gpu", "blend-cpu"] = "blend"
    memory: bool = True
    temperature: float = Field(default=1000.0, gt=0)
    exact_device: bool = False
    mix: tuple[int, int] = (1, 1)
    lex: bool = False
    split: bool = False


class GpuFragBlend(FragmentationPolicy):
    name = NAME

    def __init__(self, handle: Handle, args: GpuFragBlendArgs) -> None:
        self.measure = args.measure
        self.use_memory = args.memory
        self.temperature = args.temperature
        self.exact_device = args.exact_device
        super().__init__(handle, args)

    def _scorer(self, workload):  # type: ignore[no-untyped-def]
        from shoal.state.gpu_frag import FragmentationModel, FragScorer

        model = FragmentationModel(workload, self.devices.models, self.measure, self.args.mix)  # type: ignore[attr-defined]
        scorer = FragScorer(self.devices, self.handle.snapshot, model, self.score_of)
        scorer.exact_device = self.exact_device
        return scorer

    def score(self, state, pod, nodes):  # type: ignore[no-untyped-def]
        if self.args.split:  # type: ignore[attr-defined]
            from shoal.state.gpu_devices import request_of
            from shoal.state.gpu_frag import FragmentationModel, FragScorer

            if not hasattr(self, "_fgd_scorer"):
                wl = self.scorer.model.workload
                self._fgd_scorer = FragScorer(
                    self.devices,
                    self.handle.snapshot,
                    FragmentationModel(wl, self.devices.models, "fgd"),
                    self.score_of,
                )
                self._blend_scorer = self.scorer
            request = request_of(state, pod)
            self.scorer = self._blend_scorer if not request else self._fgd_scorer
            return super().score(state, pod, nodes)
        if not self.args.lex:  # type: ignore[attr-defined]
            return super().score(state, pod, nodes)
        from shoal.plugins.fragmentation_base import pod_shape
        from shoal.state.gpu_devices import request_of
        from shoal.state.gpu_frag import FragmentationModel, FragScorer, best_per_row

        if not hasattr(self, "_fill"):
            wl = self.scorer.model.workload
            self._fgd = FragScorer(
                self.devices,
                self.handle.snapshot,
                FragmentationModel(wl, self.devices.models, "fgd"),
                self.score_of,
            )
            self._fill = FragScorer(
                self.devices,
                self.handle.snapshot,
                FragmentationModel(wl, self.devices.models, "fill"),
                self.score_of,
            )
        request = request_of(state, pod)
        shape = pod_shape(pod, request, self.use_memory)
        per_device = request.shared and request.count == 1
        rows = nodes.rows
        pos, dev, g1 = self._fgd.gains(rows, shape, per_device)
        _, _, g2 = self._fill.gains(rows, shape, per_device)
        s1 = self.score_of(g1)
        key = s1 * 10**9 + np.round(g2).astype(np.int64) + 10**8
        bestkey, device = best_per_row(len(rows), pos, dev, key)
        if per_device:
            self.devices.plan(pod.uid, rows, device)
        top = bestkey // 10**9
        out = top.copy()
        m = top.max()
        sel = top == m
        out[sel & (bestkey < bestkey[sel].max())] = max(m - 1, 0)
        return out

    def score_of(self, gain: NDArray[np.float64]) -> NDArray[np.int64]:
        sig = 1.0 / (1.0 + np.exp(-gain / self.temperature))
        return (sig * MAX_NODE_SCORE).astype(np.int64)

    @classmethod
    def new(cls, args: GpuFragBlendArgs | None, handle: Handle) -> GpuFragBlend:
        return cls(handle, args or GpuFragBlendArgs())
