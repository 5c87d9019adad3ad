"""Testing modes never talk to Redis: the shipped middleware keeps its state in memory.

Every scenario runs in both modes and against two configs: one whose Redis URL names a port
nothing listens on (any Redis I/O would raise or be reported), and one on the real shared
server, whose keyspace must stay empty. Nothing may be reported either way: no Redis error,
no deferred lock release, no status/history write waiting to be sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import cogworker_log_records

import cogworker
from cogworker import config as config_module
from cogworker import history, locks, status, testing
from cogworker.local.server import free_port

RUNS: list[tuple[str, Any]] = []


class UniqueJob(cogworker.Job, queue="tmem", unique="until_executed"):
    name = "TMem::Unique"

    def perform(self, token: str) -> None:
        RUNS.append(("unique", token))


class SelfPushingJob(cogworker.Job, queue="tmem", unique="until_executed"):
    """Pushes its own duplicate while it runs (the lock is held then: refused)."""

    name = "TMem::SelfPushing"

    def perform(self, token: str) -> None:
        RUNS.append(("inner push", SelfPushingJob.perform_async(token)))


class UniqueFailingJob(cogworker.Job, queue="tmem", unique="until_executed", retry=False):
    name = "TMem::UniqueFailing"

    def perform(self, token: str) -> None:
        raise RuntimeError(f"failed for good: {token}")


class UniqueRetriedJob(cogworker.Job, queue="tmem", unique="until_executed", retry=3):
    name = "TMem::UniqueRetried"

    def perform(self, token: str) -> None:
        raise RuntimeError(f"will be retried: {token}")


class ProgressJob(cogworker.Job, queue="tmem", retry=False):
    """Reports progress and stores a field; fails when told to."""

    name = "TMem::Progress"

    def perform(self, fail: bool) -> None:
        status.at(self.jid, 60, "most rows")
        status.store(self.jid, rows=3)
        if fail:
            raise ValueError("bad row")


MODES = {"fake": testing.fake, "inline": testing.inline}


def running_in(mode: str) -> AbstractContextManager[None]:
    manager: AbstractContextManager[None] = MODES[mode]()
    return manager


def push_and_drain(mode: str, push: Any) -> Any:
    """Push; in fake mode run what was recorded (inline runs it during the push)."""
    result = push()
    if mode == "fake":
        testing.drain_all()
    return result


@pytest.fixture(params=["fake", "inline"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["redis down", "redis up"])
def cfg(
    request: pytest.FixtureRequest, r: redis.Redis, redis_url: str
) -> Iterator[cogworker.Config]:
    """The default config for the test: on a dead port, or on the shared (flushed) server."""
    down = request.param == "redis down"
    url = f"redis://127.0.0.1:{free_port()}/0" if down else redis_url
    config = cogworker.Config(redis_url=url, redis_socket_timeout=1)
    previous = config_module._default
    cogworker.set_default_config(config)
    RUNS.clear()
    deferred_before = len(locks.deferred)
    try:
        with cogworker_log_records() as records:
            yield config
        problems = [rec.getMessage() for rec in records if rec.levelname in ("WARNING", "ERROR")]
        assert problems == []  # no Redis error was reported, nothing was retried
        assert len(locks.deferred) == deferred_before  # no lock release left for later
        assert status.flush(config, timeout=1)  # nothing waits to be written to Redis
        assert r.keys("*") == []  # the real server (when it was the config's) is untouched
    finally:
        config_module._default = previous
        config.close()


# -- unique locks ------------------------------------------------------------------------------


def test_a_duplicate_is_refused_until_the_first_is_drained(cfg: cogworker.Config) -> None:
    with testing.fake():
        first = UniqueJob.perform_async("a")
        assert first is not None
        assert UniqueJob.perform_async("a") is None  # same class, queue and args: refused
        assert UniqueJob.perform_async("b") is not None  # other args: another job
        assert testing.jobs(UniqueJob)[0]["jid"] == first
        assert testing.drain(UniqueJob) == 2
        again = UniqueJob.perform_async("a")  # the success released the lock
        assert again is not None and again != first
    assert RUNS == [("unique", "a"), ("unique", "b")]


def test_inline_releases_after_the_run_and_refuses_a_duplicate_during_it(
    cfg: cogworker.Config,
) -> None:
    with testing.inline():
        assert UniqueJob.perform_async("a") is not None
        assert UniqueJob.perform_async("a") is not None  # the first finished: released
        assert SelfPushingJob.perform_async("x") is not None
    assert RUNS == [("unique", "a"), ("unique", "a"), ("inner push", None)]


def test_a_failure_that_ends_the_job_releases_one_that_retries_keeps(
    cfg: cogworker.Config, mode: str
) -> None:
    with running_in(mode):
        with pytest.raises(RuntimeError, match="failed for good"):
            push_and_drain(mode, lambda: UniqueFailingJob.perform_async("t"))
        with pytest.raises(RuntimeError, match="failed for good"):  # released: it runs again
            push_and_drain(mode, lambda: UniqueFailingJob.perform_async("t"))

        with pytest.raises(RuntimeError, match="will be retried"):
            push_and_drain(mode, lambda: UniqueRetriedJob.perform_async("t"))
        # as on Redis, a failure with retries left keeps the lock for the retry
        assert UniqueRetriedJob.perform_async("t") is None
    testing.clear_all()


def test_clear_and_clear_all_release_the_locks_of_the_jobs_they_drop(
    cfg: cogworker.Config,
) -> None:
    with testing.fake():
        UniqueJob.perform_async("a")
        UniqueFailingJob.perform_async("a")
        testing.clear(UniqueJob)
        assert UniqueJob.perform_async("a") is not None
        assert UniqueFailingJob.perform_async("a") is None  # not cleared: still held
        testing.clear_all()
        assert UniqueJob.perform_async("a") is not None
        assert UniqueFailingJob.perform_async("a") is not None
        testing.clear_all()


def test_a_lock_in_memory_expires_after_its_ttl(cfg: cogworker.Config) -> None:
    cfg.unique_lock_ttl = 0.2  # rounded up to 1 s, as for Redis
    with testing.fake():
        assert UniqueJob.perform_async("a") is not None
        assert UniqueJob.perform_async("a") is None
        wait_for(lambda: UniqueJob.perform_async("a"), timeout=10)
        assert len(testing.jobs(UniqueJob)) == 2
        testing.clear_all()


def test_jobs_drained_after_the_block_stay_in_memory(cfg: cogworker.Config) -> None:
    with testing.fake():
        UniqueJob.perform_async("a")
        SelfPushingJob.perform_async("x")
    assert testing.drain_all() == 2  # no mode on: they run in fake mode
    assert RUNS == [("unique", "a"), ("inner push", None)]
    with testing.fake():
        assert UniqueJob.perform_async("a") is not None  # released in memory by the drain
        testing.clear_all()


# -- status --------------------------------------------------------------------------------------


def test_status_is_recorded_in_memory_and_read_through_the_api(
    cfg: cogworker.Config, mode: str
) -> None:
    status.enable(cfg, expiration=600)
    with running_in(mode):
        jid = ProgressJob.perform_async(False)
        assert jid is not None
        if mode == "fake":
            assert status.status(jid) == "queued"
            testing.drain(ProgressJob)
        fields = status.get(jid)
        assert fields is not None
        assert status.status(jid) == "complete"
        assert fields["pct"] == "60" and fields["message"] == "most rows"
        assert fields["rows"] == "3" and fields["class"] == "TMem::Progress"
        assert fields["queue"] == "tmem"
        assert status.get("no-such-jid") is None


def test_a_failed_status_in_memory_carries_the_error(cfg: cogworker.Config, mode: str) -> None:
    status.enable(cfg)
    with running_in(mode):
        with pytest.raises(ValueError, match="bad row"):
            push_and_drain(mode, lambda: ProgressJob.perform_async(True))
        (jid,) = testing.memory.statuses
        fields = status.get(jid) or {}
    assert fields["status"] == "failed"
    assert (fields["error_class"], fields["error_message"]) == ("ValueError", "bad row")


def test_a_status_in_memory_expires(cfg: cogworker.Config) -> None:
    status.enable(cfg, expiration=1)
    with testing.fake():
        jid = ProgressJob.perform_async(False)
        assert jid is not None and status.status(jid) == "queued"
        wait_for(lambda: status.get(jid) is None, timeout=10)
        testing.clear_all()


# -- history -------------------------------------------------------------------------------------


def test_history_is_recorded_in_memory_and_read_through_the_api(
    cfg: cogworker.Config, r: redis.Redis, mode: str
) -> None:
    history.enable(cfg)
    with running_in(mode):
        ok = push_and_drain(mode, lambda: ProgressJob.perform_async(False))
        with pytest.raises(ValueError):
            push_and_drain(mode, lambda: ProgressJob.perform_async(True))
        rows, total = history.query(r)  # the client is not used while a mode is on
        failed, failed_total = history.query(r, status="failed")
        by_duration = history.query(r, sort=[{"colId": "duration", "sort": "asc"}])
        counts = history.daily_counts(r, days=2)
    assert total == 2 and failed_total == 1
    newest, oldest = rows
    assert oldest["jid"] == ok and oldest["status"] == "success"
    assert newest["status"] == "failed" and newest["error_class"] == "ValueError"
    assert failed == [newest]
    assert by_duration[1] == 2
    for entry in rows:
        assert entry["duration"] == history.duration_ms(entry["started_at"], entry["finished_at"])
    assert sum(day["success"] for day in counts.values()) == 1
    assert sum(day["failed"] for day in counts.values()) == 1


def test_history_in_memory_is_trimmed_by_count(cfg: cogworker.Config, r: redis.Redis) -> None:
    history.enable(cfg, max_entries=2)
    with testing.inline():
        jids = [ProgressJob.perform_async(False) for _ in range(3)]
        rows, total = history.query(r)
    assert total == 2
    assert [row["jid"] for row in rows] == [jids[2], jids[1]]


def test_record_in_a_mode_writes_to_memory_whatever_client_it_gets(
    cfg: cogworker.Config, r: redis.Redis, mode: str
) -> None:
    with running_in(mode):
        history.record(r, history.Retention(), {"jid": "direct", "class": "C"}, "q", 1.0)
        rows, total = history.query(r)
    assert (total, rows[0]["jid"], rows[0]["queue"]) == (1, "direct", "q")


# -- what the memory is tied to ---------------------------------------------------------------


def test_memory_outlives_the_block_and_clear_all_forgets_it(cfg: cogworker.Config) -> None:
    status.enable(cfg)
    with testing.inline():
        jid = ProgressJob.perform_async(False)
        assert jid is not None
    with testing.fake():  # a later block (either mode) sees the same memory
        assert status.status(jid) == "complete"
        assert history.query(cfg.redis())[1] == 0  # history was not enabled
        testing.clear_all()
        assert status.get(jid) is None


def test_a_real_push_after_the_mode_is_not_refused(
    config: cogworker.Config, r: redis.Redis
) -> None:
    with testing.fake():
        assert UniqueJob.perform_async("a") is not None  # locked in memory only
    assert UniqueJob.perform_async("a") is not None  # a real push: Redis never saw the lock
    assert r.llen("cogworker:queue:tmem") == 1
