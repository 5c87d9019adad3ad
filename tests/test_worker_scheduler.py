"""The scheduled poller: graduating due schedule/retry entries onto their queues, burying
entries that are not jobs, deferring entries that can't be moved, and surviving errors."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import AclServer, counter, fresh_runtime, queue_jobs, release, zset_entries

import cogworker
from cogworker import keys, redis_errors, wire
from cogworker.graduation import GRADUATE
from cogworker.local.server import RedisServer
from cogworker.worker import scheduler
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager
from cogworker.worker.scheduler import Scheduler, graduate_due

NOT_A_JOB = "not a job (JSON object with a queue) in cogworker:schedule"


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request)


@pytest.fixture
def client(config: cogworker.Config) -> redis.Redis:
    return config.redis()


def entry(token: str, queue: str = "sched", **extra: Any) -> str:
    job = {
        "class": "RtSched::Job",
        "args": [token],
        "queue": queue,
        "jid": wire.new_jid(),
        "retry": True,
        "created_at": 1_700_000_000.5,
        **extra,
    }
    return wire.dumps(job)


def due(r: redis.Redis, key: str, member: str, seconds_ago: float = 10) -> None:
    r.zadd(key, {member: time.time() - seconds_ago})


# -- claim and requeue ---------------------------------------------------------------------------


def test_claim_and_requeue_twice_second_is_gone(client: redis.Redis, r: redis.Redis) -> None:
    stored = entry("once")
    due(r, keys.SCHEDULE, stored)
    new_payload = entry("once-restamped")
    script_keys = [keys.SCHEDULE, keys.QUEUES, keys.queue("sched")]
    args = [stored, "sched", new_payload]
    assert GRADUATE(client, script_keys, args) == 1  # requeued
    assert GRADUATE(client, script_keys, args) == 0  # gone: another process took it
    assert r.lrange(keys.queue("sched"), 0, -1) == [new_payload]
    assert r.zcard(keys.SCHEDULE) == 0
    assert r.sismember(keys.QUEUES, "sched") == 1


def test_two_pollers_racing_graduate_each_entry_exactly_once(
    config: cogworker.Config, r: redis.Redis
) -> None:
    stored = [entry(f"race-{i}") for i in range(50)]
    r.zadd(keys.SCHEDULE, {member: time.time() - 5 for member in stored})
    configs = [cogworker.Config(redis_url=config.redis_url) for _ in range(2)]
    clients = [cfg.redis() for cfg in configs]
    start = threading.Barrier(2)
    moved: list[int] = []

    def poll(poller: redis.Redis) -> None:
        start.wait()
        moved.append(graduate_due(poller, keys.SCHEDULE))

    threads = [threading.Thread(target=poll, args=(c,)) for c in clients]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    finally:
        for cfg in configs:
            release(cfg)
    assert sum(moved) == 50
    jids = [job["jid"] for job in queue_jobs(r, "sched")]
    assert sorted(jids) == sorted(json.loads(member)["jid"] for member in stored)
    assert r.zcard(keys.SCHEDULE) == 0


# -- what graduates, and how -------------------------------------------------------------------


def test_graduation_restamps_enqueued_at_and_keeps_everything_else(
    client: redis.Redis, r: redis.Redis
) -> None:
    day_ago = time.time() - 86_400
    stored = entry(
        "old",
        enqueued_at=day_ago,
        retry_count=1,
        error_class="ValueError",
        error_message="boom",
        failed_at=day_ago,
    )
    # an integer no double can hold: must survive graduation digit for digit
    stored = stored.replace('"args":["old"]', '"args":["old",12345678901234567890123]')
    due(r, keys.RETRY, stored)
    before = time.time()
    assert graduate_due(client, keys.RETRY) == 1
    after = time.time()
    [raw] = r.lrange(keys.queue("sched"), 0, -1)
    graduated, original = json.loads(raw), json.loads(stored)
    assert before <= graduated["enqueued_at"] <= after  # queue latency no longer a day
    assert {k: v for k, v in graduated.items() if k != "enqueued_at"} == {
        k: v for k, v in original.items() if k != "enqueued_at"
    }
    assert "12345678901234567890123" in raw
    assert r.zcard(keys.RETRY) == 0


def test_graduated_jobs_go_to_the_head_of_the_queue(client: redis.Redis, r: redis.Redis) -> None:
    r.lpush(keys.queue("sched"), entry("waiting"))
    due(r, keys.SCHEDULE, entry("scheduled"))
    graduate_due(client, keys.SCHEDULE)
    assert [job["args"] for job in queue_jobs(r, "sched")] == [["waiting"], ["scheduled"]]


def test_future_entries_stay(client: redis.Redis, r: redis.Redis) -> None:
    future = entry("later")
    r.zadd(keys.SCHEDULE, {future: time.time() + 100})
    assert graduate_due(client, keys.SCHEDULE) == 0
    assert r.zrange(keys.SCHEDULE, 0, -1) == [future]
    assert r.llen(keys.queue("sched")) == 0


# -- entries that are not jobs, or can't be moved now ------------------------------------------


def test_invalid_entries_are_buried_and_the_good_one_behind_them_graduates(
    client: redis.Redis, r: redis.Redis
) -> None:
    invalid = ["{not json", "[1]", '{"class":"RtSched::Job","args":[]}', '{"queue":""}']
    for seconds_ago, member in zip((40, 30, 20, 15), invalid, strict=True):
        due(r, keys.SCHEDULE, member, seconds_ago)
    good = entry("good")
    due(r, keys.SCHEDULE, good, 5)
    assert graduate_due(client, keys.SCHEDULE) == 1
    assert [job["args"] for job in queue_jobs(r, "sched")] == [["good"]]
    assert r.zcard(keys.SCHEDULE) == 0
    buried = {
        wrapper["raw_payload"]: (wrapper, score) for wrapper, score in zset_entries(r, keys.DEAD)
    }
    assert set(buried) == set(invalid)
    for wrapper, score in buried.values():
        assert wrapper["class"] == "(unparseable)"
        assert wrapper["error_class"] == "TypeError"
        assert wrapper["error_message"] == NOT_A_JOB
        assert wrapper["queue"] is None
        assert wrapper["retry"] is False and wrapper["retry_count"] == 0
        assert score == wrapper["failed_at"]
    assert counter(r, keys.STATS_FAILED) == len(invalid)
    hour = int(time.time()) // 3600
    assert r.hget(keys.throughput(hour), "failed") == str(len(invalid))


def test_burial_that_fails_loses_nothing(client: redis.Redis, r: redis.Redis) -> None:
    r.set(keys.DEAD, "not a sorted set")  # the bury script aborts at its first write
    due(r, keys.SCHEDULE, "{not json", 20)
    good = entry("good")
    due(r, keys.SCHEDULE, good, 5)
    before = time.time()
    assert graduate_due(client, keys.SCHEDULE) == 1
    [(member, score)] = r.zrange(keys.SCHEDULE, 0, -1, withscores=True)
    assert member == "{not json"  # still there, pushed a minute into the future
    assert before + 60 - 1 <= score <= time.time() + 60
    assert r.get(keys.STATS_FAILED) is None
    assert [job["args"] for job in queue_jobs(r, "sched")] == [["good"]]


def test_entry_whose_queue_is_broken_is_deferred_and_the_next_graduates(
    client: redis.Redis, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    r.set(keys.queue("broken"), "oops")
    stuck = entry("stuck", queue="broken")
    due(r, keys.SCHEDULE, stuck, 20)
    good = entry("fine")
    due(r, keys.SCHEDULE, good, 5)
    before = time.time()
    assert graduate_due(client, keys.SCHEDULE) == 1
    after = time.time()
    [(member, score)] = r.zrange(keys.SCHEDULE, 0, -1, withscores=True)
    assert member == stuck
    assert before + scheduler.DEFER_DELAY <= score <= after + scheduler.DEFER_DELAY
    assert r.get(keys.queue("broken")) == "oops"
    assert [job["args"] for job in queue_jobs(r, "sched")] == [["fine"]]
    assert "Graduating an entry of cogworker:schedule failed (deferred 60s)" in caplog.text


def test_an_unreadable_schedule_set_does_not_stop_retries(
    config: cogworker.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    polls = Scheduler(Manager(config, new_identity()))
    polls.poll_once()  # the first poll runs the key check; the next one is a minute away
    r.set(keys.SCHEDULE, "not a sorted set")  # broken between two key checks
    due(r, keys.RETRY, entry("retried"))
    polls.poll_once()
    assert [job["args"] for job in queue_jobs(r, "sched")] == [["retried"]]
    assert r.zcard(keys.RETRY) == 0
    assert r.get(keys.SCHEDULE) == "not a sorted set"
    assert "Scheduled poll: ResponseError: WRONGTYPE" in caplog.text


def test_quiet_process_does_not_graduate(config: cogworker.Config, r: redis.Redis) -> None:
    manager = Manager(config, new_identity())
    polls = Scheduler(manager)
    due(r, keys.SCHEDULE, entry("after-quiet"))
    manager.set_quiet(True)
    polls.poll_once()
    assert r.zcard(keys.SCHEDULE) == 1
    manager.set_quiet(False)
    polls.poll_once()
    assert r.zcard(keys.SCHEDULE) == 0
    assert [job["args"] for job in queue_jobs(r, "sched")] == [["after-quiet"]]


def test_poller_thread_survives_errors_in_every_step(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    acl = AclServer(redis_server_factory)
    admin = acl.admin
    # every step fails on every poll: the key check (TYPE), orphan recovery (SMEMBERS, SCAN)
    # and the schedule set (wrong type, which the key check can no longer quarantine)
    acl.deny("type", "smembers", "scan")
    admin.set(keys.SCHEDULE, "broken")
    cfg = cogworker.Config(redis_url=acl.worker_url, poll_interval=0.02)
    cfg.orphan_check_interval = 0.02
    polls = Scheduler(Manager(cfg, new_identity()))
    polls.start()
    try:
        due(admin, keys.RETRY, entry("retried"))
        wait_for(lambda: admin.llen(keys.queue("sched")) == 1)  # despite recovery errors
        assert redis_errors.reporter.in_outage("Orphan recovery") is False  # not an outage
        assert not polls.recovered_once.is_set()  # no candidate source was readable
        admin.delete(keys.SCHEDULE)
        due(admin, keys.SCHEDULE, entry("scheduled"))
        wait_for(lambda: admin.llen(keys.queue("sched")) == 2)  # the thread still polls
        assert polls._thread.is_alive()
    finally:
        polls.stop()
        release(cfg)
        acl.close()
    assert not polls._thread.is_alive()
