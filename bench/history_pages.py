"""The History tab on 100,000 recorded runs, and what its index costs the history writer.

    .venv/bin/python bench/history_pages.py [N]

Fills a private Redis with N runs (default 100,000) written as the history middleware writes
them, index included: 24 job classes (the most common a third of the runs), 6 queues, one
run in ten failed (with a 20-line backtrace), durations from 1 ms to a minute, finish times
over 7 days. Then, for every History view listed in ``PAGES`` and the JSON endpoint: the
server's time to answer (the app called in-process, median of 5), the answer's size and the
Redis commands one request costs (INFO commandstats before and after; commands run inside a
script count, the EVAL too). Target: under 100 ms, except the text filters (they scan).

Last, the history writer's rate (runs/s through ``status_writer.Writer``, which sends 100
writes per pipeline) with the index and without it: 5 alternating rounds of 20,000 runs each
on a fresh Redis, medians and spreads.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import redis

import cogworker
from cogworker import history, keys, status_writer, wire
from cogworker.history import index as history_index
from cogworker.local.server import RedisServer
from cogworker.web import WebSettings, app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette asks for httpx2; httpx works the same
    from starlette.testclient import TestClient

TARGET_MS = 100.0
HX = {"hx-request": "true"}
CLASSES = [f"App::Job{n:02d}" for n in range(24)]
WEIGHTS = [8.0] + [1.0] * 23  # Job00 is a third of the runs
QUEUES = ["default", "critical", "mailers", "low", "reports", "webhooks"]
DAYS = 7
WRITER_RUNS = 20_000
ROUNDS = 5
RETENTION = history.Retention(days=30, max_entries=1_000_000)


def make_entry(i: int, chooser: random.Random, now: float) -> dict[str, Any]:
    finished = now - chooser.uniform(0, DAYS * 86_400)
    duration = min(60_000, int(chooser.lognormvariate(4.5, 1.6)) + 1)
    job = {
        "jid": f"{i:024x}",
        "class": chooser.choices(CLASSES, WEIGHTS)[0],
        "args": [i, f"user{i}@example.com"],
    }
    error = None
    if chooser.random() < 0.1:
        error = RuntimeError(f"upstream said no (request {i})")
    entry = history.build_entry(
        job, chooser.choice(QUEUES), finished - duration / 1000, finished, None
    )
    if error is not None:
        entry.update(
            status="failed",
            error_class="RuntimeError",
            error_message=str(error),
            backtrace=[f"app/jobs/job.py:{n}:in perform" for n in range(20)],
        )
    return entry


def fill(client: redis.Redis, count: int) -> float:
    """Write ``count`` runs as the middleware does; returns the runs/s of the fill."""
    chooser, now = random.Random(7), time.time()
    started = time.perf_counter()
    for start in range(0, count, 2_000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(start + 2_000, count)):
            history.store(pipe, RETENTION, make_entry(i, chooser, now))
        pipe.execute()
    return count / (time.perf_counter() - started)


def commands(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {str(k).removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def measure(web: TestClient, client: redis.Redis, path: str, hx: bool) -> tuple[float, int, str]:
    """Median time (ms) of 5 requests, the answer's size, and the commands one costs."""
    headers = HX if hx else {}
    times = []
    for _ in range(5):
        started = time.perf_counter()
        answer = web.get(path, headers=headers)
        times.append((time.perf_counter() - started) * 1000)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
    before = commands(client)
    size = len(web.get(path, headers=headers).content)
    after = commands(client)
    spent = {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}
    spent.pop("info", None)  # the measuring itself
    listed = ", ".join(f"{name} {calls}" for name, calls in sorted(spent.items()))
    return statistics.median(times), size, f"{sum(spent.values())}: {listed}"


def row(label: str, result: tuple[float, int, str], target: bool = True) -> None:
    median, size, spent = result
    verdict = ("ok" if median < TARGET_MS else "OVER") if target else "scan"
    print(f"  {label:<52} {median:8.1f} ms {verdict:>4} {size / 1024:7.1f} KiB   {spent}")


