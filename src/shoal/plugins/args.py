"""Typed pluginConfig args (kubescheduler.config.k8s.io/v1 shapes, camelCase in YAML)."""

from __future__ import annotations

from itertools import pairwise
from typing import Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from shoal.api.manifests import unknown_field
from shoal.api.objects import (
    NodeAffinity,
    NodeSelector,
    NodeSelectorTerm,
    TopologySpreadConstraint,
)
from shoal.api.validation import qualified_name_problem

__all__ = [
    "CoschedulingArgs",
    "DefaultPreemptionArgs",
    "InterPodAffinityArgs",
    "NodeAffinityArgs",
    "NodeResourcesBalancedAllocationArgs",
    "NodeResourcesFitArgs",
    "PodTopologySpreadArgs",
    "ReschedulerArgs",
    "ResourceSpec",
    "ScoringStrategy",
    "UtilizationShapePoint",
]


class Args(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class ResourceSpec(Args):
    name: str
    weight: int = Field(default=1, ge=1, le=100)


class UtilizationShapePoint(Args):
    utilization: int = Field(ge=0, le=100)
    score: int = Field(ge=0, le=10)


class RequestedToCapacityRatioParam(Args):
    shape: list[UtilizationShapePoint]

    @field_validator("shape")
    @classmethod
    def _increasing(cls, shape: list[UtilizationShapePoint]) -> list[UtilizationShapePoint]:
        if not shape:
            raise ValueError("shape needs at least one point")
        for a, b in pairwise(shape):
            if b.utilization <= a.utilization:
                raise ValueError("shape utilization values must be strictly increasing")
        return shape


def _default_resources() -> list[ResourceSpec]:
    return [ResourceSpec(name="cpu", weight=1), ResourceSpec(name="memory", weight=1)]


class ScoringStrategy(Args):
    type: Literal["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"] = "LeastAllocated"
    resources: list[ResourceSpec] = Field(default_factory=_default_resources)
    requested_to_capacity_ratio: RequestedToCapacityRatioParam | None = None

    @model_validator(mode="after")
    def _shape_needed(self) -> ScoringStrategy:
        if self.type == "RequestedToCapacityRatio" and self.requested_to_capacity_ratio is None:
            raise ValueError(
                "scoringStrategy.requestedToCapacityRatio.shape is required for "
                "type RequestedToCapacityRatio"
            )
        return self


class NodeResourcesFitArgs(Args):
    ignored_resources: list[str] = Field(default_factory=list)
    ignored_resource_groups: list[str] = Field(default_factory=list)
    scoring_strategy: ScoringStrategy = Field(default_factory=ScoringStrategy)

    @model_validator(mode="after")
    def _names(self) -> NodeResourcesFitArgs:
        # kube-scheduler's ValidateNodeResourcesFitArgs: qualified names; a group is
        # the prefix alone (the part before '/').
        for i, name in enumerate(self.ignored_resources):
            if why := qualified_name_problem(name, "resource name"):
                raise ValueError(f"ignoredResources[{i}]: {why}")
        for i, group in enumerate(self.ignored_resource_groups):
            if "/" in group:
                raise ValueError(
                    f"ignoredResourceGroups[{i}]: {group!r}: resource group name can't "
                    "contain '/' (give the prefix alone, e.g. 'example.com')"
                )
            if why := qualified_name_problem(group, "resource group name"):
                raise ValueError(f"ignoredResourceGroups[{i}]: {why}")
        return self


class NodeResourcesBalancedAllocationArgs(Args):
    resources: list[ResourceSpec] = Field(default_factory=_default_resources)


class _AddedPreferredTerm(msgspec.Struct, rename="camel", kw_only=True):
    weight: int
    preference: NodeSelectorTerm


class NodeAffinityArgs(Args):
    added_affinity: dict[str, object] | None = None

    @model_validator(mode="after")
    def _valid(self) -> NodeAffinityArgs:
        if self.added_affinity is None:
            return self
        stray = unknown_field(self.added_affinity, NodeAffinity, "addedAffinity")
        if stray:
            raise ValueError(f"{stray}: unknown field")
        # kube-scheduler takes any integer weight here (a pod's own terms must be
        # 1..100): the preferred terms are read with their weights apart.
        required = {
            k: v
            for k, v in self.added_affinity.items()
            if k != "preferredDuringSchedulingIgnoredDuringExecution"
        }
        try:
            msgspec.convert(required, NodeAffinity)
            self.added_preferred_terms()
        except msgspec.ValidationError as err:
            raise ValueError(f"addedAffinity: {err}") from None
        return self

    def added_preferred_terms(self) -> list[tuple[int, NodeSelectorTerm]]:
        """`addedAffinity.preferredDuringSchedulingIgnoredDuringExecution` decoded:
        (weight, preference) per term."""
        raw = (self.added_affinity or {}).get("preferredDuringSchedulingIgnoredDuringExecution")
        terms = msgspec.convert(raw or [], list[_AddedPreferredTerm])
        return [(t.weight, t.preference) for t in terms]

    def added_node_selector(self) -> NodeSelector | None:
        """`addedAffinity.requiredDuringSchedulingIgnoredDuringExecution` decoded."""
        if not self.added_affinity:
            return None
        raw = self.added_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        return None if raw is None else msgspec.convert(raw, NodeSelector)


class PodTopologySpreadArgs(Args):
    default_constraints: list[dict[str, object]] = Field(default_factory=list)
    defaulting_type: Literal["System", "List"] = "System"

    def constraints(self) -> list[TopologySpreadConstraint]:
        return [msgspec.convert(c, TopologySpreadConstraint) for c in self.default_constraints]

    @model_validator(mode="after")
    def _valid(self) -> PodTopologySpreadArgs:
        for i, raw in enumerate(self.default_constraints):
            stray = unknown_field(raw, TopologySpreadConstraint, f"defaultConstraints[{i}]")
            if stray:
                raise ValueError(f"{stray}: unknown field")
            try:
                constraint = msgspec.convert(raw, TopologySpreadConstraint)
            except msgspec.ValidationError as err:
                raise ValueError(f"defaultConstraints[{i}]: {err}") from None
            if constraint.label_selector is not None:
                raise ValueError(f"defaultConstraints[{i}].labelSelector must not be set")
        if self.defaulting_type == "System" and self.default_constraints:
            raise ValueError("defaultConstraints must be empty when defaultingType is System")
        return self


class InterPodAffinityArgs(Args):
    hard_pod_affinity_weight: int = Field(default=1, ge=0, le=100)
    ignore_preferred_terms_of_existing_pods: bool = False


class DefaultPreemptionArgs(Args):
    min_candidate_nodes_percentage: int = Field(default=10, ge=0, le=100)
    min_candidate_nodes_absolute: int = Field(default=100, ge=0)

    @model_validator(mode="after")
    def _some_candidates(self) -> DefaultPreemptionArgs:
        # kube-scheduler's ValidateDefaultPreemptionArgs: with both 0 no candidate node
        # is ever tried, so preemption would be off without a word.
        if not self.min_candidate_nodes_percentage and not self.min_candidate_nodes_absolute:
            raise ValueError(
                "minCandidateNodesPercentage and minCandidateNodesAbsolute cannot both be 0 "
                "(no node would ever be tried for preemption); to turn preemption off, "
                "disable DefaultPreemption in the profile's postFilter"
            )
        return self


class CoschedulingArgs(Args):
    """Gang scheduling (the Coscheduling plugin); see docs/gang-scheduling.md."""

    @model_validator(mode="before")
    @classmethod
    def _permit_waiting_time_alias(cls, data: object) -> object:
        # scheduler-plugins spells this arg permitWaitingTimeSeconds; a config written
        # for it must keep working here. Both at once would be ambiguous.
        if isinstance(data, dict) and "permitWaitingTimeSeconds" in data:
            if "scheduleTimeoutSeconds" in data or "schedule_timeout_seconds" in data:
                raise ValueError(
                    "set either permitWaitingTimeSeconds (scheduler-plugins' name) or "
                    "scheduleTimeoutSeconds, not both"
                )
            data = dict(data)
            data["scheduleTimeoutSeconds"] = data.pop("permitWaitingTimeSeconds")
        return data

    # For groups whose PodGroup sets no scheduleTimeoutSeconds (scheduler-plugins' 60).
    schedule_timeout_seconds: float = Field(default=60.0, gt=0)
    head_of_line_reservation: bool = True
    reservation_after_seconds: float = Field(default=120.0, ge=0)
    reservation_max_seconds: float = Field(default=300.0, gt=0)


class ReschedulerArgs(Args):
    """Placement by migration and defragmentation (the Rescheduler plugin); see
    docs/rescheduler.md."""

    max_moves_per_plan: int = Field(default=4, ge=1, le=64)
    # A pod must have run this long (seconds) before it may be moved (again).
    min_run_seconds: float = Field(default=300.0, ge=0)
    # Disruption budget: moves in any hour, cluster-wide and per tenant queue.
    moves_per_hour: int = Field(default=60, ge=0)
    moves_per_hour_per_queue: int = Field(default=20, ge=0)
    # After a pod of a controller was moved, none of its pods moves for this long.
    cooldown_seconds: float = Field(default=1800.0, ge=0)
    # How long a moved pod's planned node is held for its re-created pod.
    hold_seconds: float = Field(default=120.0, gt=0)
    # Defragmentation pass: every this many seconds (0: off), at most this many moves.
    defrag_interval_seconds: float = Field(default=0.0, ge=0)
    defrag_moves_per_pass: int = Field(default=2, ge=0, le=64)
    # Cost model: a move costs restartCost (annotation shoal.dev/restart-cost, default
    # 1) times (1 + ageWeight x hours the pod has run, at most 24).
    age_weight: float = Field(default=0.1, ge=0)
    # Target nodes with a covering set of moves collected per waiting pod, and nodes
    # looked at for them at most (those lacking the least room first).
    max_candidate_nodes: int = Field(default=16, ge=1, le=1000)
    max_scanned_nodes: int = Field(default=256, ge=1)
