"""Queues: size, latency, paging, lookup, deletion, clearing, pausing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import redis

from cogworker import keys, wire
from cogworker.api.records import JobRecord, paged, with_jid

PAGE = 100


def queue_names(client: redis.Redis) -> list[str]:
    """Every known queue (``cogworker:queues``), sorted."""
    return sorted(str(name) for name in client.smembers(keys.QUEUES))


def latency_of(raw: object, now: float | None = None) -> float:
    """Seconds the oldest job has waited (its ``enqueued_at`` or ``created_at``); 0 if none."""
    if not isinstance(raw, str):
        return 0.0
    try:
        job = wire.loads(raw)
    except ValueError:
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
        return next(with_jid(self, jid), None)

    def delete(self, raw: str) -> int:
        """Remove every copy of exactly ``raw``; how many were removed."""
        return int(self.client.lrem(self.key, 0, raw))

    def clear(self) -> int:
        """Drop every job (the name stays known); how many there were."""
        pipe = self.client.pipeline(transaction=True)
        pipe.llen(self.key)
        pipe.delete(self.key)
        size, _ = pipe.execute()
        return int(size)

    def pause(self) -> None:
        self.client.sadd(keys.PAUSED_QUEUES, self.name)

    def resume(self) -> None:
        self.client.srem(keys.PAUSED_QUEUES, self.name)

    def paused(self) -> bool:
        return bool(self.client.sismember(keys.PAUSED_QUEUES, self.name))
