"""The plugin contract: what a Shoal plugin author imports.

Everything here is public and stable; the submodules are the implementation. A plugin
needs only `from shoal.framework import ...`:

* the extension-point protocols (`FilterPlugin`, `ScorePlugin`, ...), one per point;
* the values crossing the contract: `Status`/`Code`, `CycleState`, `Candidates`,
  `FilterResult`/`Failure`, `PreFilterResult`, `PostFilterResult`, `ClusterEvent`;
* `Handle` (snapshot, clock, rng, binder) and the `Registry`/`PluginSpec` to register with;
* the per-node adapters (`per_node_filter`, `per_node_score`, `NodeView`).

The scheduler's own machinery (`shoal.framework.runtime.Framework`, which runs a
profile's plugins) is not part of this API.
"""

from shoal.framework.adapters import (
    NodeFilterFn,
    NodeScoreFn,
    NodeView,
    PerNodeFilter,
    PerNodeFilterScore,
    PerNodeScore,
    ScoreNormalizeFn,
    normalize_to_max,
    normalize_to_max_reversed,
    per_node_filter,
    per_node_plugin,
    per_node_score,
)
from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import Diagnosis, fit_error_message
from shoal.framework.effects import (
    BindError,
    BindFailed,
    Bound,
    Effect,
    Effects,
    Evict,
    GroupStatus,
    Nominate,
    NullEffects,
    QueueStatus,
    Unschedulable,
    annotate,
    annotations_of,
)
from shoal.framework.handle import (
    Clock,
    Handle,
    WaitingPod,
    WaitingPods,
)
from shoal.framework.interfaces import (
    BindPlugin,
    EnqueueExtensions,
    FilterPlugin,
    NodeFilterStatuses,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreBindPreFlightPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ProfilePolicy,
    QueueSortPlugin,
    ReservePlugin,
    ScoreNormalizer,
    ScorePlugin,
    Victim,
)
from shoal.framework.registry import (
    ENTRY_POINT_GROUP,
    PluginSpec,
    Registry,
    RegistryError,
    load_entry_points,
)
from shoal.framework.runtime import MAX_PERMIT_TIMEOUT
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    MAX_NODE_SCORE,
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    Failure,
    FilterResult,
    PreFilterResult,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "MAX_NODE_SCORE",
    "MAX_PERMIT_TIMEOUT",
    "ActionType",
    "BindError",
    "BindFailed",
    "BindPlugin",
    "Bound",
    "Candidates",
    "Clock",
    "ClusterEvent",
    "Code",
    "CycleState",
    "Diagnosis",
    "Effect",
    "Effects",
    "EnqueueExtensions",
    "EventResource",
    "Evict",
    "Failure",
    "FilterPlugin",
    "FilterResult",
    "GroupStatus",
    "Handle",
    "NodeFilterFn",
    "NodeFilterStatuses",
    "NodeScoreFn",
    "NodeView",
    "Nominate",
    "NullEffects",
    "PerNodeFilter",
    "PerNodeFilterScore",
    "PerNodeScore",
    "PermitPlugin",
    "Plugin",
    "PluginSpec",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreBindPlugin",
    "PreBindPreFlightPlugin",
    "PreEnqueuePlugin",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreScorePlugin",
    "ProfilePolicy",
    "QueueSortPlugin",
    "QueueStatus",
    "Registry",
    "RegistryError",
    "ReservePlugin",
    "ScoreNormalizeFn",
    "ScoreNormalizer",
    "ScorePlugin",
    "Status",
    "Unschedulable",
    "Victim",
    "WaitingPod",
    "WaitingPods",
    "annotate",
    "annotations_of",
    "fit_error_message",
    "load_entry_points",
    "normalize_to_max",
    "normalize_to_max_reversed",
    "per_node_filter",
    "per_node_plugin",
    "per_node_score",
]
