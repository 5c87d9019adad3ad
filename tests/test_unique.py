"""Unique jobs (``unique="until_executed"``) and the lock bookkeeping of the built-in server
middleware.

A duplicate push returns None while the first job is queued, scheduled, retrying or running;
the lock is released on success or a terminal failure, extended over retries, counted from the
due time, owner-checked, and deferred to the next beat when Redis can't take the release.
Jobs run on a real in-process Manager or a real worker subprocess; faults are real (ACL
revocation, a stopped server, kill -9).
"""

from __future__ import annotations

import json
import math
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    RUBY_VECTORS,
    AclServer,
    Gate,
    cogworker_env,
    counter,
    events,
    fresh_runtime,
    kill_session,
    private_config,
    queue_jobs,
    registered_identity,
    release,
    running,
    spawn_cogworker,
    zset_entries,
)

import cogworker
from cogworker import keys, locks, wire
from cogworker.client import Client
from cogworker.local.server import RedisServer
from cogworker.periodic.running_lock import active_ttl
from cogworker.worker import scheduler
from cogworker.worker.heartbeat import Heartbeat
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager

VECTORS = json.loads(RUBY_VECTORS.read_text(encoding="utf-8"))["vectors"]

RUNS: list[str] = []
GATE = Gate()
DELAYS: list[float] = []  # what UniqueRetryJob.retry_in returns, one per failure


class UniqueJob(cogworker.Job, unique="until_executed"):
    name = "PUniq::Job"

    def perform(self, token: str) -> None:
        RUNS.append(token)


class PlainJob(cogworker.Job):
    name = "PUniq::Plain"

    def perform(self, token: str) -> None:
        RUNS.append(token)


class UniqueGatedJob(cogworker.Job, unique="until_executed", retry=3):
    name = "PUniq::Gated"

    def perform(self, token: str, fail: bool = False) -> None:
        RUNS.append(token)
        GATE.pass_through()
        if fail:
            raise ValueError(f"failed after the gate: {token}")


class UniqueFailJob(cogworker.Job, unique="until_executed", retry=0):
    name = "PUniq::Fail"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        raise ValueError(f"boom {token}")


class UniqueRetryJob(cogworker.Job, unique="until_executed", retry=3):
    name = "PUniq::Retry"

    @classmethod
    def retry_in(cls, count: int, error: BaseException, job: dict[str, Any]) -> float:
        return DELAYS[count]

    def perform(self, token: str) -> None:
        RUNS.append(token)
        raise ValueError(f"always {token}")


class CronishJob(cogworker.Job):
    name = "PUniq::Cronish"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        GATE.pass_through()


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS, DELAYS, gate=GATE)


@pytest.fixture
def small(config: cogworker.Config) -> cogworker.Config:
    config.concurrency = 2
    config.shutdown_timeout = 2.0
    return config


def lock_key(job_class: type[cogworker.Job] | str, *args: Any, queue: str = "default") -> str:
    name = job_class if isinstance(job_class, str) else job_class.name
    return keys.unique(locks.unique_digest({"class": name, "queue": queue, "args": list(args)}))


def settled(r: redis.Redis, manager: Manager) -> bool:
    manager.bookkeeper.flush()
    return r.llen(keys.inprogress(manager.identity)) == 0 and not manager.ledger.running()


# -- the client side -------------------------------------------------------------------------------


def test_duplicate_push_returns_none_while_the_first_is_queued(
    config: cogworker.Config, r: redis.Redis
) -> None:
    jid = UniqueJob.perform_async("a")
    assert jid is not None
    assert UniqueJob.perform_async("a") is None
    assert UniqueJob.set(queue="default").perform_async("a") is None
    assert [job["jid"] for job in queue_jobs(r, "default")] == [jid]
    assert r.get(lock_key(UniqueJob, "a")) == jid
    assert 86_399 <= r.ttl(lock_key(UniqueJob, "a")) <= 86_400


def test_different_args_or_queue_are_different_jobs(
    config: cogworker.Config, r: redis.Redis
) -> None:
    assert UniqueJob.perform_async("a") is not None
    assert UniqueJob.perform_async("b") is not None
    assert UniqueJob.set(queue="other").perform_async("a") is not None
    assert r.llen(keys.queue("default")) == 2
    assert r.llen(keys.queue("other")) == 1
    assert r.exists(lock_key(UniqueJob, "a", queue="other")) == 1


