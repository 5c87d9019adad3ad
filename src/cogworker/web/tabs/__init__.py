"""The dashboard's built-in tabs, in header order: its label, its page and a function returning
its routes, with templates under ``templates/<page>/``. The dashboard registers each as an
extension (``cogworker.web.extensions``), the way a host adds its own."""

from __future__ import annotations

from cogworker.web.site import Tab
from cogworker.web.tabs import history, jobs, metrics, overview, schedules, workers

BUILTIN_TABS: tuple[Tab, ...] = (
    overview.TAB,
    jobs.TAB,
    schedules.TAB,
    workers.TAB,
    history.TAB,
    metrics.TAB,
)

__all__ = ["BUILTIN_TABS", "Tab"]
