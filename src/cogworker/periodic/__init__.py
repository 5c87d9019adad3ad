"""Periodic (cron) jobs: entries registered on a config, fired by every worker's ticker.

    cogworker.periodic.register("*/5 * * * *", ReportJob, args=[42], unique="until_executed")

is ``default_config().periodic.register(...)``; see ``entries.PeriodicSchedule.register``.
"""

from __future__ import annotations

from typing import Any

from cogworker.periodic.cron import CronError, Schedule
from cogworker.periodic.entries import Entry, PeriodicError, PeriodicSchedule

__all__ = ["CronError", "Entry", "PeriodicError", "PeriodicSchedule", "Schedule", "register"]


def register(cron: str, job: Any, **options: Any) -> Entry:
    """Register a cron entry on the process-wide default config."""
    from cogworker.config import default_config

    return default_config().periodic.register(cron, job, **options)
