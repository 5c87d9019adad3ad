"""Jobs used by bench/worker.py (loaded by the worker with -r bench/bench_jobs.py)."""

from __future__ import annotations

import functools
import os
import time

import redis

import cogworker

_first_start_recorded = False


class NoopJob(cogworker.Job):
    name = "NoopJob"

    def perform(self) -> None:
        pass


class SleepJob(cogworker.Job):
    name = "SleepJob"

    def perform(self, seconds: float) -> None:
        global _first_start_recorded
        if not _first_start_recorded:
            _first_start_recorded = True
            cogworker.default_config().redis().set("bench:first_start", repr(time.time()), nx=True)
        time.sleep(seconds)


class LatencyJob(cogworker.Job):
    """Records how long after its enqueue call it started and, with the trace below, how much
    of that was spent inside the worker."""

    name = "LatencyJob"

    def perform(self, enqueued_at: float) -> None:
        started = time.time()
        client = cogworker.default_config().redis()
        client.rpush("bench:latency", repr(started - enqueued_at))
        taken_at = _taken_at.pop(self.jid, None)
        if taken_at is not None:
            client.rpush("bench:latency:in-worker", repr(started - taken_at))


# jid -> when the worker read the job off a Redis reply (epoch seconds), filled while
# BENCH_TRACE_TAKING is set
_taken_at: dict[str, float] = {}


def _trace_taking() -> None:
    """Note when each job comes off a fetch reply, so that W4 can split a pickup into the way
    to the worker (client, Redis, the fetcher's wake-up) and the way through it (the hand-off to
    a processor thread, middleware, perform). A bench-only wrapper around ``Work.taken``, which
    every fetch path calls on a reply as it arrives."""
    from cogworker.fetch import Work

    parse = Work.taken.__func__  # type: ignore[attr-defined]

    def taken(cls: type[Work], queue: str, raw: str) -> Work:
        arrived = time.time()
        work: Work = parse(cls, queue, raw)
        _taken_at[work.jid] = arrived
        return work

    Work.taken = classmethod(taken)  # type: ignore[method-assign, assignment]


if os.environ.get("BENCH_TRACE_TAKING"):
    _trace_taking()


class IncrJob(cogworker.Job):
    """One Redis command, as real jobs touch Redis: through a plain client the worker process
    makes once, as an app would (bench/peers_cog.py's job is the same)."""

    name = "IncrJob"

    def perform(self) -> None:
        _counter_client().incr("bench:incr")


@functools.cache
def _counter_client() -> redis.Redis:
    return redis.Redis.from_url(os.environ["REDIS_URL"])


class HoldJob(cogworker.Job):
    """Records where and when it starts (pid, epoch seconds), then waits for its gate:
    bench/recovery.py kills the process running it and times the next start."""

    name = "HoldJob"

    def perform(self, marker: str) -> None:
        client = cogworker.default_config().redis()
        client.rpush(f"bench:starts:{marker}", f"{os.getpid()} {time.time()!r}")
        deadline = time.monotonic() + 120
        while not client.exists(f"bench:gate:{marker}") and time.monotonic() < deadline:
            time.sleep(0.01)
