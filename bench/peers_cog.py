"""cogworker's side of bench/peers.py: its INCR, nap and latency jobs and the ways to enqueue them.

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
FIRST_START = "peers:first_start"
# one client per process, created at import as a real app's would be
counter_client = redis.Redis.from_url(URL)


class IncrJob(cogworker.Job):
    name = "IncrJob"

    def perform(self) -> None:
        counter_client.incr(COUNTER)


class NapJob(cogworker.Job):
    """Waits, as an I/O-bound job does; the first one a process runs notes when it started."""

    name = "NapJob"

    def perform(self, seconds: float) -> None:
        note_first_start()
        time.sleep(seconds)
        counter_client.incr(COUNTER)


@functools.cache  # once per process
def note_first_start() -> None:
    counter_client.set(FIRST_START, repr(time.time()), nx=True)


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


def enqueue_naps(count: int, seconds: float) -> None:
    _configure()
    NapJob.perform_bulk([[seconds] for _ in range(count)])


def enqueue_latency(enqueued_at: float) -> None:
    _configure()
    LatencyJob.perform_async(enqueued_at)