def pages(count: int) -> list[tuple[str, str, bool]]:
    """(label, path, under the target?) of every History view measured."""
    deep = count // 2 // 25
    found: list[tuple[str, str, bool]] = [
        ("History, first page", "/history", True),
        (f"History, deep page ({deep:,})", f"/history?page={deep}", True),
        ("History failed, first page", "/history?status=failed", True),
    ]
    for column in ("finished_at", "duration", "class", "queue", "jid", "status", "args", "error"):
        for direction in ("asc", "desc"):
            found.append(
                (f"sort {column} {direction}", f"/history?sort={column}&dir={direction}", True)
            )
        found.append(
            (f"sort {column} asc, deep page", f"/history?sort={column}&dir=asc&page={deep}", True)
        )
    found += [
        ("class = App::Job00 (a third)", "/history?class=App::Job00", True),
        ("class = App::Job00, deep page", "/history?class=App::Job00&page=600", True),
        ("class = App::Job05 (1/32)", "/history?class=App::Job05", True),
        ("queue = mailers", "/history?queue=mailers", True),
        ("status failed + class App::Job00", "/history?status=failed&class=App::Job00", True),
        ("class App::Job05 by duration", "/history?class=App::Job05&sort=duration", True),
        ("class App::Job00 by duration", "/history?class=App::Job00&sort=duration", True),
        ("class App::Job00 + queue mailers", "/history?class=App::Job00&queue=mailers", True),
        ("duration >= 1000 ms, by duration", "/history?min_ms=1000&sort=duration", True),
        (
            "duration >= 1000 ms, by duration, deep",
            "/history?min_ms=1000&sort=duration&page=200",
            True,
        ),
        ("duration 100-200 ms (newest first)", "/history?min_ms=100&max_ms=200", True),
        ("duration >= 1000 ms (newest first)", "/history?min_ms=1000", True),
        ("finished in one day (newest first)", time_range(1), True),
        ("finished in one day, deep page", time_range(1) + "&page=100", True),
        ("jid = one run", f"/history?jid={count // 3:024x}", True),
        ("error contains 'request 4242' (scan)", "/history?error=request+4242", False),
        ("args contain 'user77@' (scan)", "/history?args=user77%40", False),
    ]
    return found


def time_range(days_ago: int) -> str:
    until = time.time() - (days_ago - 1) * 86_400
    since = until - 86_400
    fields = [time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment)) for moment in (since, until)]
    return f"/history?since={fields[0]}&until={fields[1]}"


DATA = [
    ("/history/data, first block", "/history/data?start=0&end=25", True),
    ("/history/data, deep block", "/history/data?start=50000&end=50025", True),
    (
        "/history/data, sort duration desc",
        '/history/data?start=0&end=25&sort=[{"colId":"duration","sort":"desc"}]',
        True,
    ),
    (
        "/history/data, class equals",
        '/history/data?start=0&end=25&filter={"class":{"type":"equals","filter":"App::Job05"}}',
        True,
    ),
    (
        "/history/data, duration greaterThan 5000",
        '/history/data?start=0&end=25&filter={"duration":{"filterType":"number",'
        '"type":"greaterThan","filter":5000}}',
        True,
    ),
    (
        "/history/data, class contains (scan)",
        '/history/data?start=0&end=25&filter={"class":{"type":"contains","filter":"job05"}}',
        False,
    ),
]


def writer_rate(url: str, indexed: bool) -> float:
    """Runs/s of the background writer for ``WRITER_RUNS`` runs on an emptied Redis."""
    client = redis.Redis.from_url(url, decode_responses=True)
    client.flushall()
    chooser, now = random.Random(3), time.time()
    writes: list[Callable[[Any], None]] = []
    for i in range(WRITER_RUNS):
        entry = make_entry(i, chooser, now)
        member, outcome, at = wire.dumps(entry), entry["status"], entry["finished_at"]
        if indexed:
            writes.append(
                lambda pipe, m=member, o=outcome, a=at: history._queue_record(
                    pipe, RETENTION, m, o, a
                )
            )
        else:
            writes.append(lambda pipe, m=member, o=outcome, a=at: unindexed(pipe, m, o, a))
    writer = status_writer.Writer(capacity=WRITER_RUNS + 1)
    started = time.perf_counter()
    for i, write in enumerate(writes):
        writer.submit("History", str(i), client, write)
    assert writer.flush(timeout=600)
    spent = time.perf_counter() - started
    assert client.zcard(keys.HISTORY_ALL) == WRITER_RUNS
    return WRITER_RUNS / spent


