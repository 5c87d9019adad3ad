"""dramatiq's side of bench/peers.py: its INCR, nap and latency actors and the ways to enqueue them.

The worker loads it as ``dramatiq peers_dramatiq``. dramatiq has no bulk enqueue:
``group(...).run()`` (measured as its "bulk") sends each message on its own, one Lua
script call per message on the Redis broker.
"""

from __future__ import annotations

import dramatiq
import peers_bodies as bodies
from dramatiq.brokers.redis import RedisBroker

# the default middleware (AgeLimit, TimeLimit, Callbacks, Pipelines, Retries, ...)
dramatiq.set_broker(RedisBroker(url=bodies.URL))


@dramatiq.actor
def incr() -> None:
    bodies.incr()


@dramatiq.actor
def nap(seconds: float) -> None:
    bodies.nap(seconds)


@dramatiq.actor
def latency(enqueued_at: float) -> None:
    bodies.record_latency(enqueued_at)


def enqueue_one(count: int) -> None:
    for _ in range(count):
        incr.send()


def enqueue_bulk(count: int) -> None:
    dramatiq.group(incr.message() for _ in range(count)).run()


def enqueue_naps(count: int, seconds: float) -> None:
    dramatiq.group(nap.message(seconds) for _ in range(count)).run()


def enqueue_latency(enqueued_at: float) -> None:
    latency.send(enqueued_at)
