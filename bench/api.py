"""Introspection cost on a big Redis: 100,000 jobs in each of the scheduled, retry and dead
sets and in a queue, and 100,000 history records.

    python3 dev.py bench api            (or: .venv/bin/python bench/api.py [N])

Unfiltered reads (stats, sizes, a page of each set and of history) must each take under 50 ms;
filtered or searched pages and lookups by jid scan, and their time is reported.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import cogworker
from cogworker import api, history, keys, wire
from cogworker.local.server import RedisServer


def fill(client: object, count: int) -> str:
    """Fill every set, a queue and history; returns a jid that sits in the middle."""
    now = time.time()
    middle = ""
    for start in range(0, count, 5_000):
        pipe = client.pipeline(transaction=False)  # type: ignore[attr-defined]
        chunk: dict[str, dict[str, float]] = {
            k: {} for k in (keys.SCHEDULE, keys.RETRY, keys.DEAD, keys.HISTORY_ALL)
        }
        queued = []
        for i in range(start, min(start + 5_000, count)):
            jid = f"{i:024x}"
            if i == count // 2:
                middle = jid
            job = {
                "class": "ReportJob",
                "args": [i, "user@example.com"],
                "jid": jid,
                "queue": "default",
                "retry": True,
                "created_at": now - i,
                "enqueued_at": now - i,
                "error_class": "RuntimeError",
                "error_message": f"failure {i}",
                "failed_at": now - i,
                "retry_count": 1,
            }
            raw = wire.dumps(job)
            chunk[keys.SCHEDULE][raw] = now + i
            chunk[keys.RETRY][raw] = now + i
            chunk[keys.DEAD][raw] = now - i
            queued.append(raw)
            run = {
                "jid": jid,
                "class": "MailerJob" if i % 3 else "ReportJob",
                "queue": "default",
                "args": [i],
                "status": "success" if i % 5 else "failed",
                "started_at": now - i - 0.05 * (i % 7),
                "finished_at": now - i,
            }
            chunk[keys.HISTORY_ALL][wire.dumps(run)] = now - i
        for key, members in chunk.items():
            pipe.zadd(key, members)
        pipe.lpush(keys.queue("default"), *queued)
        pipe.sadd(keys.QUEUES, "default")
        pipe.execute()
    return middle


def timed(label: str, call: Callable[[], object], limit_ms: float | None) -> None:
    times = []
    for _ in range(5):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    median = statistics.median(times)
    verdict = "" if limit_ms is None else (" ok" if median < limit_ms else " OVER TARGET")
    target = f" (target < {limit_ms:.0f} ms){verdict}" if limit_ms else " (scan)"
    print(f"  {label:<52} {median:8.2f} ms{target}")


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    with RedisServer() as server:
        client = cogworker.Config(redis_url=server.url).redis()
        started = time.perf_counter()
        middle = fill(client, count)
        print(
            f"filled {count:,} jobs per set/queue and {count:,} history records in "
            f"{time.perf_counter() - started:.1f} s; median of 5 calls each:"
        )
        dead = api.dead_set(client)
        timed("stats (totals, set sizes, every queue)", lambda: api.stats(client), 50)
        timed(
            "sizes of the three sets",
            lambda: [api.scheduled_set(client).size(), api.retry_set(client).size(), dead.size()],
            50,
        )
        timed("queue page (50 newest)", lambda: api.Queue(client, "default").page(0, 50), 50)
        timed("queue latency", lambda: api.Queue(client, "default").latency(), 50)
        for name, job_set in (
            ("scheduled", api.scheduled_set(client)),
            ("retry", api.retry_set(client)),
            ("dead", dead),
        ):
            timed(f"{name} page (50)", lambda s=job_set: s.page(0, 50), 50)
            timed(f"{name} page (50) deep, offset 90,000", lambda s=job_set: s.page(90_000, 50), 50)
        timed(
            "history page (100 newest, unfiltered)",
            lambda: history.query(client, offset=0, limit=100),
            50,
        )
        timed(
            "history page sorted by finished_at asc",
            lambda: history.query(client, sort='[{"colId":"finished_at","sort":"asc"}]'),
            50,
        )
        timed(
            "history filtered: class contains 'mailer'",
            lambda: history.query(
                client, filters='{"class":{"type":"contains","filter":"mailer"}}'
            ),
            None,
        )
        timed("history by jid", lambda: history.query(client, jid=middle), None)
        timed(
            "history sorted by duration",
            lambda: history.query(client, sort='[{"colId":"duration","sort":"desc"}]'),
            None,
        )
        timed("dead set: find by jid", lambda: dead.find_jobs(middle), None)
        timed("queue: find by jid", lambda: api.Queue(client, "default").find_job(middle), None)


if __name__ == "__main__":
    main()
