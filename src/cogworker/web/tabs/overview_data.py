"""What the Overview shows, read through ``cogworker.api``: counters, queues, one queue's jobs,
and the Redis server's figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis

from cogworker import api
from cogworker.api.records import JobRecord
from cogworker.web import urls
from cogworker.web.queue_actions import Share, share_of_set
from cogworker.web.settings import WebSettings

REDIS_FIELDS = (
    ("Version", "redis_version"),
    ("Uptime (days)", "uptime_in_days"),
    ("Connections", "connected_clients"),
    ("Memory usage", "used_memory_human"),
    ("Peak memory usage", "used_memory_peak_human"),
)


@dataclass(frozen=True)
class QueueRow:
    name: str
    size: int
    latency: float
    paused: bool
    latency_share: int  # percent of the largest latency, for the bar


@dataclass(frozen=True)
class JobRow:
    position: int  # 0 = newest
    jid: str
    job_class: str
    args: list[Any]
    enqueued_at: float | None
    raw: str
    readable: bool

    @property
    def fingerprint(self) -> str:
        return urls.digest(self.raw)


@dataclass(frozen=True)
class QueueDetail:
    name: str
    known: bool
    paused: bool
    size: int
    running: int
    retrying: Share
    dead: Share
    jobs: list[JobRow]
    page: int
    pages: int


@dataclass(frozen=True)
class Overview:
    stats: api.Stats
    queues: list[QueueRow]
    detail: QueueDetail | None = None
    redis_info: list[tuple[str, str]] = field(default_factory=list)


def queue_rows(stats: api.Stats) -> list[QueueRow]:
    longest = max([q.latency for q in stats.queues] + [0.001])
    return [
        QueueRow(q.name, q.size, q.latency, q.paused, round(q.latency / longest * 100))
        for q in stats.queues
    ]


def job_row(position: int, record: JobRecord) -> JobRow:
    item = record.item or {}
    stamp = item.get("enqueued_at") or item.get("created_at")
    return JobRow(
        position=position,
        jid=record.jid,
        job_class=record.job_class,
        args=record.args,
        enqueued_at=float(stamp) if isinstance(stamp, int | float) else None,
        raw=record.raw,
        readable=record.readable,
    )


def queue_detail(
    client: redis.Redis, stats: api.Stats, name: str, page: int, settings: WebSettings
) -> QueueDetail:
    queue = api.Queue(client, name)
    known = next((q for q in stats.queues if q.name == name), None)
    size = known.size if known is not None else queue.size()
    per_page = settings.queue_page_size
    pages = max((size + per_page - 1) // per_page, 1)
    page = min(page, pages)
    offset = (page - 1) * per_page
    records = queue.page(offset, per_page)
    running = sum(1 for work in api.WorkSet(client) if work.queue == name)
    limit = settings.queue_scan_limit
    return QueueDetail(
        name=name,
        known=known is not None,
        paused=known.paused if known is not None else queue.paused(),
        size=size,
        running=running,
        retrying=share_of_set(client, api.retry_set(client).key, name, limit),
        dead=share_of_set(client, api.dead_set(client).key, name, limit),
        jobs=[job_row(offset + i, record) for i, record in enumerate(records)],
        page=page,
        pages=pages,
    )


def redis_info(client: redis.Redis) -> list[tuple[str, str]]:
    """(label, value) of the server's INFO figures, ``n/a`` for a missing one."""
    info = client.info()
    return [(label, str(info[name]) if name in info else "n/a") for label, name in REDIS_FIELDS]


def overview(
    client: redis.Redis,
    settings: WebSettings,
    *,
    queue: str | None = None,
    page: int = 1,
    with_redis: bool = False,
) -> Overview:
    """Layout A's figures (``queue`` None), or layout B's for ``queue`` (the first known
    queue when it is empty)."""
    stats = api.stats(client)
    rows = queue_rows(stats)
    detail = None
    if queue is not None:
        chosen = queue or (rows[0].name if rows else "")
        if chosen:
            detail = queue_detail(client, stats, chosen, page, settings)
    return Overview(stats, rows, detail, redis_info(client) if with_redis else [])
