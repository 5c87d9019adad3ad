"""The example's jobs: a greeting, a flaky job that fails twice and then succeeds (reporting
its progress), an async one, a low-priority one on queue ``low``, and the job the cron entry
runs. Their wire names are plain class names, so a Ruby process can push them too."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import cogworker
from cogworker import status

logger = logging.getLogger("cogworker")

ATTEMPTS_TTL = 86_400


class GreetingJob(cogworker.Job):
    name = "GreetingJob"

    def perform(self, who: str) -> None:
        logger.info("GreetingJob: hello, %s! jid=%s", who, self.jid)


class FlakyJob(cogworker.Job, retry=3):
    """Fails on its first ``fail_times`` attempts, then succeeds; each attempt reports its
    progress in the job's status (``cogworker.status.get(jid)``)."""

    name = "FlakyJob"

    @classmethod
    def retry_in(cls, count: int, error: BaseException, job: dict[str, Any]) -> float:
        return 5.0  # seconds: the demo shouldn't keep you waiting the default backoff

    def perform(self, fail_times: int = 2) -> None:
        pipe = cogworker.default_config().redis().pipeline(transaction=False)
        pipe.incr(attempts_key(self.jid))
        pipe.expire(attempts_key(self.jid), ATTEMPTS_TTL)
        attempt = int(pipe.execute()[0])
        status.at(self.jid, round(attempt / (fail_times + 1) * 100), f"attempt {attempt}")
        if attempt <= fail_times:
            raise RuntimeError(f"simulated failure (attempt {attempt} of {fail_times + 1})")
        logger.info("FlakyJob: attempt %d succeeded jid=%s", attempt, self.jid)


def attempts_key(jid: str) -> str:
    """Where FlakyJob counts its attempts (an example's own key, kept a day)."""
    return f"examples:flaky_job:{jid}:attempts"


class FetchReportJob(cogworker.Job):
    """An ``async def perform``: the worker runs it on an event loop of its own thread."""

    name = "FetchReportJob"

    async def perform(self, report_id: int) -> None:
        await asyncio.sleep(0.2)  # stands for an HTTP call
        logger.info("FetchReportJob: report %d fetched jid=%s", report_id, self.jid)


class LowPriorityJob(cogworker.Job, queue="low"):
    name = "LowPriorityJob"

    def perform(self, item: str) -> None:
        time.sleep(0.5)
        logger.info("LowPriorityJob: %s done jid=%s", item, self.jid)


class DailyReportJob(cogworker.Job):
    """The cron entries' job. Its argument is a dict (JSON objects arrive as dicts)."""

    name = "DailyReportJob"

    def perform(self, options: dict[str, Any]) -> None:
        logger.info("DailyReportJob: section %s jid=%s", options.get("section"), self.jid)
