"""dramatiq's side of bench/peers.py: its INCR, nap and latency actors and the ways to enqueue them.

The worker loads it as ``dramatiq peers_dramatiq``. dramatiq has no bulk enqueue:
``group(...).run()`` (measured as its "bulk") sends each message on its own, one Lua
script call per message on the Redis broker.
"""

from __future__ import annotations

import functools
import os
import time

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

URL = os.environ["PEERS_REDIS_URL"]
COUNTER = "peers:incr"
LATENCIES = "peers:latency"
FIRST_START = "peers:first_start"
counter_client = redis.Redis.from_url(URL)

# the default middleware (AgeLimit, TimeLimit, Callbacks, Pipelines, Retries, ...)
dramatiq.set_broker(RedisBroker(url=URL))


@dramatiq.actor
def incr() -> None:
    counter_client.incr(COUNTER)


@dramatiq.actor
def nap(seconds: float) -> None:
    note_first_start()
    time.sleep(seconds)
    counter_client.incr(COUNTER)


@functools.cache  # once per process
def note_first_start() -> None:
    counter_client.set(FIRST_START, repr(time.time()), nx=True)


@dramatiq.actor
def latency(enqueued_at: float) -> None:
    counter_client.rpush(LATENCIES, repr(time.time() - enqueued_at))


def enqueue_one(count: int) -> None:
    for _ in range(count):
        incr.send()


def enqueue_bulk(count: int) -> None:
    dramatiq.group(incr.message() for _ in range(count)).run()


def enqueue_naps(count: int, seconds: float) -> None:
    dramatiq.group(nap.message(seconds) for _ in range(count)).run()


def enqueue_latency(enqueued_at: float) -> None:
    latency.send(enqueued_at)
