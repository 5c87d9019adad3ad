"""The admin commands, run as real subprocesses: ``cogworker stats | queues | processes |
dead | metrics`` (text and ``--json``), acting through the API on the shared Redis.

A name that doesn't exist (queue, process identity, jid) must end the command with one
``cogworker: ...`` line on stderr and a non-zero status, and change nothing.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from admin_support import cli, ok, one_line_error, serving_metrics
from conftest import wait_for
from prometheus_client.parser import text_string_to_metric_families
from runtime_support import (
    cogworker_env,
    listening,
    registered_identity,
    run_cogworker,
    worker_process,
)

from cogworker import keys, wire
from cogworker.connection import redacted_url
from cogworker.local.server import free_port

pytestmark = pytest.mark.slow  # the full run only: the admin CLI as processes, beside workers

JOBS_MODULE = """
import cogworker


class CountJob(cogworker.Job):
    name = "Admin::Count"

    def perform(self, marker):
        cogworker.default_config().redis().incr(f"test:runs:{marker}")
"""

WORKER_CONFIG = "heartbeat_interval: 0.2\npoll_interval: 0.2\nconcurrency: 2\n"


def job(jid: str | None = None, **fields: Any) -> dict[str, Any]:
    return {
        "class": "Admin::Count",
        "args": ["x"],
        "queue": "default",
        "jid": jid or wire.new_jid(),
        **fields,
    }


def seed(r: redis.Redis) -> float:
    """processed 7, failed 3, queues default (3, oldest 40 s), low (2), mail (0, paused),
    2 scheduled, 1 retry, 4 dead."""
    now = time.time()
    r.set(keys.STATS_PROCESSED, 7)
    r.set(keys.STATS_FAILED, 3)
    r.lpush(keys.queue("default"), *(wire.dumps(job(enqueued_at=now - 40 + n)) for n in range(3)))
    r.lpush(keys.queue("low"), *(wire.dumps(job(enqueued_at=now)) for _ in range(2)))
    r.sadd(keys.QUEUES, "default", "low", "mail")
    r.sadd(keys.PAUSED_QUEUES, "mail")
    r.zadd(keys.SCHEDULE, {wire.dumps(job()): now + 60, wire.dumps(job()): now + 70})
    r.zadd(keys.RETRY, {wire.dumps(job()): now + 60})
    r.zadd(keys.DEAD, {wire.dumps(job(n=n)): now - n for n in range(4)})
    return now


# -- stats and queues ------------------------------------------------------------------------


def test_stats_text(r: redis.Redis, redis_url: str) -> None:
    seed(r)

    lines = ok(cli(redis_url, "stats")).splitlines()

    assert lines[0].split() == [
        *("processed", "7", "failed", "3", "enqueued", "5"),
        *("scheduled", "2", "retry", "1", "dead", "4"),
        *("in", "progress", "0", "orphaned", "0"),
    ]
    table = [line.split() for line in lines[2:]]
    assert table[0] == ["QUEUE", "SIZE", "LATENCY"]
    assert [row[:2] for row in table[1:]] == [["default", "3"], ["low", "2"], ["mail", "0"]]
    assert 40 <= float(table[1][2].rstrip("s")) <= 45
    assert table[3] == ["mail", "0", "0.0s", "paused"]
    assert len(table[1]) == 3  # not paused


def test_stats_json(r: redis.Redis, redis_url: str) -> None:
    seed(r)

    figures = json.loads(ok(cli(redis_url, "stats", "--json")))

    queues = figures.pop("queues")
    assert figures == {
        "processed": 7,
        "failed": 3,
        "enqueued": 5,
        "scheduled_size": 2,
        "retry_size": 1,
        "dead_size": 4,
        "in_progress": 0,
        "orphaned": 0,
        "gone_processes": [],
    }
    assert [(q["name"], q["size"], q["paused"]) for q in queues] == [
        ("default", 3, False),
        ("low", 2, False),
        ("mail", 0, True),
    ]
    assert 40 <= queues[0]["latency"] <= 45
    assert queues[2]["latency"] == 0


def test_queues_list_pause_resume_clear(r: redis.Redis, redis_url: str) -> None:
    seed(r)

    listed = [line.split() for line in ok(cli(redis_url, "queues")).splitlines()]
    assert [row[:2] for row in listed[1:]] == [["default", "3"], ["low", "2"], ["mail", "0"]]
    as_json = json.loads(ok(cli(redis_url, "queues", "--json")))
    assert [q["name"] for q in as_json] == ["default", "low", "mail"]

    on = f"on {redacted_url(redis_url)}"
    assert ok(cli(redis_url, "queues", "pause", "low")).strip() == f"paused queue low {on}"
    assert r.smembers(keys.PAUSED_QUEUES) == {"low", "mail"}
    assert ok(cli(redis_url, "queues", "resume", "mail")).strip() == f"resumed queue mail {on}"
    assert r.smembers(keys.PAUSED_QUEUES) == {"low"}

    assert ok(cli(redis_url, "queues", "clear", "default")).strip() == (
        f"cleared queue default {on}: 3 job(s) deleted"
    )
    assert r.exists(keys.queue("default")) == 0
    assert r.smembers(keys.QUEUES) == {"default", "low", "mail"}  # the name stays
    assert r.llen(keys.queue("low")) == 2


@pytest.mark.parametrize("action", ["pause", "resume", "clear"])
def test_unknown_queue_is_a_one_line_error(r: redis.Redis, redis_url: str, action: str) -> None:
    seed(r)
    r.lpush(keys.queue("ghost"), wire.dumps(job()))  # has jobs, but not a known queue

    result = cli(redis_url, "queues", action, "ghost")

    one_line_error(result, "unknown queue", "ghost")
    assert r.llen(keys.queue("ghost")) == 1
    assert r.smembers(keys.PAUSED_QUEUES) == {"mail"}


# -- processes -------------------------------------------------------------------------------


@pytest.fixture
def worker(tmp_path: Path, redis_url: str, r: redis.Redis) -> Iterator[subprocess.Popen[bytes]]:
    yield from worker_process(tmp_path, redis_url, "admin_jobs", JOBS_MODULE, WORKER_CONFIG)


def live_identity(r: redis.Redis, process: subprocess.Popen[bytes]) -> str:
    def registered() -> str | None:
        assert process.poll() is None, "the worker exited early"
        identity = registered_identity(r, process.pid)
        return identity if identity and listening(r, identity) else None

    return str(wait_for(registered, timeout=20))


def presence(r: redis.Redis, identity: str, field: str) -> str | None:
    value = r.hget(keys.process(identity), field)
    return None if value is None else str(value)


def test_processes_list_quiet_resume_stop_by_identity(
    r: redis.Redis, redis_url: str, worker: subprocess.Popen[bytes]
) -> None:
    identity = live_identity(r, worker)

    rows = [line.split() for line in ok(cli(redis_url, "processes")).splitlines()]
    assert rows[0][:2] == ["IDENTITY", "BUSY"]
    assert rows[1][:3] == [identity, "0/2", "default"]
    (listed,) = json.loads(ok(cli(redis_url, "processes", "--json")))
    assert listed["identity"] == identity
    assert (listed["busy"], listed["quiet"], listed["concurrency"]) == (0, False, 2)
    assert listed["queues"] == ["default"]
    assert abs(listed["last_beat"] - int(r.time()[0])) <= 2

    on = f"on {redacted_url(redis_url)}"
    assert ok(cli(redis_url, "processes", "quiet", identity)).strip() == f"quiet -> {identity} {on}"
    wait_for(lambda: presence(r, identity, "quiet") == "true")
    assert json.loads(ok(cli(redis_url, "processes", "--json")))[0]["quiet"] is True
    assert "quiet" in ok(cli(redis_url, "processes")).splitlines()[1].split()

    assert ok(cli(redis_url, "processes", "resume", identity)).strip() == (
        f"resume -> {identity} {on}"
    )
    wait_for(lambda: presence(r, identity, "quiet") == "false")

    assert ok(cli(redis_url, "processes", "stop", identity)).strip() == f"stop -> {identity} {on}"
    assert worker.wait(20) == 0
    assert json.loads(ok(cli(redis_url, "processes", "--json"))) == []


def test_processes_all_reaches_every_live_process(
    r: redis.Redis, redis_url: str, worker: subprocess.Popen[bytes]
) -> None:
    identity = live_identity(r, worker)
    # a second process whose presence is alive but which isn't listening
    deaf = "deaf:1:aaaaaaaaaaaa"
    info = json.dumps({"hostname": "deaf", "pid": 1, "concurrency": 1, "queues": ["default"]})
    r.hset(keys.process(deaf), mapping={"info": info, "busy": "0", "quiet": "false"})
    r.sadd(keys.PROCESSES, deaf)

    out = ok(cli(redis_url, "processes", "quiet", "--all")).splitlines()

    on = f"on {redacted_url(redis_url)}"
    assert sorted(out) == sorted(
        [f"quiet -> {identity} {on}", f"quiet -> {deaf} {on} (not listening: command lost)"]
    )
    wait_for(lambda: presence(r, identity, "quiet") == "true")

    ok(cli(redis_url, "processes", "stop", "--all"))
    assert worker.wait(20) == 0
    assert r.exists(keys.process(identity)) == 0


def test_unknown_process_is_a_one_line_error(
    r: redis.Redis, redis_url: str, worker: subprocess.Popen[bytes]
) -> None:
    identity = live_identity(r, worker)

    for action in ("quiet", "resume", "stop"):
        one_line_error(cli(redis_url, "processes", action, "nobody:1:x"), "nobody:1:x")
    one_line_error(cli(redis_url, "processes", "stop"), "--all")  # names nothing

    assert worker.poll() is None
    assert presence(r, identity, "quiet") == "false"


def test_processes_all_without_any_process_is_an_error(redis_url: str, r: redis.Redis) -> None:
    one_line_error(cli(redis_url, "processes", "quiet", "--all"), "no live process")


# -- dead ------------------------------------------------------------------------------------


def seed_dead(r: redis.Redis) -> tuple[str, list[str], str]:
    """Two entries of one jid (the job died twice), one of another; returns (jid, raws, other)."""
    jid = wire.new_jid()
    now = time.time()
    twice = [
        wire.dumps(job(jid, queue="mail", retry_count=1, error_class="E", error_message="one")),
        wire.dumps(job(jid, queue="mail", retry_count=2, error_class="E", error_message="two")),
    ]
    other = wire.dumps(job(error_class="KeyError", error_message="k"))
    r.zadd(keys.DEAD, {twice[0]: now - 100, twice[1]: now - 10, other: now - 50})
    r.rpush(keys.job_attempts(jid), '{"attempt":1}', '{"attempt":2}')
    return jid, twice, other


def test_dead_list_newest_first(r: redis.Redis, redis_url: str) -> None:
    jid, _, other = seed_dead(r)
    other_jid = json.loads(other)["jid"]

    rows = [line.split() for line in ok(cli(redis_url, "dead")).splitlines()]
    assert rows[0][:3] == ["JID", "CLASS", "QUEUE"]
    assert [(row[0], row[2]) for row in rows[1:]] == [
        (jid, "mail"),
        (other_jid, "default"),
        (jid, "mail"),
    ]

    listed = json.loads(ok(cli(redis_url, "dead", "--json", "--limit", "2")))
    assert [entry["jid"] for entry in listed] == [jid, other_jid]
    assert listed[0]["item"]["error_message"] == "two"
    assert listed[1]["raw"] == other


def test_dead_retry_by_jid_requeues_every_entry(r: redis.Redis, redis_url: str) -> None:
    jid, _, other = seed_dead(r)

    out = ok(cli(redis_url, "dead", "retry", jid)).strip()

    assert out == (
        f"retried dead job {jid} on {redacted_url(redis_url)}: "
        "2 requeued, 0 not requeueable, 0 already gone"
    )
    assert r.zrange(keys.DEAD, 0, -1) == [other]
    requeued = [json.loads(raw) for raw in r.lrange(keys.queue("mail"), 0, -1)]
    assert sorted(job["retry_count"] for job in requeued) == [1, 2]
    assert {job["jid"] for job in requeued} == {jid}


def test_dead_retry_counts_entries_that_cannot_be_requeued(r: redis.Redis, redis_url: str) -> None:
    jid = wire.new_jid()
    queueless = wire.dumps({"class": "X", "args": [], "jid": jid, "error_class": "E"})
    fine = wire.dumps(job(jid))
    r.zadd(keys.DEAD, {queueless: 1.0, fine: 2.0})

    out = ok(cli(redis_url, "dead", "retry", jid)).strip()

    assert out.endswith(": 1 requeued, 1 not requeueable, 0 already gone")
    assert r.zrange(keys.DEAD, 0, -1) == [queueless]
    assert r.llen(keys.queue("default")) == 1


def test_dead_delete_by_jid_deletes_every_entry(r: redis.Redis, redis_url: str) -> None:
    jid, _, other = seed_dead(r)

    assert ok(cli(redis_url, "dead", "delete", jid)).strip() == (
        f"deleted dead job {jid} on {redacted_url(redis_url)} (2 entries)"
    )

    assert r.zrange(keys.DEAD, 0, -1) == [other]
    assert r.exists(keys.job_attempts(jid)) == 0


@pytest.mark.parametrize("action", ["retry", "delete"])
def test_unknown_dead_jid_is_a_one_line_error(r: redis.Redis, redis_url: str, action: str) -> None:
    seed_dead(r)

    one_line_error(cli(redis_url, "dead", action, "no-such-jid"), "no-such-jid")

    assert r.zcard(keys.DEAD) == 3
    assert r.keys(f"{keys.QUEUE_PREFIX}*") == []


# -- metrics ---------------------------------------------------------------------------------


def test_metrics_command_serves_until_term(r: redis.Redis, redis_url: str) -> None:
    r.set(keys.STATS_PROCESSED, 41)

    served = serving_metrics("metrics", "--port", "0", env=cogworker_env(redis_url))
    with served as url, urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode("utf-8")

    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert values["cogworker_processed_total"] == 41


# -- Redis unreachable -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [("stats",), ("dead", "retry", "j1")],
)
def test_unreachable_redis_is_a_one_line_error(args: tuple[str, ...]) -> None:
    """Like every other failure of the command: one ``cogworker:`` line, no traceback."""
    unreachable = f"redis://127.0.0.1:{free_port()}/0"

    result = run_cogworker(*args, redis_url=unreachable)

    one_line_error(result)
    assert "Traceback" not in result.stderr
