"""Processor threads: acknowledge / retry / dead routing, the give-back rule, shutdown.

Everything runs a real Manager (fetcher, processors, bookkeeper) against a real Redis; faults
are provoked for real (ACL revocation, keys of the wrong type, a stopped server).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    AclServer,
    Gate,
    counter,
    fresh_runtime,
    pending_filing,
    private_config,
    queue_jobs,
    release,
    running,
    zset_entries,
)

import cogworker
from cogworker import failure, keys, redis_errors, wire
from cogworker.local.server import RedisServer
from cogworker.worker import scheduler
from cogworker.worker.identity import new_identity
from cogworker.worker.ledger import ACK
from cogworker.worker.manager import Manager
from cogworker.worker.scheduler import Scheduler

RUNS: list[str] = []  # tokens, in the order perform ran
THREADS: list[str] = []  # the thread each run happened on
GATE = Gate()


class OkJob(cogworker.Job):
    name = "RtProc::Ok"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        THREADS.append(threading.current_thread().name)


class JidJob(cogworker.Job):
    name = "RtProc::Jid"

    def perform(self) -> None:
        RUNS.append(self.jid)


class FailJob(cogworker.Job, retry=3):
    name = "RtProc::Fail"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        raise ValueError(f"boom {token}")


class LastRetryJob(cogworker.Job, retry=1):
    name = "RtProc::LastRetry"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        raise ValueError("still broken")


class NoRetryJob(cogworker.Job, retry=False):
    name = "RtProc::NoRetry"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        raise KeyError("gone")


class GatedJob(cogworker.Job, retry=3):
    """Appends its token, waits for the test to open GATE, then succeeds or fails."""

    name = "RtProc::Gated"

    def perform(self, token: str, fail: bool = False) -> None:
        RUNS.append(token)
        THREADS.append(threading.current_thread().name)
        GATE.pass_through()
        if fail:
            raise ValueError(f"failed after the gate: {token}")


class AsyncJob(cogworker.Job):
    name = "RtProc::Async"

    async def perform(self, token: str) -> None:
        await asyncio.sleep(0)
        RUNS.append(token)
        THREADS.append(threading.current_thread().name)


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS, THREADS, gate=GATE)


@pytest.fixture
def small(config: cogworker.Config) -> cogworker.Config:
    config.concurrency = 1
    config.shutdown_timeout = 2.0
    return config


def inprogress(manager: Manager) -> str:
    return keys.inprogress(manager.identity)


def settled_idle(r: redis.Redis, manager: Manager) -> bool:
    """The bookkeeper sent everything and nothing is left in progress."""
    manager.bookkeeper.flush()
    return r.llen(inprogress(manager)) == 0 and not manager.ledger.running()


# -- success and failure routing ---------------------------------------------------------------


def test_success_is_acknowledged_counted_and_deregistered(
    small: cogworker.Config, r: redis.Redis
) -> None:
    manager = Manager(small, new_identity())
    with running(manager):
        OkJob.perform_async("ok-1")
        wait_for(lambda: RUNS == ["ok-1"])
        wait_for(lambda: settled_idle(r, manager) and counter(r, keys.STATS_PROCESSED) == 1)
        assert r.llen(keys.queue("default")) == 0
        assert r.zcard(keys.RETRY) == 0 and r.zcard(keys.DEAD) == 0
        assert r.get(keys.STATS_FAILED) is None
        assert r.hlen(keys.workers(manager.identity)) == 0
        hour = int(time.time()) // 3600
        assert r.hget(keys.throughput(hour), "processed") == "1"
    assert RUNS == ["ok-1"]


def test_failure_files_a_retry_entry_within_the_backoff_window(
    small: cogworker.Config, r: redis.Redis
) -> None:
    manager = Manager(small, new_identity())
    with running(manager):
        before = time.time()
        jid = FailJob.perform_async("f1")
        wait_for(lambda: r.zcard(keys.RETRY) == 1)
        after = time.time()
        wait_for(lambda: settled_idle(r, manager) and counter(r, keys.STATS_FAILED) == 1)
    [(entry, score)] = zset_entries(r, keys.RETRY)
    assert entry["jid"] == jid
    assert entry["retry_count"] == 1
    assert entry["error_class"] == "ValueError"
    assert entry["error_message"] == "boom f1"
    assert before <= entry["failed_at"] <= after
    # first retry: 1**4 + 15 + rand(0..29) * 2 seconds after the failure
    assert 16 - 1e-3 <= score - entry["failed_at"] <= 74 + 1e-3
    assert r.llen(keys.queue("default")) == 0
    assert r.zcard(keys.DEAD) == 0
    attempts = [json.loads(item) for item in r.lrange(keys.job_attempts(jid), 0, -1)]
    assert [(item["attempt"], item["outcome"]) for item in attempts] == [(1, "retrying")]
    assert RUNS == ["f1"]


def test_a_payload_is_parsed_once_from_fetch_to_ack_or_filing(
    small: cogworker.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each payload is read once, when it is taken; running, registering, acknowledging,
    filing its failure and logging it all use that parse (the lenient reader the scripts'
    view of a bad payload needs is never called for a job)."""
    parsed: list[str] = []
    lenient: list[str] = []
    parse_object, read_leniently = failure.parse_object, wire.read_leniently

    def counting_parse(raw: str) -> Any:
        parsed.append(raw)
        return parse_object(raw)

    def counting_lenient(raw: str) -> Any:
        lenient.append(raw)
        return read_leniently(raw)

    monkeypatch.setattr(failure, "parse_object", counting_parse)
    monkeypatch.setattr(wire, "read_leniently", counting_lenient)
    manager = Manager(small, new_identity())
    with running(manager):
        ok = [OkJob.perform_async(f"once-{n}") for n in range(3)]
        failed = FailJob.perform_async("once-failed")
        wait_for(lambda: len(RUNS) == 4 and r.zcard(keys.RETRY) == 1)
        wait_for(lambda: settled_idle(r, manager) and counter(r, keys.STATS_PROCESSED) == 3)
    assert sorted(json.loads(raw)["jid"] for raw in parsed) == sorted([*ok, failed])
    assert lenient == []