def unindexed(pipe: Any, member: str, outcome: str, finished_at: float) -> None:
    """What a history write sent before the index (the same sets, trims and counter)."""
    day = keys.history_daily(time.strftime("%Y-%m-%d", time.gmtime(finished_at)))
    for key in (keys.HISTORY_ALL, history.SETS[outcome]):
        pipe.zadd(key, {member: finished_at})
        pipe.zremrangebyscore(key, "-inf", finished_at - RETENTION.days * 86400)
        pipe.zremrangebyrank(key, 0, -(RETENTION.max_entries + 1))
    pipe.hincrby(day, outcome, 1)
    pipe.expire(day, RETENTION.daily_stats_days * 86400)


def writer_rounds(url: str) -> None:
    rates: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(ROUNDS):
        for indexed in (False, True):
            rates[indexed].append(writer_rate(url, indexed))
    for indexed, found in rates.items():
        label = "with the index" if indexed else "without the index"
        print(
            f"  writer {label:<18} median {statistics.median(found):8.0f} runs/s "
            f"(spread {min(found):.0f} to {max(found):.0f})"
        )
    drop = 1 - statistics.median(rates[True]) / statistics.median(rates[False])
    print(f"  the index costs the writer {drop:.0%} of its rate")


def memory(client: redis.Redis) -> None:
    total = 0
    for key in client.scan_iter("cogworker:history:index:*", count=1000):
        total += int(client.memory_usage(key) or 0)
    history_bytes = sum(int(client.memory_usage(key) or 0) for key in history.SETS.values())
    print(f"  memory: history sets {history_bytes / 2**20:.1f} MiB, index {total / 2**20:.1f} MiB")


def catch_up(client: redis.Redis, count: int) -> None:
    """The first reads' catch-up: every run of history:all is checked once (as after an
    upgrade, when the runs were stored before the index existed, or written by Ruby)."""
    client.delete(keys.HISTORY_INDEX_META)
    times = []
    while True:
        started = time.perf_counter()
        synced = history_index.sync(client)
        times.append((time.perf_counter() - started) * 1000)
        if synced.added == 0 and len(times) * history_index.SYNC_CAP >= count:
            break
    listed = ", ".join(f"{spent:.0f}" for spent in times)
    print(f"  catch-up over {count:,} stored runs: {len(times)} reads of {listed} ms; then:")
    started = time.perf_counter()
    history_index.sync(client)
    print(f"  a caught-up read's catch-up: {(time.perf_counter() - started) * 1000:.1f} ms")
    client.delete(*[key for key in client.scan_iter("cogworker:history:index:*", count=1000)])
    started = time.perf_counter()
    while history_index.sync(client).added:
        pass
    spent = time.perf_counter() - started
    print(f"  indexing {count:,} runs a Ruby process wrote (catch-up from nothing): {spent:.1f} s")


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        rate = fill(client, count)
        print(f"filled {count:,} runs (index included) at {rate:,.0f} runs/s")
        memory(client)
        catch_up(client, count)
        dashboard = app(
            cogworker.Config(redis_url=server.url), WebSettings(session_secret="s" * 64)
        )
        with TestClient(dashboard, base_url="http://bench") as web:
            print(
                "  what (the Live refresh fragment)                       median  target"
                "    size   Redis commands per request"
            )
            row("History, full page", measure(web, client, "/history", hx=False))
            for label, path, target in [*pages(count), *DATA]:
                row(label, measure(web, client, path, hx=True), target)
        dashboard.close()
        writer_rounds(server.url)


if __name__ == "__main__":
    main()
