"""The read API's scheduled / retry / dead sets (``api/sets.py``): listing, finding, and
acting on entries, checked against a Redis state the test wrote itself."""

from __future__ import annotations

import json
import re
import time

import pytest
import redis
from api_support import (
    client,
    payload,
    producer,
    worker,
    zadd,
)
from runtime_support import (
    closing_pools,
)

from cogworker import api, keys, wire

_close_pools = pytest.fixture(autouse=True)(closing_pools)
_fixtures = (client, producer, worker)  # from api_support, named here for pytest


# -- scheduled / retry / dead sets -----------------------------------------------------------


def test_set_page_order_and_scores(r: redis.Redis, client: redis.Redis) -> None:
    raws = [zadd(r, keys.RETRY, payload(args=[n]), 1000.0 + n) for n in range(5)]
    retry = api.retry_set(client)

    assert retry.size() == 5
    assert [rec.raw for rec in retry.page(0, 2)] == [raws[4], raws[3]]
    assert [rec.score for rec in retry.page(0, 2)] == [1004.0, 1003.0]
    assert [rec.raw for rec in retry.page(2, 2)] == [raws[2], raws[1]]
    assert [rec.raw for rec in retry.page(0, 2, newest_first=False)] == [raws[0], raws[1]]
    assert retry.page(0, 0) == []


def test_set_iteration_covers_more_than_one_page(r: redis.Redis, client: redis.Redis) -> None:
    r.zadd(keys.DEAD, {wire.dumps(payload(args=[n])): float(n) for n in range(1203)})

    seen = [record.args[0] for record in api.dead_set(client)]

    assert seen == list(range(1202, -1, -1))


def test_find_jobs_returns_every_entry_with_that_jid(r: redis.Redis, client: redis.Redis) -> None:
    jid = wire.new_jid()
    entries = {wire.dumps(payload(args=[n])): float(n) for n in range(1100)}
    copies = [payload(jid, retry_count=n, error_class="E") for n in (1, 2, 3)]
    for copy, score in zip(copies, (0.5, 700.5, 1099.5), strict=True):
        entries[wire.dumps(copy)] = score
    entries[wire.dumps(payload(args=[{"jid": jid}]))] = 42.5  # mentions the jid in its args
    r.zadd(keys.DEAD, entries)

    found = api.dead_set(client).find_jobs(jid)

    assert sorted(record.raw for record in found) == sorted(wire.dumps(c) for c in copies)
    assert api.dead_set(client).find_jobs("nope") == []


def test_retry_now_requeues_the_job_unchanged_apart_from_enqueued_at(
    r: redis.Redis, client: redis.Redis
) -> None:
    job = payload(
        queue="mail",
        args=[2**63 + 7, 1.0e20, "naïve ☃", {"nested": [1, 2.5]}],
        retry_count=3,
        error_class="Timeout::Error",
        error_message="took too long",
        failed_at=1_700_000_100.25,
        enqueued_at=1_700_000_000.5,
    )
    raw = zadd(r, keys.RETRY, job, time.time() + 3600)
    before = time.time()

    assert api.retry_set(client).retry_now(raw) == "requeued"

    assert r.zcard(keys.RETRY) == 0
    (requeued_raw,) = r.lrange(keys.queue("mail"), 0, -1)
    assert str(2**63 + 7) in requeued_raw  # not rounded through a double
    requeued = json.loads(requeued_raw)
    stored = json.loads(raw)
    assert before <= requeued.pop("enqueued_at") <= time.time()
    stored.pop("enqueued_at")
    assert requeued == stored
    assert "mail" in r.smembers(keys.QUEUES)


def test_retry_now_twice_queues_the_job_once(r: redis.Redis, client: redis.Redis) -> None:
    raw = zadd(r, keys.DEAD, payload(), time.time())
    dead = api.dead_set(client)

    assert dead.retry_now(raw) == "requeued"
    assert dead.retry_now(raw) == "gone"

    assert r.llen(keys.queue("default")) == 1
    assert r.zcard(keys.DEAD) == 0


