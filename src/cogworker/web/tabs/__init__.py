"""The dashboard's tabs, in header order. A new tab is one more ``Tab`` in this list (or in
the list given to ``cogworker.web.app``): its label, its page and a function returning its
routes, with templates under ``templates/<page>/``."""

from __future__ import annotations

from cogworker.web.site import Tab
from cogworker.web.tabs import jobs, overview, workers

BUILTIN_TABS: tuple[Tab, ...] = (overview.TAB, jobs.TAB, workers.TAB)

__all__ = ["BUILTIN_TABS", "Tab"]
