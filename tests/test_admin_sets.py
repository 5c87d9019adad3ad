"""The listing and deleting admin commands, run as real subprocesses: ``retries``,
``scheduled``, ``dead clear`` and ``queues delete``.

Entries holding invalid UTF-8 print as ``(unparseable)`` rows, in tables and in JSON, and
can be deleted by their pseudo-jid; removing a job releases the locks it owns.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from admin_support import cli, ok, one_line_error, rows

import cogworker
from cogworker import api, keys, locks, wire
from cogworker.connection import redacted_url


def job(jid: str | None = None, **fields: Any) -> dict[str, Any]:
    return {
        "class": "Listing::Job",
        "args": ["x"],
        "queue": "default",
        "jid": jid or wire.new_jid(),
        **fields,
    }


def unique_job(n: int, **fields: Any) -> dict[str, Any]:
    return job(args=[n], unique="until_executed", **fields)


def lock_key(payload: dict[str, Any]) -> str:
    return keys.unique(locks.unique_digest(payload))


# -- retries and scheduled -------------------------------------------------------------------


def test_retries_soonest_first_with_the_retry_budget(r: redis.Redis, redis_url: str) -> None:
    now = time.time()
    later = job(retry=5, retry_count=2, error_class="ValueError", error_message="late\nline")
    sooner = job(retry_count=1, error_class="KeyError", error_message="soon")
    r.zadd(keys.RETRY, {wire.dumps(later): now + 600, wire.dumps(sooner): now + 60})
    r.zadd(keys.RETRY, {b"\xff\xfe not utf-8": now + 900})

    table = rows(ok(cli(redis_url, "retries")))
    shown = json.loads(ok(cli(redis_url, "retries", "--json", "--limit", "2")))

    assert table[0] == ["JID", "CLASS", "QUEUE", "DUE", "RETRY", "ERROR"]
    assert [(row[0], row[4]) for row in table[1:3]] == [
        (sooner["jid"], "1/25"),
        (later["jid"], "2/5"),
    ]
    assert table[2][5] == "ValueError: late line"  # one line per row
    assert table[3][1:3] == ["(unparseable)", "-"]
    assert table[3][0].startswith("unparseable-")
    assert [entry["jid"] for entry in shown] == [sooner["jid"], later["jid"]]


def test_retries_delete_and_retry_by_jid(r: redis.Redis, redis_url: str) -> None:
    dropped, requeued = unique_job(1), job()
    r.zadd(keys.RETRY, {wire.dumps(dropped): 1.0, wire.dumps(requeued): 2.0})
    r.set(lock_key(dropped), dropped["jid"])
    r.rpush(keys.job_attempts(dropped["jid"]), "{}")
    on = f"on {redacted_url(redis_url)}"

    deleted = ok(cli(redis_url, "retries", "delete", dropped["jid"])).strip()
    retried = ok(cli(redis_url, "retries", "retry", requeued["jid"])).strip()

    assert deleted == f"deleted retry {dropped['jid']} {on} (1 entry)"
    assert r.exists(lock_key(dropped), keys.job_attempts(dropped["jid"])) == 0
    assert (
        retried
        == f"retried retry {requeued['jid']} {on}: 1 requeued, 0 not requeueable, 0 already gone"
    )
    assert r.zcard(keys.RETRY) == 0
    assert json.loads(r.lindex(keys.queue("default"), 0) or "{}")["jid"] == requeued["jid"]
    assert "no retry with jid" in one_line_error(cli(redis_url, "retries", "delete", "nope"))


def test_scheduled_listing_delete_and_clear(r: redis.Redis, redis_url: str) -> None:
    now = time.time()
    entries = [unique_job(n, at=now + 60 * (n + 1)) for n in range(3)]
    r.zadd(keys.SCHEDULE, {wire.dumps(entry): entry["at"] for entry in entries})
    for entry in entries:
        r.set(lock_key(entry), entry["jid"])
    r.zadd(keys.SCHEDULE, {b"\xc3\x28": now + 1})

    table = rows(ok(cli(redis_url, "scheduled")))
    pseudo = table[1][0]
    on = f"on {redacted_url(redis_url)}"

    assert table[0] == ["JID", "CLASS", "QUEUE", "DUE", "ARGS"]
    assert table[1][1] == "(unparseable)" and pseudo.startswith("unparseable-")
    assert [row[0] for row in table[2:]] == [entry["jid"] for entry in entries]
    assert table[2][4] == "[0]"
    assert ok(cli(redis_url, "scheduled", "delete", pseudo)).strip() == (
        f"deleted scheduled job {pseudo} {on} (1 entry)"
    )
    assert (
        ok(cli(redis_url, "scheduled", "clear")).strip()
        == f"cleared scheduled {on}: 3 entries deleted"
    )
    assert r.exists(keys.SCHEDULE) == 0
    assert r.keys(keys.UNIQUE_PREFIX + "*") == []


def test_dead_clear_names_its_redis(r: redis.Redis, redis_url: str) -> None:
    r.zadd(keys.DEAD, {wire.dumps(job()): 1.0, b"\xff": 2.0})

    out = ok(cli(redis_url, "dead", "clear")).strip()

    assert out == f"cleared dead on {redacted_url(redis_url)}: 2 entries deleted"
    assert r.exists(keys.DEAD) == 0


# -- queues delete ---------------------------------------------------------------------------


def test_queues_delete_by_jid_and_by_pseudo_jid(
    r: redis.Redis, redis_url: str, config: cogworker.Config
) -> None:
    kept, dropped = job(), unique_job(1)
    r.lpush(keys.queue("default"), wire.dumps(kept), wire.dumps(dropped), b"\xff\xfe")
    r.sadd(keys.QUEUES, "default")
    r.set(lock_key(dropped), dropped["jid"])
    on = f"on {redacted_url(redis_url)}"
    (unreadable,) = [record for record in api.Queue(config.redis()) if not record.readable]

    by_jid = ok(cli(redis_url, "queues", "delete", "default", dropped["jid"])).strip()
    by_pseudo = ok(cli(redis_url, "queues", "delete", "default", unreadable.jid)).strip()

    assert by_jid == f"deleted job {dropped['jid']} from queue default {on} (1 entry)"
    assert by_pseudo == f"deleted job {unreadable.jid} from queue default {on} (1 entry)"
    assert r.exists(lock_key(dropped)) == 0
    assert r.lrange(keys.queue("default"), 0, -1) == [wire.dumps(kept)]
    line = one_line_error(cli(redis_url, "queues", "delete", "default", "nope"))
    assert "no job 'nope' on queue default" in line
    assert "unknown queue" in one_line_error(cli(redis_url, "queues", "delete", "ghost", "x"))


def test_a_queue_named_with_invalid_bytes_lists_and_pauses(r: redis.Redis, redis_url: str) -> None:
    r.sadd(keys.QUEUES, b"bad\xff", "default")
    r.lpush(b"cogworker:queue:bad\xff", wire.dumps(job(queue="bad")))
    on = f"on {redacted_url(redis_url)}"

    table = rows(ok(cli(redis_url, "queues")))
    shown = json.loads(ok(cli(redis_url, "stats", "--json")))
    paused = ok(cli(redis_url, "queues", "pause", "bad\udcff")).strip()  # argv bytes b"bad\xff"

    assert [row[:2] for row in table[1:]] == [["bad\ufffd", "1"], ["default", "0"]]
    assert [queue["name"] for queue in shown["queues"]] == ["bad\ufffd", "default"]
    assert paused == f"paused queue bad\ufffd {on}"
    assert r.sismember(keys.PAUSED_QUEUES, b"bad\xff")
    assert "unknown queue 'ba\ufffd'" in one_line_error(
        cli(redis_url, "queues", "pause", "ba\udcff")
    )