def test_duplicate_push_returns_none_while_the_first_is_scheduled(
    config: cogworker.Config, r: redis.Redis
) -> None:
    jid = UniqueJob.perform_in(60, "s")
    assert jid is not None
    assert UniqueJob.perform_async("s") is None
    assert UniqueJob.perform_in(5, "s") is None
    assert [entry["jid"] for entry, _ in zset_entries(r, keys.SCHEDULE)] == [jid]
    assert r.llen(keys.queue("default")) == 0


@pytest.mark.parametrize(("delay", "low", "high"), [(1000, 87_399, 87_400), (-500, 86_399, 86_400)])
def test_lock_ttl_is_counted_from_the_due_time(
    config: cogworker.Config, r: redis.Redis, delay: float, low: int, high: int
) -> None:
    """A job scheduled far ahead keeps its lock until it is due plus unique_lock_ttl."""
    UniqueJob.perform_at(time.time() + delay, "due")
    assert low <= r.ttl(lock_key(UniqueJob, "due")) <= high


def test_fractional_ttl_and_delay_are_rounded_up(config: cogworker.Config, r: redis.Redis) -> None:
    config.unique_lock_ttl = 100.5
    UniqueJob.perform_in(10.2, "frac")
    ttl = r.ttl(lock_key(UniqueJob, "frac"))
    assert 110 <= ttl <= math.ceil(100.5 + 10.2)


def test_set_option_and_low_level_push_take_the_lock_too(
    config: cogworker.Config, r: redis.Redis
) -> None:
    unique_plain = PlainJob.set(unique="until_executed")
    jid = unique_plain.perform_async("p")
    assert jid is not None and unique_plain.perform_async("p") is None
    assert PlainJob.perform_async("p") is not None  # without the option: not unique
    client = Client(config)
    item = {"class": "Other::Job", "args": [1, {"k": "v"}], "unique": "until_executed"}
    first = client.push(item)
    assert first is not None
    assert client.push(dict(item)) is None
    assert r.get(lock_key("Other::Job", 1, {"k": "v"})) == first
    for value in ("while_executing", None, True):  # any other value: no uniqueness
        assert client.push({"class": "Other::Loose", "args": [], "unique": value}) is not None
        assert client.push({"class": "Other::Loose", "args": [], "unique": value}) is not None
    assert r.llen(keys.queue("default")) == 2 + 1 + 6


def test_duplicate_in_a_bulk_push_is_skipped(config: cogworker.Config, r: redis.Redis) -> None:
    results = UniqueJob.perform_bulk([["x"], ["y"], ["x"]])
    assert results[0] is not None and results[1] is not None and results[2] is None
    assert r.llen(keys.queue("default")) == 2


@pytest.mark.parametrize("vector", VECTORS, ids=[v["args_json_ruby"][:40] for v in VECTORS])
def test_lock_key_matches_the_ruby_vectors(
    config: cogworker.Config, r: redis.Redis, vector: dict[str, str]
) -> None:
    args = json.loads(vector["args_input"])
    jid = Client(config).push(
        {"class": "AccJob", "queue": "default", "args": args, "unique": "until_executed"}
    )
    assert jid is not None
    assert r.get(vector["unique_key"]) == jid
    assert r.keys(keys.UNIQUE_PREFIX + "*") == [vector["unique_key"]]


# -- the server side: while running, success, failures --------------------------------------------


def test_duplicate_refused_while_running_and_accepted_after_success(
    small: cogworker.Config, r: redis.Redis
) -> None:
    jid = UniqueGatedJob.perform_async("run")
    manager = Manager(small, new_identity())
    with running(manager):
        assert GATE.entered.wait(10)
        assert UniqueGatedJob.perform_async("run") is None
        assert r.get(lock_key(UniqueGatedJob, "run")) == jid
        GATE.open()
        wait_for(lambda: settled(r, manager))
        assert r.exists(lock_key(UniqueGatedJob, "run")) == 0
        GATE.reset()
        again = UniqueGatedJob.perform_async("run")
        assert again is not None and again != jid
        GATE.open()
        wait_for(lambda: RUNS == ["run", "run"] and settled(r, manager))
    assert r.exists(lock_key(UniqueGatedJob, "run")) == 0


