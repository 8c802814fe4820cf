"""deploy/grafana/shoal-dashboard.json parses, its panels do not overlap, and every
metric its queries name is one Shoal exports (a renamed metric breaks this test, not the
dashboard of whoever imported it)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Histogram
from prometheus_client.registry import CollectorRegistry

from shoal.testing import SchedulerHarness
from shoal.web.gpu_census import GpuCensus
from shoal.web.metrics import (
    SchedulerMetrics,
    register_gpu_collector,
    register_scheduler_collector,
)

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "shoal-dashboard.json"

# PromQL words that are not metric names.
_FUNCTIONS = {
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "increase",
    "irate",
    "histogram_quantile",
    "label_values",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
}


def exported_names() -> set[str]:
    """Every series name a Shoal /metrics can carry, from the registry's families
    (labelled counters and histograms that have no value yet still count)."""
    metrics = SchedulerMetrics()
    harness = SchedulerHarness()
    register_scheduler_collector(metrics.registry, lambda: harness.scheduler)
    register_gpu_collector(metrics.registry, lambda: GpuCensus(harness.scheduler))
    registry: CollectorRegistry = metrics.registry
    names: set[str] = set()
    for family in registry.collect():
        if family.type == "counter":
            names |= {family.name + "_total", family.name}
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count")}
        else:
            names.add(family.name)
    # The instrumented classes, for their types (the collect above covers their names).
    assert isinstance(metrics.binds, Counter) and isinstance(metrics.attempt_duration, Histogram)
    return names


def metric_names(expr: str) -> set[str]:
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values
    text = re.sub(r"\{[^}]*\}", "", text)  # matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)  # grouping labels
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text))
    return {w for w in words if w not in _FUNCTIONS and not w.startswith("__")}


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        query = var.get("query")
        if isinstance(query, dict):
            exprs.append(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", query["query"]))
    return exprs


def test_dashboard_parses_and_its_panels_do_not_overlap() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "shoal-scheduler"
    seen: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        cells = {(g["y"] + dy, g["x"] + dx) for dy in range(g["h"]) for dx in range(g["w"])}
        assert not cells & seen, f"panel {panel['title']!r} overlaps another"
        seen |= cells
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_every_query_names_metrics_shoal_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_names()
    used: set[str] = set()
    for expr in _exprs(dashboard):
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= exported, f"{expr!r} names {sorted(names - exported)}, not exported"
        used |= names
    # The dashboard shows what the issue asks for.
    for name in (
        "shoal_queue_allocated",
        "shoal_queue_guaranteed",
        "shoal_queue_fair_share",
        "scheduler_plugin_execution_duration_seconds_bucket",
        "scheduler_framework_extension_point_duration_seconds_bucket",
        "shoal_gang_groups",
        "shoal_gpu_allocated",
        "shoal_gpu_unallocated",
        "shoal_gpu_fragmentation",
    ):
        assert name in used


def test_the_metric_name_check_catches_a_typo() -> None:
    assert metric_names('sum by (queue) (shoal_queue_alocated{queue=~"$queue"})') == {
        "shoal_queue_alocated"
    }
    assert "shoal_queue_alocated" not in exported_names()
