"""The read API's figures (``api/stats.py``): stats, throughput per hour and the attempts of
a job, checked against a Redis state the test wrote itself; and the read API as a whole loads
nothing of the worker runtime."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import redis
from api_support import (
    client,
    lpush,
    payload,
    producer,
    worker,
    zadd,
)
from runtime_support import (
    closing_pools,
)

from cogworker import api, keys

_close_pools = pytest.fixture(autouse=True)(closing_pools)
_fixtures = (client, producer, worker)  # from api_support, named here for pytest


# -- stats -----------------------------------------------------------------------------------


def test_the_read_api_loads_nothing_of_the_worker_runtime() -> None:
    """A dashboard or an admin command reads through the API without loading the worker."""
    probe = (
        "import sys, cogworker.api; "
        "print(sorted(m for m in sys.modules if m.startswith('cogworker.worker')))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert shown.stdout.strip() == "[]"


def test_stats_of_an_empty_redis_are_all_zero(client: redis.Redis) -> None:
    figures = api.stats(client)
    assert (figures.processed, figures.failed, figures.enqueued) == (0, 0, 0)
    assert (figures.scheduled_size, figures.retry_size, figures.dead_size) == (0, 0, 0)
    assert figures.queues == []


def test_stats_figures_match_a_known_redis_state(r: redis.Redis, client: redis.Redis) -> None:
    now = time.time()
    r.set(keys.STATS_PROCESSED, 7)
    r.set(keys.STATS_FAILED, 3)
    lpush(r, "default", *(payload(enqueued_at=now - 50 + i) for i in range(3)))
    lpush(r, "low", payload(enqueued_at=now - 5), payload(enqueued_at=now - 1))
    r.sadd(keys.QUEUES, "mail")  # known, empty
    r.lpush(keys.queue("unregistered"), *["x"] * 4)  # not in cogworker:queues: not counted
    r.sadd(keys.PAUSED_QUEUES, "mail")
    for i in range(2):
        zadd(r, keys.SCHEDULE, payload(at=now + 60), now + 60 + i)
    zadd(r, keys.RETRY, payload(), now + 30)
    for i in range(4):
        zadd(r, keys.DEAD, payload(), now - i)

    figures = api.stats(client)

    assert (figures.processed, figures.failed) == (7, 3)
    assert figures.enqueued == 5
    assert (figures.scheduled_size, figures.retry_size, figures.dead_size) == (2, 1, 4)
    assert [(q.name, q.size, q.paused) for q in figures.queues] == [
        ("default", 3, False),
        ("low", 2, False),
        ("mail", 0, True),
    ]
    default, low, mail = figures.queues
    assert 49 <= default.latency <= 50 + (time.time() - now)  # the tail: the oldest job
    assert 4 <= low.latency <= 5 + (time.time() - now)
    assert mail.latency == 0
    as_dict = figures.to_dict()
    assert {k: as_dict[k] for k in as_dict if k != "queues"} == {
        "processed": 7,
        "failed": 3,
        "enqueued": 5,
        "scheduled_size": 2,
        "retry_size": 1,
        "dead_size": 4,
        "in_progress": 0,
        "orphaned": 0,
        "gone_processes": [],
    }
    assert [q["name"] for q in as_dict["queues"]] == ["default", "low", "mail"]
    assert as_dict["queues"][0]["latency"] == round(default.latency, 3)


# -- throughput, attempts --------------------------------------------------------------------


def test_throughput_one_bucket_per_hour_oldest_first(r: redis.Redis, client: redis.Redis) -> None:
    now = 1_750_000_000.0
    hour = int(now // 3600)
    r.hset(keys.throughput(hour), mapping={"processed": 5, "failed": 1})
    r.hset(keys.throughput(hour - 2), mapping={"processed": 2})
    r.hset(keys.throughput(hour - 5), mapping={"processed": 99})  # outside the window

    series = api.throughput(client, hours=4, now=now)

    assert series == [
        {"time": (hour - 3) * 3600, "processed": 0, "failed": 0},
        {"time": (hour - 2) * 3600, "processed": 2, "failed": 0},
        {"time": (hour - 1) * 3600, "processed": 0, "failed": 0},
        {"time": hour * 3600, "processed": 5, "failed": 1},
    ]


def test_attempts_oldest_first_skipping_unreadable_entries(
    r: redis.Redis, client: redis.Redis
) -> None:
    key = keys.job_attempts("j1")
    r.rpush(key, '{"attempt":1,"outcome":"retrying"}', "garbage", '{"attempt":2,"outcome":"dead"}')

    assert api.attempts(client, "j1") == [
        {"attempt": 1, "outcome": "retrying"},
        {"attempt": 2, "outcome": "dead"},
    ]
    assert api.attempts(client, "unknown") == []
