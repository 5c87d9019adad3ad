"""Per job class metrics: the Metrics tab on a full day of buckets, and the drain rate of a
job doing one Redis command (to compare the worker with and without recording them).

    .venv/bin/python bench/metrics_by_class.py tab [CLASSES]
    PYTHONPATH=<tree>/src .venv/bin/python bench/metrics_by_class.py drain [JOBS] [incr|noop]

``tab``: CLASSES (200) classes, each run in every one of the last 120 minutes and 24 hours
(as a busy day leaves it: every minute, ten-minute and hour hash holds every class, each tally
with 12 histogram buckets). For the tab (both periods, every sort) and a class page (both periods):
the server's time to answer (the app called in-process, median of 5), the answer's size, and
the Redis commands one Live refresh costs (INFO commandstats before and after; the commands a
script runs count, the EVALSHA too). Target: under 100 ms each.

``drain``: JOBS (20,000) jobs that each run one INCR (or nothing: ``noop``), enqueued first,
then one worker process (concurrency 10, reliable fetch, per-job logging off) timed from its
spawn until the last ran, as bench/worker.py's W2 does for no-op jobs. Besides the rate it
gives the CPU time the worker process used (user + system, start-up included) and Redis's
(INFO cpu) per job: on a shared machine these vary far less than wall-clock time. It runs
whichever cogworker PYTHONPATH names, so the same script measures a tree before per-class
metrics and one after.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import redis

import cogworker
from cogworker import keys
from cogworker.local.server import RedisServer

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette asks for httpx2; httpx works the same
    from starlette.testclient import TestClient

TARGET_MS = 100.0
HX = {"hx-request": "true"}

INCR_JOBS = '''
import cogworker


class IncrJob(cogworker.Job):
    name = "IncrJob"

    def perform(self):
        cogworker.default_config().redis().incr("bench:incr")


class NoopJob(cogworker.Job):
    name = "NoopJob"

    def perform(self):
        pass
'''


# -- the tab ---------------------------------------------------------------------------------


def fill_day(client: redis.Redis, classes: int, now: float) -> None:
    """Every class in each of the last 120 minute hashes, 12 ten-minute ones and 24 hour
    hashes."""
    from cogworker.metrics.by_class import Tally

    chooser = random.Random(7)
    names = [f"App::Jobs::Class{number:03d}Job" for number in range(classes)]
    pipe = client.pipeline(transaction=False)
    spans = [(keys.class_metrics_minute(int(now) // 60 - back), 60) for back in range(120)]
    spans += [(keys.class_metrics_ten_minutes(int(now) // 600 - back), 600) for back in range(12)]
    spans += [(keys.class_metrics_hour(int(now) // 3600 - back), 3600) for back in range(24)]
    for key, seconds in spans:
        fields = {}
        for name in names:
            runs = chooser.randint(1, 5) * seconds // 60
            start = chooser.randint(20, 60)
            buckets = {start + step: max(1, runs // 12) for step in range(12)}
            tally = Tally(sum(buckets.values()), runs // 20, runs * 5_000, 2_000_000, buckets)
            fields[name] = tally.encode()
        pipe.hset(key, mapping=fields)
        pipe.expire(key, keys.CLASS_METRICS_HOUR_TTL)
    pipe.execute()


def commands(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {str(k).removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def measure(web: TestClient, client: redis.Redis, path: str) -> None:
    times = []
    for _ in range(5):
        started = time.perf_counter()
        answer = web.get(path, headers=HX)
        times.append((time.perf_counter() - started) * 1000)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
    full = web.get(path)
    assert full.status_code == 200
    before = commands(client)
    size = len(web.get(path, headers=HX).content)
    after = commands(client)
    spent = {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}
    spent.pop("info", None)  # the measuring itself
    listed = ", ".join(f"{name} {calls}" for name, calls in sorted(spent.items()))
    median = statistics.median(times)
    verdict = "ok" if median < TARGET_MS else "OVER"
    print(
        f"  {path:<58} {median:7.1f} ms {verdict:>4} {size / 1024:7.1f} KiB   "
        f"refresh: {sum(spent.values())} commands ({listed})"
    )


def tab(classes: int) -> None:
    from cogworker.web import WebSettings, app

    with RedisServer() as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        started = time.perf_counter()
        fill_day(client, classes, time.time())
        memory = client.info("memory")["used_memory"] / 1024 / 1024
        print(
            f"filled {classes} classes x (120 minute + 24 hour) hashes in "
            f"{time.perf_counter() - started:.1f} s; Redis uses {memory:.1f} MB"
        )
        dashboard = app(
            cogworker.Config(redis_url=server.url), WebSettings(session_secret="s" * 64)
        )
        with TestClient(dashboard, base_url="http://bench") as web:
            print("server time (median of 5 Live refreshes), size, Redis commands per refresh:")
            for period in ("hour", "day"):
                for sort in ("total", "class", "p95"):
                    measure(web, client, f"/class_metrics?period={period}&sort={sort}")
            for period in ("hour", "day"):
                page = f"/class_metrics/class?class=App::Jobs::Class007Job&period={period}"
                measure(web, client, page)


# -- the drain -------------------------------------------------------------------------------


def redis_cpu(client: redis.Redis) -> float:
    found = client.info("cpu")
    return float(found["used_cpu_user"]) + float(found["used_cpu_sys"])


def drain(count: int, kind: str) -> None:
    job_class = {"incr": "IncrJob", "noop": "NoopJob"}[kind]
    with RedisServer() as server, tempfile.TemporaryDirectory() as home:
        Path(home, "incr_jobs.py").write_text(INCR_JOBS)
        config = cogworker.Config(redis_url=server.url)
        client = config.redis()
        cogworker.Client(config).push_bulk(
            {"class": job_class, "queue": "default", "args": []} for _ in range(count)
        )
        redis_before = redis_cpu(client)
        env = {**os.environ, "REDIS_URL": server.url}
        started = time.perf_counter()
        flags = ["run", "-r", "incr_jobs", "-c", "10", "--log-level", "WARNING"]
        worker = subprocess.Popen(
            [sys.executable, "-m", "cogworker", *flags],
            env=env,
            cwd=home,
        )
        try:
            deadline = time.monotonic() + 180
            while int(client.get(keys.STATS_PROCESSED) or 0) < count:
                if time.monotonic() > deadline:
                    raise TimeoutError("the drain did not finish")
                time.sleep(0.002)
            elapsed = time.perf_counter() - started
            redis_spent = redis_cpu(client) - redis_before
        finally:
            worker.terminate()
        _, _, usage = os.wait4(worker.pid, 0)
        worker.returncode = 0  # reaped above
        assert kind == "noop" or int(client.get("bench:incr") or 0) == count
        worker_spent = usage.ru_utime + usage.ru_stime
        print(
            f"drain {count:,} {kind} jobs (concurrency 10, incl. worker start): "
            f"{elapsed:.2f} s = {count / elapsed:,.0f} jobs/s; CPU per job: worker "
            f"{worker_spent / count * 1e6:.1f} us, Redis {redis_spent / count * 1e6:.1f} us  "
            f"[{cogworker.__file__}]"
        )


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "tab"
    if mode == "tab":
        tab(int(sys.argv[2]) if len(sys.argv) > 2 else 200)
    elif mode == "drain":
        drain(
            int(sys.argv[2]) if len(sys.argv) > 2 else 20_000,
            sys.argv[3] if len(sys.argv) > 3 else "incr",
        )
    else:
        raise SystemExit(f"unknown mode {mode!r}: tab or drain")


if __name__ == "__main__":
    main()
