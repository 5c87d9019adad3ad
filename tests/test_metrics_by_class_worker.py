"""A real worker process records each run's class and execution time: the counts per class,
a histogram whose percentiles are within the stated error of the times the worker logged, and
the keys' TTLs."""

from __future__ import annotations

import math
import re
import textwrap
import time
from pathlib import Path

import redis
from conftest import wait_for
from runtime_support import cogworker_env, started_workers

import cogworker
from cogworker import keys
from cogworker.metrics import by_class as metrics_by_class
from cogworker.metrics.by_class import RELATIVE_ERROR, Period

JOBS_MODULE = textwrap.dedent(
    """
    import time

    import cogworker


    class NapJob(cogworker.Job, retry=False):
        name = "NapJob"

        def perform(self, seconds):
            time.sleep(seconds)


    class BrokenJob(cogworker.Job, retry=False):
        name = "BrokenJob"

        def perform(self):
            raise ValueError("broken on purpose")
    """
)

DONE = re.compile(r"done: NapJob jid=\S+ in (\d+\.\d+)s")
NAPS = [0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.12] * 3
BROKEN = 4


def nearest_rank(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def test_a_workers_runs_land_in_the_minute_and_hour_buckets(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    (tmp_path / "nap_jobs.py").write_text(JOBS_MODULE)
    config = cogworker.Config(redis_url=redis_url)
    client = cogworker.Client(config)
    for seconds in NAPS:
        client.push({"class": "NapJob", "queue": "default", "args": [seconds]})
    for _ in range(BROKEN):
        client.push({"class": "BrokenJob", "queue": "default", "args": []})
    started = time.time()
    with started_workers(tmp_path) as workers:
        worker = workers.start(
            ["run", "-r", "nap_jobs", "-c", "3", "--log-level", "INFO"], cogworker_env(redis_url)
        )

        def recorded() -> bool:
            found = metrics_by_class.summaries(r, Period.DAY).classes
            return (
                found.get("NapJob", metrics_by_class.Tally()).executions == len(NAPS)
                and found.get("BrokenJob", metrics_by_class.Tally()).executions == BROKEN
            )

        wait_for(recorded, timeout=60)
        assert worker.stop() == 0
        logged = [float(seconds) for seconds in DONE.findall(worker.output())]
    hour = metrics_by_class.summaries(r, Period.HOUR).classes
    day = metrics_by_class.summaries(r, Period.DAY).classes
    assert hour == day  # all within this hour (unless the test straddled one: then still equal)
    nap, broken = day["NapJob"], day["BrokenJob"]
    assert (nap.executions, nap.failures) == (len(NAPS), 0)
    assert (broken.executions, broken.failures) == (BROKEN, BROKEN)
    assert len(logged) == len(NAPS)
    for fraction in (0.5, 0.95):
        true = nearest_rank(logged, fraction)
        # the log rounds to the millisecond: allow that on top of the stated error
        assert abs(nap.percentile(fraction) - true) <= true * RELATIVE_ERROR + 0.0005, fraction
    assert abs(nap.max - max(logged)) <= 0.0005
    assert nap.max >= max(NAPS)
    ended = time.time()
    minutes = range(int(started) // 60, int(ended) // 60 + 1)
    minute_keys = [keys.class_metrics_minute(m) for m in minutes]
    assert any(r.exists(key) for key in minute_keys)
    minute_keys = [key for key in minute_keys if r.exists(key)]
    for key in minute_keys:
        assert 0 < r.ttl(key) <= keys.CLASS_METRICS_MINUTE_TTL
    hour_key = keys.class_metrics_hour(int(started) // 3600)
    if not r.exists(hour_key):  # the runs fell in the next hour
        hour_key = keys.class_metrics_hour(int(started) // 3600 + 1)
    assert keys.CLASS_METRICS_MINUTE_TTL < r.ttl(hour_key) <= keys.CLASS_METRICS_HOUR_TTL
