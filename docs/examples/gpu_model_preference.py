"""GpuModelPreference: a complete out-of-tree Shoal plugin (PreFilter, Filter, PreScore, Score).

* A pod may require GPU models with the annotation
  `example.com/gpu-models: "NVIDIA-H100-80GB-HBM3,NVIDIA-A100-SXM4-80GB"`. PreFilter
  parses it once per cycle (Skip when the pod has none, which switches Filter off);
  Filter keeps the nodes whose model label is one of them.
* Score ranks feasible nodes by the order of the `preferredModels` arg, for pods that
  request `nvidia.com/gpu`; PreScore returns Skip for the others.

Filter and Score read the snapshot's integer-coded label column for every candidate node
at once: no Python loop over nodes. This file is the example of docs/plugin-authoring.md
and is run by tests/docs/test_plugin_example.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from shoal.api.podinfo import PodInfo
from shoal.framework import (
    MAX_NODE_SCORE,
    ActionType,
    Candidates,
    ClusterEvent,
    Code,
    CycleState,
    EventResource,
    FilterResult,
    Handle,
    PluginSpec,
    PreFilterResult,
    Status,
)

NAME = "GpuModelPreference"
ANNOTATION = "example.com/gpu-models"
GPU = "nvidia.com/gpu"
REASON = "node(s) didn't have a requested GPU model"
_STATE_KEY = "PreFilter" + NAME  # CycleState keys are private to the plugin


class GpuModelPreferenceArgs(BaseModel):
    """pluginConfig args. camelCase in YAML; unknown fields are errors."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    label_key: str = Field(default="nvidia.com/gpu.product", min_length=1)
    """The node label holding the GPU model (GPU feature discovery sets this one)."""
    preferred_models: list[str] = Field(default_factory=list)
    """Models from most to least preferred; unlisted models score 0."""

    @field_validator("preferred_models")
    @classmethod
    def _unique(cls, models: list[str]) -> list[str]:
        duplicates = sorted({m for m in models if models.count(m) > 1})
        if duplicates:
            raise ValueError(f"models listed more than once: {duplicates}")
        return models


class GpuModelPreference:
    name = NAME

    def __init__(self, handle: Handle, args: GpuModelPreferenceArgs) -> None:
        self.handle = handle
        self.label_key = args.label_key
        # Score per preferred model: 100 for the first, evenly lower for the next ones.
        n = len(args.preferred_models)
        self.model_scores = {
            model: MAX_NODE_SCORE * (n - rank) // n
            for rank, model in enumerate(args.preferred_models)
        }

    # ---- PreFilter / Filter ------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        raw = pod.pod.metadata.annotations.get(ANNOTATION)
        if raw is None:
            return None, Status(Code.SKIP)  # nothing to check: Filter is not called
        models = tuple(m.strip() for m in raw.split(",") if m.strip())
        if not models:
            # Rejects the pod on every node, before any Filter runs.
            return None, Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE, f"annotation {ANNOTATION} names no GPU model"
            )
        state.write(_STATE_KEY, models)
        return None, Status()

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        models: tuple[str, ...] = state.read(_STATE_KEY)
        labels = self.handle.snapshot.labels
        codes = labels.column(self.label_key, nodes.index)  # one int code per candidate
        wanted = labels.value_codes(self.label_key, list(models))
        passed = np.isin(codes, wanted)
        # A node's labels do not change by evicting pods: preemption cannot help.
        return FilterResult.from_mask(passed, REASON, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    # ---- PreScore / Score --------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> Status:
        if not pod.requests.get(GPU) or not self.model_scores:
            return Status(Code.SKIP)  # Score is not called for this pod
        return Status()

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        labels = self.handle.snapshot.labels
        codes = labels.column(self.label_key, nodes.index)
        scores = np.zeros(nodes.size, dtype=np.int64)
        for model, value in self.model_scores.items():
            for code in labels.value_codes(self.label_key, [model]):
                scores[codes == code] = value
        return scores  # already 0..MAX_NODE_SCORE: no normalize_score needed

    # ---- requeueing --------------------------------------------------------------

    def events_to_register(self) -> Sequence[ClusterEvent]:
        # Pods this plugin rejected may fit once a node appears or its labels change.
        return [ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)]

    @classmethod
    def new(cls, args: GpuModelPreferenceArgs | None, handle: Handle) -> GpuModelPreference:
        return cls(handle, args or GpuModelPreferenceArgs())


# What the registry (or the `shoal.plugins` entry point) points at.
SPEC = PluginSpec(GpuModelPreference.new, GpuModelPreferenceArgs)
