"""The example's app module, for ``cogworker run -r examples.app -C examples/worker.yml``.

It loads the jobs and, in a worker, adds a timing middleware, job status and run history, and
the cron entries. In any other process (the web app, the scripts) only the client side is set
up: job status on push. Redis is cogworker's usual: ``--redis-url``, else ``$REDIS_URL``, else
``redis://localhost:6379/0``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import cogworker
from cogworker import history, status
from examples import jobs as jobs  # the job classes register when imported

logger = logging.getLogger("cogworker")

STATUS_EXPIRATION = 1800
HISTORY_ENTRIES = 500


class TimingMiddleware:
    """A server middleware: one line per run saying how long it took."""

    def __call__(
        self, worker: Any, job: dict[str, Any], queue: str, call_next: Callable[[], None]
    ) -> None:
        started = time.monotonic()
        try:
            call_next()
        finally:
            logger.info(
                "%s jid=%s on %s took %.3fs",
                job.get("class"),
                job.get("jid"),
                queue,
                time.monotonic() - started,
            )


def register_entries(config: cogworker.Config) -> None:
    """The example's cron entries (the worker publishes them for the Schedules tab)."""
    periodic = config.periodic
    periodic.register(
        "*/5 * * * *",
        jobs.DailyReportJob,
        args=[{"section": "hourly_digest"}],
        unique="until_executed",
    )
    periodic.register("0 7 * * 1-5 Europe/Berlin", jobs.DailyReportJob, args=[{"section": "daily"}])
    periodic.register("*/30 * * * * *", jobs.GreetingJob, args=["cron"], queue="low")


config = cogworker.default_config()


@config.configure_server
def server_side(config: cogworker.Config) -> None:
    config.server_middleware.add(TimingMiddleware)
    status.enable(config, expiration=STATUS_EXPIRATION)
    history.enable(config, max_entries=HISTORY_ENTRIES)
    register_entries(config)


@config.configure_client
def client_side(config: cogworker.Config) -> None:
    status.enable(config, expiration=STATUS_EXPIRATION)
