"""The pace (``worker/pace.py``): fewer threads hold a job while short jobs saturate the CPU,
all of them again once it has room; ``adaptive_concurrency: false`` keeps every thread busy.

The rule is tested on its own with clocks the test moves; the effect in a real worker process
through the threads its jobs ran on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from runtime_support import StartWorker, Worker, cogworker_env, started_workers

import cogworker
from cogworker.worker import pace
from cogworker.worker.pace import Pace

pytestmark = pytest.mark.slow  # the full run only: a worker process flooded with jobs


class Clocks:
    """A wall clock and a CPU clock that move only when the test says."""

    def __init__(self) -> None:
        self.wall = 100.0
        self.cpu = 5.0

    def window(self, pacer: Pace, *, busy: float, jobs: int) -> None:
        """One window passes with the CPU ``busy`` (seconds per second) and ``jobs`` finished;
        the last finish reviews the limit."""
        for _ in range(jobs - 1):
            pacer.starting("short")
            pacer.keeps_lane("short")
        elapsed = pace.WINDOW * 1.25  # a little over one window, as a real review comes
        self.wall += elapsed
        self.cpu += elapsed * busy
        pacer.keeps_lane("short")


def pacer_at(clocks: Clocks, concurrency: int = 10, *, adaptive: bool = True) -> Pace:
    pacer = Pace(
        concurrency, adaptive=adaptive, clock=lambda: clocks.wall, cpu_clock=lambda: clocks.cpu
    )
    assert pacer.reserve(concurrency, timeout=0) == concurrency  # every thread holds a job
    return pacer


def saturated(clocks: Clocks, pacer: Pace) -> None:
    """Short jobs saturate the CPU until one lane is left."""
    for _ in range(3):
        clocks.window(pacer, busy=1.0, jobs=300)
    assert pacer.limit == 1


def test_lanes_halve_every_window_while_short_jobs_saturate_the_cpu() -> None:
    clocks = Clocks()
    pacer = pacer_at(clocks)
    limits = []
    for _ in range(5):
        clocks.window(pacer, busy=1.05, jobs=300)  # 0.44 ms of CPU per job
        limits.append(pacer.limit)
    assert limits == [5, 2, 1, 1, 1]
    # ten threads still hold lanes: each that finishes now settles without taking the next
    assert not pacer.keeps_lane("short")
    for _ in range(9):  # nine of them went idle
        pacer.idle("short")
    assert pacer.keeps_lane("short")
    assert pacer.reserve(5, timeout=0) == 0  # the fetcher feeds no idle thread


def test_a_long_job_keeps_its_lane_and_one_more_for_the_others() -> None:
    clocks = Clocks()
    pacer = pacer_at(clocks)
    pacer.starting("long")
    limits = []
    for _ in range(4):
        clocks.window(pacer, busy=1.05, jobs=300)  # short jobs beside it
        limits.append(pacer.limit)
    assert limits == [5, 2, 2, 2]
    pacer.keeps_lane("long")  # it ended: the short jobs may take its lane too
    clocks.window(pacer, busy=1.05, jobs=300)
    assert pacer.limit == 1


def test_a_thread_gone_idle_after_a_failed_run_is_not_counted_as_running() -> None:
    clocks = Clocks()
    pacer = pacer_at(clocks)
    pacer.starting("buggy")  # its processing raised: no turnover, straight to idle
    pacer.idle("buggy")
    saturated(clocks, pacer)


def test_jobs_that_cost_more_cpu_keep_every_lane() -> None:
    clocks = Clocks()
    pacer = pacer_at(clocks)
    for _ in range(5):
        clocks.window(pacer, busy=1.0, jobs=50)  # 2.5 ms of CPU per job
    assert pacer.limit == 10
    assert pacer.keeps_lane("short")


def test_lanes_reopen_when_the_jobs_cost_more_cpu_or_none_finishes() -> None:
    clocks = Clocks()
    pacer = pacer_at(clocks)
    saturated(clocks, pacer)
    clocks.window(pacer, busy=1.0, jobs=25)  # 5 ms of CPU per job: give the threads back
    assert pacer.limit == 2
    clocks.window(pacer, busy=1.0, jobs=25)
    assert pacer.limit == 4
    # long jobs hold the lanes and nothing finishes: the fetcher, waiting for a lane for an
    # idle thread, reviews the limit
    clocks.wall += pace.WINDOW * 1.25
    clocks.cpu += pace.WINDOW * 1.25
    assert pacer.reserve(1, timeout=0) == 0  # all ten threads still hold theirs
    assert pacer.limit == 8


def test_lanes_reopen_doubling_as_soon_as_the_cpu_has_room() -> None:
    clocks = Clocks()
    pacer = pacer_at(clocks)
    saturated(clocks, pacer)
    for _ in range(9):
        pacer.idle("short")
    limits = []
    for _ in range(4):
        clocks.window(pacer, busy=0.3, jobs=20)  # the jobs now wait on I/O
        limits.append(pacer.limit)
    assert limits == [2, 4, 8, 10]
    assert pacer.reserve(10, timeout=0) == 9


def test_between_saturated_and_roomy_the_limit_holds() -> None:
    clocks = Clocks()
    pacer = pacer_at(clocks)
    clocks.window(pacer, busy=1.0, jobs=300)
    for _ in range(5):
        clocks.window(pacer, busy=0.6, jobs=300)
    assert pacer.limit == 5


def test_one_lane_always_stays_open() -> None:
    clocks = Clocks()
    one = pacer_at(clocks, concurrency=1)
    for _ in range(5):
        clocks.window(one, busy=1.0, jobs=300)
    assert one.limit == 1
    assert one.keeps_lane("short")


def test_without_adaptive_concurrency_every_lane_stays_open() -> None:
    clocks = Clocks()
    pacer = pacer_at(clocks, adaptive=False)
    for _ in range(10):
        clocks.window(pacer, busy=1.05, jobs=300)
        assert pacer.keeps_lane("short")
    assert pacer.limit == 10


def test_the_fetcher_waits_for_a_lane_and_gets_none_when_the_wait_ends() -> None:
    pacer = Pace(2)
    assert pacer.reserve(3, timeout=0) == 2
    assert pacer.reserve(1, timeout=0.05) == 0
    got: list[int] = []
    waiting = threading.Thread(target=lambda: got.append(pacer.reserve(1, timeout=30)))
    waiting.start()
    pacer.idle("first")
    waiting.join(30)
    assert got == [1]
    assert pacer.held == 2


# -- in a real worker --------------------------------------------------------------------------

JOBS_MODULE = '''
import threading
import time

import cogworker


class ShortJob(cogworker.Job):
    """A third of a millisecond of Python, then one Redis command: the thread it ran on."""

    name = "Test::Short"

    def perform(self):
        until = time.perf_counter() + 0.0003
        while time.perf_counter() < until:
            pass
        name = threading.current_thread().name
        cogworker.default_config().redis().rpush("test:threads", name)


class WaitingJob(cogworker.Job):
    """Counts itself started, then waits (no CPU) until test:go is set."""

    name = "Test::Waiting"

    def perform(self):
        client = cogworker.default_config().redis()
        client.incr("test:waiting")
        deadline = time.monotonic() + 60
        while not client.exists("test:go") and time.monotonic() < deadline:
            time.sleep(0.02)
'''

FLOOD = 4000
TAIL = 1000


@pytest.fixture
def start_worker(tmp_path: Path, redis_url: str) -> Iterator[StartWorker]:
    (tmp_path / "pace_jobs.py").write_text(JOBS_MODULE)
    with started_workers(tmp_path) as workers:

        def start(settings: str) -> Worker:
            config = tmp_path / f"worker-{len(workers.started)}.yml"
            config.write_text(f"concurrency: 10\nlog_level: DEBUG\n{settings}")
            args = ["run", "-r", "pace_jobs", "-C", str(config)]
            return workers.start(args, cogworker_env(redis_url))

        yield start


def flood(
    start_worker: StartWorker, settings: str, config: cogworker.Config, r: redis.Redis
) -> tuple[Worker, list[str]]:
    """A worker with ``settings`` runs FLOOD short jobs; it, and the threads the last TAIL of
    them ran on."""
    worker = start_worker(settings)
    worker.wait_output("started")
    client = cogworker.Client(config)
    client.push_bulk({"class": "Test::Short", "args": []} for _ in range(FLOOD))
    wait_for(lambda: worker.alive() and r.llen("test:threads") >= FLOOD, timeout=120)
    assert r.llen("test:threads") == FLOOD  # nothing lost, nothing run twice
    return worker, list(r.lrange("test:threads", -TAIL, -1))


def test_short_jobs_run_on_fewer_threads_and_waiting_jobs_get_them_all_back(
    start_worker: StartWorker, config: cogworker.Config, r: redis.Redis
) -> None:
    worker, tail = flood(start_worker, "", config, r)
    # the CPU is saturated from the start: the lanes halve every window, down to one or two
    # (a thread or two more may finish a job each while the limit is crossed)
    assert len(set(tail)) <= 3, sorted(set(tail))
    assert "pace: 5 of 10 threads may hold a job" in worker.output()
    # jobs that wait get every thread again: the CPU idles, the lanes double back
    client = cogworker.Client(config)
    client.push_bulk({"class": "Test::Waiting", "args": []} for _ in range(10))
    wait_for(lambda: int(r.get("test:waiting") or 0) == 10, timeout=20)
    r.set("test:go", 1)
    assert worker.stop() == 0


def test_without_adaptive_concurrency_short_jobs_keep_every_thread(
    start_worker: StartWorker, config: cogworker.Config, r: redis.Redis
) -> None:
    worker, tail = flood(start_worker, "adaptive_concurrency: false\n", config, r)
    assert len(set(tail)) >= 8, sorted(set(tail))
    assert "pace:" not in worker.output()
    assert worker.stop() == 0
