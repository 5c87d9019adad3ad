"""The read API and the admin commands with entries that are not readable jobs: invalid
UTF-8, nesting too deep to parse, not JSON, not an object, a multi-megabyte payload.

Such an entry is a ``JobRecord`` of class ``(unparseable)`` with a stable pseudo-jid; it can
be found by that jid, printed, and deleted by its exact stored bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
import redis
from api_support import client
from runtime_support import run_cogworker

from cogworker import api, keys, wire

_fixtures = (client,)  # from api_support, named here for pytest

UNREADABLE: dict[str, bytes] = {
    "invalid-utf8": b'{"class":"Api::Job","args":["caf\xe9"],"queue":"default","jid":"x1"}',
    "garbage-bytes": b"\xff\xfe\x00 garbage \x80",
    "nested-200000-deep": b"[" * 200_000 + b"]" * 200_000,
    "multi-megabyte-invalid": b'{"args":["' + b"z" * 3_000_000 + b'\xff"]}',
    "not-json": b"{not json",
    "not-an-object": b"[1, 2]",
    "nan": b'{"class":"Api::Job","args":[NaN],"queue":"default","jid":"x2"}',
}
CASES = list(UNREADABLE)


def pseudo_jid(stored: bytes) -> str:
    return "unparseable-" + hashlib.sha1(stored).hexdigest()[:12]


def a_job(jid: str) -> bytes:
    job = {"class": "Api::Job", "args": [1], "jid": jid, "created_at": 1_700_000_000.5}
    return wire.dumps(wire.normalize(job)).encode()


@pytest.mark.parametrize("case", CASES)
def test_a_dead_entry_reads_as_unparseable_with_a_stable_pseudo_jid(
    b: redis.Redis, client: redis.Redis, case: str
) -> None:
    stored = UNREADABLE[case]
    b.zadd(keys.DEAD, {stored: 5.0, a_job("neighbour"): 6.0})
    dead = api.dead_set(client)
    [neighbour, record] = dead.page(0, 10)
    assert neighbour.jid == "neighbour"
    assert record.job_class == "(unparseable)" and not record.readable
    assert record.jid == pseudo_jid(stored)
    assert api.JobRecord(record.raw).jid == record.jid  # stable: computed from the bytes
    assert record.problem is not None and ": " in record.problem
    assert record.args == [] and record.queue is None and not record.requeueable
    # printable, and the exact bytes recoverable
    record.raw_text.encode("utf-8")
    shown = record.to_dict()
    json.dumps(shown, ensure_ascii=False).encode("utf-8")
    exact = base64.b64decode(shown["raw_base64"]) if "raw_base64" in shown else shown["raw"]
    assert exact == stored or exact == stored.decode()
    # found by its pseudo-jid, deleted by its raw
    [found] = dead.find_jobs(record.jid)
    assert found.raw == record.raw
    assert dead.retry_now(record.raw) == "invalid"
    assert dead.delete(record.raw) is True
    assert b.zrange(keys.DEAD, 0, -1) == [a_job("neighbour")]


@pytest.mark.parametrize("case", CASES)
def test_a_queued_entry_can_be_found_and_deleted_by_its_bytes(
    b: redis.Redis, client: redis.Redis, case: str
) -> None:
    stored = UNREADABLE[case]
    b.sadd(keys.QUEUES, "default")
    b.lpush(keys.queue("default"), a_job("before"), stored, stored, a_job("after"))
    queue = api.Queue(client, "default")
    records = queue.page(0, 10)
    assert [record.job_class for record in records] == [
        "Api::Job",
        "(unparseable)",
        "(unparseable)",
        "Api::Job",
    ]
    found = queue.find_job(pseudo_jid(stored))
    assert found is not None and found.raw == records[1].raw
    assert queue.delete(found.raw) == 2  # every copy of exactly those bytes
    assert b.lrange(keys.queue("default"), 0, -1) == [a_job("after"), a_job("before")]


def test_a_wrapper_filed_by_a_worker_reads_as_a_record_with_its_jid(
    b: redis.Redis, client: redis.Redis
) -> None:
    wrapper = {
        "class": "(unparseable)",
        "args": [],
        "queue": "default",
        "jid": "0f0f0f0f0f0f0f0f0f0f0f0f",
        "retry": False,
        "error_class": "UnicodeDecodeError",
        "error_message": "not valid UTF-8 (invalid start byte at byte 0)",
        "raw_payload": "\ufffd",
        "raw_payload_base64": base64.b64encode(b"\xff").decode(),
    }
    b.zadd(keys.DEAD, {wire.dumps(wrapper).encode(): 1.0})
    [record] = api.dead_set(client).page()
    assert record.readable and record.job_class == "(unparseable)"
    assert record.jid == "0f0f0f0f0f0f0f0f0f0f0f0f"
    assert record.error == "UnicodeDecodeError: not valid UTF-8 (invalid start byte at byte 0)"
    assert [found.raw for found in api.dead_set(client).find_jobs(record.jid)] == [record.raw]


def test_stats_reads_queues_and_sets_holding_invalid_bytes(
    b: redis.Redis, client: redis.Redis
) -> None:
    b.sadd(keys.QUEUES, "default")
    b.lpush(keys.queue("default"), UNREADABLE["invalid-utf8"])  # the tail: read for latency
    b.zadd(keys.DEAD, {UNREADABLE["garbage-bytes"]: 1.0})
    b.zadd(keys.RETRY, {UNREADABLE["not-an-object"]: 1.0})
    figures = api.stats(client)
    assert (figures.dead_size, figures.retry_size, figures.enqueued) == (1, 1, 1)


@pytest.mark.parametrize("case", CASES)
def test_any_unreadable_entry_at_a_queues_tail_has_no_latency_and_breaks_nothing(
    b: redis.Redis, client: redis.Redis, case: str
) -> None:
    """The tail is read for the queue's latency: an entry that isn't a job (too deep to parse
    included) has no enqueue time, so the latency is 0 and the rest of the figures stand."""
    b.sadd(keys.QUEUES, "default", "mail")
    b.lpush(keys.queue("default"), UNREADABLE[case])
    b.lpush(keys.queue("mail"), a_job("m1"))
    figures = api.stats(client)
    latency = {queue.name: queue.latency for queue in figures.queues}
    assert latency["default"] == 0.0
    assert latency["mail"] > 0.0  # created long ago, so the readable queue still tells
    assert api.Queue(client, "default").latency() == 0.0
    assert figures.enqueued == 2


@pytest.mark.parametrize(
    "command", [["stats"], ["stats", "--json"], ["queues"], ["dead"], ["dead", "--json"]]
)
def test_admin_commands_print_entries_holding_invalid_bytes(
    b: redis.Redis, redis_url: str, command: list[str]
) -> None:
    garbage = UNREADABLE["garbage-bytes"]
    b.sadd(keys.QUEUES, "default")
    b.lpush(keys.queue("default"), UNREADABLE["invalid-utf8"])
    b.zadd(keys.DEAD, {garbage: 1.0, UNREADABLE["invalid-utf8"]: 2.0})
    done = run_cogworker(*command, redis_url=redis_url)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    if command[0] == "dead":
        assert pseudo_jid(garbage) in done.stdout
        assert "(unparseable)" in done.stdout


def test_admin_dead_delete_by_pseudo_jid(b: redis.Redis, redis_url: str) -> None:
    garbage = UNREADABLE["garbage-bytes"]
    b.zadd(keys.DEAD, {garbage: 1.0, a_job("kept"): 2.0})
    done = run_cogworker("dead", "delete", pseudo_jid(garbage), redis_url=redis_url)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert b.zrange(keys.DEAD, 0, -1) == [a_job("kept")]
