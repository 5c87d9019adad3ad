"""The bookkeeper sends per-class metrics at most every METRICS_EVERY seconds however busy it
is, sends what an idle worker has left after that second, and sends everything at stop and
flush."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis
from conftest import wait_for

import cogworker
from cogworker.fetch.strategy import FetchStrategy
from cogworker.metrics import by_class as metrics_by_class
from cogworker.metrics.by_class import Period
from cogworker.worker.bookkeeper import METRICS_EVERY, Bookkeeper
from cogworker.worker.ledger import Ledger

IDENTITY = "metrics-host:1:0123456789ab"


@pytest.fixture
def bookkeeper(config: cogworker.Config) -> Iterator[Bookkeeper]:
    strategy = FetchStrategy(config, IDENTITY, threading.Event())
    keeper = Bookkeeper(config.redis(), IDENTITY, strategy, Ledger())
    keeper.start()
    yield keeper
    keeper.stop()


def executions(r: redis.Redis, job_class: str) -> int:
    return metrics_by_class.summaries(r, Period.HOUR).classes.get(
        job_class, metrics_by_class.Tally()
    ).executions


def script_calls(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    names = ("cmdstat_evalsha", "cmdstat_eval")
    return sum(int(stats.get(name, {}).get("calls", 0)) for name in names)


def test_a_busy_bookkeeper_sends_metrics_about_once_a_second(
    bookkeeper: Bookkeeper, r: redis.Redis
) -> None:
    before = script_calls(r)
    started = time.monotonic()
    runs = 0
    while time.monotonic() - started < 2.5 * METRICS_EVERY:
        bookkeeper.register("t1", "{}")
        bookkeeper.finished("t1", processed=1, job_class="BusyJob", seconds=0.001)
        bookkeeper.wake()  # a batch (its deregistration) leaves now, as after every job
        runs += 1
        time.sleep(0.002)
    bookkeeper.flush()
    elapsed = time.monotonic() - started
    assert executions(r, "BusyJob") == runs
    # one per METRICS_EVERY, one more where the minute turned, one for the flush
    assert script_calls(r) - before <= elapsed / METRICS_EVERY + 3, runs


def test_an_idle_bookkeeper_sends_what_is_left_after_a_second(
    bookkeeper: Bookkeeper, r: redis.Redis
) -> None:
    bookkeeper.finished("t1", failed=1, job_class="LastJob", seconds=0.2)
    bookkeeper.wake()
    wait_for(lambda: executions(r, "LastJob") == 1, timeout=METRICS_EVERY + 10)
    found = metrics_by_class.summaries(r, Period.HOUR).classes["LastJob"]
    assert (found.failures, found.max_us) == (1, 200_000)


def test_stop_sends_the_metrics_at_once(config: cogworker.Config, r: redis.Redis) -> None:
    strategy = FetchStrategy(config, IDENTITY, threading.Event())
    keeper = Bookkeeper(config.redis(), IDENTITY, strategy, Ledger())
    keeper.start()
    keeper.finished("t1", processed=1, job_class="StopJob", seconds=0.01)
    keeper.stop()
    assert executions(r, "StopJob") == 1
