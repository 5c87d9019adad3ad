"""Client.push / push_bulk against a real Redis: payloads, batches, queue registry, encoding."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import cogworker
from cogworker.local.server import RedisServer
from cogworker.wire import Payload

JID = re.compile(r"\A[0-9a-f]{24}\Z")
SCHEDULE = "cogworker:schedule"
QUEUES = "cogworker:queues"


class ClientJob(cogworker.Job, queue="client_q", retry=2):
    name = "ClientTest::ClientJob"

    def perform(self, a: int, b: str) -> None:
        pass


def stored(r: redis.Redis, queue: str) -> list[dict[str, Any]]:
    """The payloads of a queue, oldest (next to run) first."""
    return [json.loads(raw) for raw in reversed(r.lrange(f"cogworker:queue:{queue}", 0, -1))]


def calls(r: redis.Redis, command: str) -> int:
    """How many times the server has run ``command`` (counted by Redis itself)."""
    stats = r.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


class StopOdd:
    """Client middleware that stops every job whose first argument is odd."""

    def __call__(
        self, job_class: str, job: Payload, queue: str, redis: Any, call_next: Callable[[], None]
    ) -> None:
        if job["args"][0] % 2 == 0:
            call_next()


@pytest.fixture
def client(config: cogworker.Config) -> cogworker.Client:
    return cogworker.Client(config)


@pytest.fixture
def private_server(redis_server_factory: Callable[..., RedisServer]) -> RedisServer:
    return redis_server_factory()


@pytest.fixture
def private_config(private_server: RedisServer) -> Iterator[cogworker.Config]:
    cfg = cogworker.Config(redis_url=private_server.url)
    try:
        yield cfg
    finally:
        cfg.close()


# -- push -----------------------------------------------------------------------------------


def test_push_minimal_item_field_by_field(client: cogworker.Client, r: redis.Redis) -> None:
    before = time.time()
    jid = client.push({"class": "Some::Job", "args": [1, "two"]})
    after = time.time()
    assert jid is not None and JID.match(jid)
    (job,) = stored(r, "default")
    assert set(job) == {"class", "args", "jid", "queue", "retry", "created_at", "enqueued_at"}
    assert job["class"] == "Some::Job"
    assert job["args"] == [1, "two"]
    assert job["jid"] == jid
    assert job["queue"] == "default"
    assert job["retry"] is True
    assert before <= job["created_at"] <= job["enqueued_at"] <= after
    assert r.smembers(QUEUES) == {"default"}
    assert r.exists(SCHEDULE) == 0


def test_push_keeps_given_fields_and_extra_keys(client: cogworker.Client, r: redis.Redis) -> None:
    item = {
        "class": "Some::Job",
        "args": [],
        "queue": "q1",
        "jid": "00112233445566778899aabb",
        "created_at": 1700000000.25,
        "retry": None,
        "tags": ["a", "b"],
        "lock_run": "while_executing",
    }
    assert client.push(item) == "00112233445566778899aabb"
    (job,) = stored(r, "q1")
    assert job["enqueued_at"] > 1700000000.25
    del job["enqueued_at"]
    assert job == item
    assert '"retry":null' in r.lindex("cogworker:queue:q1", 0)


def test_push_job_class_object_is_stored_by_wire_name(
    client: cogworker.Client, r: redis.Redis
) -> None:
    client.push({"class": ClientJob, "args": [1, "x"], "queue": "q"})
    (job,) = stored(r, "q")
    assert job["class"] == "ClientTest::ClientJob"


def test_push_without_class_is_refused(client: cogworker.Client, r: redis.Redis) -> None:
    with pytest.raises(ValueError):
        client.push({"args": [1]})
    assert r.dbsize() == 0


def test_push_returns_none_when_middleware_stops(
    config: cogworker.Config, client: cogworker.Client, r: redis.Redis
) -> None:
    config.client_middleware.add(StopOdd)
    assert client.push({"class": "Some::Job", "args": [1]}) is None
    assert r.dbsize() == 0
    jid = client.push({"class": "Some::Job", "args": [2]})
    assert jid is not None
    assert [job["jid"] for job in stored(r, "default")] == [jid]


def test_scheduled_push(client: cogworker.Client, r: redis.Redis) -> None:
    jid = client.push({"class": "Some::Job", "args": ["x"], "queue": "later", "at": 1900000000.5})
    ((raw, score),) = r.zrange(SCHEDULE, 0, -1, withscores=True)
    job = json.loads(raw)
    assert score == 1900000000.5
    assert job["at"] == 1900000000.5
    assert job["jid"] == jid
    assert job["queue"] == "later"
    assert set(job) == {"class", "args", "queue", "at", "jid", "retry", "created_at"}
    assert "enqueued_at" not in job
    assert r.exists("cogworker:queue:later") == 0
    # only an immediate push registers its queue (the poller does when the job moves)
    assert r.exists(QUEUES) == 0


def test_raw_utf8_in_stored_json(client: cogworker.Client, r: redis.Redis, redis_url: str) -> None:
    client.push({"class": "Some::Job", "args": ["zwölf", "😀", "日本", "a/b"], "queue": "utf"})
    raw_client = redis.Redis.from_url(redis_url)  # bytes, no decoding
    try:
        raw = raw_client.lindex("cogworker:queue:utf", 0)
    finally:
        raw_client.close()
    assert isinstance(raw, bytes)
    assert '"args":["zwölf","😀","日本","a/b"]'.encode() in raw
    assert b"\\u" not in raw
    assert b"\\/" not in raw
    assert b", " not in raw and b": " not in raw


def test_floats_are_stored_in_ruby_layout(client: cogworker.Client, r: redis.Redis) -> None:
    client.push({"class": "Some::Job", "args": [1e20, 1.0, 1e-5], "queue": "f"})
    assert '"args":[1.0e+20,1.0,1.0e-05]' in r.lindex("cogworker:queue:f", 0)


def test_queue_registered_once_per_client(client: cogworker.Client, r: redis.Redis) -> None:
    sadds = calls(r, "sadd")
    for n in range(3):
        client.push({"class": "Some::Job", "args": [n], "queue": "q1"})
    client.push({"class": "Some::Job", "args": [9], "queue": "q2"})
    assert r.smembers(QUEUES) == {"q1", "q2"}
    assert calls(r, "sadd") - sadds == 2
    # another client registers again (the registry may have been cleaned meanwhile)
    r.delete(QUEUES)
    cogworker.Client(client.config).push({"class": "Some::Job", "args": [1], "queue": "q1"})
    assert r.smembers(QUEUES) == {"q1"}


def test_push_into_a_key_of_the_wrong_type_raises(client: cogworker.Client, r: redis.Redis) -> None:
    r.set("cogworker:queue:broken", "not a list")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        client.push({"class": "Some::Job", "queue": "broken"})
    # the same client tries again later (and fails again, not silently)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        client.push({"class": "Some::Job", "queue": "broken"})


def test_queue_registration_failure_is_logged_not_raised(
    client: cogworker.Client, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    r.set(QUEUES, "not a set")
    with caplog.at_level(logging.WARNING, logger="cogworker.client"):
        jid = client.push({"class": "Some::Job", "queue": "q"})
    assert jid is not None
    assert [job["jid"] for job in stored(r, "q")] == [jid]
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "register" in warnings[0] and "WRONGTYPE" in warnings[0]


def test_client_uses_its_own_config(
    private_config: cogworker.Config, config: cogworker.Config, r: redis.Redis
) -> None:
    jid = cogworker.Client(private_config).push({"class": "Some::Job", "queue": "p"})
    assert r.dbsize() == 0
    other = private_config.redis()
    assert [json.loads(raw)["jid"] for raw in other.lrange("cogworker:queue:p", 0, -1)] == [jid]
    assert other.smembers(QUEUES) == {"p"}


def test_typed_enqueue_helpers(client: cogworker.Client, r: redis.Redis) -> None:
    before = time.time()
    now_jid = client.enqueue(ClientJob, 1, "a")
    in_jid = client.enqueue_in(30, ClientJob, 2, "b")
    at_jid = client.enqueue_at(2000000000.0, ClientJob, 3, "c")
    after = time.time()
    (job,) = stored(r, "client_q")
    assert (job["jid"], job["args"], job["class"], job["retry"]) == (
        now_jid,
        [1, "a"],
        "ClientTest::ClientJob",
        2,
    )
    later = {
        json.loads(raw)["jid"]: score for raw, score in r.zrange(SCHEDULE, 0, -1, withscores=True)
    }
    assert set(later) == {in_jid, at_jid}
    assert before + 30 <= later[in_jid] <= after + 30
    assert later[at_jid] == 2000000000.0


# -- push_bulk ------------------------------------------------------------------------------


def test_push_bulk_field_by_field(client: cogworker.Client, r: redis.Redis) -> None:
    before = time.time()
    jids = client.push_bulk(
        [
            {"class": "Some::Job", "args": [1]},
            {"class": "Some::Job", "args": [2], "queue": "other", "tags": ["t"]},
            {"class": "Some::Job", "args": [3], "at": 1900000000.0},
        ]
    )
    after = time.time()
    assert len(jids) == 3 and all(jid is not None and JID.match(jid) for jid in jids)
    (first,) = stored(r, "default")
    assert first["jid"] == jids[0] and first["args"] == [1]
    assert first["retry"] is True and first["queue"] == "default"
    assert before <= first["created_at"] <= first["enqueued_at"] <= after
    (second,) = stored(r, "other")
    assert second["jid"] == jids[1] and second["tags"] == ["t"] and second["args"] == [2]
    ((raw, score),) = r.zrange(SCHEDULE, 0, -1, withscores=True)
    third = json.loads(raw)
    assert third["jid"] == jids[2] and score == 1900000000.0 and "enqueued_at" not in third
    assert r.smembers(QUEUES) == {"default", "other"}


def test_push_bulk_empty(client: cogworker.Client, r: redis.Redis) -> None:
    assert client.push_bulk([]) == []
    assert r.dbsize() == 0


def test_push_bulk_2500_items_in_fifo_order_and_batches_of_1000(
    client: cogworker.Client, r: redis.Redis
) -> None:
    lpushes, sadds = calls(r, "lpush"), calls(r, "sadd")
    items = ({"class": "Some::Job", "args": [n], "queue": "bulk"} for n in range(2500))
    jids = client.push_bulk(items)
    assert len(jids) == 2500 and len(set(jids)) == 2500
    jobs = stored(r, "bulk")
    assert [job["args"] for job in jobs] == [[n] for n in range(2500)]
    assert [job["jid"] for job in jobs] == jids
    # one LPUSH per batch of up to 1,000 (1000 + 1000 + 500); the queue registered once
    assert calls(r, "lpush") - lpushes == 3
    assert calls(r, "sadd") - sadds == 1
    assert r.smembers(QUEUES) == {"bulk"}


def test_push_bulk_scheduled_batches(client: cogworker.Client, r: redis.Redis) -> None:
    zadds = calls(r, "zadd")
    jids = client.push_bulk(
        {"class": "Some::Job", "args": [n], "at": 1900000000.0 + n} for n in range(1500)
    )
    assert calls(r, "zadd") - zadds == 2
    members = r.zrange(SCHEDULE, 0, -1, withscores=True)
    assert [json.loads(raw)["jid"] for raw, _ in members] == jids
    assert [score for _, score in members] == [1900000000.0 + n for n in range(1500)]


def test_push_bulk_with_middleware_stopping_some(
    config: cogworker.Config, client: cogworker.Client, r: redis.Redis
) -> None:
    config.client_middleware.add(StopOdd)
    jids = client.push_bulk({"class": "Some::Job", "args": [n]} for n in range(6))
    assert [jid is None for jid in jids] == [False, True, False, True, False, True]
    jobs = stored(r, "default")
    assert [job["args"] for job in jobs] == [[0], [2], [4]]
    assert [job["jid"] for job in jobs] == [jid for jid in jids if jid is not None]


def test_push_bulk_all_stopped_writes_nothing(
    config: cogworker.Config, client: cogworker.Client, r: redis.Redis
) -> None:
    config.client_middleware.add(StopOdd)
    assert client.push_bulk({"class": "Some::Job", "args": [n]} for n in (1, 3)) == [None, None]
    assert r.dbsize() == 0


# -- deferred pushes and closing -------------------------------------------------------------


def test_a_deferred_push_returns_its_jid_and_writes_only_when_sent(
    config: cogworker.Config, client: cogworker.Client, r: redis.Redis
) -> None:
    held: list[tuple[list[Payload], Callable[[], None]]] = []

    def hold(jobs: list[Payload], send: Callable[[], None]) -> bool:
        held.append((jobs, send))
        return True

    config.defer_push = hold
    jid = client.push({"class": "ClientTest::ClientJob", "args": [1, "x"], "queue": "client_q"})
    bulk = client.push_bulk([{"class": "X", "args": [n], "queue": "client_q"} for n in range(3)])
    assert jid is not None and JID.match(jid)
    assert all(bulk)
    assert r.llen("cogworker:queue:client_q") == 0
    assert [len(jobs) for jobs, _ in held] == [1, 3]

    for _, send in held:
        send()
    assert [job["jid"] for job in stored(r, "client_q")] == [jid, *bulk]


def test_a_deferral_that_declines_sends_at_once(
    config: cogworker.Config, client: cogworker.Client, r: redis.Redis
) -> None:
    config.defer_push = lambda jobs, send: False
    jid = client.push({"class": "X", "args": [], "queue": "client_q"})
    assert [job["jid"] for job in stored(r, "client_q")] == [jid]


def test_defer_push_must_be_callable() -> None:
    with pytest.raises(cogworker.ConfigError, match="defer_push must be a callable or None, got 3"):
        cogworker.Config(defer_push=3)


def test_closing_a_client_disconnects_its_pool_and_a_later_push_reconnects(
    config: cogworker.Config, r: redis.Redis
) -> None:
    with cogworker.Client(config) as client:
        client.push({"class": "X", "args": [], "queue": "client_q"})
        name = f"closing-{time.monotonic_ns()}"
        config.redis().client_setname(name)
        assert name in [entry["name"] for entry in r.client_list()]
    assert config._redis is None
    assert name not in [entry["name"] for entry in r.client_list()]

    client.push({"class": "X", "args": [], "queue": "client_q"})
    assert r.llen("cogworker:queue:client_q") == 2
