"""dramatiq's side of bench/peers.py: the INCR actor and its two ways to enqueue.

The worker loads it as ``dramatiq peers_dramatiq``. dramatiq has no bulk enqueue:
``group(...).run()`` (measured as its "bulk") sends each message on its own, one Lua
script call per message on the Redis broker.
"""

from __future__ import annotations

import os

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

URL = os.environ["PEERS_REDIS_URL"]
COUNTER = "peers:incr"
counter_client = redis.Redis.from_url(URL)

# the default middleware (AgeLimit, TimeLimit, Callbacks, Pipelines, Retries, ...)
dramatiq.set_broker(RedisBroker(url=URL))


@dramatiq.actor
def incr() -> None:
    counter_client.incr(COUNTER)


def enqueue_one(count: int) -> None:
    for _ in range(count):
        incr.send()


def enqueue_bulk(count: int) -> None:
    dramatiq.group(incr.message() for _ in range(count)).run()
