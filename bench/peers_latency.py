"""Pickup latency and idle cost for bench/peers.py, one worker at its default concurrency.

Pickup: SAMPLES jobs pushed 50 ms apart to an idle worker, each recording its start time minus
a timestamp taken just before its enqueue call. Idle: the Redis commands per second (INFO
commandstats delta, INFO itself excluded) the same idle worker sends over 10 s. peers.py runs
this in rotating rounds, like the other rows, and pools each system's samples: a p99 of one
200-sample set is its second-slowest pickup, which moves by milliseconds between runs here.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import redis
from peers_systems import COUNTER, LATENCIES, System, enqueue, running

IDLE_SECONDS = 10.0


@dataclass(frozen=True)
class Idle:
    """One round of one system: its pickup latencies (ms, sorted) and idle command rate."""

    pickups_ms: list[float]
    commands_per_s: float

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.pickups_ms)

    @property
    def p99_ms(self) -> float:
        return percentile(self.pickups_ms, 0.99)


def percentile(ordered: list[float], share: float) -> float:
    """The value ``share`` of ``ordered`` (sorted) lies at or under: nearest rank."""
    return ordered[max(0, math.ceil(len(ordered) * share) - 1)]


def commands(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for name, v in stats.items() if name != "cmdstat_info")


def measure_idle(system: System, client: redis.Redis, url: str, samples: int) -> Idle:
    client.flushall()
    with running(system, url, system.default_concurrency) as worker:
        enqueue(system, url, "one", 1)  # the worker is up once this job has run
        worker.wait_until(lambda: int(client.get(COUNTER) or 0) >= 1, 60, "its first job")
        time.sleep(1.0)  # let it settle into its idle fetch
        before = commands(client)
        time.sleep(IDLE_SECONDS)
        rate = (commands(client) - before) / IDLE_SECONDS
        enqueue(system, url, "latency", samples)
        worker.wait_until(lambda: client.llen(LATENCIES) >= samples, 60, "the last latency job")
    found = sorted(float(value) * 1000 for value in client.lrange(LATENCIES, 0, -1))
    client.flushall()
    return Idle(found, rate)
