"""Database connections around each job, as Django handles them around a request."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import close_old_connections, reset_queries  # type: ignore[import-untyped]

from cogworker.middleware import JobInstance
from cogworker.wire import Payload

logger = logging.getLogger("cogworker.contrib.django")


class CloseDatabaseConnections:
    """Server middleware: what Django runs at a request's start and end, around each job:
    ``close_old_connections()`` before and after, and ``reset_queries()`` before. A
    connection past its ``CONN_MAX_AGE`` (with the default 0: every one) or left unusable by
    an error is closed, so a job never starts on a connection the database may have dropped
    while the thread waited; with ``DEBUG`` on, the query log holds one job's queries, not
    every query the thread ever ran."""

    def __call__(
        self, worker: JobInstance | None, job: Payload, queue: str, call_next: Callable[[], None]
    ) -> None:
        reset_queries()
        _close_old(job, "before")
        try:
            call_next()
        finally:
            _close_old(job, "after")


def _close_old(job: Payload, when: str) -> None:
    # a failure here must not count as the job's: log it and carry on
    try:
        close_old_connections()
    except Exception as error:
        logger.warning(
            "closing old database connections %s the job failed: jid=%s: %s: %s",
            when,
            job.get("jid"),
            type(error).__name__,
            error,
        )
