"""cogworker's side of bench/peers.py: its INCR, nap and latency jobs and the ways to enqueue them.

Imported inside the benchmark's own cogworker virtualenv, never the checkout's: the worker
loads it with ``-r``, bench/peers_enqueue.py calls the ``enqueue_*`` functions.
"""

from __future__ import annotations

import functools

import peers_bodies as bodies

import cogworker


class IncrJob(cogworker.Job):
    name = "IncrJob"

    def perform(self) -> None:
        bodies.incr()


class NapJob(cogworker.Job):
    name = "NapJob"

    def perform(self, seconds: float) -> None:
        bodies.nap(seconds)


class LatencyJob(cogworker.Job):
    name = "LatencyJob"

    def perform(self, enqueued_at: float) -> None:
        bodies.record_latency(enqueued_at)


@functools.cache  # once per process: never in the worker, whose config the CLI builds
def _configure() -> None:
    cogworker.set_default_config(cogworker.Config(redis_url=bodies.URL))


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
