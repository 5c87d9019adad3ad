"""Totals, set sizes, per-queue size and latency, throughput per hour, attempts of a job."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import redis

from cogworker import keys, wire
from cogworker.api.in_progress import DEFAULT_ORPHAN_THRESHOLD, InProgress, in_progress
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
    in_progress: InProgress = field(default_factory=lambda: InProgress(0, []))

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
            "in_progress": self.in_progress.running,
            "orphaned": self.in_progress.orphaned,
            "gone_processes": [
                {
                    "identity": gone.identity,
                    "jobs": gone.jobs,
                    "last_beat": gone.last_beat,
                    "recover_from": gone.recover_from,
                }
                for gone in self.in_progress.gone
            ],
        }


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def stats(client: redis.Redis, *, orphan_threshold: float = DEFAULT_ORPHAN_THRESHOLD) -> Stats:
    """Every figure of the dashboard's header, in four round trips whatever the data size;
    ``orphan_threshold`` (the workers' setting) dates the recovery of orphaned jobs."""
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
    work = in_progress(client, orphan_threshold=orphan_threshold)
    return Stats(
        _int(processed), _int(failed), _int(scheduled), _int(retry), _int(dead), queues, work
    )


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
