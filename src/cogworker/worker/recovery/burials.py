"""Jobs filed into dead outside a processor: their entries, bookkeeping and death hooks.

Each step after the filing is best-effort: the locks are released, the burial is counted as
failed, and a job (never an ``(unparseable)`` wrapper) gets its death hooks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis

from cogworker import failure, keys, locks, redis_errors, wire
from cogworker.failure import Rejection
from cogworker.fetch import Filing
from cogworker.fetch.reliable import file_instead_on
from cogworker.wire import Payload
from cogworker.worker.bookkeeper import count_burial
from cogworker.worker.recovery.requeue import DEFAULT_QUEUE
from cogworker.worker.settle import Settler

logger = logging.getLogger("cogworker")


class JobFailedError(RuntimeError):
    """Passed to death hooks for a failure filed later from a stored record."""


class JobOrphanedError(RuntimeError):
    """Passed to death hooks for a job whose process died under it too often."""


def process_died(raw: str, max_orphanings: int) -> tuple[Payload, bool]:
    """The dead entry of a job whose process died under it too often, and whether it is a job
    (a payload that is not one is wrapped, and gets no death hooks)."""
    parsed = failure.parse_job(raw)
    readable = not isinstance(parsed, Rejection)
    entry = dict(
        failure.unparseable_job(raw, None, Rejection(parsed.error_class, "unreadable", parsed.jid))
        if isinstance(parsed, Rejection)
        else parsed
    )
    entry.update(
        {
            "error_class": "Cogworker::ProcessDied",
            "failed_at": wire.now(),
            "error_message": (
                f"its process died while running it more than {max_orphanings} times "
                "(killed for memory? SIGKILL?) — not retried again"
            ),
        }
    )
    return entry, readable


def buried_as_dead(client: redis.Redis, entry: Payload) -> None:
    """Bookkeeping for a job filed into dead outside a processor."""
    locks.release(client, entry)
    jid = entry.get("jid")
    count_burial(client, jid if isinstance(jid, str) else None)


def filed_as_dead(client: redis.Redis, settler: Settler, payload: str) -> None:
    """After a stored failure was filed into dead: free its locks and run its death hooks,
    if it is a job (an unparseable wrapper gets neither)."""
    job = failure.parse_job(payload)
    if isinstance(job, Rejection) or job.get("class") == "(unparseable)":
        return
    locks.release(client, job)
    settler.run_death_hooks(job, JobFailedError(str(job.get("error_message"))))


def bury_unnamed_requeues(client: redis.Redis, raws: Iterable[str]) -> None:
    """A requeue sent these payloads to the default queue because no queue could be read in
    them: move the ones that are not jobs on to dead now (nobody may read that queue). A job
    (one whose queue only cjson couldn't read) stays there and runs."""
    for raw in raws:
        rejection = failure.parse_job(raw)
        if not isinstance(rejection, Rejection):
            continue
        wrapper = failure.unparseable_job(raw, DEFAULT_QUEUE, rejection)
        jid = wire.jid_of(raw)
        filing = Filing(keys.DEAD, float(wrapper["failed_at"]), wire.dumps(wrapper))
        try:
            moved = file_instead_on(client, keys.queue(DEFAULT_QUEUE), raw, filing)
        except redis.RedisError as error:  # it waits on the default queue to be buried there
            redis_errors.reporter.report("Burying an unparseable payload", error)
            continue
        if moved:
            count_burial(client, None if jid == "?" else jid)
            logger.error(
                "unparseable payload left in progress moved to dead as jid=%s: %s: %s",
                wrapper["jid"],
                rejection.error_class,
                rejection.message,
            )
