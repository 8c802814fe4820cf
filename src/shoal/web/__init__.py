"""HTTP endpoints for operators: Prometheus /metrics, /healthz and /readyz."""

from shoal.web.metrics import SchedulerMetrics, register_scheduler_collector
from shoal.web.server import Check, HealthServer

__all__ = ["Check", "HealthServer", "SchedulerMetrics", "register_scheduler_collector"]
