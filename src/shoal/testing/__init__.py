"""Test helpers for Shoal and for plugin authors: object builders and a scheduler harness.

from shoal.testing import SchedulerHarness, make_node, make_pod
"""

from shoal.testing.builders import (
    DEFAULT_MAX_PODS,
    HOSTNAME_LABEL,
    ZONE_LABEL,
    NodeBuilder,
    PodBuilder,
    label_selector,
    make_node,
    make_pod,
    node_requirement,
)
from shoal.testing.harness import HarnessEvent, RunResult, SchedulerHarness
from shoal.testing.plugin_env import (
    FilterReport,
    as_pod_info,
    make_handle,
    run_filter,
    run_score,
)

__all__ = [
    "DEFAULT_MAX_PODS",
    "HOSTNAME_LABEL",
    "ZONE_LABEL",
    "FilterReport",
    "HarnessEvent",
    "NodeBuilder",
    "PodBuilder",
    "RunResult",
    "SchedulerHarness",
    "as_pod_info",
    "label_selector",
    "make_handle",
    "make_node",
    "make_pod",
    "node_requirement",
    "run_filter",
    "run_score",
]
