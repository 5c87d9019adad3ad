"""The app module of ``examples.stress``'s worker processes: the jobs it pushes and, when
``$STRESS_PERIODIC_ENTRIES`` is set, that many per-second cron entries (every other one
``until_executed``) on the paused queue ``stress-periodic``."""

from __future__ import annotations

import os
import random
import time
from typing import Any

import cogworker

PERIODIC_QUEUE = "stress-periodic"
ENTRIES_ENV = "STRESS_PERIODIC_ENTRIES"


class StressJob(cogworker.Job):
    name = "StressJob"

    def perform(self, index: int, work_ms: float, failure_rate: float) -> None:
        if work_ms > 0:
            time.sleep(work_ms / 1000)
        if failure_rate > 0 and random.random() < failure_rate:
            raise RuntimeError(f"stress job {index} failed on purpose (rate {failure_rate})")


class StressPeriodicJob(cogworker.Job):
    name = "StressPeriodicJob"

    def perform(self, options: dict[str, Any]) -> None:
        pass  # never runs: its queue stays paused, so the runs can be counted


def register_entries(config: cogworker.Config, count: int) -> None:
    for index in range(count):
        config.periodic.register(
            "* * * * * *",
            StressPeriodicJob,
            args=[{"entry": index}],
            unique="until_executed" if index % 2 == 0 else None,
            queue=PERIODIC_QUEUE,
        )


register_entries(cogworker.default_config(), int(os.environ.get(ENTRIES_ENV) or 0))
