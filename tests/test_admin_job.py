"""``cogworker job JID``, run as a real subprocess: the explanation for humans and as JSON,
the one-line error for a jid nothing knows, entries holding invalid bytes, and a job
running on a real worker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from admin_support import cli, gate_worker, ok, one_line_error
from conftest import wait_for
from runtime_support import Worker, redis_time

from cogworker import keys, wire


def payload(**fields: Any) -> dict[str, Any]:
    return {
        "class": "AdminJob::Count",
        "args": ["x"],
        "queue": "default",
        "jid": wire.new_jid(),
        **fields,
    }


def test_job_explains_a_queued_job_for_humans(r: redis.Redis, redis_url: str) -> None:
    first, second = payload(), payload(unique="until_executed")
    r.lpush(keys.queue("default"), wire.dumps(first), wire.dumps(second))
    r.sadd(keys.QUEUES, "default")
    r.sadd(keys.PAUSED_QUEUES, "default")

    lines = ok(cli(redis_url, "job", second["jid"])).splitlines()

    assert lines[0] == f"job {second['jid']}: queued"
    assert lines[1] == '  class AdminJob::Count, args ["x"]'
    assert lines[2] == "  - queued on default at position 1 (0 = next to run)"
    assert lines[3] == "why:"
    assert "1 job(s) ahead of it on default" in lines[4]
    assert "queue default is paused" in lines[5]
    assert "no worker process is running" in lines[6]
    assert "its unique lock cogworker:unique:" in lines[7] and "is not held" in lines[7]
    assert lines[-1].startswith("searched (entries read): cogworker:schedule 0,")
    assert "cogworker:queue:default 2" in lines[-1]


def test_job_json_carries_places_reasons_and_cost(r: redis.Redis, redis_url: str) -> None:
    job = payload(retry_count=1, error_class="E", error_message="boom")
    due = redis_time(r) + 300.0
    r.zadd(keys.RETRY, {wire.dumps(job): due})

    shown = json.loads(ok(cli(redis_url, "job", job["jid"], "--json")))

    assert shown["place"] == "retry"
    (location,) = shown["locations"]
    assert (location["retry"], location["max_retries"], location["at"]) == (1, 25, due)
    assert location["job"] == job
    assert [reason["why"] for reason in shown["reasons"]] == ["not_due", "no_reader"]
    assert shown["scanned"][keys.RETRY] == 1


def test_job_unknown_jid_is_a_one_line_error_that_says_why_it_cant_tell(
    r: redis.Redis, redis_url: str
) -> None:
    for args in (("job", "no-such-jid"), ("job", "no-such-jid", "--json")):
        line = one_line_error(cli(redis_url, *args))
        assert "no job 'no-such-jid'" in line
        assert "looks the same as an unknown jid" in line


def test_job_finished_according_to_its_status(r: redis.Redis, redis_url: str) -> None:
    jid = wire.new_jid()
    r.hset(keys.status(jid), mapping={"status": "complete", "update_time": "1700000000.0"})

    lines = ok(cli(redis_url, "job", jid)).splitlines()

    assert lines[0] == f"job {jid}: finished"
    assert "status: status=complete, update_time=1700000000.0" in lines


def test_job_with_invalid_bytes_prints_an_unparseable_entry(r: redis.Redis, redis_url: str) -> None:
    r.zadd(keys.DEAD, {b'{"jid":"x\xff","class":"Bad"}': 5.0})
    r.lpush(keys.queue("default"), b"\xff\xfe", wire.dumps(payload()))
    r.sadd(keys.QUEUES, "default")
    listed = json.loads(ok(cli(redis_url, "dead", "--json")))
    pseudo = listed[0]["jid"]
    assert pseudo.startswith("unparseable-")

    text = ok(cli(redis_url, "job", pseudo))
    shown = json.loads(ok(cli(redis_url, "job", pseudo, "--json")))

    assert text.splitlines()[0] == f"job {pseudo}: dead"
    assert "(unparseable)" in text.splitlines()[1]
    assert shown["locations"][0]["job"] is None
    assert "\ufffd" in shown["locations"][0]["raw"]


def test_job_orphan_threshold_dates_the_recovery(r: redis.Redis, redis_url: str) -> None:
    job = payload()
    identity = "gone:7:aaaaaaaaaaaa"
    r.lpush(keys.inprogress(identity), wire.dumps(job))
    r.sadd(keys.INPROGRESS_IDENTITIES, identity)
    beat = redis_time(r) - 10
    r.hset(keys.LAST_BEAT, identity, str(beat))

    shown = json.loads(ok(cli(redis_url, "job", job["jid"], "--json", "--orphan-threshold", "90")))
    text = ok(cli(redis_url, "job", job["jid"]))

    assert shown["place"] == "orphaned"
    assert shown["locations"][0]["recover_at"] == beat + 90
    assert f"left in progress by process {identity}, which is gone" in text
    assert "recovery requeues it at about" in text  # default 300 s: still ahead
    assert "--orphan-threshold" in one_line_error(
        cli(redis_url, "job", job["jid"], "--orphan-threshold", "0")
    )


@pytest.fixture
def worker(tmp_path: Path, redis_url: str, r: redis.Redis) -> Iterator[Worker]:
    with gate_worker(tmp_path, redis_url, "AdminJob::Gate") as process:
        yield process


def test_job_running_on_a_real_worker(r: redis.Redis, redis_url: str, worker: Worker) -> None:
    identity = worker.identity(r)
    job = payload(**{"class": "AdminJob::Gate"})
    r.lpush(keys.queue("default"), wire.dumps(job))
    wait_for(lambda: r.get("test:runs:x") == "1", timeout=20)

    text = ok(cli(redis_url, "job", job["jid"]))

    assert text.splitlines()[0] == f"job {job['jid']}: running"
    assert f"  - running on process {identity}, thread " in text
    assert "why:" not in text
    r.set("test:gate:x", 1)
