"""Periodic (cron) jobs: entries registered on a config, fired by every worker's ticker.

    cogworker.periodic.register("*/5 * * * *", ReportJob, args=[42], unique="until_executed")

is ``default_config().periodic.register(...)``; see ``entries.PeriodicSchedule.register``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cogworker.periodic.entries import Entry, PeriodicError, PeriodicSchedule

if TYPE_CHECKING:
    from cogworker.periodic.cron import CronError, Schedule

__all__ = ["CronError", "Entry", "PeriodicError", "PeriodicSchedule", "Schedule", "register"]


def register(cron: str, job: Any, **options: Any) -> Entry:
    """Register a cron entry on the process-wide default config."""
    from cogworker.config import default_config

    return default_config().periodic.register(cron, job, **options)


def __getattr__(name: str) -> Any:
    # the cron parser is imported on first use, as entries.py does (see Entry.__post_init__)
    if name in ("CronError", "Schedule"):
        return getattr(importlib.import_module("cogworker.periodic.cron"), name)
    raise AttributeError(f"module 'cogworker.periodic' has no attribute {name!r}")