def test_retried_failure_keeps_the_lock_extended_and_duplicates_out(
    small: cogworker.Config, r: redis.Redis
) -> None:
    jid = UniqueGatedJob.perform_async("retry", True)
    GATE.open()
    manager = Manager(small, new_identity())
    with running(manager):
        wait_for(lambda: r.zcard(keys.RETRY) == 1 and settled(r, manager))
    [(entry, score)] = zset_entries(r, keys.RETRY)
    assert entry["jid"] == jid and entry["retry_count"] == 1
    key = lock_key(UniqueGatedJob, "retry", True)
    assert r.get(key) == jid
    assert r.ttl(key) >= (score - time.time()) + 86_400 - 2
    assert UniqueGatedJob.perform_async("retry", True) is None
    assert UniqueGatedJob.perform_in(10, "retry", True) is None


def test_terminal_failure_releases_the_lock(small: cogworker.Config, r: redis.Redis) -> None:
    jid = UniqueFailJob.perform_async("dies")
    manager = Manager(small, new_identity())
    with running(manager):
        wait_for(lambda: r.zcard(keys.DEAD) == 1 and settled(r, manager))
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["jid"] == jid and entry["error_class"] == "ValueError"
    assert r.exists(lock_key(UniqueFailJob, "dies")) == 0
    assert UniqueFailJob.perform_async("dies") is not None


def test_lock_is_extended_over_a_whole_retry_series(
    small: cogworker.Config, r: redis.Redis
) -> None:
    """F: after each failure the lock lives for the retry delay + unique_lock_ttl (here far
    longer than the 30 s it was taken with); the last failure releases it."""
    small.unique_lock_ttl = 30
    DELAYS.extend([600, 1200, 2400])
    jid = UniqueRetryJob.perform_async("series")
    key = lock_key(UniqueRetryJob, "series")
    assert r.ttl(key) <= 30
    manager = Manager(small, new_identity())
    with running(manager):
        for attempt, delay in enumerate(DELAYS, start=1):
            wait_for(lambda a=attempt: len(RUNS) == a and r.zcard(keys.RETRY) == 1)
            wait_for(lambda: settled(r, manager))
            [(entry, score)] = zset_entries(r, keys.RETRY)
            assert entry["retry_count"] == attempt
            assert score - time.time() == pytest.approx(delay, abs=2)
            assert r.get(key) == jid
            assert delay + 30 - 3 <= r.ttl(key) <= delay + 30
            assert UniqueRetryJob.perform_async("series") is None
            # the retry comes due now (graduated as the scheduler would, with a later clock)
            assert scheduler.graduate_due(r, keys.RETRY, now=time.time() + 10**6) == 1
        wait_for(lambda: len(RUNS) == 4 and r.zcard(keys.DEAD) == 1 and settled(r, manager))
    assert r.zcard(keys.RETRY) == 0
    assert r.exists(key) == 0


# -- owner checks ---------------------------------------------------------------------------------


def old_copy(job_class: type[cogworker.Job], *args: Any, **extra: Any) -> str:
    """A payload of an older run of the job (another jid) put straight on the queue."""
    payload = wire.normalize(
        {
            "class": job_class.name,
            "args": list(args),
            "queue": "default",
            **job_class.options,
            **extra,
        }
    )
    return wire.dumps(payload)


def test_a_run_handed_back_at_shutdown_leaves_the_lock_to_its_requeued_copy(
    small: cogworker.Config, r: redis.Redis
) -> None:
    """At the shutdown deadline a job still inside perform is handed back; if that run then
    finishes before the process exits, its release must not free the lock the requeued copy
    (same jid) now holds, or a duplicate could get in while the copy waits or runs."""
    jid = UniqueGatedJob.perform_async("handed-back")
    key = lock_key(UniqueGatedJob, "handed-back")
    manager = Manager(small, new_identity())
    manager.start()
    try:
        assert GATE.entered.wait(10)
        manager.stop(0.2)
        assert [job["jid"] for job in queue_jobs(r, "default")] == [jid]
        GATE.open()
        wait_for(lambda: manager.ledger.busy == 0)  # the run here finished (and tried to release)
    finally:
        GATE.open()
    assert RUNS == ["handed-back"]
    assert r.get(key) == jid
    assert UniqueGatedJob.perform_async("handed-back") is None  # still a duplicate


