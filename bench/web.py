"""The dashboard on a big Redis: 100,000 jobs in each of the scheduled, retry and dead sets and
in a queue, a few live processes with running jobs, 1,000 cron entries (their crons all
different), full counters for the Overview's charts (24 hours, 182 days) and 100,000 history
runs (with their index; every History view is timed in ``bench/history_pages.py``).

    .venv/bin/python bench/web.py [N]

For each tab and fragment: the server's time to answer (the app called in-process, median of
5), the size of the answer, and the Redis commands one Live refresh of it costs (INFO
commandstats before and after; commands run inside a script count, the EVALSHA too). Target:
under 100 ms each; the search and the explanation scan, and their time is quoted instead.
"""

from __future__ import annotations

import sys
import time
import warnings
from typing import Any

import history_pages  # bench/ is the script's directory, first on sys.path
import redis
from history_pages import measure

import cogworker
from cogworker import keys, wire
from cogworker.history import index as history_index
from cogworker.local.server import RedisServer
from cogworker.periodic import Entry
from cogworker.web import WebSettings, app
from cogworker.web.tabs.schedules_data import crons

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette asks for httpx2; httpx works the same
    from starlette.testclient import TestClient

TARGET_MS = 100.0
IDENTITIES = [f"web-{n}:{4000 + n}:{n:012x}" for n in range(3)]
SCHEDULES = 1_000
ZONES = ("", " Europe/Berlin", " America/New_York", " Asia/Tokyo")


def fill(client: redis.Redis, count: int) -> str:
    """Fill the three sets and the queue ``default``; returns a dead entry's jid."""
    now = time.time()
    for start in range(0, count, 5_000):
        pipe = client.pipeline(transaction=False)
        sets: dict[str, dict[str, float]] = {k: {} for k in (keys.SCHEDULE, keys.RETRY, keys.DEAD)}
        queued = []
        for i in range(start, min(start + 5_000, count)):
            job = {
                "class": "MailerJob" if i % 3 else "ReportJob",
                "args": [i, f"user{i}@example.com"],
                "jid": f"{i:024x}",
                "queue": "default",
                "retry": True,
                "created_at": now - i,
                "enqueued_at": now - i,
                "error_class": "RuntimeError",
                "error_message": f"failure {i}",
                "failed_at": now - i,
                "retry_count": 1 + i % 5,
            }
            raw = wire.dumps(job)
            sets[keys.SCHEDULE][raw] = now + i
            sets[keys.RETRY][raw] = now + i
            sets[keys.DEAD][raw] = now - i
            queued.append(raw)
        for key, members in sets.items():
            pipe.zadd(key, members)
        pipe.lpush(keys.queue("default"), *queued)
        pipe.execute()
    client.sadd(keys.QUEUES, "default", "mailers", "critical")
    for i in range(25):
        client.rpush(keys.job_attempts(f"{count // 2:024x}"), wire.dumps({"attempt": i + 1}))
    plant_processes(client)
    fill_schedules(client)
    fill_counters(client)
    return f"{count // 2:024x}"


def fill_schedules(client: redis.Redis, count: int = SCHEDULES) -> None:
    """``count`` published cron entries, no two crons alike; most ran, some are disabled, some
    until_executed ones hold their running lock."""
    now = time.time()
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        cron = f"{i % 60} {(i // 60) % 24} * * {i % 7}{ZONES[i % len(ZONES)]}"
        unique = "until_executed" if i % 3 == 0 else None
        entry = Entry(cron, f"Reports::Job{i}", [{"report": i}], 0, unique, "reports")
        pipe.hset(keys.PERIODIC_SCHEDULE, entry.pjid, entry.published())
        if i % 4:
            pipe.set(keys.periodic_last_slot(entry.pjid), entry.schedule.slot(now))
        if i % 10 == 0:
            pipe.sadd(keys.PERIODIC_DISABLED, entry.pjid)
        if i % 30 == 0:
            pipe.set(keys.periodic_running(entry.pjid), f"run{i}", ex=3600)
    pipe.execute()


def fill_counters(client: redis.Redis) -> None:
    """Every hourly throughput bucket of the last day and every daily count of 182 days."""
    hour = int(time.time()) // 3600
    pipe = client.pipeline(transaction=False)
    for back in range(24):
        pipe.hset(keys.throughput(hour - back), mapping={"processed": 900 + back, "failed": back})
    for back in range(182):
        day = time.strftime("%Y-%m-%d", time.gmtime(time.time() - back * 86400))
        pipe.hset(keys.history_daily(day), mapping={"success": 20_000 + back, "failed": back})
    pipe.execute()


def plant_processes(client: redis.Redis) -> None:
    seconds, _ = client.time()
    for n, identity in enumerate(IDENTITIES):
        info = {
            "hostname": identity.split(":")[0],
            "pid": 4000 + n,
            "concurrency": 10,
            "queues": ["default", "mailers"],
            "started_at": seconds - 3600,
            "rss_kb": 81_000,
        }
        client.hset(
            keys.process(identity),
            mapping={"info": wire.dumps(info), "busy": "2", "quiet": "false", "beat": str(seconds)},
        )
        client.expire(keys.process(identity), 3600)
        client.sadd(keys.PROCESSES, identity)
        for thread in range(2):
            payload = {
                "class": "ReportJob",
                "jid": f"run{n}{thread}",
                "queue": "default",
                "args": [n, thread],
            }
            entry = {"queue": "default", "payload": payload, "run_at": seconds - 30}
            client.hset(keys.workers(identity), f"tid-{thread}", wire.dumps(entry))