@pytest.mark.parametrize(("count", "low", "high"), [(1, 16, 74), (2, 31, 118), (5, 640, 814)])
def test_default_backoff_window(count: int, low: int, high: int) -> None:
    """count**4 + 15 + rand(0..29) * (count + 1), with the random draw at both ends."""
    draws: list[int] = []

    def lowest(n: int) -> int:
        draws.append(n)
        return 0

    assert failure.default_backoff(count, rand=lowest) == low
    assert failure.default_backoff(count, rand=lambda n: n - 1) == high
    assert draws == [30]


def graduate_retry(r: redis.Redis, client: redis.Redis) -> dict[str, Any]:
    """Move the single retry entry onto its queue now (the real graduation script)."""
    [(entry, score)] = zset_entries(r, keys.RETRY)
    assert scheduler.graduate_due(client, keys.RETRY, now=score + 1) == 1
    return entry


def test_second_failure_keeps_first_failed_at_and_backs_off_longer(
    small: cogworker.Config, r: redis.Redis
) -> None:
    manager = Manager(small, new_identity())
    with running(manager):
        FailJob.perform_async("twice")
        wait_for(lambda: r.zcard(keys.RETRY) == 1)
        first = graduate_retry(r, manager.client)
        before = time.time()
        wait_for(lambda: len(RUNS) == 2 and r.zcard(keys.RETRY) == 1)
        after = time.time()
    [(second, score)] = zset_entries(r, keys.RETRY)
    assert second["jid"] == first["jid"]
    assert second["retry_count"] == 2
    assert second["failed_at"] == first["failed_at"]  # kept from the first failure
    # second retry: 2**4 + 15 + rand(0..29) * 3 seconds after the second failure
    assert before + 31 - 1e-3 <= score <= after + 118 + 1e-3
    assert RUNS == ["twice", "twice"]


def test_failure_of_the_last_retry_goes_to_dead(small: cogworker.Config, r: redis.Redis) -> None:
    manager = Manager(small, new_identity())
    with running(manager):
        jid = LastRetryJob.perform_async("last")
        wait_for(lambda: r.zcard(keys.RETRY) == 1)
        graduate_retry(r, manager.client)
        wait_for(lambda: r.zcard(keys.DEAD) == 1)
        wait_for(lambda: settled_idle(r, manager))
    [(entry, score)] = zset_entries(r, keys.DEAD)
    assert entry["jid"] == jid
    assert entry["retry_count"] == 2
    assert entry["error_class"] == "ValueError"
    assert score == pytest.approx(time.time(), abs=10)
    assert r.zcard(keys.RETRY) == 0
    assert r.llen(keys.queue("default")) == 0
    assert RUNS == ["last", "last"]