def test_older_run_never_releases_or_extends_a_newer_runs_lock(
    small: cogworker.Config, r: redis.Redis
) -> None:
    """A lock owned by a newer job is never touched by an older copy: the older copy
    succeeding, then another failing with a retry, leave its value and TTL alone."""
    key = lock_key(UniqueRetryJob, "owned")
    r.set(key, "newer-run", ex=500)
    DELAYS.append(100_000)
    r.lpush(keys.queue("default"), old_copy(UniqueRetryJob, "owned"))
    manager = Manager(small, new_identity())
    with running(manager):
        wait_for(lambda: r.zcard(keys.RETRY) == 1 and settled(r, manager))
    assert r.get(key) == "newer-run"
    assert 490 <= r.ttl(key) <= 500

    key = lock_key(UniqueJob, "owned")
    r.set(key, "newer-run", ex=500)
    r.lpush(keys.queue("default"), old_copy(UniqueJob, "owned"))
    manager = Manager(small, new_identity())
    with running(manager):
        wait_for(lambda: RUNS == ["owned", "owned"] and settled(r, manager))
    assert r.get(key) == "newer-run"
    assert 490 <= r.ttl(key) <= 500


def test_older_cron_run_leaves_a_newer_runs_running_lock_alone(
    small: cogworker.Config, r: redis.Redis
) -> None:
    """The same for ``periodic:running``: an older cron run neither shortens a newer run's
    lock to active_ttl nor releases it."""
    pjid = "c" * 40
    lock = keys.periodic_running(pjid)
    r.set(lock, "newer-run", ex=1000)
    GATE.open()
    r.lpush(
        keys.queue("default"),
        old_copy(
            CronishJob,
            "cron",
            periodic_pjid=pjid,
            periodic_slot=1,
            retry=0,
            periodic_until_executed=True,
        ),
    )
    manager = Manager(small, new_identity())
    with running(manager):
        wait_for(lambda: RUNS == ["cron"] and settled(r, manager))
    assert r.get(lock) == "newer-run"
    assert r.ttl(lock) > 990


# -- releases Redis can't take ---------------------------------------------------------------------


@pytest.fixture
def acl_config(acl: AclServer) -> Iterator[cogworker.Config]:
    cfg = private_config(acl.worker_url, concurrency=2, shutdown_timeout=2.0)
    try:
        yield cfg
    finally:
        release(cfg)


def test_release_refused_is_deferred_the_job_is_not_failed_and_the_next_beat_releases(
    acl: AclServer, acl_config: cogworker.Config
) -> None:
    """Lock bookkeeping never changes a job's fate: with DEL refused while the job runs, it
    still succeeds (processed, not in retry or dead); the release waits in memory and the
    next heartbeat sends it."""
    admin_client = acl.admin
    client = Client(acl_config)
    jid = client.push(
        {"class": UniqueGatedJob.name, "args": ["refused"], "unique": "until_executed"}
    )
    key = lock_key(UniqueGatedJob, "refused")
    manager = Manager(acl_config, new_identity())
    heartbeat = Heartbeat(acl_config, manager, lambda message: None)
    with running(manager):
        assert GATE.entered.wait(10)
        acl.deny("del")
        GATE.open()
        wait_for(lambda: len(locks.deferred) == 1 and settled(admin_client, manager))
        assert counter(admin_client, keys.STATS_PROCESSED) == 1
        assert admin_client.zcard(keys.RETRY) == 0 and admin_client.zcard(keys.DEAD) == 0
        assert admin_client.get(key) == jid
        acl.allow("del")
        assert heartbeat.beat()
    assert admin_client.exists(key) == 0
    assert len(locks.deferred) == 0


def test_release_refused_after_a_terminal_failure_keeps_the_jobs_own_error(
    acl: AclServer, acl_config: cogworker.Config
) -> None:
    """A job failing for good records its own error, not the lock bookkeeping's."""
    admin_client = acl.admin
    acl.deny("del")
    jid = Client(acl_config).push(
        {"class": UniqueFailJob.name, "args": ["own"], "unique": "until_executed", "retry": 0}
    )
    manager = Manager(acl_config, new_identity())
    with running(manager):
        wait_for(lambda: admin_client.zcard(keys.DEAD) == 1 and settled(admin_client, manager))
    [(entry, _)] = zset_entries(admin_client, keys.DEAD)
    assert entry["jid"] == jid
    assert (entry["error_class"], entry["error_message"]) == ("ValueError", "boom own")
    assert len(locks.deferred) == 1
    acl.allow("del")
    locks.deferred.retry_all(admin_client)
    assert admin_client.exists(lock_key(UniqueFailJob, "own")) == 0