FRAGMENTS = (
    "/overview/redis",
    "/overview/throughput",
    "/overview/runs",
    "/workers/summary",
    "/jobs/explain",
)


def measure_once(web: TestClient, path: str) -> tuple[float, int, str]:
    """One request's time (ms) and size: for a first, cold request."""
    started = time.perf_counter()
    answer = web.get(path)
    spent = (time.perf_counter() - started) * 1000
    assert answer.status_code == 200, (path, answer.status_code)
    return spent, len(answer.content), "(first request)"


def row(label: str, result: tuple[float, int, str], target: bool = True) -> None:
    median, size, spent = result
    verdict = ("ok" if median < TARGET_MS else "OVER") if target else "scan"
    print(f"  {label:<44} {median:8.1f} ms {verdict:>4} {size / 1024:7.1f} KiB   {spent}")


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        started = time.perf_counter()
        dead_jid = fill(client, count)
        print(
            f"filled {count:,} jobs in each of schedule, retry, dead and queue default in "
            f"{time.perf_counter() - started:.1f} s"
        )
        history_pages.fill(client, count)
        while history_index.sync(client).added:  # the runs' first reads, done ahead
            pass
        dashboard = app(
            cogworker.Config(redis_url=server.url), WebSettings(session_secret="s" * 64)
        )
        with TestClient(dashboard, base_url="http://bench") as web:
            run(web, client, count, dead_jid)
        dashboard.close()


def run(web: TestClient, client: redis.Redis, count: int, dead_jid: str) -> None:
    per_page = 25
    middle_all = (count * 4 // 2) // per_page
    middle_dead = (count // 2) // per_page
    dead_entry = dead_entry_of(client, dead_jid)
    pages: list[tuple[str, str, bool]] = [
        ("Overview A (with both charts), page", "/overview?layout=a", True),
        ("Overview throughput chart fragment", "/overview/throughput", True),
        ("Overview runs chart fragment (month)", "/overview/runs?period=month", True),
        ("Overview runs chart fragment (6 months)", "/overview/runs?period=6months", True),
        ("Overview throughput_data JSON", "/overview/throughput_data", True),
        ("Overview runs_data JSON (6 months)", "/overview/runs_data?period=6months", True),
        ("Overview B (queue default), page", "/overview?layout=b&queue=default", True),
        ("Overview Redis fragment", "/overview/redis", True),
        ("Workers, page", "/workers", True),
        (f"Schedules ({SCHEDULES:,} entries), page", "/schedules", True),
        ("Schedules, search 'job99' (11 match)", "/schedules?q=job99", True),
        ("cluster bar fragment", "/workers/summary", True),
        ("Jobs All, first page", "/jobs", True),
        (f"Jobs All, middle page ({middle_all:,})", f"/jobs?page={middle_all}", True),
        ("Jobs All, last page", f"/jobs?page={(count * 4 + 6 + per_page - 1) // per_page}", True),
    ]
    for status in ("Enqueued", "Running", "Scheduled", "Retrying", "Dead"):
        pages.append((f"Jobs {status}, first page", f"/jobs?status={status}", True))
    pages += [
        (
            f"Jobs Dead, middle page ({middle_dead:,})",
            f"/jobs?status=Dead&page={middle_dead}",
            True,
        ),
        (
            "Jobs Dead, detail panel",
            f"/jobs?status=Dead&selected={dead_jid}&entry={dead_entry}",
            True,
        ),
        ("Jobs search All 'report' (broad)", "/jobs?q=report", False),
        (f"Jobs search All '{dead_jid[-8:]}' (one jid)", f"/jobs?q={dead_jid[-8:]}", False),
        (f"Jobs search Dead '{dead_jid[-8:]}'", f"/jobs?status=Dead&q={dead_jid[-8:]}", False),
        ("Jobs search Dead 'é' (no prefilter)", "/jobs?status=Dead&q=%C3%A9", False),
        ("Jobs panel explanation (api.explain)", f"/jobs/explain?selected={dead_jid}", False),
        ("History, page", "/history", True),
        (
            f"History, middle page ({count // 2 // per_page:,})",
            f"/history?page={count // 2 // per_page}",
            True,
        ),
        ("History sorted by duration, page", "/history?sort=duration", True),
        ("History class = App::Job05 by duration", "/history?class=App::Job05&sort=duration", True),
        ("History duration >= 1000 ms, page", "/history?min_ms=1000", True),
        ("History data JSON (25 rows)", "/history/data?start=0&end=25", True),
        ("History error contains (scan)", "/history?error=request+4242", False),
    ]
    print(
        "  what (page: full page; refresh: Live fragment)    median  target    size   "
        "Redis commands per request"
    )
    crons.clear()  # the first Schedules page after a start parses every cron
    row("Schedules, first page after a start (no cron parsed yet)", measure_once(web, "/schedules"))
    for label, path, target in pages:
        fragment_only = path.startswith(FRAGMENTS)
        if not fragment_only and target:
            row(label, measure(web, client, path, hx=False))
        shown = label.replace(", page", "") + ("" if fragment_only else ", refresh")
        row(shown if target else label, measure(web, client, path, hx=True), target)


def dead_entry_of(client: redis.Redis, jid: str) -> str:
    from cogworker.web.job_sources import score_hint
    from cogworker.web.urls import digest

    raw, score = next((m, s) for m, s in scan_dead(client) if f'"jid":"{jid}"' in m)
    return f"dead:{digest(raw)}:{score_hint(score)}"


def scan_dead(client: redis.Redis) -> Any:
    start = 0
    while batch := client.zrevrange(keys.DEAD, start, start + 999, withscores=True):
        yield from batch
        start += 1000


if __name__ == "__main__":
    main()
