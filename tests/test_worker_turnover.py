"""A busy processor thread takes its next job with the acknowledgement of the one it finished,
in one script call, instead of waiting for the fetcher: the job taken is listed in progress
and in the workers hash by that call, quiet and stop take nothing, a failed call loses
nothing (the bookkeeper sends what it carried), and basic fetch keeps the fetcher's path.

A real Manager against a real Redis; each job waits at its own gate until the test opens it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    AclServer,
    Gate,
    all_settled,
    fresh_runtime,
    holds,
    private_config,
    release,
    running,
)

import cogworker
from cogworker import keys
from cogworker.fetch import queues as queues_module
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager

RUNS: list[str] = []
GATES: dict[str, Gate] = {}


class StepJob(cogworker.Job):
    name = "Turnover::Step"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        GATES[token].pass_through()


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    GATES.clear()
    yield from fresh_runtime(request, RUNS)
    for gate in GATES.values():
        gate.open()


@pytest.fixture
def one_thread(config: cogworker.Config) -> cogworker.Config:
    config.concurrency = 1
    config.shutdown_timeout = 5.0
    return config


def push(*tokens: str) -> None:
    for token in tokens:
        GATES[token] = Gate()
        StepJob.perform_async(token)


def raws(r: redis.Redis, key: str) -> list[str]:
    return list(r.lrange(key, 0, -1))


class FeedCount:
    """Counts how often a processor asked the fetcher for work (it was idle)."""

    def __init__(self, manager: Manager) -> None:
        self.calls = 0
        ready = manager.fetcher.ready

        def counted(tid: str, mailbox: object) -> None:
            self.calls += 1
            ready(tid, mailbox)  # type: ignore[arg-type]

        manager.fetcher.ready = counted  # type: ignore[method-assign]


def test_a_busy_thread_acknowledges_and_takes_its_next_job_in_one_call(
    one_thread: cogworker.Config, r: redis.Redis
) -> None:
    push("first", "second", "third")
    [third, second, first] = raws(r, keys.queue("default"))
    manager = Manager(one_thread, new_identity())
    fed = FeedCount(manager)
    inprogress = keys.inprogress(manager.identity)
    tid = manager.processors[0].tid
    with running(manager):
        wait_for(GATES["first"].entered.is_set)
        assert fed.calls == 1  # the first job came from the fetcher
        GATES["first"].open()
        wait_for(GATES["second"].entered.is_set)
        # the first is acknowledged and counted, the second listed and registered, by the
        # same call: the fetcher was not asked again
        assert raws(r, inprogress) == [second]
        assert raws(r, keys.queue("default")) == [third]
        assert r.get(keys.STATS_PROCESSED) == "1"
        hour = keys.throughput(int(time.time()) // 3600)
        assert r.hget(hour, "processed") == "1" and r.ttl(hour) > 0
        entry = r.hget(keys.workers(manager.identity), tid)
        assert entry is not None
        assert entry.startswith('{"queue":"default","payload":' + second + ',"run_at":')
        assert abs(json.loads(entry)["run_at"] - time.time()) < 60
        assert fed.calls == 1
        GATES["second"].open()
        GATES["third"].open()
        wait_for(lambda: RUNS == ["first", "second", "third"] and all_settled(r, manager))
        # the queue ran dry: the last call removed the entry, the thread waits for the fetcher
        wait_for(lambda: fed.calls == 2)
        assert r.hget(keys.workers(manager.identity), tid) is None
        assert r.get(keys.STATS_PROCESSED) == "3"
    assert first not in raws(r, inprogress)


def test_quiet_takes_nothing_more_and_resume_carries_on(
    one_thread: cogworker.Config, r: redis.Redis
) -> None:
    push("first", "second")
    manager = Manager(one_thread, new_identity())
    with running(manager):
        wait_for(GATES["first"].entered.is_set)
        manager.set_quiet(True)
        GATES["first"].open()
        GATES["second"].open()
        wait_for(lambda: RUNS == ["first"] and all_settled(r, manager))
        holds(lambda: RUNS == ["first"] and r.llen(keys.queue("default")) == 1, 0.5)
        assert r.hlen(keys.workers(manager.identity)) == 0
        manager.set_quiet(False)
        wait_for(lambda: RUNS == ["first", "second"] and all_settled(r, manager))
    assert r.llen(keys.queue("default")) == 0


def test_stop_lets_the_running_job_finish_and_leaves_the_rest_queued(
    one_thread: cogworker.Config, r: redis.Redis
) -> None:
    push("first", "second")
    [second, _] = raws(r, keys.queue("default"))
    manager = Manager(one_thread, new_identity())
    with running(manager):
        wait_for(GATES["first"].entered.is_set)
        stopper = threading.Thread(target=manager.stop)
        stopper.start()
        wait_for(manager.stopping.is_set)
        GATES["first"].open()
        stopper.join(10)
        assert not stopper.is_alive()
    assert RUNS == ["first"]
    assert raws(r, keys.queue("default")) == [second]
    assert r.llen(keys.inprogress(manager.identity)) == 0
    assert r.get(keys.STATS_PROCESSED) == "1"


def test_connections_killed_mid_job_lose_nothing_and_run_nothing_twice(
    one_thread: cogworker.Config, r: redis.Redis
) -> None:
    """Every client connection is killed while the second job runs: the thread's own
    connection (opened by the turnover that took the second job) fails on the next call, the
    acknowledgement goes to the bookkeeper, and the third job comes through the fetcher."""
    push("first", "second", "third")
    manager = Manager(one_thread, new_identity())
    with running(manager):
        wait_for(GATES["first"].entered.is_set)
        GATES["first"].open()
        wait_for(GATES["second"].entered.is_set)
        r.client_kill_filter(_type="normal", skipme=True)
        GATES["second"].open()
        GATES["third"].open()
        wait_for(lambda: RUNS == ["first", "second", "third"] and all_settled(r, manager), 20)
        wait_for(lambda: r.get(keys.STATS_PROCESSED) == "3")
    assert r.llen(keys.queue("default")) == 0
    assert r.zcard(keys.RETRY) == 0 and r.zcard(keys.DEAD) == 0
    assert RUNS == ["first", "second", "third"]


def test_a_script_flush_mid_job_is_answered_by_sending_the_script_whole(
    one_thread: cogworker.Config, r: redis.Redis
) -> None:
    push("first", "second", "third")
    manager = Manager(one_thread, new_identity())
    fed = FeedCount(manager)
    with running(manager):
        wait_for(GATES["first"].entered.is_set)
        GATES["first"].open()
        wait_for(GATES["second"].entered.is_set)
        r.script_flush()
        GATES["second"].open()
        wait_for(GATES["third"].entered.is_set)
        assert fed.calls == 1  # the turnover took the third itself, after NOSCRIPT
        GATES["third"].open()
        wait_for(lambda: len(RUNS) == 3 and all_settled(r, manager))
    assert r.get(keys.STATS_PROCESSED) == "3"


def test_basic_fetch_feeds_every_job_through_the_fetcher(
    one_thread: cogworker.Config, r: redis.Redis
) -> None:
    one_thread.fetch = "basic"
    push("first", "second")
    manager = Manager(one_thread, new_identity())
    fed = FeedCount(manager)
    with running(manager):
        GATES["first"].open()
        GATES["second"].open()
        wait_for(lambda: RUNS == ["first", "second"] and all_settled(r, manager))
        wait_for(lambda: fed.calls == 3)  # one per job, and idle again
        wait_for(lambda: r.get(keys.STATS_PROCESSED) == "2")
        wait_for(lambda: r.hlen(keys.workers(manager.identity)) == 0)


def test_a_queue_key_of_the_wrong_type_is_skipped_and_the_job_counted_once(
    one_thread: cogworker.Config,
    r: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The turnover reads a queue whose key holds a string before the one with jobs: that
    LMOVE fails inside the script after the acknowledgement and the counts were written; the
    failure is reported, the script goes on to the next queue, and nothing is sent twice."""
    one_thread.queues = ["broken", "default"]
    monkeypatch.setattr(queues_module.random, "shuffle", lambda names: None)  # broken first
    push("first", "second", "third")
    manager = Manager(one_thread, new_identity())
    fed = FeedCount(manager)
    with running(manager):
        wait_for(GATES["first"].entered.is_set)
        r.set(keys.queue("broken"), "not a list")
        for token in ("first", "second", "third"):
            GATES[token].open()
        wait_for(lambda: RUNS == ["first", "second", "third"] and all_settled(r, manager))
        wait_for(lambda: fed.calls >= 2)
        assert r.get(keys.STATS_PROCESSED) == "3"
    assert fed.calls >= 2 and RUNS == ["first", "second", "third"]
    assert any(
        "Fetch: ResponseError: WRONGTYPE" in record.getMessage() for record in caplog.records
    )


