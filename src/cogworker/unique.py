"""Unique jobs: ``unique="until_executed"`` keeps a second identical job out while one waits.

Identical means same class, queue and arguments: the lock key is
``cogworker:unique:<sha1(class|queue|args-json)>``, the same digest a Ruby producer computes,
so both deduplicate against each other. The lock holds the jid of the job that owns it; it is
taken at push (a duplicate push returns None), kept while the job is queued, scheduled,
retrying or running, extended over each retry, and released when the job succeeds or fails
for good, or when the push itself raises. Its TTL, ``unique_lock_ttl`` counted from the job's
due time, is only a safety net. In a testing mode the lock lives in ``testing.memory`` instead,
with the same rules.

Every config starts with both middleware (``Config`` adds them), so this module sits below
``config``: it reads the two settings it needs through ``UniqueSettings``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Protocol

import redis

from cogworker import failure, keys, locks, testing, wire
from cogworker.middleware import JobInstance
from cogworker.wire import Payload


class UniqueSettings(Protocol):
    """What the unique middleware reads of its config (a ``cogworker.Config``)."""

    @property
    def unique_lock_ttl(self) -> float: ...

    def redis(self) -> redis.Redis: ...


_ran_inline = threading.local()
"""``jid``: the last job whose run on this thread, in a testing mode, failed with retries left
and so keeps its lock (the failure that then leaves its inline push must not release it)."""


class UniqueLockMiddleware:
    """Client side: take the lock, or skip the push (``push`` then returns None)."""

    def __init__(self, config: UniqueSettings) -> None:
        self.config = config

    def __call__(
        self,
        job_class: str,
        job: Payload,
        queue: str,
        redis: redis.Redis,
        call_next: Callable[[], None],
    ) -> None:
        if not locks.is_until_executed(job):
            call_next()
            return
        at = job.get("at")
        wait = max(float(at) - wire.now(), 0.0) if isinstance(at, int | float) else 0.0
        ttl = math.ceil(self.config.unique_lock_ttl + wait)
        key, jid = keys.unique(locks.unique_digest(job)), str(job["jid"])
        in_memory = testing.active()
        if in_memory:
            taken = testing.memory.take_lock(key, jid, ttl)
        else:
            taken = bool(redis.set(key, jid, nx=True, ex=ttl))
        if not taken:
            job["unique_skipped"] = True
            return
        try:
            call_next()
        except BaseException:
            # the push raised: free the digest instead of refusing this job for a day. (If
            # the push did land and only its reply was lost, a duplicate can now get in.)
            if not in_memory:
                locks.release_key(redis, key, jid)
            elif getattr(_ran_inline, "jid", None) != jid:
                testing.memory.release_lock(key, jid)
            # else an inline run raised through its push: its end decided, as on a worker
            raise


class UniqueReleaseMiddleware:
    """Server side: release the lock after success, or after a failure that ends the job."""

    def __init__(self, config: UniqueSettings) -> None:
        self.config = config

    def __call__(
        self, worker: JobInstance | None, job: Payload, queue: str, call_next: Callable[[], None]
    ) -> None:
        if not locks.is_until_executed(job):
            call_next()
            return
        try:
            call_next()
        except BaseException:
            if failure.is_terminal(job):
                _release(self.config, job)
            elif testing.active():
                _ran_inline.jid = job.get("jid")  # kept for a retry: not the push's failure
            raise
        _release(self.config, job)


def _release(config: UniqueSettings, job: Payload) -> None:
    jid = job.get("jid")
    if not isinstance(jid, str):
        return
    key = keys.unique(locks.unique_digest(job))
    if testing.active():
        testing.memory.release_lock(key, jid)
    else:
        locks.release_key(config.redis(), key, jid)
