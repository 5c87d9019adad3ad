"""The scheduled, retry and dead sets: page, find, retry now, reschedule, kill, delete.

Every change acts on an entry's exact stored string and is one atomic step, so two operators
(or an operator and the scheduler) acting on one entry never duplicate or lose it.

Removing entries (``delete``, ``clear``) also forgets their retry histories and releases the
locks the jobs still own, each only while it holds that job's jid; so does ``kill`` (the job
ends for good). That includes the dead
set: a dead job normally released its locks when it died, and the owner check leaves a newer
duplicate's lock alone, so the release only matters when the dying process couldn't make it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import redis

from cogworker import keys, scripts, wire
from cogworker.api.records import JobRecord, paged, release_locks_of
from cogworker.api.search import search_sorted_set
from cogworker.graduation import Requeue, claim_and_requeue

PAGE = 500
CLEAR_BATCH = 1000

RESCHEDULE = scripts.load(__file__, "reschedule")
KILL = scripts.load(__file__, "kill")


@dataclass(frozen=True)
class JobSet:
    """One sorted set of jobs, scored by time (due time, or time of death)."""

    client: redis.Redis
    key: str

    def size(self) -> int:
        return int(self.client.zcard(self.key))

    def page(
        self, offset: int = 0, limit: int = 50, *, newest_first: bool = True
    ) -> list[JobRecord]:
        """A slice by score: latest first by default (the dead set's natural order)."""
        if limit <= 0:
            return []
        start, stop = max(offset, 0), max(offset, 0) + limit - 1
        if newest_first:
            members = self.client.zrevrange(self.key, start, stop, withscores=True)
        else:
            members = self.client.zrange(self.key, start, stop, withscores=True)
        pairs: list[tuple[str, float]] = members  # type: ignore[assignment]
        return [JobRecord(str(raw), float(score)) for raw, score in pairs]

    def __iter__(self) -> Iterator[JobRecord]:
        """Every entry, latest first, read a page at a time."""
        return paged(self.page, PAGE)

    def find_jobs(self, jid: str) -> list[JobRecord]:
        """Every entry with ``jid`` (one pass over the set; a job can be there twice)."""
        return search_sorted_set(self.client, self.key, jid).records

    def retry_now(self, raw: str) -> Requeue:
        """Put the entry back on its queue now: requeued, gone (taken first) or invalid."""
        return claim_and_requeue(self.client, self.key, raw)

    def reschedule(self, raw: str, at: float) -> bool:
        """Make the entry due at ``at`` (epoch seconds); False if it is gone."""
        return bool(RESCHEDULE(self.client, [self.key], [raw, at]))

    def delete(self, raw: str) -> bool:
        """Remove the entry and forget its retry history; if it was still there, release
        the locks its job owns (not when it was gone: it may be on a queue by now)."""
        record = JobRecord(raw)
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(self.key, raw)
        pipe.delete(keys.job_attempts(record.jid))
        removed, _ = pipe.execute()
        if removed:
            release_locks_of(self.client, [record])
        return bool(removed)

    def clear(self) -> int:
        """Remove every entry, their retry histories and their locks; how many were removed.

        Entries are popped lowest score first, ``CLEAR_BATCH`` per round trip, up to the
        size the set had when the clear began (an entry added meanwhile may be removed
        instead of an older one). Each popped entry is gone for every other process, so its
        locks are released and its history deleted exactly once.
        """
        remaining = self.size()
        removed = 0
        while remaining > 0:
            popped: list[tuple[str, float]] = self.client.zpopmin(  # type: ignore[assignment]
                self.key, min(remaining, CLEAR_BATCH)
            )
            if not popped:
                break
            records = [JobRecord(str(raw)) for raw, _ in popped]
            removed += len(records)
            remaining -= len(records)
            self.client.delete(*{keys.job_attempts(record.jid) for record in records})
            release_locks_of(self.client, records)
        return removed

    def kill(self, raw: str) -> bool:
        """Move the entry to the dead set now; False if it is gone. A killed job ends for
        good, as one that ran out of retries: its locks are released (owner-checked)."""
        if self.key == keys.DEAD:
            return False
        moved = bool(KILL(self.client, [self.key, keys.DEAD], [raw, wire.now()]))
        if moved:
            release_locks_of(self.client, [JobRecord(raw)])
        return moved


def scheduled_set(client: redis.Redis) -> JobSet:
    return JobSet(client, keys.SCHEDULE)


def retry_set(client: redis.Redis) -> JobSet:
    return JobSet(client, keys.RETRY)


def dead_set(client: redis.Redis) -> JobSet:
    return JobSet(client, keys.DEAD)
