"""The read API's queues (``api/queues.py``): sizes, latency, paging, pausing and clearing,
checked against a Redis state the test wrote itself."""

from __future__ import annotations

import time

import pytest
import redis
from api_support import (
    client,
    lpush,
    payload,
    producer,
    worker,
)
from runtime_support import (
    closing_pools,
)

import cogworker
from cogworker import api, keys, wire

_close_pools = pytest.fixture(autouse=True)(closing_pools)
_fixtures = (client, producer, worker)  # from api_support, named here for pytest


# -- queues ----------------------------------------------------------------------------------


def test_queue_size_and_latency_read_the_tail(r: redis.Redis, client: redis.Redis) -> None:
    queue = api.Queue(client, "default")
    assert queue.size() == 0
    assert queue.latency() == 0  # empty
    now = time.time()
    lpush(r, "default", payload(enqueued_at=now - 100), payload(enqueued_at=now - 3))
    assert queue.size() == 2
    assert 100 <= queue.latency() <= 100 + (time.time() - now) + 0.5

    # created_at is the fallback for a tail without enqueued_at
    lpush(r, "fallback", payload(created_at=now - 40))
    assert 40 <= api.Queue(client, "fallback").latency() <= 41

    # a clock ahead of ours never gives a negative latency
    lpush(r, "future", payload(enqueued_at=now + 3600))
    assert api.Queue(client, "future").latency() == 0

    # no timestamp at all, or an unreadable tail: 0
    no_stamp = payload()
    del no_stamp["created_at"]
    lpush(r, "nostamp", no_stamp)
    assert api.Queue(client, "nostamp").latency() == 0
    r.lpush(keys.queue("corrupt"), "{not json")
    assert api.Queue(client, "corrupt").latency() == 0


def test_queue_page_is_newest_first(producer: cogworker.Client, client: redis.Redis) -> None:
    jids = [producer.push({"class": "Api::Count", "args": [n]}) for n in range(5)]
    queue = api.Queue(client, "default")

    first, second = queue.page(0, 2), queue.page(2, 2)

    assert [record.jid for record in first] == [jids[4], jids[3]]
    assert [record.jid for record in second] == [jids[2], jids[1]]
    assert [record.args for record in first] == [[4], [3]]
    assert first[0].job_class == "Api::Count"
    assert first[0].queue == "default"
    assert first[0].item is not None and first[0].item["jid"] == jids[4]
    assert queue.page(0, 0) == []


def test_queue_iteration_reads_every_job_across_pages(r: redis.Redis, client: redis.Redis) -> None:
    jobs = [payload(args=[n]) for n in range(251)]  # several pages
    lpush(r, "default", *jobs)

    seen = [record.args[0] for record in api.Queue(client, "default")]

    assert seen == list(range(250, -1, -1))  # newest first, none missing or repeated


def test_find_job_compares_the_jid_not_just_the_text(r: redis.Redis, client: redis.Redis) -> None:
    wanted = wire.new_jid()
    decoy = payload(args=[{"jid": wanted}])  # its raw text contains "jid":"<wanted>"
    jobs = [payload(args=[n]) for n in range(150)]
    lpush(r, "default", payload(wanted, args=["target"]), *jobs[:120], decoy, *jobs[120:])
    queue = api.Queue(client, "default")

    found = queue.find_job(wanted)

    assert found is not None
    assert found.jid == wanted and found.args == ["target"]
    assert queue.find_job("no-such-jid") is None


def test_queue_delete_removes_every_copy_of_the_exact_raw(
    r: redis.Redis, client: redis.Redis
) -> None:
    jid = wire.new_jid()
    job = payload(jid, args=[1])
    same_jid_other_text = payload(jid, args=[1], enqueued_at=1.5)
    raw = wire.dumps(job)
    r.lpush(keys.queue("default"), raw, wire.dumps(same_jid_other_text), raw)
    queue = api.Queue(client, "default")

    assert queue.delete(raw) == 2
    assert r.lrange(keys.queue("default"), 0, -1) == [wire.dumps(same_jid_other_text)]
    assert queue.delete(raw) == 0
    assert queue.delete(raw.replace('"args":[1]', '"args": [1]')) == 0  # not byte-identical
    assert queue.size() == 1


def test_queue_clear_keeps_the_name(r: redis.Redis, client: redis.Redis) -> None:
    lpush(r, "default", *(payload() for _ in range(3)))
    lpush(r, "other", payload())

    assert api.Queue(client, "default").clear() == 3

    assert r.exists(keys.queue("default")) == 0
    assert "default" in r.smembers(keys.QUEUES)
    assert api.queue_names(client) == ["default", "other"]
    assert api.Queue(client, "other").size() == 1
    assert api.Queue(client, "default").clear() == 0


def test_pause_and_resume_each_queue_on_its_own(r: redis.Redis, client: redis.Redis) -> None:
    mail, low = api.Queue(client, "mail"), api.Queue(client, "low")
    assert not mail.paused() and not low.paused()

    mail.pause()
    assert mail.paused() and not low.paused()
    assert r.smembers(keys.PAUSED_QUEUES) == {"mail"}

    low.pause()
    mail.resume()
    assert not mail.paused() and low.paused()
    assert r.smembers(keys.PAUSED_QUEUES) == {"low"}
