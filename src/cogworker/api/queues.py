"""Queues: size, latency, paging, lookup, deletion, clearing, pausing.

Removing jobs (``delete``, ``clear``) releases the locks they still own: a unique job's
``cogworker:unique:<digest>`` and a cron run's ``periodic:running:<pjid>``, each only while
it holds that job's jid, so a newer duplicate's lock is never touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import redis

from cogworker import keys, scripts, wire
from cogworker.api.records import JobRecord, paged, release_locks_of
from cogworker.api.search import Found, search_list

PAGE = 100
CLEAR_BATCH = 1000

TAKE_BATCH = scripts.load(__file__, "take_batch")
LOCK_MARKER = "until_executed"
"""Only a job whose text holds this can own a lock (``unique`` or ``periodic_until_executed``
says so): a clear reads back just those, so clearing a queue of plain jobs moves no payloads."""


def queue_names(client: redis.Redis) -> list[str]:
    """Every known queue (``cogworker:queues``), sorted."""
    return sorted(str(name) for name in client.smembers(keys.QUEUES))


def latency_of(raw: object, now: float | None = None) -> float:
    """Seconds the oldest job has waited (its ``enqueued_at`` or ``created_at``); 0 if none."""
    if not isinstance(raw, str):
        return 0.0
    try:
        job = wire.loads(raw)
    except (ValueError, RecursionError):  # not a job: it has no enqueue time to count from
        return 0.0
    stamp = job.get("enqueued_at") or job.get("created_at") if isinstance(job, dict) else None
    if not isinstance(stamp, int | float):
        return 0.0
    return max((wire.now() if now is None else now) - float(stamp), 0.0)


@dataclass(frozen=True)
class Queue:
    client: redis.Redis
    name: str = "default"

    @property
    def key(self) -> str:
        return keys.queue(self.name)

    def size(self) -> int:
        return int(self.client.llen(self.key))

    def latency(self) -> float:
        """How long the next job to run has waited."""
        return latency_of(self.client.lindex(self.key, -1))

    def page(self, offset: int = 0, limit: int = 50) -> list[JobRecord]:
        """Jobs newest first (the next to run is last)."""
        if limit <= 0:
            return []
        raws = self.client.lrange(self.key, max(offset, 0), max(offset, 0) + limit - 1)
        return [JobRecord(str(raw)) for raw in raws]

    def __iter__(self) -> Iterator[JobRecord]:
        """Every job, newest first, read a page at a time."""
        return paged(self.page, PAGE)

    def find_job(self, jid: str) -> JobRecord | None:
        """The job with ``jid`` (a scan of the queue)."""
        found = self.locate(jid)
        return found.records[0] if found.records else None

    def locate(self, jid: str) -> Found:
        """Every copy of job ``jid`` and its position (0 = next to run): one pass over the
        queue, a page of 1,000 per round trip."""
        return search_list(self.client, self.key, jid)

    def delete(self, raw: str) -> int:
        """Remove every copy of exactly ``raw``; how many were removed. If any was, the
        locks the job owns are released (owner-checked)."""
        removed = int(self.client.lrem(self.key, 0, raw))
        if removed:
            release_locks_of(self.client, [JobRecord(raw)])
        return removed

    def clear(self) -> int:
        """Drop every job (the name stays known) and release the locks they own; how many
        jobs were dropped.

        Jobs are taken from the tail in batches of ``CLEAR_BATCH`` (one script call each,
        which reads back only the jobs that may own a lock), up to the length the queue had
        when the clear began: a job pushed meanwhile survives unless workers took that many
        jobs from the queue during the clear. Every job dropped has its locks released.
        """
        remaining = self.size()
        dropped = 0
        while remaining > 0:
            taken, *holders = TAKE_BATCH(
                self.client, [self.key], [min(remaining, CLEAR_BATCH), LOCK_MARKER]
            )
            if not taken:
                break
            dropped += int(taken)
            remaining -= int(taken)
            release_locks_of(self.client, [JobRecord(str(raw)) for raw in holders])
        return dropped

    def pause(self) -> None:
        self.client.sadd(keys.PAUSED_QUEUES, self.name)

    def resume(self) -> None:
        self.client.srem(keys.PAUSED_QUEUES, self.name)

    def paused(self) -> bool:
        return bool(self.client.sismember(keys.PAUSED_QUEUES, self.name))
