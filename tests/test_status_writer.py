"""The background writer of status and history: order, outages, a full queue, refusals and
the shutdown flush, against real servers (a private one where a test stops it)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from runtime_support import cogworker_log_records

import cogworker
from cogworker import history, keys, status
from cogworker.local.server import RedisServer


@pytest.fixture
def private(redis_server_factory: Callable[..., RedisServer]) -> RedisServer:
    return redis_server_factory()


@pytest.fixture
def private_config(private: RedisServer) -> Iterator[cogworker.Config]:
    config = cogworker.Config(redis_url=private.url, redis_socket_timeout=1)
    try:
        yield config
    finally:
        status.close(config, timeout=0)
        config.close()


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    with cogworker_log_records() as collected:
        yield collected


def lines(records: list[logging.LogRecord], fragment: str) -> list[str]:
    return [rec.getMessage() for rec in records if fragment in rec.getMessage()]


def queue_status(config: cogworker.Config, jid: str, **fields: object) -> None:
    status.write(config, jid, dict(fields))


def test_writes_land_in_the_order_they_were_made(config: cogworker.Config, r: redis.Redis) -> None:
    for n in range(500):
        status.at("ordered", n % 100, f"step {n}", config=config)
    status.store("ordered", config=config, last="yes")

    assert status.flush(config, timeout=10)
    fields = r.hgetall(keys.status("ordered"))
    assert (fields["message"], fields["pct"], fields["last"]) == ("step 499", "99", "yes")


def test_a_process_reads_back_what_it_wrote(config: cogworker.Config) -> None:
    for n in range(50):
        status.store("mine", config=config, n=n)
        assert status.get("mine", config=config) == {"n": str(n)}  # not a write behind
    status.at("mine", 5, config=config)
    assert status.status("mine", config=config) == "working"


def test_status_and_history_share_one_queue_and_its_order(
    config: cogworker.Config, r: redis.Redis
) -> None:
    status.enable(config, expiration=600)
    history.enable(config)

    class Quick(cogworker.Job):
        name = "SW::Quick"

        def perform(self) -> None:
            status.at(self.jid, 10, "inside")

    from cogworker.execute import execute

    job = {"class": "SW::Quick", "args": [], "jid": "quick", "queue": "default"}
    execute(config.server_middleware, job, "default")

    assert status.flush(config, timeout=10)
    assert r.hget(keys.status("quick"), "status") == "complete"  # not "working" from at()
    (raw,) = r.zrange(keys.HISTORY_SUCCESS, 0, -1)
    assert json.loads(raw)["jid"] == "quick"


def test_writes_wait_through_an_outage_and_land_in_order_once_redis_is_back(
    private: RedisServer, private_config: cogworker.Config, records: list[logging.LogRecord]
) -> None:
    private.stop()
    queue_status(private_config, "out", status="working", pct=10)
    queue_status(private_config, "out", status="working", pct=20)
    queue_status(private_config, "out", status="complete")
    wait_for(lambda: lines(records, "Status: Redis unavailable"))
    assert not status.flush(private_config, timeout=0.5)  # the writes wait for Redis

    private.start()
    assert status.flush(private_config, timeout=30)
    client = redis.Redis.from_url(private.url, decode_responses=True)
    assert client.hgetall(keys.status("out"))["status"] == "complete"
    assert client.hget(keys.status("out"), "pct") == "20"
    client.close()
    assert lines(records, "Status: Redis available again")
    assert lines(records, "dropped") == []


def test_a_full_queue_drops_new_writes_with_one_line_and_one_when_it_has_room(
    private: RedisServer, private_config: cogworker.Config, records: list[logging.LogRecord]
) -> None:
    writer = status.Writer(capacity=4)
    client = private_config.redis()
    private.stop()
    for n in range(12):
        jid = f"w{n}"
        writer.submit("Status", jid, client, lambda pipe, jid=jid: pipe.set(f"test:{jid}", 1))
    (full,) = lines(records, "new ones are dropped")
    assert "first dropped: jid=w4" in full

    private.start()
    assert writer.flush(timeout=30)
    check = redis.Redis.from_url(private.url, decode_responses=True)
    assert sorted(check.keys("test:*")) == ["test:w0", "test:w1", "test:w2", "test:w3"]
    (resumed,) = lines(records, "accepted again")
    assert "8 dropped" in resumed

    writer.submit("Status", "w12", client, lambda pipe: pipe.set("test:w12", 1))
    assert writer.flush(timeout=10)
    assert check.exists("test:w12")
    check.close()


def test_a_refused_write_is_dropped_with_its_jid_and_the_others_still_land(
    config: cogworker.Config, r: redis.Redis, records: list[logging.LogRecord]
) -> None:
    r.rpush(keys.status("wrongtype"), "not a hash")
    queue_status(config, "before", status="working")
    queue_status(config, "wrongtype", status="working")
    queue_status(config, "after", status="complete")

    assert status.flush(config, timeout=10)
    assert r.hget(keys.status("before"), "status") == "working"
    assert r.hget(keys.status("after"), "status") == "complete"
    (dropped,) = lines(records, "is dropped")
    assert dropped.startswith("Status: ResponseError: WRONGTYPE")
    assert "jid=wrongtype" in dropped


def test_close_sends_what_it_can_and_drops_the_rest_with_one_line(
    private: RedisServer, private_config: cogworker.Config, records: list[logging.LogRecord]
) -> None:
    queue_status(private_config, "sent", status="complete")
    assert status.flush(private_config, timeout=10)
    private.stop()
    for n in range(3):
        queue_status(private_config, f"lost{n}", status="complete")

    status.close(private_config, timeout=0.5)

    (closing,) = lines(records, "not sent within")
    assert closing.startswith("3 status/history write(s)") and "jid=lost0" in closing
    assert status.flush(private_config, timeout=0)  # forgotten: nothing waits any more


def test_mark_failed_corrects_a_status_the_middleware_wrote(
    config: cogworker.Config, r: redis.Redis
) -> None:
    job = {"class": "SW::Hooked", "jid": "hooked", "queue": "default"}
    status.mark_failed(config, job, RuntimeError("not enabled"))
    assert status.flush(config, timeout=10)
    assert r.exists(keys.status("hooked")) == 0  # status not enabled: nothing written

    status.enable(config)
    status.write(config, "hooked", {"status": "retrying"})
    status.mark_failed(config, job, RuntimeError("killed by its hook"))
    assert status.flush(config, timeout=10)
    fields = r.hgetall(keys.status("hooked"))
    assert (fields["status"], fields["error_message"]) == ("failed", "killed by its hook")


@pytest.mark.parametrize(
    ("enable", "message"),
    [
        (lambda c: status.enable(c, expiration=0), "status expiration must be a positive"),
        (lambda c: status.enable(c, expiration=1.5), "status expiration must be a positive"),
        (lambda c: history.enable(c, retention_days=-1), "history retention_days must be"),
        (lambda c: history.enable(c, max_entries=True), "history max_entries must be"),
        (
            lambda c: history.enable(c, daily_stats_retention_days="400"),
            "history daily_stats_retention_days must be",
        ),
    ],
)
def test_enable_refuses_bad_settings_in_one_line(
    config: cogworker.Config, enable: Callable[[cogworker.Config], None], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        enable(config)
    added = (status.StatusServerMiddleware, history.HistoryMiddleware)
    assert not any(middleware in config.server_middleware for middleware in added)


EXITING_PRODUCER = """
import sys

import cogworker
from cogworker import status

config = cogworker.Config(redis_url=sys.argv[1])
for n in range(200):
    status.at("exiting", n % 100, f"step {n}", config=config)
"""


def test_writes_still_queued_when_the_process_exits_are_sent(
    r: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "producer.py"
    script.write_text(EXITING_PRODUCER)
    done = subprocess.run(
        [sys.executable, str(script), redis_url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert r.hget(keys.status("exiting"), "message") == "step 199"