def test_retry_false_goes_to_dead_at_once_and_hooks_run_after_the_ack(
    small: cogworker.Config, r: redis.Redis
) -> None:
    manager = Manager(small, new_identity())
    seen: list[tuple[dict[str, Any], BaseException, int]] = []

    def handler(entry: dict[str, Any], error: BaseException) -> None:
        seen.append((entry, error, r.llen(inprogress(manager))))

    small.death_handlers = [handler]
    with running(manager):
        jid = NoRetryJob.perform_async("once")
        wait_for(lambda: len(seen) == 1)
        wait_for(lambda: settled_idle(r, manager))
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["jid"] == jid
    assert entry["retry_count"] == 1
    assert entry["error_class"] == "KeyError"
    assert r.zcard(keys.RETRY) == 0
    hook_entry, hook_error, listed_during_hook = seen[0]
    assert hook_entry == entry  # the stored entry
    assert isinstance(hook_error, KeyError)
    assert listed_during_hook == 0  # hooks run only after the job was acknowledged
    attempts = [json.loads(item) for item in r.lrange(keys.job_attempts(jid), 0, -1)]
    assert [item["outcome"] for item in attempts] == ["dead"]
    assert RUNS == ["once"]


# -- Redis failing between execute and acknowledge ------------------------------------------


@pytest.mark.parametrize("settled_by", ["reconcile", "shutdown_while_still_denied"])
def test_ack_denied_keeps_the_job_listed_and_it_never_runs_again(
    acl: AclServer, caplog: pytest.LogCaptureFixture, settled_by: str
) -> None:
    cfg = private_config(acl.worker_url, concurrency=1, shutdown_timeout=2.0)
    admin = acl.admin
    manager = Manager(cfg, new_identity())
    try:
        with running(manager):
            jid = cogworker.Client(cfg).enqueue(GatedJob, "acked-late")
            wait_for(GATE.entered.is_set)
            [raw] = admin.lrange(inprogress(manager), 0, -1)
            acl.deny("lrem")  # the ack script's LREM now fails on the worker's connections
            GATE.open()
            wait_for(lambda: manager.ledger.pending() == {raw: ACK})
            assert f"couldn't acknowledge finished job jid={jid} after 3 attempts" in caplog.text
            assert admin.lrange(inprogress(manager), 0, -1) == [raw]
            assert admin.llen(keys.queue("default")) == 0
            if settled_by == "reconcile":
                acl.allow("lrem")
                Scheduler(manager).orphan_check()  # reconcile settles the pending ack
                assert manager.ledger.pending() == {}
                assert admin.llen(inprogress(manager)) == 0
            manager.stop(2.0)  # still denied in the other case: the finished job is dropped
        assert admin.llen(inprogress(manager)) == 0
        assert admin.llen(keys.queue("default")) == 0
        assert admin.zcard(keys.RETRY) == 0 and admin.zcard(keys.DEAD) == 0
        assert RUNS == ["acked-late"]
    finally:
        release(cfg)


