"""The read API's processes (``api/processes.py``): seeded presence records, then remote
commands and running work against a real ``python -m cogworker`` worker subprocess."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
import redis
from api_support import (
    client,
    find_process,
    identity_of,
    producer,
    runs,
    worker,
)
from conftest import wait_for
from runtime_support import (
    closing_pools,
    holds,
    listening,
    redis_time,
)

import cogworker
from cogworker import api, keys

_close_pools = pytest.fixture(autouse=True)(closing_pools)
_fixtures = (client, producer, worker)  # from api_support, named here for pytest


# -- processes (seeded) ----------------------------------------------------------------------


def seed_process(r: redis.Redis, identity: str, **fields: str) -> None:
    info = {"hostname": "h", "pid": 4242, "concurrency": 5, "queues": ["a", "a", "b"]}
    r.hset(keys.process(identity), mapping={"info": json.dumps(info), **fields})
    r.sadd(keys.PROCESSES, identity)


def test_last_beat_comes_from_the_beat_field_else_the_last_beat_hash(
    r: redis.Redis, client: redis.Redis
) -> None:
    seed_process(r, "h:1:aaaaaaaaaaaa", busy="2", quiet="true", beat="1700000100")
    seed_process(r, "h:2:bbbbbbbbbbbb", busy="0", quiet="false")
    seed_process(r, "h:3:cccccccccccc", busy="1", quiet="false")
    r.hset(keys.LAST_BEAT, mapping={"h:1:aaaaaaaaaaaa": "1700000000", "h:2:bbbbbbbbbbbb": "1"})

    found = {p.identity: p for p in api.ProcessSet(client)}

    assert found["h:1:aaaaaaaaaaaa"].last_beat == 1_700_000_100
    assert found["h:2:bbbbbbbbbbbb"].last_beat == 1
    assert found["h:3:cccccccccccc"].last_beat is None
    first = found["h:1:aaaaaaaaaaaa"]
    assert (first.busy, first.quiet, first.concurrency, first.pid) == (2, True, 5, 4242)
    assert first.queues == ["a", "a", "b"]
    assert api.ProcessSet(client).total_busy() == 3
    assert api.ProcessSet(client).size() == 3


def test_stale_members_are_removed_while_iterating(r: redis.Redis, client: redis.Redis) -> None:
    seed_process(r, "live:1:aaaaaaaaaaaa", busy="0", quiet="false")
    r.sadd(keys.PROCESSES, "gone:1:bbbbbbbbbbbb", "gone:2:cccccccccccc")  # presence expired

    assert [p.identity for p in api.ProcessSet(client)] == ["live:1:aaaaaaaaaaaa"]

    assert r.smembers(keys.PROCESSES) == {"live:1:aaaaaaaaaaaa"}


def test_stale_members_seen_before_an_early_stop_are_removed_too(
    r: redis.Redis, client: redis.Redis
) -> None:
    """A stale member is removed as soon as iteration reaches it, even if the caller stops
    early (``find`` returns at the first match)."""
    r.sadd(keys.PROCESSES, "a-gone:1:bbbbbbbbbbbb")  # sorts before the live one
    seed_process(r, "b-live:1:aaaaaaaaaaaa", busy="0", quiet="false")

    found = api.ProcessSet(client).find("b-live:1:aaaaaaaaaaaa")

    assert found is not None
    assert r.smembers(keys.PROCESSES) == {"b-live:1:aaaaaaaaaaaa"}


def test_process_signal_refuses_an_unknown_command(r: redis.Redis, client: redis.Redis) -> None:
    seed_process(r, "h:1:aaaaaaaaaaaa", busy="0", quiet="false")
    (process,) = api.ProcessSet(client)

    with pytest.raises(ValueError, match="unknown command"):
        process.signal("reboot")
    assert process.quiet_down() == 0  # nobody listening: lost, and it says so


# -- processes, remote commands and work with a real worker ----------------------------------


def test_process_set_describes_a_live_worker(
    worker: subprocess.Popen[bytes],
    r: redis.Redis,
    client: redis.Redis,
    producer: cogworker.Client,
) -> None:
    identity = identity_of(r, worker)

    process = find_process(client, identity)

    hostname, pid, suffix = identity.rsplit(":", 2)
    assert re.fullmatch(r"[0-9a-f]{12}", suffix)
    assert process.pid == worker.pid == int(pid)
    assert process.hostname == hostname
    assert process.concurrency == 3
    assert process.queues == ["default"]
    assert (process.busy, process.quiet) == (0, False)
    assert process.rss_kb is not None and process.rss_kb > 0
    assert process.started_at is not None and process.started_at <= time.time()
    assert process.last_beat is not None and abs(process.last_beat - redis_time(r)) <= 2

    producer.push({"class": "Api::Gate", "args": ["busy"]})
    wait_for(lambda: find_process(client, identity).busy == 1)
    r.set("test:gate:busy", 1)
    wait_for(lambda: find_process(client, identity).busy == 0)
    assert runs(r, "busy", "finished") == 1


def test_work_set_shows_the_running_job(
    worker: subprocess.Popen[bytes],
    r: redis.Redis,
    client: redis.Redis,
    producer: cogworker.Client,
) -> None:
    identity = identity_of(r, worker)
    before = int(time.time())
    jid = producer.push({"class": "Api::Gate", "args": ["work"]})

    def running() -> api.Work | None:
        return next((work for work in api.WorkSet(client) if work.job.get("jid") == jid), None)

    work = wait_for(running)

    assert work.identity == identity
    assert re.fullmatch(r"[0-9a-f]{12}", work.thread_id)
    assert work.queue == "default"
    assert work.run_at is not None and before - 1 <= work.run_at <= time.time() + 1
    assert work.job["class"] == "Api::Gate" and work.job["args"] == ["work"]
    assert api.WorkSet(client).size() == 1

    r.set("test:gate:work", 1)
    wait_for(lambda: api.WorkSet(client).size() == 0)


def test_quiet_resume_and_stop_reach_a_real_worker(
    worker: subprocess.Popen[bytes],
    r: redis.Redis,
    client: redis.Redis,
    producer: cogworker.Client,
) -> None:
    identity = identity_of(r, worker)
    wait_for(lambda: listening(r, identity))
    process = find_process(client, identity)

    assert process.quiet_down() == 1
    wait_for(lambda: find_process(client, identity).quiet)
    producer.push({"class": "Api::Count", "args": ["while-quiet"]})
    holds(lambda: runs(r, "while-quiet") == 0 and r.llen(keys.queue("default")) == 1, 1.0)

    assert process.resume() == 1
    wait_for(lambda: runs(r, "while-quiet") == 1)
    wait_for(lambda: not find_process(client, identity).quiet)

    assert process.stop() == 1
    assert worker.wait(20) == 0
    assert [p.identity for p in api.ProcessSet(client)] == []
    assert r.exists(keys.process(identity)) == 0


def test_figures_after_real_runs(
    worker: subprocess.Popen[bytes],
    r: redis.Redis,
    client: redis.Redis,
    producer: cogworker.Client,
) -> None:
    identity_of(r, worker)
    for marker in ("a", "b"):
        producer.push({"class": "Api::Count", "args": [marker]})
    failing = producer.push({"class": "Api::Fail", "args": ["x"], "retry": 1})
    assert failing is not None

    wait_for(lambda: api.stats(client).processed == 2 and api.stats(client).failed == 1)
    wait_for(lambda: api.retry_set(client).size() == 1)

    figures = api.stats(client)
    assert (figures.enqueued, figures.retry_size, figures.dead_size) == (0, 1, 0)
    series = api.throughput(client, hours=2)  # two buckets, in case the hour just turned
    assert sum(b["processed"] for b in series) == 2
    assert sum(b["failed"] for b in series) == 1
    (attempt,) = api.attempts(client, failing)
    assert attempt["attempt"] == 1
    assert attempt["outcome"] == "retrying"
    assert attempt["error_class"] == "RuntimeError"
    assert attempt["error_message"] == "failing on purpose: x"
    assert isinstance(attempt["failed_at"], float)
    (entry,) = api.retry_set(client).find_jobs(failing)
    assert entry.error == "RuntimeError: failing on purpose: x"
