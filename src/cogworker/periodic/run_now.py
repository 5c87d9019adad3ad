"""Run now: push one run of a published cron entry at once, on the entry's own queue (the
Schedules tab's action and ``periodic.admin.run_now``).

The run goes through the client push path, so the client middleware applies, and it takes no
slot, so ``last_slot`` and the slot locks stay as they are. An ``until_executed`` entry never
runs twice at once, and a run pushed by hand keeps that rule. It takes the entry's running
lock as the ticker's claim does: ``SET NX`` with the run's jid, for a short time until the
push is done, then for ``unique_lock_ttl``. It carries ``periodic_pjid`` and
``periodic_until_executed``, so the run releases the lock when it ends, Ruby workers
included, and re-takes it if it is put back on its queue. While an earlier run holds the
lock (queued, retrying or running), the request is refused and nothing is pushed. A cron
slot that comes while this run holds the lock is skipped, as it is behind any run.
"""

from __future__ import annotations

import enum
import logging
import math
from dataclasses import dataclass
from typing import Any

import redis

from cogworker import keys, locks, wire
from cogworker.client import Client
from cogworker.config import Config
from cogworker.periodic.running_lock import CLAIMED_TTL

logger = logging.getLogger("cogworker")


class Outcome(enum.Enum):
    QUEUED = "queued"
    HELD = "held"  # an earlier run holds the entry's running lock: nothing pushed
    GONE = "gone"  # the entry is no longer published
    UNREADABLE = "unreadable"  # its published value can't be read as a job
    REFUSED = "refused"  # a client middleware stopped the push


@dataclass(frozen=True)
class RunNow:
    outcome: Outcome
    job_class: str = ""
    queue: str = ""
    jid: str | None = None
    holder: str | None = None  # the jid holding the lock, when refused for it


def _published(raw: str) -> dict[str, Any] | None:
    try:
        value = wire.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("class"), str):
        return None
    if not value["class"] or not isinstance(value.get("args", []), list):
        return None
    return value


def run_now(config: Config, client: redis.Redis, pjid: str, pusher: Client | None = None) -> RunNow:
    """Push one run of the entry ``pjid`` now (see the module docstring), through ``pusher``
    (default: a ``Client`` of ``config``)."""
    raw = client.hget(keys.PERIODIC_SCHEDULE, pjid)
    if raw is None:
        return RunNow(Outcome.GONE)
    value = _published(str(raw))
    if value is None:
        return RunNow(Outcome.UNREADABLE)
    queue = value.get("queue")
    item: dict[str, Any] = {
        "class": value["class"],
        "args": value.get("args", []),
        "retry": value.get("retry", 0),
        "queue": queue if isinstance(queue, str) and queue else "default",
    }
    pusher = pusher or Client(config)
    if value.get("unique") != "until_executed":
        jid = pusher.push(item)
        return RunNow(Outcome.QUEUED if jid else Outcome.REFUSED, item["class"], item["queue"], jid)
    return _push_holding_the_lock(config, client, pjid, pusher, item)


def _push_holding_the_lock(
    config: Config, client: redis.Redis, pjid: str, pusher: Client, item: dict[str, Any]
) -> RunNow:
    """The run of an ``until_executed`` entry: take its running lock, push, then let the lock
    last until the run releases it."""
    job_class, queue = item["class"], item["queue"]
    jid = wire.new_jid()
    lock = keys.periodic_running(pjid)
    if not client.set(lock, jid, nx=True, ex=CLAIMED_TTL):
        holder = client.get(lock)
        held = None if holder is None else str(holder)
        return RunNow(Outcome.HELD, job_class, queue, holder=held)
    item.update(jid=jid, periodic_pjid=pjid, periodic_until_executed=True)
    try:
        pushed = pusher.push(item)
    except BaseException:
        _release(client, lock, jid)
        raise
    if pushed is None:
        _release(client, lock, jid)
        return RunNow(Outcome.REFUSED, job_class, queue)
    if pushed != jid:
        logger.warning(
            "Run now of %s: a client middleware changed the job's jid (%s -> %s); its "
            "running lock won't be released by the job and keeps the entry closed for up to %ds",
            pjid,
            jid,
            pushed,
            math.ceil(config.unique_lock_ttl),
        )
    try:  # queued: the lock now lasts until the run releases it, as the ticker's runs do
        locks.expire_if_owned(client, lock, jid, math.ceil(config.unique_lock_ttl))
    except redis.RedisError as error:
        logger.warning(
            "Run now of %s: couldn't extend the running lock of jid=%s (it expires in %ds "
            "unless the run starts first): %s",
            pjid,
            jid,
            CLAIMED_TTL,
            error,
        )
    return RunNow(Outcome.QUEUED, job_class, queue, pushed)


def _release(client: redis.Redis, lock: str, jid: str) -> None:
    try:
        locks.delete_if_owned(client, lock, jid)
    except redis.RedisError as error:  # it expires on its own within CLAIMED_TTL seconds
        logger.warning(
            "Couldn't release %s after a run now that pushed nothing (it expires in %ds): %s",
            lock,
            CLAIMED_TTL,
            error,
        )
