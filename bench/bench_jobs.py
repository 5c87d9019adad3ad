"""Jobs used by bench/worker.py (loaded by the worker with -r bench/bench_jobs.py)."""

from __future__ import annotations

import time

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
    name = "LatencyJob"

    def perform(self, enqueued_at: float) -> None:
        started = time.time()
        cogworker.default_config().redis().rpush("bench:latency", repr(started - enqueued_at))
