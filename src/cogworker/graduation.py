"""Moving an entry of the schedule or retry set onto the head of its queue, as a new job.

Shared by the worker's scheduler (due entries) and the read API's ``retry_now``, so neither
imports the other. The entry is re-encoded here with ``enqueued_at`` re-stamped (the queue's
latency then counts from now); the move itself is one script call that fails harmlessly when
another process took the entry first.
"""

from __future__ import annotations

import enum

import redis

from cogworker import failure, keys, scripts, wire
from cogworker.failure import Rejection

GRADUATE = scripts.load(__file__, "graduate")


class Requeue(enum.StrEnum):
    """What moving an entry onto its queue came to (a str, so callers may compare text)."""

    REQUEUED = "requeued"
    GONE = "gone"  # another process took it first
    INVALID = "invalid"  # not a job (no queue, say): left where it is


def requeueable(entry: str, source: str) -> tuple[str, str] | Rejection:
    """``(queue, payload to push)`` for an entry of ``source`` that is a job, else why it is
    not one."""
    job = failure.parse_object(entry)
    not_a_job = f"not a job (JSON object with a queue) in {source}"
    if isinstance(job, Rejection):
        if job.undecodable:
            return Rejection(job.error_class, f"{job.message} (in {source})")
        return Rejection("TypeError", not_a_job)
    queue, jid = job.get("queue"), job.get("jid")
    if not isinstance(queue, str) or not queue:
        return Rejection("TypeError", not_a_job, jid if isinstance(jid, str) and jid else None)
    rejection = failure.check_job(job)
    if rejection is not None:
        return Rejection(rejection.error_class, f"{rejection.message} (in {source})", rejection.jid)
    job["enqueued_at"] = wire.now()
    try:
        return queue, wire.dumps(job)
    except (ValueError, TypeError, RecursionError) as error:
        return Rejection(type(error).__name__, f"can't be encoded again ({error}) in {source}")


def move_to_queue(client: redis.Redis, source: str, entry: str, queue: str, payload: str) -> bool:
    """Push ``payload`` onto ``queue`` in place of ``entry``; False if ``entry`` was gone."""
    return bool(GRADUATE(client, [source, keys.QUEUES, keys.queue(queue)], [entry, queue, payload]))


def claim_and_requeue(client: redis.Redis, source: str, entry: str) -> Requeue:
    """Move one entry of a sorted set onto the head of its queue (see ``Requeue``)."""
    requeue = requeueable(entry, source)
    if isinstance(requeue, Rejection):
        return Requeue.INVALID
    moved = move_to_queue(client, source, entry, *requeue)
    return Requeue.REQUEUED if moved else Requeue.GONE
