"""Totals, set sizes, per-queue size and latency, throughput per hour, attempts of a job."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import redis

from cogworker import keys, wire
from cogworker.api.queues import latency_of, queue_names


@dataclass(frozen=True)
class QueueStats:
    name: str
    size: int
    latency: float
    paused: bool


@dataclass(frozen=True)
class Stats:
    processed: int
    failed: int
    scheduled_size: int
    retry_size: int
    dead_size: int
    queues: list[QueueStats] = field(default_factory=list)

    @property
    def enqueued(self) -> int:
        return sum(queue.size for queue in self.queues)

    def to_dict(self) -> dict[str, Any]:
        return {
            "processed": self.processed,
            "failed": self.failed,
            "enqueued": self.enqueued,
            "scheduled_size": self.scheduled_size,
            "retry_size": self.retry_size,
            "dead_size": self.dead_size,
            "queues": [
                {"name": q.name, "size": q.size, "latency": round(q.latency, 3), "paused": q.paused}
                for q in self.queues
            ],
        }


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def stats(client: redis.Redis) -> Stats:
    """Every figure of the dashboard's header, in two round trips whatever the data size."""
    names = queue_names(client)
    pipe = client.pipeline(transaction=False)
    pipe.get(keys.STATS_PROCESSED)
    pipe.get(keys.STATS_FAILED)
    pipe.zcard(keys.SCHEDULE)
    pipe.zcard(keys.RETRY)
    pipe.zcard(keys.DEAD)
    pipe.smembers(keys.PAUSED_QUEUES)
    for name in names:
        pipe.llen(keys.queue(name))
        pipe.lindex(keys.queue(name), -1)
    processed, failed, scheduled, retry, dead, paused, *per_queue = pipe.execute()
    now = wire.now()
    queues = [
        QueueStats(
            name, _int(per_queue[2 * i]), latency_of(per_queue[2 * i + 1], now), name in paused
        )
        for i, name in enumerate(names)
    ]
    return Stats(_int(processed), _int(failed), _int(scheduled), _int(retry), _int(dead), queues)


def throughput(
    client: redis.Redis, hours: int = 24, now: float | None = None
) -> list[dict[str, int]]:
    """Processed and failed per hour, oldest first, ``hours`` buckets ending with this hour."""
    current = int((time.time() if now is None else now) // 3600)
    buckets = list(range(current - hours + 1, current + 1))
    pipe = client.pipeline(transaction=False)
    for hour in buckets:
        pipe.hmget(keys.throughput(hour), ["processed", "failed"])
    return [
        {"time": hour * 3600, "processed": _int(processed), "failed": _int(failed)}
        for hour, (processed, failed) in zip(buckets, pipe.execute(), strict=True)
    ]


def attempts(client: redis.Redis, jid: str) -> list[dict[str, Any]]:
    """The recorded failed attempts of a job, oldest first (at most the last 25)."""
    found = []
    for raw in client.lrange(keys.job_attempts(jid), 0, -1):
        try:
            entry = wire.loads(raw)
        except ValueError:
            continue
        if isinstance(entry, dict):
            found.append(entry)
    return found