def test_a_failure_before_the_call_still_settles_the_finished_job(
    acl: AclServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turnover re-reads the paused queues (SMEMBERS) when its cache has expired; refused
    then, the job that just finished is acknowledged through the bookkeeper all the same
    (before, the error escaped and the job stayed listed, held by a live process, for good)."""
    # the paused queues are re-read on every call
    monkeypatch.setattr(queues_module.PausedQueues.__init__, "__defaults__", (0.0,))
    cfg = private_config(acl.worker_url, concurrency=1, shutdown_timeout=2.0)
    admin = acl.admin
    manager = Manager(cfg, new_identity())
    try:
        with running(manager):
            GATES["first"] = Gate()
            cogworker.Client(cfg).enqueue(StepJob, "first")
            wait_for(GATES["first"].entered.is_set)
            acl.deny("smembers")
            GATES["first"].open()
            wait_for(lambda: all_settled(admin, manager))
            assert admin.llen(keys.queue("default")) == 0
            acl.allow("smembers")
            GATES["second"] = Gate()
            GATES["second"].open()
            cogworker.Client(cfg).enqueue(StepJob, "second")
            wait_for(lambda: RUNS == ["first", "second"] and all_settled(admin, manager))
        assert admin.get(keys.STATS_PROCESSED) == "2"
    finally:
        release(cfg)


def test_each_thread_opens_its_connection_before_its_first_job(
    config: cogworker.Config, r: redis.Redis
) -> None:
    """Once the fetch is chosen (the launcher's first heartbeat chooses it), every processor
    thread opens its own connection as it starts: none waits for a handshake after a job."""
    config.concurrency = 4
    manager = Manager(config, new_identity())
    manager.strategy.current()
    newest = max(int(client["id"]) for client in r.client_list())
    with running(manager):

        def idle_new_connections() -> int:
            new = [c for c in r.client_list() if int(c["id"]) > newest]
            return sum(1 for c in new if c["cmd"] != "blmove")  # the fetcher's wait aside

        wait_for(lambda: idle_new_connections() >= config.concurrency)
        assert RUNS == []

