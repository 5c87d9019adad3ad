"""What the jobs of bench/peers.py do, the same in every system: each system's module
(bench/peers_<module>.py) wraps these in its own kind of job. Imported inside each system's
virtualenv, where the bench folder is on the path; needs nothing but redis-py.
"""

from __future__ import annotations

import functools
import os
import time

import redis
from peers_systems import COUNTER, FIRST_START, LATENCIES

URL = os.environ["PEERS_REDIS_URL"]
# one client per process, created at import as a real app's would be
counter_client = redis.Redis.from_url(URL)


def incr() -> None:
    """The drains' job: one Redis command, as real jobs touch Redis."""
    counter_client.incr(COUNTER)


def record_latency(enqueued_at: float) -> None:
    counter_client.rpush(LATENCIES, repr(time.time() - enqueued_at))


def nap(seconds: float) -> None:
    """Wait, as an I/O-bound job does, then count; the first nap of a process notes its start."""
    _note_first_start()
    time.sleep(seconds)
    counter_client.incr(COUNTER)


@functools.cache  # once per process
def _note_first_start() -> None:
    counter_client.set(FIRST_START, repr(time.time()), nx=True)
