"""A standalone worker's death detected in seconds at short settings, and a frozen worker.

Real ``python -m cogworker run`` processes, kill -9 and SIGSTOP. With ``heartbeat_interval``
1 s, ``presence_ttl`` 3 s and ``orphan_threshold`` 5 s, a dead worker's job runs again once
its last beat is older than the threshold, at the next orphan check (every second) of a live
worker; a worker frozen for less than that keeps its job.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    HOLD_JOB_MODULE,
    StartWorker,
    Worker,
    closing_pools,
    cogworker_env,
    holds,
    started_workers,
)

import cogworker
from cogworker import keys

pytestmark = pytest.mark.slow  # the full run only: worker processes killed and judged dead

JOBS_MODULE = HOLD_JOB_MODULE

HEARTBEAT, PRESENCE, THRESHOLD, CHECK = 1.0, 3.0, 5.0, 1.0
SHORT = f"""\
heartbeat_interval: {HEARTBEAT}
presence_ttl: {PRESENCE}
orphan_check_interval: {CHECK}
poll_interval: 1
concurrency: 2
"""
# the last beat is older than the threshold (on Redis's clock, in whole seconds: + 1 s), then
# a live worker's next orphan check runs, then it takes the job; plus room for a slow machine
RECOVERY_BOUND = max(PRESENCE, THRESHOLD) + 1 + CHECK + 8

_close_pools = pytest.fixture(autouse=True)(closing_pools)


@pytest.fixture
def start_worker(tmp_path: Path, redis_url: str) -> Iterator[StartWorker]:
    (tmp_path / "death_jobs.py").write_text(JOBS_MODULE)
    with started_workers(tmp_path) as workers:

        def start(threshold: float = THRESHOLD) -> Worker:
            config = tmp_path / f"short-{len(workers.started)}.yml"
            config.write_text(f"{SHORT}orphan_threshold: {threshold}\n")
            args = ["run", "-r", "death_jobs", "-C", str(config)]
            return workers.start(args, cogworker_env(redis_url))

        yield start


def starts(r: redis.Redis, marker: str) -> list[tuple[int, float]]:
    entries = [str(entry).split() for entry in r.lrange(f"test:starts:{marker}", 0, -1)]
    return [(int(pid), float(at)) for pid, at in entries]


@pytest.fixture
def producer(config: cogworker.Config) -> cogworker.Client:
    return cogworker.Client(config)


def running_on(
    r: redis.Redis,
    start_worker: StartWorker,
    producer: cogworker.Client,
    marker: str,
    threshold: float = THRESHOLD,
) -> tuple[Worker, Worker]:
    """A job running on one worker, and a second worker beating beside it, idle."""
    victim = start_worker(threshold)
    victim.identity(r)
    producer.push({"class": "Test::Hold", "args": [marker]})
    wait_for(lambda: starts(r, marker))
    assert starts(r, marker)[0][0] == victim.pid
    rescuer = start_worker(threshold)
    rescuer.identity(r)
    return victim, rescuer


def test_a_killed_workers_job_runs_again_within_seconds_at_short_settings(
    r: redis.Redis, start_worker: StartWorker, producer: cogworker.Client
) -> None:
    victim, rescuer = running_on(r, start_worker, producer, "kill")
    identity = victim.identity(r)

    killed_at = time.time()
    victim.kill()

    wait_for(lambda: len(starts(r, "kill")) == 2, timeout=RECOVERY_BOUND)
    pid, started = starts(r, "kill")[1]
    assert pid == rescuer.pid
    print(f"job started again {started - killed_at:.2f} s after the kill")
    assert r.llen(keys.inprogress(identity)) == 0
    assert identity not in r.smembers(keys.INPROGRESS_IDENTITIES)
    r.set("test:gate:kill", 1)
    wait_for(lambda: r.get("test:finished:kill") == "1")


def test_a_worker_frozen_for_less_than_the_threshold_keeps_its_job(
    r: redis.Redis, start_worker: StartWorker, producer: cogworker.Client
) -> None:
    """Frozen longer than its presence lives, but its last beat never gets older than the
    threshold (8 s here): nobody may take the job, during the freeze or after it."""
    threshold = 8.0
    victim, rescuer = running_on(r, start_worker, producer, "freeze", threshold)
    identity = victim.identity(r)

    victim.send(signal.SIGSTOP)
    try:
        wait_for(lambda: not r.exists(keys.process(identity)), timeout=PRESENCE + 5)
        holds(lambda: len(starts(r, "freeze")) == 1, 1.0)  # frozen about 3-4 s in all
    finally:
        victim.send(signal.SIGCONT)
    wait_for(lambda: r.exists(keys.process(identity)) == 1)  # beating again
    holds(lambda: len(starts(r, "freeze")) == 1, threshold + CHECK + 1)
    assert r.llen(keys.inprogress(identity)) == 1
    r.set("test:gate:freeze", 1)
    wait_for(lambda: r.get("test:finished:freeze") == "1")
    wait_for(lambda: r.llen(keys.inprogress(identity)) == 0)  # acknowledged after perform
    assert rescuer.alive()


def test_a_worker_frozen_past_the_threshold_loses_its_job_and_both_runs_finish(
    r: redis.Redis, start_worker: StartWorker, producer: cogworker.Client
) -> None:
    """What the README says of a worker frozen past both limits: judged dead, its job runs
    elsewhere, and when it thaws its own run goes on too (the job runs twice)."""
    victim, rescuer = running_on(r, start_worker, producer, "long-freeze")
    identity = victim.identity(r)

    victim.send(signal.SIGSTOP)
    try:
        wait_for(lambda: len(starts(r, "long-freeze")) == 2, timeout=RECOVERY_BOUND)
    finally:
        victim.send(signal.SIGCONT)
    assert starts(r, "long-freeze")[1][0] == rescuer.pid
    r.set("test:gate:long-freeze", 1)
    wait_for(lambda: r.get("test:finished:long-freeze") == "2")
    wait_for(lambda: r.exists(keys.process(identity)) == 1)  # the thawed worker beats again
    assert victim.alive()
    wait_for(lambda: r.llen(keys.inprogress(identity)) == 0)
    victim.wait_output("Heartbeat: no beat for")  # it says it was stalled
    assert os.getpid() not in {pid for pid, _ in starts(r, "long-freeze")}
