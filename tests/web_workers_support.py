"""A real worker process for the dashboard tests (tests/test_web_*.py); not a test module.

``start_worker`` starts ``python -m cogworker run`` processes on the test Redis with short
intervals and one job class, ``HoldJob``, that runs until ``test:release`` exists; every
process it started is killed at teardown and its output printed. ``quiet_flag`` reads what a
process's presence hash says of its quiet state.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from runtime_support import StartWorker, Worker

from cogworker import keys

JOBS = textwrap.dedent(
    '''
    """Jobs for the dashboard tests."""
    import time

    import cogworker


    class HoldJob(cogworker.Job):
        """Runs until ``test:release`` exists (at most 60 s)."""

        name = "HoldJob"

        def perform(self, marker):
            client = cogworker.default_config().redis()
            client.incr(f"test:started:{marker}")
            deadline = time.monotonic() + 60
            while not client.exists("test:release") and time.monotonic() < deadline:
                time.sleep(0.02)
    '''
)

FAST = "heartbeat_interval: 0.2\npoll_interval: 0.2\nconcurrency: 2\nshutdown_timeout: 5\n"


@pytest.fixture
def start_worker(tmp_path: Path, redis_url: str) -> Iterator[StartWorker]:
    (tmp_path / "web_jobs.py").write_text(JOBS)
    (tmp_path / "worker.yml").write_text(FAST)
    started: list[Worker] = []

    def start(*args: str) -> Worker:
        command = ["run", "-r", "web_jobs", "-C", str(tmp_path / "worker.yml"), *args]
        environment = {**os.environ, "REDIS_URL": redis_url}
        worker = Worker(command, tmp_path, environment, tmp_path / f"worker-{len(started)}.out")
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.kill()
        for worker in started:
            print(f"--- worker {worker.pid}:\n{worker.output()}")


def quiet_flag(r: redis.Redis, identity: str) -> str | None:
    value = r.hget(keys.process(identity), "quiet")
    return None if value is None else str(value)
