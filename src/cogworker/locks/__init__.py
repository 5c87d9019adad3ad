"""Lock bookkeeping shared by unique jobs and cron runs: owner-checked TTL changes and
releases, and releases deferred until Redis answers again.

Every EXPIRE or DEL of ``cogworker:unique:*`` and ``periodic:running:*`` checks that the key
still holds the acting job's jid, so an older run never touches a newer run's lock. A release
that fails is remembered in memory and retried on every heartbeat (locks expire on their TTL
anyway if the process exits first).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from typing import TYPE_CHECKING

import redis

from cogworker import keys, redis_errors, scripts, wire
from cogworker.wire import Payload

if TYPE_CHECKING:
    from cogworker.config import Config

logger = logging.getLogger("cogworker")

EXPIRE_IF_OWNED = scripts.load(__file__, "expire_if_owned")
DELETE_IF_OWNED = scripts.load(__file__, "delete_if_owned")


def unique_digest(job: Payload) -> str:
    """SHA1 of ``class|queue|args-json``, byte-compatible with the Ruby gem."""
    text = f"{job.get('class')}|{job.get('queue')}|{wire.dumps(job.get('args', []))}"
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def is_until_executed(job: Payload) -> bool:
    return str(job.get("unique")) == "until_executed"


def held_locks(job: Payload) -> list[str]:
    """The lock keys this job may own: its unique lock and its cron entry's running lock."""
    held = []
    if is_until_executed(job):
        held.append(keys.unique(unique_digest(job)))
    pjid = job.get("periodic_pjid")
    if isinstance(pjid, str) and pjid:
        held.append(keys.periodic_running(pjid))
    return held


def expire_if_owned(client: redis.Redis, key: str, owner: str, ttl: float) -> bool:
    return bool(EXPIRE_IF_OWNED(client, [key], [owner, math.ceil(ttl)]))


def delete_if_owned(client: redis.Redis, key: str, owner: str) -> bool:
    return bool(DELETE_IF_OWNED(client, [key], [owner]))


class DeferredReleases:
    """Owner-checked releases that failed, retried later (process memory only)."""

    def __init__(self) -> None:
        self._pending: dict[str, str] = {}
        self._lock = threading.Lock()

    def add(self, key: str, owner: str) -> None:
        with self._lock:
            self._pending[key] = owner

    def __len__(self) -> int:
        return len(self._pending)

    def retry_all(self, client: redis.Redis) -> None:
        """Retry every pending release; stops (re-raising, releases kept) at the first error
        that may pass (Redis away, a command refused for now). Only a key that holds another
        type can't ever be released by us: that release is dropped."""
        with self._lock:
            pending = list(self._pending.items())
        for key, owner in pending:
            try:
                if owner not in handed_back:
                    delete_if_owned(client, key, owner)
            except redis.RedisError as error:
                if "WRONGTYPE" not in str(error):
                    raise
                logger.error("deferred release of %s dropped: %s", key, error)
            with self._lock:
                if self._pending.get(key) == owner:
                    del self._pending[key]

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()


deferred = DeferredReleases()
"""The process-wide table (reset in a forked child)."""

handed_back: set[str] = set()
"""jids of jobs this process handed back to their queue at shutdown while they were still
running. The run goes on here until the process exits, and must not release the locks its
requeued copy (same jid: owner checks can't tell them apart) now holds."""


def release_key(client: redis.Redis, key: str, owner: str) -> None:
    """Owner-checked release of one lock; a failure is deferred, never raised."""
    if owner in handed_back:
        return
    try:
        delete_if_owned(client, key, owner)
    except redis.RedisError as error:
        redis_errors.reporter.report("Lock release", error)
        deferred.add(key, owner)


def release(client: redis.Redis, job: Payload) -> None:
    """Release every lock the job may own (best-effort: failures are deferred)."""
    jid = job.get("jid")
    if isinstance(jid, str):
        for key in held_locks(job):
            release_key(client, key, jid)


def extend_for_retry(config: Config, client: redis.Redis, job: Payload, delay: float) -> None:
    """Keep the job's locks for its retry: ``delay + unique_lock_ttl`` (best-effort)."""
    jid = job.get("jid")
    if not isinstance(jid, str):
        return
    for key in held_locks(job):
        try:
            expire_if_owned(client, key, jid, delay + config.unique_lock_ttl)
        except redis.RedisError as error:
            redis_errors.reporter.report("Lock extension", error)
