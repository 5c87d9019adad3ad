"""Lock bookkeeping shared by unique jobs and cron runs: owner-checked TTL changes and
releases, and releases deferred until Redis answers again.

Every EXPIRE or DEL of ``cogworker:unique:*`` and ``periodic:running:*`` checks that the key
still holds the acting job's jid, so an older run never touches a newer run's lock. A release
that fails is remembered in memory and retried on every heartbeat (locks expire on their TTL
anyway if the process exits first). Removing many jobs at once (a queue or set cleared by an
operator) releases their locks in batches of ``RELEASE_BATCH`` per script call.

The deferred releases and the handed-back jids are parts of the process state (a forked
worker starts with neither).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections.abc import Iterable
from typing import Protocol

import redis

from cogworker import keys, redis_errors, scripts, wire
from cogworker.process_state import state
from cogworker.wire import Payload

logger = logging.getLogger("cogworker")

EXPIRE_IF_OWNED = scripts.load(__file__, "expire_if_owned")
DELETE_IF_OWNED = scripts.load(__file__, "delete_if_owned")

RELEASE_BATCH = 500
"""Locks released per script call by ``release_owned`` (one round trip each)."""


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


class NotALock(redis.ResponseError):
    """A lock key holds another type (a list, a hash...): no job owns it."""


def delete_if_owned(client: redis.Redis, key: str, owner: str) -> bool:
    """Delete ``key`` if it holds ``owner``; raises ``NotALock`` if it holds another type."""
    deleted, not_locks = _delete_owned(client, [(key, owner)])
    if not_locks:
        raise NotALock(f"{key} holds another type, not a lock")
    return bool(deleted)


def _delete_owned(client: redis.Redis, pairs: list[tuple[str, str]]) -> tuple[int, list[str]]:
    reply = DELETE_IF_OWNED(client, [key for key, _ in pairs], [owner for _, owner in pairs])
    return int(reply[0]), [str(key) for key in reply[1:]]


def release_owned(client: redis.Redis, pairs: Iterable[tuple[str, str]]) -> int:
    """Owner-checked release of many ``(lock key, owner jid)`` pairs, ``RELEASE_BATCH`` per
    round trip; how many locks were deleted. Redis errors are raised (nothing is deferred:
    the caller is an operator's command, which reports them)."""
    deleted = 0
    batch: list[tuple[str, str]] = []
    for pair in pairs:
        batch.append(pair)
        if len(batch) == RELEASE_BATCH:
            deleted += _release_batch(client, batch)
            batch = []
    if batch:
        deleted += _release_batch(client, batch)
    return deleted


def _release_batch(client: redis.Redis, batch: list[tuple[str, str]]) -> int:
    deleted, not_locks = _delete_owned(client, batch)
    for key in not_locks:
        logger.warning("lock %s not released: it holds another type, not a lock", key)
    return deleted


def owned_locks(*jobs: Payload) -> list[tuple[str, str]]:
    """``(lock key, jid)`` for every lock the jobs may own. A job without a string jid owns
    none, nor does one whose fields can't be UTF-8 encoded (it couldn't have taken one)."""
    pairs: list[tuple[str, str]] = []
    for job in jobs:
        jid = job.get("jid")
        if not isinstance(jid, str):
            continue
        try:
            pairs.extend((key, jid) for key in held_locks(job))
        except UnicodeEncodeError:
            continue
    return pairs


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
                if not handed_back.skip(key, owner):
                    delete_if_owned(client, key, owner)
            except NotALock as error:
                logger.error("deferred release of %s dropped: %s", key, error)
            with self._lock:
                if self._pending.get(key) == owner:
                    del self._pending[key]

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()

    reset = clear


class HandedBack(set[str]):
    """A set of jids that the process state can forget, with the releases their runs
    skipped (kept for ``withdraw``)."""

    def __init__(self) -> None:
        super().__init__()
        self._skipped: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def skip(self, key: str, owner: str) -> bool:
        """True if ``owner`` is marked: its release of ``key`` is skipped, and remembered."""
        with self._lock:
            if owner not in self:
                return False
            self._skipped.setdefault(owner, set()).add(key)
            return True

    def withdraw(self, jids: Iterable[str]) -> list[tuple[str, str]]:
        """Unmark ``jids``; the ``(key, owner)`` releases their runs skipped meanwhile."""
        with self._lock:
            jids = set(jids)
            self.difference_update(jids)
            return [(key, jid) for jid in jids for key in self._skipped.pop(jid, ())]

    def reset(self) -> None:
        with self._lock:
            self.clear()
            self._skipped.clear()


deferred = state.hold("deferred lock releases", DeferredReleases())
"""The process-wide table."""

handed_back = state.hold("handed-back jids", HandedBack())
"""jids of jobs this process handed back to their queue at shutdown while they were still
running. The run goes on here until the process exits, and must not release the locks its
requeued copy (same jid: owner checks can't tell them apart) now holds. A hand-back that
certainly did not happen withdraws its marks (``withdraw_hand_back``)."""


def withdraw_hand_back(client: redis.Redis, jids: Iterable[str]) -> None:
    """Unmark ``jids``, whose hand-back certainly did not happen (no copy of them was
    requeued, so no copy holds their locks), and make the releases their runs skipped
    meanwhile (deferred if they fail)."""
    for key, owner in handed_back.withdraw(jids):
        release_key(client, key, owner)


def release_key(client: redis.Redis, key: str, owner: str) -> None:
    """Owner-checked release of one lock; a failure is deferred, never raised."""
    if handed_back.skip(key, owner):
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


class LockSettings(Protocol):
    """What extending a job's locks reads of its config (a ``cogworker.Config``)."""

    @property
    def unique_lock_ttl(self) -> float: ...


def extend_for_retry(
    config: LockSettings, client: redis.Redis, job: Payload, delay: float
) -> None:
    """Keep the job's locks for its retry: ``delay + unique_lock_ttl`` (best-effort)."""
    jid = job.get("jid")
    if not isinstance(jid, str):
        return
    for key in held_locks(job):
        try:
            expire_if_owned(client, key, jid, delay + config.unique_lock_ttl)
        except redis.RedisError as error:
            redis_errors.reporter.report("Lock extension", error)
