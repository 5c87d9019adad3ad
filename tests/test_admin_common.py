"""Which Redis the admin commands act on, and what they say about it (real subprocesses):

* ``cogworker --redis-url URL <command>`` acts on URL, for every admin command; the same
  option given again after the command with another value is a one-line usage error naming
  ``--redis-url`` (the same value twice is fine);
* every command that changes something names the Redis it acted on, without credentials;
* ``cogworker busy`` lists the running work of a real worker, unreadable entries included.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from admin_support import gate_worker, ok, one_line_error, serving_metrics
from conftest import wait_for
from runtime_support import (
    WORKER_PASSWORD,
    AclServer,
    Worker,
    cogworker_env,
    run_cogworker,
)

from cogworker import admin, keys, wire
from cogworker.local.server import RedisServer, free_port

pytestmark = pytest.mark.slow  # the full run only: the admin command line as processes

UNREACHABLE = f"redis://127.0.0.1:{free_port()}/0"


@pytest.fixture
def private(redis_server_factory: Callable[..., RedisServer]) -> Iterator[redis.Redis]:
    server = redis_server_factory()
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        yield client
    finally:
        client.close()


def url_of(client: redis.Redis) -> str:
    port = client.connection_pool.connection_kwargs["port"]
    return f"redis://127.0.0.1:{port}/0"


# every admin command, with arguments that make it succeed on a Redis holding one dead job
# "d1" and one unique lock "a"*40 (metrics serves until stopped: tested on its own)
READ_AND_ACT = [
    ["stats"],
    ["queues"],
    ["processes"],
    ["busy"],
    ["job", "d1"],
    ["retries"],
    ["scheduled"],
    ["dead"],
    ["locks"],
    ["periodic"],
]


def test_every_command_lists_in_the_matrix() -> None:
    """A new admin command must be added to the matrices above and below."""
    assert sorted(command.name or "" for command in admin.COMMANDS) == sorted(
        [args[0] for args in READ_AND_ACT] + ["metrics"]
    )


@pytest.mark.parametrize("args", READ_AND_ACT, ids=lambda args: args[0])
def test_the_url_before_the_command_is_the_one_used(private: redis.Redis, args: list[str]) -> None:
    private.zadd(keys.DEAD, {wire.dumps({"class": "X", "args": [], "jid": "d1"}): 1.0})

    result = run_cogworker("--redis-url", url_of(private), *args, redis_url=UNREACHABLE)

    ok(result)  # $REDIS_URL points nowhere: only the given URL can have answered
    if args == ["dead"]:
        assert "d1" in result.stdout


def test_the_url_before_metrics_is_the_one_used(private: redis.Redis) -> None:
    private.set(keys.STATS_PROCESSED, 17)
    command = ["--redis-url", url_of(private), "metrics", "--port", "0"]

    served = serving_metrics(*command, env=cogworker_env(UNREACHABLE))
    with served as url, urllib.request.urlopen(url, timeout=10) as response:
        lines = response.read().decode().splitlines()

    assert "cogworker_processed_total 17" in lines


@pytest.mark.parametrize(
    "args",
    [[*args[:1], "--redis-url", "redis://127.0.0.1:2/0", *args[1:]] for args in READ_AND_ACT]
    + [["metrics", "--redis-url", "redis://127.0.0.1:2/0"]],
    ids=lambda args: args[0],
)
def test_two_different_urls_are_a_usage_error(args: list[str]) -> None:
    result = run_cogworker("--redis-url", "redis://127.0.0.1:1/0", *args, redis_url=UNREACHABLE)

    line = one_line_error(result)
    assert result.returncode == 2
    assert "--redis-url" in line and "different values" in line


def test_the_same_url_twice_is_fine(private: redis.Redis) -> None:
    url = url_of(private)
    private.sadd(keys.QUEUES, "default")

    out = ok(run_cogworker("--redis-url", url, "queues", "--redis-url", url, redis_url=UNREACHABLE))

    assert out.split()[:3] == ["QUEUE", "SIZE", "LATENCY"]


def test_changes_name_their_redis_without_credentials(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    acl = AclServer(redis_server_factory)
    url = acl.worker_url  # user and password in the URL
    shown = f"on redis://127.0.0.1:{acl.server.port}/0"
    client = acl.admin
    for jid in ("d1", "d2", "r1"):
        key = keys.RETRY if jid.startswith("r") else keys.DEAD
        client.zadd(key, {wire.dumps({"class": "X", "args": [], "queue": "q", "jid": jid}): 1.0})
    client.sadd(keys.QUEUES, "q")
    client.set(keys.unique("a" * 40), "owner")
    acl.close()
    commands = [
        ["queues", "pause", "q"],
        ["queues", "resume", "q"],
        ["dead", "retry", "d1"],
        ["queues", "delete", "q", "d1"],
        ["dead", "delete", "d2"],
        ["retries", "delete", "r1"],
        ["locks", "release", "a" * 40],
        ["queues", "clear", "q"],
        ["dead", "clear"],
        ["retries", "clear"],
        ["scheduled", "clear"],
    ]

    for args in commands:
        out = ok(run_cogworker(*args, redis_url=url))
        assert shown in out, (args, out)
        assert WORKER_PASSWORD not in out and "@" not in out


# -- busy ------------------------------------------------------------------------------------


@pytest.fixture
def worker(tmp_path: Path, redis_url: str, r: redis.Redis) -> Iterator[Worker]:
    with gate_worker(tmp_path, redis_url, "Busy::Gate") as process:
        yield process


def test_busy_lists_running_work_and_unreadable_entries(
    r: redis.Redis, redis_url: str, worker: Worker
) -> None:
    identity = worker.identity(r)
    jid = wire.new_jid()
    r.lpush(
        keys.queue("default"),
        wire.dumps({"class": "Busy::Gate", "args": ["b"], "queue": "default", "jid": jid}),
    )
    wait_for(lambda: r.get("test:runs:b") == "1", timeout=20)
    r.hset(keys.workers(identity), "feedfacefeed", b'{"queue":"default","payload":\xff')

    lines = ok(run_cogworker("busy", redis_url=redis_url)).splitlines()
    shown = json.loads(ok(run_cogworker("busy", "--json", redis_url=redis_url)))

    assert lines[0].split() == ["PROCESS", "THREAD", "JID", "CLASS", "QUEUE", "SINCE"]
    running = next(line.split() for line in lines[1:] if jid in line)
    assert running[0] == identity and running[3:5] == ["Busy::Gate", "default"]
    broken = next(line.split() for line in lines[1:] if "feedfacefeed" in line)
    assert broken[:4] == [identity, "feedfacefeed", "-", "(unparseable)"]
    (entry,) = [item for item in shown if item["jid"] == jid]
    assert entry["identity"] == identity and entry["job"]["class"] == "Busy::Gate"
    (bad,) = [item for item in shown if item["thread_id"] == "feedfacefeed"]
    assert bad["job"] is None and "\ufffd" in bad["raw"]
    r.set("test:gate:b", 1)