def test_a_deferred_release_refused_again_is_kept_until_it_goes_through(
    acl: AclServer, acl_config: cogworker.Config, caplog: pytest.LogCaptureFixture
) -> None:
    """A deferred release is kept while its retries are refused (dropping it would keep a
    cron entry or a unique job locked out until the TTL); only a key of another type drops
    it, with a log line."""
    admin_client = acl.admin
    worker_client = acl_config.redis()
    admin_client.set("cogworker:unique:kept", "owner-jid")
    admin_client.rpush("cogworker:unique:a-list", "not a lock")
    locks.deferred.clear()
    try:
        locks.deferred.add("cogworker:unique:kept", "owner-jid")
        acl.deny("del")
        with pytest.raises(redis.ResponseError):
            locks.deferred.retry_all(worker_client)
        assert len(locks.deferred) == 1
        assert admin_client.get("cogworker:unique:kept") == "owner-jid"
        acl.allow("del")
        locks.deferred.add("cogworker:unique:a-list", "owner-jid")
        locks.deferred.retry_all(worker_client)
        assert len(locks.deferred) == 0
        assert admin_client.exists("cogworker:unique:kept") == 0
        assert admin_client.llen("cogworker:unique:a-list") == 1
        assert "deferred release of cogworker:unique:a-list dropped" in caplog.text
    finally:
        locks.deferred.clear()


def test_a_push_that_fails_after_taking_the_lock_releases_it(
    acl: AclServer, acl_config: cogworker.Config
) -> None:
    """The lock is taken, then the push itself is refused: the digest is free again at once
    (not blocked for unique_lock_ttl), and the same job can be pushed once the push works."""
    admin_client = acl.admin
    client = Client(acl_config)
    acl.deny("lpush")
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.push({"class": UniqueJob.name, "args": ["refused"], "unique": "until_executed"})
    assert admin_client.exists(lock_key(UniqueJob, "refused")) == 0
    acl.allow("lpush")
    jid = client.push({"class": UniqueJob.name, "args": ["refused"], "unique": "until_executed"})
    assert jid is not None
    assert admin_client.get(lock_key(UniqueJob, "refused")) == jid
    assert [job["jid"] for job in queue_jobs(admin_client, "default")] == [jid]


@pytest.mark.parametrize("owner_changed", [False, True])
def test_release_during_an_outage_is_deferred_and_sent_by_the_next_beat(
    redis_server_factory: Callable[..., RedisServer], owner_changed: bool
) -> None:
    """A release that meets a Redis outage while the job runs is kept in memory; after the
    restart the next beat releases it, unless a newer job owns the key by then."""
    server = redis_server_factory(config_lines=["appendonly yes", "appendfsync always"])
    cfg = private_config(server.url, concurrency=1, shutdown_timeout=1.0)
    admin_client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        jid = Client(cfg).push(
            {"class": UniqueGatedJob.name, "args": ["outage"], "unique": "until_executed"}
        )
        key = lock_key(UniqueGatedJob, "outage")
        manager = Manager(cfg, new_identity())
        heartbeat = Heartbeat(cfg, manager, lambda message: None)
        with running(manager):
            assert GATE.entered.wait(10)
            server.stop()
            GATE.open()
            wait_for(lambda: RUNS == ["outage"] and len(locks.deferred) == 1)
            server.start()
            admin_client.connection_pool.disconnect()
            assert admin_client.get(key) == jid  # the lock survived, still ours
            if owner_changed:
                admin_client.set(key, "newer-run", ex=777)
            wait_for(heartbeat.beat, timeout=10)
            assert len(locks.deferred) == 0
            if owner_changed:
                assert admin_client.get(key) == "newer-run"
            else:
                assert admin_client.exists(key) == 0
    finally:
        admin_client.close()
        release(cfg)