@pytest.mark.parametrize(
    "raw",
    [
        wire.dumps({"class": "X", "args": [], "jid": "j1"}),  # no queue
        wire.dumps({"class": "X", "args": [], "jid": "j2", "queue": ""}),
        "{not json",
        "[1, 2]",
    ],
)
def test_retry_now_of_a_non_requeueable_entry_is_invalid_and_leaves_it(
    r: redis.Redis, client: redis.Redis, raw: str
) -> None:
    r.zadd(keys.SCHEDULE, {raw: 10.0})

    assert api.scheduled_set(client).retry_now(raw) == "invalid"

    assert r.zscore(keys.SCHEDULE, raw) == 10.0
    assert r.keys(f"{keys.QUEUE_PREFIX}*") == []


def test_reschedule_moves_the_score_without_duplicating(
    r: redis.Redis, client: redis.Redis
) -> None:
    raw = zadd(r, keys.RETRY, payload(retry_count=2, error_class="E"), 100.0)
    other = zadd(r, keys.RETRY, payload(), 200.0)
    target = time.time() + 1800

    assert api.retry_set(client).reschedule(raw, target) is True

    assert r.zcard(keys.RETRY) == 2
    assert r.zscore(keys.RETRY, raw) == pytest.approx(target)
    assert r.zscore(keys.RETRY, other) == 200.0


def test_reschedule_of_a_gone_entry_is_a_no_op(r: redis.Redis, client: redis.Redis) -> None:
    raw = wire.dumps(payload())

    assert api.scheduled_set(client).reschedule(raw, time.time() + 60) is False

    assert r.exists(keys.SCHEDULE) == 0  # not re-added


def test_delete_removes_the_entry_and_clears_its_attempts(
    r: redis.Redis, client: redis.Redis
) -> None:
    jid = wire.new_jid()
    raw = zadd(r, keys.DEAD, payload(jid), 5.0)
    kept = zadd(r, keys.DEAD, payload(), 6.0)
    r.rpush(keys.job_attempts(jid), '{"attempt":1}', '{"attempt":2}')
    dead = api.dead_set(client)

    assert dead.delete(raw) is True
    assert r.zrange(keys.DEAD, 0, -1) == [kept]
    assert r.exists(keys.job_attempts(jid)) == 0

    # the attempts go even when the entry was already gone
    r.rpush(keys.job_attempts(jid), '{"attempt":3}')
    assert dead.delete(raw) is False
    assert r.exists(keys.job_attempts(jid)) == 0


def test_delete_of_an_unparseable_entry_uses_its_pseudo_jid(
    r: redis.Redis, client: redis.Redis
) -> None:
    raw = "{not json"
    r.zadd(keys.RETRY, {raw: 1.0})
    pseudo = api.JobRecord(raw).jid
    assert re.fullmatch(r"unparseable-[0-9a-f]{12}", pseudo)
    r.rpush(keys.job_attempts(pseudo), "{}")

    assert api.retry_set(client).delete(raw) is True

    assert r.exists(keys.RETRY, keys.job_attempts(pseudo)) == 0


def test_clear_empties_the_set_and_its_attempts(r: redis.Redis, client: redis.Redis) -> None:
    jids = [wire.new_jid() for _ in range(3)]
    for n, jid in enumerate(jids):
        zadd(r, keys.RETRY, payload(jid), float(n))
        r.rpush(keys.job_attempts(jid), "{}")
    r.rpush(keys.job_attempts("elsewhere"), "{}")

    assert api.retry_set(client).clear() == 3

    assert r.exists(keys.RETRY) == 0
    assert all(r.exists(keys.job_attempts(jid)) == 0 for jid in jids)
    assert r.llen(keys.job_attempts("elsewhere")) == 1


def test_kill_moves_the_entry_to_dead(r: redis.Redis, client: redis.Redis) -> None:
    raw = zadd(r, keys.RETRY, payload(retry_count=1), time.time() + 600)
    before = time.time()
    retry = api.retry_set(client)

    assert retry.kill(raw) is True

    assert r.zcard(keys.RETRY) == 0
    assert r.zrange(keys.DEAD, 0, -1) == [raw]  # the same string
    assert before <= r.zscore(keys.DEAD, raw) <= time.time()
    assert retry.kill(raw) is False  # gone
    assert api.dead_set(client).kill(raw) is False  # already dead
    assert r.zcard(keys.DEAD) == 1
