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

A unique job took its lock when it was pushed (the client middleware runs at once, so a
duplicate inside the transaction is refused as usual). A held push that is never sent frees
the locks of its jobs, owner-checked: Django has no rollback hook, but it drops a rolled-back
block's callbacks, and the held push notices that it was dropped unsent (a weakref finalizer:
at once in CPython, as nothing else refers to it). Without that, an identical job would be
refused until the lock's TTL (a day by default). It also logs an INFO line per job: on a
rollback that is intended, but Django drops the rest of the callbacks too when an earlier
``on_commit`` callback (not ``robust``) raised, and the job must not vanish without a word.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

from django.db import connections, transaction  # type: ignore[import-untyped]

from cogworker import keys, locks, testing
from cogworker.config import Config
from cogworker.registry import describe_error
from cogworker.wire import Payload

AFTER_COMMIT = "after_commit"

logger = logging.getLogger("cogworker.contrib.django")


class AfterCommit:
    """``defer_push`` of ``config`` (whose Redis holds its unique locks) for the database
    alias ``using``."""

    def __init__(self, config: Config, using: str) -> None:
        self.config = config
        self.using = using

    def __call__(self, jobs: list[Payload], send: Callable[[], None]) -> bool:
        if not _wants_commit(jobs):
            return False
        connection = connections[self.using]
        if connection.in_atomic_block:
            transaction.on_commit(HeldPush(self.config, jobs, send), using=self.using)
            return True
        if connection.connection is not None and not connection.autocommit:
            raise transaction.TransactionManagementError(
                f"{jobs[0]['class']}: can't push after commit with autocommit off outside "
                f"transaction.atomic() (database {self.using!r}): use atomic(), or "
                "set(after_commit=False) to push at once"
            )
        return False


DeferPush = Callable[[list[Payload], Callable[[], None]], bool]


class PushAtOnce:
    """``defer_push`` with ``after_commit`` off in the settings: every push is sent at once
    (or as ``inner``, your own ``defer_push``, decides), with the key checked and taken out
    of the payloads first."""

    def __init__(self, inner: DeferPush | None = None) -> None:
        self.inner = inner

    def __call__(self, jobs: list[Payload], send: Callable[[], None]) -> bool:
        _wants_commit(jobs)
        return self.inner is not None and bool(self.inner(jobs, send))

    def __repr__(self) -> str:
        return f"PushAtOnce({self.inner!r})"


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


class HeldPush:
    """A push waiting for the commit: Django calls it then, or drops it on a rollback."""

    def __init__(self, config: Config, jobs: list[Payload], send: Callable[[], None]) -> None:
        self.jobs = jobs
        self.send = send
        self.outcome = {"sent": False}  # read by the finalizer, which can't refer to self
        unsent = weakref.finalize(self, _dropped_unsent, config, jobs, self.outcome)
        unsent.atexit = False  # a process ending inside a transaction: the TTL frees them

    def __call__(self) -> None:
        try:
            self.send()
        except Exception as error:
            for job in self.jobs:
                logger.error(
                    "push after commit failed: %s jid=%s: %s",
                    job["class"],
                    job["jid"],
                    describe_error(error),
                )
        else:
            self.outcome["sent"] = True


def _dropped_unsent(config: Config, jobs: list[Payload], outcome: dict[str, Any]) -> None:
    if outcome["sent"]:
        return
    for job in jobs:
        logger.info(
            "not pushed: %s jid=%s: its transaction rolled back, or an earlier on_commit "
            "callback failed",
            job["class"],
            job["jid"],
        )
    _free_unique_locks(config, jobs)


def _free_unique_locks(config: Config, jobs: list[Payload]) -> None:
    for job in jobs:
        if not locks.is_until_executed(job):
            continue
        key, jid = keys.unique(locks.unique_digest(job)), str(job["jid"])
        if testing.active():
            testing.memory.release_lock(key, jid)
        else:
            locks.release_key(config.redis(), key, jid)  # a failure is retried, not raised
