"""The web dashboard: a read-only JSON API over the scheduler's state and a page that
charts it (queues over time, gangs, pending pods by reason, GPU nodes). Served by
`shoal run` on its serving port and by `shoal simulate --serve`; see docs/dashboard.md."""

from shoal.web.dashboard.app import Dashboard, attach_dashboard
from shoal.web.dashboard.frame import DashboardSource, Frame
from shoal.web.dashboard.history import QueueHistory

__all__ = ["Dashboard", "DashboardSource", "Frame", "QueueHistory", "attach_dashboard"]
