"""huey's side of bench/peers.py: the INCR, nap and latency tasks, and the ways to enqueue them.

The consumer loads it as ``huey_consumer peers_huey.huey``. huey has no bulk enqueue:
``Task.map`` (measured as its "bulk") calls the single enqueue, one LPUSH, per item.
"""

from __future__ import annotations

import functools
import os
import time

import redis
from huey import RedisHuey

URL = os.environ["PEERS_REDIS_URL"]
COUNTER = "peers:incr"
LATENCIES = "peers:latency"
FIRST_START = "peers:first_start"
counter_client = redis.Redis.from_url(URL)

# huey's defaults otherwise (blocking BRPOP fetch, results kept unless None)
huey = RedisHuey("peers", url=URL)


@huey.task()
def incr() -> None:
    counter_client.incr(COUNTER)


@huey.task()
def nap(seconds: float) -> None:
    note_first_start()
    time.sleep(seconds)
    counter_client.incr(COUNTER)


@functools.cache  # once per process
def note_first_start() -> None:
    counter_client.set(FIRST_START, repr(time.time()), nx=True)


@huey.task()
def latency(enqueued_at: float) -> None:
    counter_client.rpush(LATENCIES, repr(time.time() - enqueued_at))


def enqueue_one(count: int) -> None:
    for _ in range(count):
        incr()


def enqueue_bulk(count: int) -> None:
    incr.map([() for _ in range(count)])


def enqueue_naps(count: int, seconds: float) -> None:
    nap.map([(seconds,) for _ in range(count)])


def enqueue_latency(enqueued_at: float) -> None:
    latency(enqueued_at)
