"""cogworker's side of bench/peers.py: the INCR job, the latency job, and the ways to enqueue them.

Imported inside the benchmark's own cogworker virtualenv, never the checkout's: the worker
loads it with ``-r``, bench/peers_enqueue.py calls the ``enqueue_*`` functions.
"""

from __future__ import annotations

import functools
import os
import time

import redis

import cogworker

URL = os.environ["PEERS_REDIS_URL"]
COUNTER = "peers:incr"
LATENCIES = "peers:latency"
# one client per process, created at import as a real app's would be
counter_client = redis.Redis.from_url(URL)


class IncrJob(cogworker.Job):
    name = "IncrJob"

    def perform(self) -> None:
        counter_client.incr(COUNTER)


class LatencyJob(cogworker.Job):
    name = "LatencyJob"

    def perform(self, enqueued_at: float) -> None:
        counter_client.rpush(LATENCIES, repr(time.time() - enqueued_at))


@functools.cache  # once per process: never in the worker, whose config the CLI builds
def _configure() -> None:
    cogworker.set_default_config(cogworker.Config(redis_url=URL))


def enqueue_one(count: int) -> None:
    _configure()
    for _ in range(count):
        IncrJob.perform_async()


def enqueue_bulk(count: int) -> None:
    """``perform_bulk``: one round trip per 1,000 jobs."""
    _configure()
    IncrJob.perform_bulk([[] for _ in range(count)])


def enqueue_latency(enqueued_at: float) -> None:
    _configure()
    LatencyJob.perform_async(enqueued_at)
