"""The running lock of an ``until_executed`` cron run when the run leaves the worker that held
it: its process is killed mid-run and another process recovers it, or the run is handed back
before it started.

While a run performs, its lock lasts ``active_ttl``, long enough to outlive the recovery of a
dead process's jobs; the script that puts the run back on its queue re-takes the lock if it
lapsed, and never touches a lock a newer run holds. The killed worker is a real
``python -m cogworker`` process (SIGKILL); the lapse of a lock is its deletion, which is what
its TTL would do.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    Gate,
    Worker,
    all_settled,
    cogworker_env,
    fresh_runtime,
    redis_time,
    running,
    ttl_was_set_to,
)

import cogworker
from cogworker import keys, wire
from cogworker.periodic.running_lock import active_ttl, queued_ttl
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager

RUNS: list[str] = []  # jids of the cron runs performed in this process
GATE = Gate()
PJID = "fm-cron-pj"
LOCK = keys.periodic_running(PJID)
NEWER_RUN = "a-newer-run"

APP = textwrap.dedent(
    '''
    """A cron job that records its start and runs until test:gate is set."""
    import os
    import time

    import cogworker


    class HeldCron(cogworker.Job):
        name = "FMCron::Held"

        def perform(self, token):
            client = cogworker.default_config().redis()
            client.rpush("test:started", f"{self.jid} {os.getpid()}")
            deadline = time.monotonic() + 60
            while not client.exists("test:gate") and time.monotonic() < deadline:
                time.sleep(0.02)
    '''
)

WORKER_OPTIONS = {
    "heartbeat_interval": 0.2,
    "poll_interval": 0.2,
    "concurrency": 1,
    "shutdown_timeout": 1,
}


class HeldCron(cogworker.Job):
    """The same job in this process (the recovered run ends here): returns at once."""

    name = "FMCron::Held"

    def perform(self, token: str) -> None:
        RUNS.append(self.jid)


class GatedJob(cogworker.Job):
    name = "FMCron::Gated"

    def perform(self) -> None:
        GATE.pass_through()


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS, gate=GATE)


def cron_raw(token: str) -> str:
    job = {
        "class": HeldCron.name,
        "args": [token],
        "periodic_pjid": PJID,
        "periodic_until_executed": True,
    }
    return wire.dumps(wire.normalize(job))


def jid_of(raw: str) -> str:
    return str(json.loads(raw)["jid"])


# -- how long a performing run's lock lasts ----------------------------------------------------


@pytest.mark.parametrize(
    ("threshold", "check_interval"),
    [(300, 60), (900, 60), (2, 0.3), (300, 600), (60, 3600)],
)
@pytest.mark.parametrize("presence_ttl", [60, 3, 600])
def test_active_ttl_outlasts_the_recovery_of_a_dead_process(
    threshold: float, check_interval: float, presence_ttl: float
) -> None:
    """A process killed mid-run stops refreshing the lock. Its jobs come back once its
    presence key has expired, its last beat is older than ``orphan_threshold``, and then at
    the next orphan check: the lock must last at least that long, or the next slot could
    start while the killed run still waits to be recovered."""
    cfg = cogworker.Config(
        orphan_threshold=threshold, orphan_check_interval=check_interval, presence_ttl=presence_ttl
    )
    recovery_takes = max(threshold, presence_ttl) + max(check_interval, 60)
    assert active_ttl(cfg) >= recovery_takes


def test_active_ttl_with_the_default_intervals_is_the_ruby_gems() -> None:
    """420 s: what Ruby processes sharing the Redis use for the same lock."""
    assert active_ttl(cogworker.Config()) == 420
    assert active_ttl(cogworker.Config(orphan_threshold=900)) > 960


# -- a run whose process is killed is recovered with its lock ------------------------------------


@pytest.fixture
def worker_dir(tmp_path: Path) -> Path:
    (tmp_path / "fm_cron_app.py").write_text(APP)
    options = "\n".join(f"{name}: {value}" for name, value in WORKER_OPTIONS.items())
    (tmp_path / "worker.yml").write_text(options + "\n")
    return tmp_path


def kill_mid_run(worker_dir: Path, redis_url: str, r: redis.Redis, raw: str) -> str:
    """A worker process starts the cron run, then is killed by SIGKILL. Returns its
    identity once its presence is gone (as its TTL would make it) and its last beat is
    older than a second."""
    r.set(LOCK, jid_of(raw), ex=queued_ttl(cogworker.Config()))  # what the claim wrote
    r.lpush(keys.queue("default"), raw)
    args = ["run", "-r", "fm_cron_app", "-C", str(worker_dir / "worker.yml")]
    worker = Worker(args, worker_dir, cogworker_env(redis_url), worker_dir / "worker.out")
    try:
        identity = worker.identity(r)
        wait_for(lambda: r.lrange("test:started", 0, -1) == [f"{jid_of(raw)} {worker.pid}"])
        # the run is performing: its lock was cut to the active TTL
        assert 0 < r.ttl(LOCK) <= active_ttl(cogworker.Config(**WORKER_OPTIONS))
        assert r.get(LOCK) == jid_of(raw)
    finally:
        worker.kill()
    r.delete(keys.process(identity))
    wait_for(lambda: redis_time(r) - int(r.hget(keys.LAST_BEAT, identity) or 0) > 1)
    return identity


@pytest.mark.parametrize("lock_after_kill", ["lapsed", "newer run"])
def test_recovery_of_a_killed_run_retakes_its_lapsed_lock_and_leaves_a_newer_one(
    worker_dir: Path,
    redis_url: str,
    config: cogworker.Config,
    r: redis.Redis,
    lock_after_kill: str,
) -> None:
    raw = cron_raw(lock_after_kill)
    identity = kill_mid_run(worker_dir, redis_url, r, raw)
    if lock_after_kill == "lapsed":
        r.delete(LOCK)
    else:  # it lapsed and the ticker claimed a later slot meanwhile
        r.set(LOCK, NEWER_RUN, ex=300)
    assert r.lrange(keys.inprogress(identity), 0, -1) == [raw]
    config.orphan_threshold = 1
    config.concurrency = 1
    manager = Manager(config, new_identity())
    started = time.monotonic()
    assert manager.orphans.recover(scan=False).moved == 1
    assert r.lrange(keys.queue("default"), 0, -1) == [raw]  # the same run, not a new one
    if lock_after_kill == "lapsed":
        assert r.get(LOCK) == jid_of(raw)
        assert ttl_was_set_to(r, LOCK, queued_ttl(config), started)
    else:
        assert r.get(LOCK) == NEWER_RUN
        assert 0 < r.ttl(LOCK) <= 300
    r.set("test:gate", "open")
    jids = [jid_of(raw)]
    with running(manager):  # the recovered run finishes here
        wait_for(lambda: jids == RUNS and all_settled(r, manager))
    # its release is owner-checked: a newer run's lock stays
    assert r.get(LOCK) == (None if lock_after_kill == "lapsed" else NEWER_RUN)
    assert r.llen(keys.queue("default")) == 0
    assert r.zcard(keys.RETRY) == 0 and r.zcard(keys.DEAD) == 0


# -- a run handed back before it started --------------------------------------------------------


@pytest.mark.parametrize("lock_before", ["lapsed", "own, about to lapse", "newer run"])
def test_a_cron_run_handed_back_retakes_its_running_lock(
    config: cogworker.Config, r: redis.Redis, lock_before: str
) -> None:
    """A processor handed a cron run once shutdown began hands it back to its queue instead
    of starting it: the run's lock is re-taken then (unless a newer run holds it)."""
    config.concurrency = 1
    config.shutdown_timeout = 2.0
    raw = cron_raw(lock_before)
    jid = jid_of(raw)
    jids = [jid]
    if lock_before == "own, about to lapse":
        r.set(LOCK, jid, ex=5)
    elif lock_before == "newer run":
        r.set(LOCK, NEWER_RUN, ex=300)
    r.lpush(keys.queue("default"), raw)
    stopping = Manager(config, new_identity())
    started = time.monotonic()
    [work] = stopping.strategy.current().retrieve(1, wait=False)
    stopping.ledger.taken(work)
    stopping.stopping.set()
    assert stopping.processors[0].process(work) is None
    stopping.strategy.close()
    assert r.lrange(keys.queue("default"), 0, -1) == [raw]
    assert r.llen(keys.inprogress(stopping.identity)) == 0
    assert raw not in stopping.ledger.running()
    if lock_before == "newer run":
        assert r.get(LOCK) == NEWER_RUN
        assert 0 < r.ttl(LOCK) <= 300
    else:
        assert r.get(LOCK) == jid
        assert ttl_was_set_to(r, LOCK, queued_ttl(config), started)
    assert RUNS == []
    GATE.open()
    with running(Manager(config, new_identity())) as manager:
        wait_for(lambda: jids == RUNS and all_settled(r, manager))
    assert r.get(LOCK) == (NEWER_RUN if lock_before == "newer run" else None)
    assert r.llen(keys.queue("default")) == 0
