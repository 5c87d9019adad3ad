"""Enqueue after commit: the ``Config.defer_push`` that follows Django's transactions.

Inside ``transaction.atomic()`` on the followed database a push is handed to
``transaction.on_commit``: the job reaches Redis when the outermost block commits, and never
when the block (or the savepoint it was pushed in) rolls back, as Django drops those
callbacks. Outside an atomic block (autocommit) it is sent at once. The jid is returned at once
either way.

``after_commit`` steers one push: ``MyJob.set(after_commit=False).perform_async(...)`` (or the
class keyword ``class MyJob(Job, after_commit=False)``) sends at once even inside a
transaction. The key only steers the push: it is taken out of the payload here, before the
payload is encoded, so it never reaches Redis.

Once the transaction has committed a failed push can't undo it: each held push is tried in
turn, and one that fails logs an ERROR line naming each of its jobs instead of raising out of
the commit (which would also drop the pushes queued after it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import connections, transaction  # type: ignore[import-untyped]

from cogworker.wire import Payload

AFTER_COMMIT = "after_commit"

logger = logging.getLogger("cogworker.contrib.django")


class AfterCommit:
    """``defer_push`` for the database alias ``using``."""

    def __init__(self, using: str) -> None:
        self.using = using

    def __call__(self, jobs: list[Payload], send: Callable[[], None]) -> bool:
        if not _wants_commit(jobs):
            return False
        connection = connections[self.using]
        if connection.in_atomic_block:
            transaction.on_commit(lambda: _send_logged(jobs, send), using=self.using)
            return True
        if connection.connection is not None and not connection.autocommit:
            raise transaction.TransactionManagementError(
                f"{jobs[0]['class']}: can't push after commit with autocommit off outside "
                f"transaction.atomic() (database {self.using!r}): use atomic(), or "
                "set(after_commit=False) to push at once"
            )
        return False


def _wants_commit(jobs: list[Payload]) -> bool:
    """Whether these jobs wait for the commit (each job's ``after_commit``, default True),
    with the key taken out of every payload."""
    choices = set()
    for job in jobs:
        choice = job.get(AFTER_COMMIT, True)
        if not isinstance(choice, bool):
            raise ValueError(f"{job['class']}: after_commit must be True or False, got {choice!r}")
        choices.add(choice)
    if len(choices) > 1:
        raise ValueError(
            "a bulk push mixes after_commit=True and after_commit=False jobs: push them apart"
        )
    for job in jobs:
        job.pop(AFTER_COMMIT, None)
    return choices != {False}


def _send_logged(jobs: list[Payload], send: Callable[[], None]) -> None:
    try:
        send()
    except Exception as error:
        for job in jobs:
            logger.error(
                "push after commit failed: %s jid=%s: %s: %s",
                job["class"],
                job["jid"],
                type(error).__name__,
                str(error).splitlines()[0] if str(error) else "",
            )
