"""huey's side of bench/peers.py: the INCR, nap and latency tasks, and the ways to enqueue them.

The consumer loads it as ``huey_consumer peers_huey.huey``. huey has no bulk enqueue:
``Task.map`` (measured as its "bulk") calls the single enqueue, one LPUSH, per item.
"""

from __future__ import annotations

import peers_bodies as bodies
from huey import RedisHuey

# huey's defaults otherwise (blocking BRPOP fetch, results kept unless None)
huey = RedisHuey("peers", url=bodies.URL)


@huey.task()
def incr() -> None:
    bodies.incr()


@huey.task()
def nap(seconds: float) -> None:
    bodies.nap(seconds)


@huey.task()
def latency(enqueued_at: float) -> None:
    bodies.record_latency(enqueued_at)


def enqueue_one(count: int) -> None:
    for _ in range(count):
        incr()


def enqueue_bulk(count: int) -> None:
    incr.map([() for _ in range(count)])


def enqueue_naps(count: int, seconds: float) -> None:
    nap.map([(seconds,) for _ in range(count)])


def enqueue_latency(enqueued_at: float) -> None:
    latency(enqueued_at)
