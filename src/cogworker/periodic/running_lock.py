"""The running lock of an ``until_executed`` cron entry, around the run itself.

The ticker's claim sets ``periodic:running:<pjid>`` to the run's jid for ``queued_ttl``. When
the run starts, this middleware shortens it to ``active_ttl`` (long enough to outlive orphan
recovery; the heartbeat refreshes it while ``perform`` runs), then releases it on success or
on a failure that ends the job. Every write is owner-checked: an older run never touches a
newer run's lock. A no-op for jobs that are not cron runs.

Every config starts with this middleware (``Config`` adds it), so this module sits below
``config``: it reads the settings it needs through ``CronLockSettings``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Protocol

import redis

from cogworker import failure, keys, locks, redis_errors
from cogworker.middleware import JobInstance
from cogworker.wire import Payload

logger = logging.getLogger("cogworker")


CLAIMED_TTL = 20
"""Seconds a running lock taken for a run lasts until its push is done (then it lasts for
``unique_lock_ttl``): a process that dies between taking it and pushing closes the entry for
this long, not for a day. The ticker's claims and a run pushed by hand share it."""
RUBY_CHECK_INTERVAL = 60  # Ruby processes sharing the Redis check for orphans this often


class CronLockSettings(Protocol):
    """What the running lock's TTLs are made of (a ``cogworker.Config``)."""

    @property
    def unique_lock_ttl(self) -> float: ...

    @property
    def orphan_threshold(self) -> float: ...

    @property
    def presence_ttl(self) -> float: ...

    @property
    def orphan_check_interval(self) -> float: ...

    def redis(self) -> redis.Redis: ...


def queued_ttl(config: CronLockSettings) -> int:
    """TTL of a cron run's running lock while the run waits on a queue: pushed by the ticker,
    or handed back to its queue (re-taken by the same step that requeues it)."""
    return math.ceil(config.unique_lock_ttl)


def requeued_lock(job: Payload) -> str | None:
    """The running lock a cron run re-takes when it is put back on its queue (an
    ``until_executed`` run: its entry stays closed while it waits), or None."""
    pjid, jid = job.get("periodic_pjid"), job.get("jid")
    if job.get("periodic_until_executed") is True and isinstance(pjid, str):
        return keys.periodic_running(pjid) if isinstance(jid, str) else None
    return None


def active_ttl(config: CronLockSettings) -> int:
    """TTL of a running cron lock while its job performs.

    It outlives the recovery of a run whose process died: the presence key expires, the
    orphan threshold passes, then the next orphan check requeues the run (which re-takes
    the lock). The check interval counts with the configured value when that is longer than
    a minute; with the defaults this is the Ruby gem's 420 s.
    """
    check_interval = max(config.orphan_check_interval, RUBY_CHECK_INTERVAL)
    return math.ceil(config.orphan_threshold + config.presence_ttl + check_interval)


class RunningLockMiddleware:
    def __init__(self, config: CronLockSettings) -> None:
        self.config = config

    def __call__(
        self, worker: JobInstance | None, job: Payload, queue: str, call_next: Callable[[], None]
    ) -> None:
        pjid, jid = job.get("periodic_pjid"), job.get("jid")
        if not isinstance(pjid, str) or not isinstance(jid, str):
            call_next()
            return
        client = self.config.redis()
        lock = keys.periodic_running(pjid)
        try:
            locks.expire_if_owned(client, lock, jid, active_ttl(self.config))
        except redis.RedisError as error:  # the heartbeat shortens it later
            logger.warning("couldn't shorten periodic lock for %s: %s", pjid, error)
            redis_errors.reporter.report("Periodic lock", error)
        try:
            call_next()
        except BaseException:
            if failure.is_terminal(job):
                locks.release_key(client, lock, jid)
            raise
        locks.release_key(client, lock, jid)
