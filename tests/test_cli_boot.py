"""What a worker says at boot: the banner comes before any job's line and shows each queue
once with its weight; an app module that registers no job class is a WARNING naming it. And at
its end: the shutdown handlers run after the stop, one that raises logged and not stopping the
others."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from runtime_support import StartWorker, Worker, cogworker_env, release, started_workers

import cogworker
from cogworker import keys

pytestmark = pytest.mark.slow  # the full run only: `cogworker run` processes

JOBS = textwrap.dedent(
    """
    import logging
    import threading

    import cogworker

    job_logged = threading.Event()


    class HoldTheBanner(logging.Filter):
        \"""Holds the banner until a job's line was logged (or 3 s): a processor running
        before the banner would log one meanwhile.\"""

        def filter(self, record):
            message = record.getMessage()
            if message.startswith("start: "):
                job_logged.set()
            elif " started, identity=" in message:
                job_logged.wait(3)
            return True


    logging.getLogger("cogworker").addFilter(HoldTheBanner())


    class BootJob(cogworker.Job):
        name = "BootJob"

        def perform(self, index):
            cogworker.default_config().redis().incr("test:boot:runs")
    """
)

HANDLERS = textwrap.dedent(
    """
    import os

    import cogworker
    from cogworker import keys

    config = cogworker.default_config()


    def broken():
        raise RuntimeError("flush refused")


    def note_the_stop():
        # what the worker still holds when the handler runs: nothing, it has stopped
        identity = next(iter(config.redis().smembers(keys.PROCESSES)), "none")
        config.redis().rpush("test:shutdown", f"ran pid={os.getpid()} listed={identity}")


    config.shutdown_handlers = [broken, note_the_stop]


    class BootJob(cogworker.Job):
        name = "BootJob"

        def perform(self):
            pass
    """
)

BANNER = re.compile(r"INFO: cogworker \S+ started, identity=\S+ concurrency=2 queues=(\S+) ")


@pytest.fixture
def start_worker(tmp_path: Path, redis_url: str) -> Iterator[StartWorker]:
    (tmp_path / "boot_jobs.py").write_text(JOBS)
    (tmp_path / "no_jobs.py").write_text("import cogworker\n\nSETTING = 1\n")
    (tmp_path / "handlers.py").write_text(HANDLERS)
    with started_workers(tmp_path) as workers:

        def start(*args: str) -> Worker:
            return workers.start(list(args), cogworker_env(redis_url))

        yield start


def test_banner_comes_first_and_shows_each_queue_once_with_its_weight(
    start_worker: StartWorker, r: redis.Redis, redis_url: str
) -> None:
    """Jobs are waiting before the worker starts, and the app holds the banner line until a
    job's line is logged: a processor started before the banner would log one ahead of it."""
    settings = cogworker.Config(redis_url=redis_url)
    try:
        client = cogworker.Client(settings)
        for queue in ("critical", "default"):
            client.push_bulk([{"class": "BootJob", "args": [i], "queue": queue} for i in range(50)])
    finally:
        release(settings)
    worker = start_worker("run", "-r", "boot_jobs", "-c", "2", "-q", "critical,2", "-q", "default")
    wait_for(lambda: int(r.get("test:boot:runs") or 0) == 100, timeout=30)
    assert worker.info(r)["queues"] == ["critical", "critical", "default"]  # still expanded
    assert worker.stop() == 0

    lines = worker.output().splitlines()
    banners = [i for i, line in enumerate(lines) if BANNER.search(line)]
    jobs = [i for i, line in enumerate(lines) if "INFO: start: BootJob" in line]
    assert len(banners) == 1 and len(jobs) == 100, lines
    assert banners[0] < jobs[0]
    match = BANNER.search(lines[banners[0]])
    assert match is not None and match.group(1) == "critical(2),default(1)"
    assert "registered no job class" not in worker.output()


def test_an_app_module_without_job_classes_is_a_warning_at_boot(
    start_worker: StartWorker, r: redis.Redis
) -> None:
    worker = start_worker("run", "-r", "no_jobs")
    worker.identity(r)  # it still runs: jobs may name classes it imports on demand
    worker.wait_output("started, identity=")
    assert worker.stop() == 0

    lines = worker.output().splitlines()
    [warning] = [line for line in lines if "registered no job class" in line]
    assert re.search(r" WARNING: app module 'no_jobs' registered no job class", warning)
    assert "under no_jobs" in warning  # where a job's class may still come from
    banner = next(i for i, line in enumerate(lines) if "started, identity=" in line)
    assert lines.index(warning) < banner
    assert r.scard(keys.PROCESSES) == 0


def test_shutdown_handlers_run_after_the_stop_and_a_failing_one_is_logged(
    start_worker: StartWorker, r: redis.Redis
) -> None:
    worker = start_worker("run", "-r", "handlers")
    worker.identity(r)
    assert r.lrange("test:shutdown", 0, -1) == []  # not before the stop
    assert worker.stop() == 0
    assert r.lrange("test:shutdown", 0, -1) == [f"ran pid={worker.pid} listed=none"]
    [failed] = [line for line in worker.output().splitlines() if "shutdown handler" in line]
    assert re.search(r" WARNING: shutdown handler <function broken .*RuntimeError: flush", failed)
