"""cogworker.testing: fake and inline modes, nesting, restoring, draining."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis

import cogworker
from cogworker import testing
from cogworker.testing import Mode

ran: list[tuple[str, Any]] = []


class RecordJob(cogworker.Job, queue="modes"):
    name = "ModesTest::RecordJob"

    def perform(self, value: Any) -> None:
        ran.append(("record", value))
        ran.append(("jid", self.jid))


class ChainJob(cogworker.Job, queue="modes"):
    """Pushes another ChainJob until n reaches 0."""

    name = "ModesTest::ChainJob"

    def perform(self, n: int) -> None:
        ran.append(("chain", n))
        if n > 0:
            ChainJob.perform_async(n - 1)


class FanOutJob(cogworker.Job, queue="modes"):
    name = "ModesTest::FanOutJob"

    def perform(self, n: int) -> None:
        ran.append(("fan", n))
        RecordJob.perform_async(n * 10)


class FailingJob(cogworker.Job, queue="modes", retry=3):
    name = "ModesTest::FailingJob"

    def perform(self, message: str) -> None:
        raise RuntimeError(message)


class AsyncJob(cogworker.Job, queue="modes"):
    name = "ModesTest::AsyncJob"

    async def perform(self, value: int) -> None:
        await asyncio.sleep(0)
        ran.append(("async", value))
        ran.append(("async jid", self.jid))


@cogworker.job(queue="modes", name="ModesTest::record_function")
def record_function(value: int) -> None:
    ran.append(("function", value))


@cogworker.job(queue="modes", name="ModesTest::async_function")
async def async_function(value: int) -> None:
    await asyncio.sleep(0)
    ran.append(("async function", value))


@pytest.fixture(autouse=True)
def _clear_log() -> None:
    ran.clear()


# -- modes ----------------------------------------------------------------------------------


def test_disabled_by_default() -> None:
    assert testing.current_mode() is Mode.DISABLED


def test_fake_records_without_touching_redis(config: cogworker.Config, r: redis.Redis) -> None:
    before = time.time()
    with testing.fake():
        assert testing.current_mode() is Mode.FAKE
        jid = RecordJob.perform_async("a")
        in_jid = RecordJob.perform_in(60, "b")
        bulk = RecordJob.perform_bulk([["c"], ["d"]])
        fn_jid = record_function.perform_async(1)
    after = time.time()
    assert testing.current_mode() is Mode.DISABLED
    assert r.dbsize() == 0
    assert ran == []  # nothing ran
    jobs = testing.jobs(RecordJob)
    assert [job["jid"] for job in jobs] == [jid, in_jid, *bulk]
    assert [job["args"] for job in jobs] == [["a"], ["b"], ["c"], ["d"]]
    first = jobs[0]
    assert first["class"] == "ModesTest::RecordJob" and first["queue"] == "modes"
    assert first["retry"] is True
    assert before <= first["created_at"] <= after
    assert "enqueued_at" not in first and "at" not in first
    assert before + 60 <= jobs[1]["at"] <= after + 60
    assert testing.jobs("ModesTest::RecordJob") == jobs
    assert [job["jid"] for job in testing.jobs(record_function)] == [fn_jid]
    assert testing.jobs("ModesTest::record_function") == testing.jobs(record_function)
    assert len(testing.all_jobs()) == 5


def test_fake_jobs_of_an_unknown_name_is_empty() -> None:
    assert testing.jobs("Nothing::Recorded") == []


def test_jobs_refuses_other_objects() -> None:
    with pytest.raises(TypeError):
        testing.jobs(object())


def test_clear_and_clear_all(config: cogworker.Config) -> None:
    with testing.fake():
        RecordJob.perform_async(1)
        record_function.perform_async(2)
        testing.clear(RecordJob)
        assert testing.jobs(RecordJob) == []
        assert len(testing.jobs(record_function)) == 1
        RecordJob.perform_async(3)
        testing.clear_all()
    assert testing.all_jobs() == []


def test_fake_mode_is_process_wide(config: cogworker.Config, r: redis.Redis) -> None:
    with testing.fake():
        thread = threading.Thread(target=RecordJob.perform_async, args=("from thread",))
        thread.start()
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert [job["args"] for job in testing.jobs(RecordJob)] == [["from thread"]]
    assert r.dbsize() == 0


def test_perform_one_runs_the_oldest(config: cogworker.Config) -> None:
    with testing.fake():
        first = RecordJob.perform_async("first")
        RecordJob.perform_async("second")
        payload = testing.perform_one(RecordJob)
    assert payload["jid"] == first
    assert ran == [("record", "first"), ("jid", first)]
    assert [job["args"] for job in testing.jobs(RecordJob)] == [["second"]]


def test_perform_one_on_empty(config: cogworker.Config) -> None:
    with pytest.raises(testing.EmptyQueueError, match="no ModesTest::RecordJob jobs recorded"):
        testing.perform_one(RecordJob)
    with testing.fake():
        RecordJob.perform_async(1)
        testing.perform_one(RecordJob)
        with pytest.raises(testing.EmptyQueueError):
            testing.perform_one("ModesTest::RecordJob")
    assert issubclass(testing.EmptyQueueError, LookupError)


def test_perform_one_propagates_and_removes_the_job(config: cogworker.Config) -> None:
    with testing.fake():
        FailingJob.perform_async("broken")
        with pytest.raises(RuntimeError, match="broken"):
            testing.perform_one(FailingJob)
    assert testing.jobs(FailingJob) == []


def test_drain_includes_jobs_pushed_meanwhile(config: cogworker.Config, r: redis.Redis) -> None:
    with testing.fake():
        ChainJob.perform_async(3)
        assert testing.drain(ChainJob) == 4
        assert testing.jobs(ChainJob) == []
    assert ran == [("chain", 3), ("chain", 2), ("chain", 1), ("chain", 0)]
    assert r.dbsize() == 0


def test_drain_only_that_class(config: cogworker.Config) -> None:
    with testing.fake():
        FanOutJob.perform_async(1)
        FanOutJob.perform_async(2)
        assert testing.drain(FanOutJob) == 2
        assert [job["args"] for job in testing.jobs(RecordJob)] == [[10], [20]]
    assert ran == [("fan", 1), ("fan", 2)]


def test_drain_all(config: cogworker.Config) -> None:
    with testing.fake():
        FanOutJob.perform_async(1)
        record_function.perform_async(5)
        ChainJob.perform_async(1)
        assert testing.drain_all() == 5
        assert testing.all_jobs() == []
    assert sorted(entry for entry in ran if entry[0] != "jid") == sorted(
        [("fan", 1), ("record", 10), ("function", 5), ("chain", 1), ("chain", 0)]
    )


def test_drain_runs_through_server_middleware(config: cogworker.Config) -> None:
    seen: list[str] = []

    class Seen:
        def __call__(self, worker: Any, job: Any, queue: str, call_next: Any) -> None:
            seen.append(job["jid"])
            call_next()

    config.server_middleware.add(Seen)
    with testing.fake():
        jids = [RecordJob.perform_async(n) for n in range(3)]
        testing.drain(RecordJob)
    assert seen == jids


def test_inline_runs_at_once(config: cogworker.Config, r: redis.Redis) -> None:
    with testing.inline():
        assert testing.current_mode() is Mode.INLINE
        jid = RecordJob.perform_async("now")
        assert ran == [("record", "now"), ("jid", jid)]
        RecordJob.perform_in(3600, "later")  # the delay is ignored
        RecordJob.perform_at(4000000000.0, "much later")
        record_function.perform_async(7)
    assert [entry for entry in ran if entry[0] != "jid"] == [
        ("record", "now"),
        ("record", "later"),
        ("record", "much later"),
        ("function", 7),
    ]
    assert r.dbsize() == 0
    assert testing.all_jobs() == []


def test_inline_exceptions_propagate(config: cogworker.Config, r: redis.Redis) -> None:
    with testing.inline(), pytest.raises(RuntimeError, match="kaboom"):
        FailingJob.perform_async("kaboom")
    assert r.dbsize() == 0  # no retry, no dead entry


def test_inline_nested_pushes_run_depth_first(config: cogworker.Config) -> None:
    with testing.inline():
        ChainJob.perform_async(2)
    assert ran == [("chain", 2), ("chain", 1), ("chain", 0)]


def test_async_perform_inline(config: cogworker.Config) -> None:
    with testing.inline():
        jid = AsyncJob.perform_async(5)
        async_function.perform_async(6)
    assert ran == [("async", 5), ("async jid", jid), ("async function", 6)]


def test_async_perform_drained(config: cogworker.Config) -> None:
    with testing.fake():
        AsyncJob.perform_async(1)
        async_function.perform_async(2)
        assert testing.drain_all() == 2
    assert ("async", 1) in ran and ("async function", 2) in ran


# -- nesting and restoring ------------------------------------------------------------------


def test_modes_nest(config: cogworker.Config, r: redis.Redis) -> None:
    with testing.fake():
        with testing.inline():
            assert testing.current_mode() is Mode.INLINE
            RecordJob.perform_async("inline")
            with testing.disabled():
                assert testing.current_mode() is Mode.DISABLED
                RecordJob.perform_async("redis")
            assert testing.current_mode() is Mode.INLINE
        assert testing.current_mode() is Mode.FAKE
        RecordJob.perform_async("fake")
    assert testing.current_mode() is Mode.DISABLED
    assert ran[0] == ("record", "inline")
    assert [job["args"] for job in testing.jobs(RecordJob)] == [["fake"]]
    assert r.llen("cogworker:queue:modes") == 1


def test_mode_restored_after_an_exception() -> None:
    with pytest.raises(KeyError), testing.fake():
        raise KeyError("boom")
    assert testing.current_mode() is Mode.DISABLED

    with testing.fake():
        with pytest.raises(RuntimeError), testing.inline():
            raise RuntimeError("inner")
        assert testing.current_mode() is Mode.FAKE
    assert testing.current_mode() is Mode.DISABLED


def test_mode_restored_after_a_job_fails_inline(config: cogworker.Config) -> None:
    with testing.fake():
        with pytest.raises(RuntimeError), testing.inline():
            FailingJob.perform_async("x")
        assert testing.current_mode() is Mode.FAKE
    assert testing.current_mode() is Mode.DISABLED