def test_failed_lock_shortening_at_run_start_lets_the_job_run_and_the_beat_shortens_it(
    acl: AclServer, acl_config: cogworker.Config, caplog: pytest.LogCaptureFixture
) -> None:
    """A cron run whose running lock can't be shortened when it starts (EXPIRE refused)
    runs anyway, and a heartbeat during ``perform`` shortens the lock."""
    admin_client = acl.admin
    pjid = "d" * 40
    lock = keys.periodic_running(pjid)
    payload = wire.normalize(
        {
            "class": CronishJob.name,
            "args": ["shorten"],
            "retry": 0,
            "periodic_pjid": pjid,
            "periodic_slot": 1,
            "periodic_until_executed": True,
        }
    )
    admin_client.set(lock, payload["jid"], ex=86_400)
    acl.deny("expire")
    admin_client.lpush(keys.queue("default"), wire.dumps(payload))
    manager = Manager(acl_config, new_identity())
    heartbeat = Heartbeat(acl_config, manager, lambda message: None)
    with running(manager):
        assert GATE.entered.wait(10)
        assert admin_client.ttl(lock) > 86_000
        assert any(
            f"couldn't shorten periodic lock for {pjid}" in r.getMessage() for r in caplog.records
        )
        acl.allow("expire")
        assert heartbeat.beat()
        assert 0 < admin_client.ttl(lock) <= active_ttl(acl_config)
        GATE.open()
        wait_for(lambda: settled(admin_client, manager))
    assert admin_client.exists(lock) == 0


# -- across a kill -9 (real worker processes) ------------------------------------------------------


APP = textwrap.dedent(
    '''
    """Jobs for the unique-lock process test."""
    import os
    import time

    import cogworker


    class HeldUnique(cogworker.Job, unique="until_executed"):
        name = "PUniq::Held"

        def perform(self, marker):
            client = cogworker.default_config().redis()
            client.rpush("test:events", f"start {self.jid} {marker} {os.getpid()}")
            deadline = time.monotonic() + 60
            while not client.exists(f"test:gate:{marker}") and time.monotonic() < deadline:
                time.sleep(0.02)
            client.rpush("test:events", f"done {self.jid} {marker} {os.getpid()}")
    '''
)

FAST = """\
heartbeat_interval: 0.2
poll_interval: 0.2
orphan_check_interval: 0.3
orphan_threshold: 2
shutdown_timeout: 2
concurrency: 2
"""


def test_duplicates_stay_out_across_a_kill_and_the_recovery_of_the_run(
    r: redis.Redis, redis_url: str, config: cogworker.Config, tmp_path: Path
) -> None:
    (tmp_path / "uniq_app.py").write_text(APP)
    (tmp_path / "fast.yml").write_text(FAST)
    env = cogworker_env(redis_url)
    args = ["run", "-r", "uniq_app", "-C", str(tmp_path / "fast.yml")]
    processes = []
    try:
        first = spawn_cogworker(args, tmp_path, tmp_path / "first.out", env)
        processes.append(first)
        client = Client(config)
        item = {"class": "PUniq::Held", "args": ["m"], "unique": "until_executed"}
        jid = client.push(dict(item))
        assert jid is not None
        wait_for(lambda: len(events(r, "test:events")) == 1, timeout=20)
        identity = registered_identity(r, first.pid)
        assert identity is not None
        kill_session(first)
        assert client.push(dict(item)) is None  # the run is dead but not finished

        r.delete(keys.process(identity))  # what its 60 s presence TTL would do
        second = spawn_cogworker(args, tmp_path, tmp_path / "second.out", env)
        processes.append(second)
        wait_for(lambda: len(events(r, "test:events")) == 2, timeout=20)
        assert client.push(dict(item)) is None  # recovered and running again
        r.set("test:gate:m", "open")
        wait_for(lambda: r.exists(lock_key("PUniq::Held", "m")) == 0, timeout=10)
        runs = events(r, "test:events")
        assert [(kind, run_jid) for kind, run_jid, *_ in runs] == [
            ("start", jid),
            ("start", jid),
            ("done", jid),
        ]
        assert runs[0][3] == str(first.pid) and runs[1][3] == str(second.pid)

        again = client.push(dict(item))
        assert again is not None and again != jid
        wait_for(lambda: len(events(r, "test:events")) == 5, timeout=10)
        assert [(kind, run_jid) for kind, run_jid, *_ in events(r, "test:events")[3:]] == [
            ("start", again),
            ("done", again),
        ]
    finally:
        for process in processes:
            kill_session(process)
        for name in ("first.out", "second.out"):
            path = tmp_path / name
            if path.exists():
                print(f"--- {name}:\n{path.read_text(errors='replace')}")
