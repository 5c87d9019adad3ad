"""The I/O-bound row of bench/peers.py: jobs that wait instead of computing.

NAPS jobs that each sleep NAP_SECONDS (as a job waiting on an HTTP call or a slow query would),
pushed before the worker starts, drained at CONCURRENCY (cogworker ``-c``, huey ``-w`` threads,
dramatiq ``--threads``). Timed from the first job's start (the first job each worker process
runs sets FIRST_START unless it is set) until the counter reaches NAPS, as the driver sees it,
polling every 2 ms. The ideal is NAPS x NAP_SECONDS / CONCURRENCY: 2.00 s.
"""

from __future__ import annotations

import time

import redis
from peers_systems import COUNTER, FIRST_START, NAP_SECONDS, System, enqueue, running

NAPS = 2_000
CONCURRENCY = 20
ROW = (
    f"{NAPS:,} jobs sleeping {NAP_SECONDS * 1000:g} ms at concurrency {CONCURRENCY}, "
    "s from the first start"
)


def measure_io(system: System, client: redis.Redis, url: str) -> float:
    """Seconds from the first nap's start until the last one finished."""
    client.flushall()
    enqueue(system, url, "io", NAPS)
    with running(system, url, CONCURRENCY) as worker:
        worker.wait_until(lambda: int(client.get(COUNTER) or 0) >= NAPS, 120, f"{NAPS:,} naps")
        finished = time.time()
    first = client.get(FIRST_START)
    client.flushall()
    if first is None:
        raise RuntimeError(f"{system.name}: no nap recorded its start")
    return finished - float(first)