def test_unrecordable_failure_is_left_in_progress_then_filed_never_requeued(
    small: cogworker.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    r.set(keys.RETRY, "not a sorted set")  # every ZADD into retry fails with WRONGTYPE
    manager = Manager(small, new_identity())
    with running(manager):
        jid = FailJob.perform_async("unfiled")
        # the settlement is pending before settle logs what happens next: wait for both
        wait_for(lambda: manager.ledger.pending() and "next reconcile" in caplog.text)
        [raw] = r.lrange(inprogress(manager), 0, -1)
        target = pending_filing(manager, raw).target
        assert target == keys.RETRY
        assert (
            f"fail: RtProc::Fail jid={jid}: ValueError: boom unfiled; couldn't file it "
            "(ResponseError: WRONGTYPE"
        ) in caplog.text
        assert "left in progress, filed into retry by the next reconcile" in caplog.text
        checks = Scheduler(manager)
        for _ in range(2):  # two reconcile passes: a stray would be requeued by now
            checks.orphan_check()
            assert r.lrange(inprogress(manager), 0, -1) == [raw]
            assert r.llen(keys.queue("default")) == 0
        r.delete(keys.RETRY)
        checks.orphan_check()  # the pending filing goes through now
        assert manager.ledger.pending() == {}
        assert r.llen(inprogress(manager)) == 0
    [(entry, score)] = zset_entries(r, keys.RETRY)
    assert entry["jid"] == jid
    assert entry["interrupted_count"] == 1
    assert entry["retry_count"] == 1
    assert entry["error_class"] == "ValueError"
    assert score == pytest.approx(entry["failed_at"] + 30, abs=0.01)
    assert r.llen(keys.queue("default")) == 0
    assert RUNS == ["unfiled"]


def test_unfileable_failure_at_shutdown_is_handed_to_unsettled(
    small: cogworker.Config, r: redis.Redis
) -> None:
    r.set(keys.DEAD, "not a sorted set")
    manager = Manager(small, new_identity())
    with running(manager):
        jid = NoRetryJob.perform_async("orphan-failure")
        wait_for(lambda: manager.ledger.pending())
        manager.stop(1.0)
    assert r.llen(inprogress(manager)) == 0
    assert r.llen(keys.queue("default")) == 0
    [record] = [json.loads(item) for item in r.lrange(keys.UNSETTLED, 0, -1)]
    assert record["set"] == keys.DEAD
    assert json.loads(record["payload"])["jid"] == jid
    # any live process files it once the dead set is usable again
    r.delete(keys.DEAD)
    other = Manager(small, new_identity())
    Scheduler(other).orphan_check()
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["jid"] == jid
    assert r.llen(keys.UNSETTLED) == 0
    assert RUNS == ["orphan-failure"]


def test_redis_down_between_execute_and_acknowledge(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    # appendfsync always: every acknowledged write survives the restart
    server = redis_server_factory(config_lines=["appendonly yes", "appendfsync always"])
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    cfg = private_config(server.url, concurrency=1, shutdown_timeout=2.0)
    manager = Manager(cfg, new_identity())
    try:
        with running(manager):
            jid = cogworker.Client(cfg).enqueue(GatedJob, "first", True)
            wait_for(GATE.entered.is_set)
            [raw] = admin.lrange(inprogress(manager), 0, -1)
            server.stop()
            GATE.open()  # perform raises now; filing the failure hits a dead connection
            wait_for(lambda: raw in manager.ledger.pending(), timeout=15)
            server.start()
            assert admin.lrange(inprogress(manager), 0, -1) == [raw]
            assert admin.llen(keys.queue("default")) == 0
            Scheduler(manager).orphan_check()  # reconcile files the pending failure
            assert manager.ledger.pending() == {}
            [(entry, _)] = zset_entries(admin, keys.RETRY)
            assert entry["jid"] == jid
            assert entry["interrupted_count"] == 1
            assert entry["error_class"] == "ValueError"
            assert admin.llen(inprogress(manager)) == 0
            # the same single processor thread keeps working
            cogworker.Client(cfg).enqueue(OkJob, "second")
            wait_for(lambda: RUNS == ["first", "second"], timeout=15)
        assert THREADS == ["processor-0", "processor-0"]
        assert admin.llen(keys.queue("default")) == 0
    finally:
        release(cfg)
        admin.close()


# -- payloads that are not runnable jobs -------------------------------------------------------


def test_unparseable_payloads_are_buried_and_the_single_thread_goes_on(
    small: cogworker.Config, r: redis.Redis
) -> None:
    r.lpush(keys.queue("default"), "{not json", "[1]")  # taken in that order
    OkJob.perform_async("after-garbage")
    manager = Manager(small, new_identity())
    with running(manager):
        wait_for(lambda: RUNS == ["after-garbage"])
        wait_for(lambda: settled_idle(r, manager) and counter(r, keys.STATS_PROCESSED) == 1)
    assert THREADS == ["processor-0"]
    wrappers = {entry["raw_payload"]: (entry, score) for entry, score in zset_entries(r, keys.DEAD)}
    assert set(wrappers) == {"{not json", "[1]"}
    for raw, error_class in (("{not json", "json.JSONDecodeError"), ("[1]", "TypeError")):
        entry, score = wrappers[raw]
        assert entry["class"] == "(unparseable)"
        assert entry["queue"] == "default"
        assert entry["error_class"] == error_class
        assert entry["retry"] is False and entry["retry_count"] == 0
        assert score == entry["failed_at"]
    assert "got list" in wrappers["[1]"][0]["error_message"]
    assert counter(r, keys.STATS_FAILED) == 2
    assert r.llen(keys.queue("default")) == 0


@pytest.mark.parametrize("retry", [0, 2])
def test_unknown_job_class_is_routed_like_a_failure(
    small: cogworker.Config, r: redis.Redis, retry: int
) -> None:
    errors: list[BaseException] = []
    small.death_handlers = [lambda entry, error: errors.append(error)]
    manager = Manager(small, new_identity())
    with running(manager):
        jid = cogworker.Client(small).push(
            {"class": "RtProc::TotallyUndefinedGhostJob", "args": [1], "retry": retry}
        )
        target = keys.DEAD if retry == 0 else keys.RETRY
        wait_for(lambda: r.zcard(target) == 1)
        wait_for(lambda: settled_idle(r, manager))
    [(entry, score)] = zset_entries(r, target)
    assert entry["jid"] == jid
    assert entry["retry_count"] == 1
    assert "TotallyUndefinedGhostJob" in entry["error_message"]
    if retry == 0:
        assert r.zcard(keys.RETRY) == 0
        assert len(errors) == 1 and isinstance(errors[0], NameError)
    else:
        assert r.zcard(keys.DEAD) == 0
        assert 16 - 1e-3 <= score - entry["failed_at"] <= 74 + 1e-3
    assert counter(r, keys.STATS_FAILED) == 1
    # the wire name Ruby processes and the Web UI expect for an unresolvable class
    assert entry["error_class"] == "NameError"


# -- thread survival ---------------------------------------------------------------------------


def test_a_failing_first_fetch_does_not_kill_the_worker(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    server.stop()  # the port is kept: the first fetch gets "connection refused"
    cfg = private_config(server.url, concurrency=1, shutdown_timeout=2.0)
    manager = Manager(cfg, new_identity())
    try:
        with running(manager):
            wait_for(lambda: redis_errors.reporter.in_outage("Fetch"))
            server.start()
            cogworker.Client(cfg).enqueue(OkJob, "after-outage")
            wait_for(lambda: RUNS == ["after-outage"], timeout=15)
            wait_for(lambda: not redis_errors.reporter.in_outage("Fetch"))
            assert all(p.thread.is_alive() for p in manager.processors)
        assert THREADS == ["processor-0"]
    finally:
        release(cfg)


def test_a_bug_in_processing_leaves_the_single_thread_its_lane(
    redis_url: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failure mode 14 with the pace: the thread that raised goes idle through its error
    path, and its lane (the only one at concurrency 1) must come back with it."""
    cfg = private_config(redis_url, concurrency=1, shutdown_timeout=2.0)
    manager = Manager(cfg, new_identity())
    real_finish = manager.settler.finish
    calls: list[int] = []

    def finish_raising_once(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug after the run")
        return real_finish(*args)

    monkeypatch.setattr(manager.settler, "finish", finish_raising_once)
    try:
        with running(manager):
            cogworker.Client(cfg).enqueue(OkJob, "first")
            wait_for(lambda: RUNS == ["first"])
            cogworker.Client(cfg).enqueue(OkJob, "second")
            wait_for(lambda: RUNS == ["first", "second"], timeout=15)
            assert manager.pace.held <= 1
        assert THREADS == ["processor-0", "processor-0"]
    finally:
        release(cfg)


# -- shutdown ---------------------------------------------------------------------------------


def test_job_fetched_after_stop_began_is_given_back(
    small: cogworker.Config, r: redis.Redis
) -> None:
    manager = Manager(small, new_identity())
    OkJob.perform_async("too-late")
    [work] = manager.strategy.current().retrieve(1)
    OkJob.perform_async("pushed-later")
    try:
        manager.stopping.set()
        manager.ledger.taken(work)  # what the fetcher does before handing it over
        manager.processors[0].process(work)
    finally:
        manager.strategy.current().close()
    assert RUNS == []
    assert r.llen(inprogress(manager)) == 0
    # back at the tail of its queue: it runs next, before the job pushed meanwhile
    assert [job["args"] for job in queue_jobs(r, "default")] == [["too-late"], ["pushed-later"]]
    assert r.lindex(keys.queue("default"), -1) == work.raw  # byte for byte
    assert manager.ledger.running() == set()


def test_a_thread_that_lagged_past_the_hand_back_never_starts_its_job(
    small: cogworker.Config, r: redis.Redis
) -> None:
    """A thread checked for shutdown before it began, then lagged (a starved process) until
    the hand-back had requeued the job: it must not run it, and the job is queued once.
    (Found by a fault run: both copies ran, 20 ms apart.)"""
    manager = Manager(small, new_identity())
    OkJob.perform_async("lagged")
    [work] = manager.strategy.current().retrieve(1)
    try:
        manager.ledger.taken(work)
        manager.stopping.set()
        manager.ledger.close_starts()  # what stop does before it hands the list back
        manager.reconciler.hand_back()
        lagging = manager.processors[0]
        lagging._stopping = threading.Event()  # its stale view: shutdown not begun yet
        assert lagging.process(work) is None  # and its turnover takes nothing: stopping
    finally:
        manager.strategy.current().close()
    assert RUNS == []
    assert [job["args"] for job in queue_jobs(r, "default")] == [["lagged"]]  # once
    assert r.llen(inprogress(manager)) == 0
    assert manager.ledger.running() == set()


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_stop_requeues_a_job_running_past_the_shutdown_timeout(
    small: cogworker.Config, r: redis.Redis, mode: str
) -> None:
    small.fetch = mode
    manager = Manager(small, new_identity())
    with running(manager):
        jid = GatedJob.perform_async("stuck")
        wait_for(GATE.entered.is_set)
        started = time.monotonic()
        manager.stop(0.2)
        assert time.monotonic() - started < 5
        assert [job["jid"] for job in queue_jobs(r, "default")] == [jid]
        assert r.llen(inprogress(manager)) == 0
    GATE.open()
    manager.processors[0].thread.join(5)
    assert not manager.processors[0].thread.is_alive()
    assert [job["jid"] for job in queue_jobs(r, "default")] == [jid]  # not run again here
    assert RUNS == ["stuck"]


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_stop_lets_a_short_job_finish_and_does_not_requeue_it(
    small: cogworker.Config, r: redis.Redis, mode: str
) -> None:
    small.fetch = mode
    manager = Manager(small, new_identity())
    with running(manager):
        GatedJob.perform_async("short")
        wait_for(GATE.entered.is_set)
        stopper = threading.Thread(target=manager.stop, kwargs={"timeout": 5.0})
        stopper.start()
        wait_for(manager.stopping.is_set)
        GATE.open()  # the job ends while the manager drains
        stopper.join(10)
        assert not stopper.is_alive()
    assert RUNS == ["short"]
    assert r.llen(keys.queue("default")) == 0
    assert r.llen(inprogress(manager)) == 0
    assert counter(r, keys.STATS_PROCESSED) == 1


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_jobs_pushed_while_stopping_are_either_run_once_or_left_queued(
    config: cogworker.Config, r: redis.Redis, mode: str
) -> None:
    config.concurrency = 2
    config.fetch = mode
    manager = Manager(config, new_identity())
    pushed: list[str] = []
    done_pushing = threading.Event()

    def push() -> None:
        client = cogworker.Client(config)
        while not done_pushing.is_set() and len(pushed) < 3000:
            pushed.append(str(client.enqueue(JidJob)))

    pusher = threading.Thread(target=push)
    with running(manager):
        pusher.start()
        wait_for(lambda: len(RUNS) >= 20)
        manager.stop(5.0)
    done_pushing.set()
    pusher.join(10)
    queued = [job["jid"] for job in queue_jobs(r, "default")]
    assert len(RUNS) == len(set(RUNS))  # nothing ran twice
    assert not set(RUNS) & set(queued)  # nothing both ran and waits
    assert sorted(RUNS + queued) == sorted(pushed)  # nothing lost
    assert r.llen(inprogress(manager)) == 0


def test_async_perform_runs_on_the_processor_thread(
    small: cogworker.Config, r: redis.Redis
) -> None:
    manager = Manager(small, new_identity())
    with running(manager):
        AsyncJob.perform_async("a1")
        AsyncJob.perform_async("a2")
        wait_for(lambda: RUNS == ["a1", "a2"])
        wait_for(lambda: settled_idle(r, manager) and counter(r, keys.STATS_PROCESSED) == 2)
    assert THREADS == ["processor-0", "processor-0"]
    assert r.zcard(keys.RETRY) == 0 and r.zcard(keys.DEAD) == 0


def test_processor_logs_name_the_job(
    small: cogworker.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cogworker")
    manager = Manager(small, new_identity())
    with running(manager):
        jid = FailJob.perform_async("logged")
        wait_for(lambda: r.zcard(keys.RETRY) == 1)
    assert f"start: RtProc::Fail jid={jid}" in caplog.text
    assert f"fail: RtProc::Fail jid={jid}: ValueError: boom logged" in caplog.text
