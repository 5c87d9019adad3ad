"""``cogworker locks`` (list, release by digest or owner, owner-checked) and ``cogworker
periodic`` (published cron entries with their last and next run), as real subprocesses.
"""

from __future__ import annotations

import json
import time

import redis
from admin_support import cli, ok, one_line_error, rows

from cogworker import keys
from cogworker.connection import redacted_url
from cogworker.periodic.cron import Schedule

# -- locks -----------------------------------------------------------------------------------


def test_locks_lists_owner_and_ttl(r: redis.Redis, redis_url: str) -> None:
    r.set(keys.unique("a" * 40), "jid-a", ex=7200)
    r.set(keys.unique("b" * 40), "jid-b")
    r.set(keys.unique("c" * 40), b"jid-\xff")  # an owner with invalid bytes still prints

    table = rows(ok(cli(redis_url, "locks")))
    shown = json.loads(ok(cli(redis_url, "locks", "--json")))

    assert table[0] == ["DIGEST", "OWNER", "TTL"]
    assert table[1][:2] == ["a" * 40, "jid-a"] and table[1][2] in ("1h59m", "2h00m")
    assert table[2] == ["b" * 40, "jid-b", "none"]
    assert table[3] == ["c" * 40, "jid-\ufffd", "none"]
    assert [(lock["digest"], lock["owner"]) for lock in shown][:2] == [
        ("a" * 40, "jid-a"),
        ("b" * 40, "jid-b"),
    ]
    assert shown[0]["key"] == keys.unique("a" * 40)


def test_locks_release_by_digest_and_by_jid(r: redis.Redis, redis_url: str) -> None:
    r.set(keys.unique("a" * 40), "stuck")
    r.set(keys.unique("b" * 40), "stuck")
    r.set(keys.unique("c" * 40), "other")
    on = f"on {redacted_url(redis_url)}"

    by_digest = ok(cli(redis_url, "locks", "release", keys.unique("c" * 40))).strip()
    by_jid = sorted(ok(cli(redis_url, "locks", "release", "--jid", "stuck")).splitlines())

    assert by_digest == f"released {keys.unique('c' * 40)} (owner other) {on}"
    assert by_jid == [
        f"released {keys.unique('a' * 40)} (owner stuck) {on}",
        f"released {keys.unique('b' * 40)} (owner stuck) {on}",
    ]
    assert r.keys(keys.UNIQUE_PREFIX + "*") == []


def test_locks_release_is_owner_checked_and_unknown_is_an_error(
    r: redis.Redis, redis_url: str
) -> None:
    r.set(keys.unique("a" * 40), "newer")

    refused = one_line_error(cli(redis_url, "locks", "release", "a" * 40, "--jid", "older"))
    missing = one_line_error(cli(redis_url, "locks", "release", "f" * 40))
    nobody = one_line_error(cli(redis_url, "locks", "release", "--jid", "older"))
    neither = one_line_error(cli(redis_url, "locks", "release"))

    assert "is owned by newer, not older: nothing released" in refused
    assert r.get(keys.unique("a" * 40)) == "newer"
    assert f"no unique lock {keys.unique('f' * 40)}" in missing
    assert "no unique lock is owned by 'older'" in nobody
    assert "DIGEST" in neither and "--jid" in neither


# -- periodic --------------------------------------------------------------------------------


def publish(r: redis.Redis, pjid: str, **value: object) -> None:
    r.hset(keys.PERIODIC_SCHEDULE, pjid, json.dumps(value))


def test_periodic_lists_last_and_next_run_and_state(r: redis.Redis, redis_url: str) -> None:
    report = {"cron": "*/5 * * * * UTC", "class": "Cron::Report", "retry": 0, "args": []}
    cleanup = {"cron": "0 3 * * * UTC", "class": "Cron::Cleanup", "retry": 0, "args": [1]}
    publish(r, "a" * 40, unique="until_executed", queue="reports", **report)
    publish(r, "b" * 40, unique=None, **cleanup)
    r.hset(keys.PERIODIC_SCHEDULE, "c" * 40, "{not json")
    r.set(keys.periodic_last_slot("a" * 40), 1_700_000_100)
    r.set(keys.periodic_running("a" * 40), "run-jid", ex=300)
    r.sadd(keys.PERIODIC_DISABLED, "b" * 40)
    before = time.time()

    table = rows(ok(cli(redis_url, "periodic")))
    shown = {entry["pjid"]: entry for entry in json.loads(ok(cli(redis_url, "periodic", "--json")))}

    assert table[0] == ["PJID", "CRON", "CLASS", "QUEUE", "LAST RUN", "NEXT RUN"]
    by_class = {row[2]: row for row in table[1:]}
    assert by_class["Cron::Report"][:5] == [
        "a" * 12,
        "*/5 * * * * UTC",
        "Cron::Report",
        "reports",
        "2023-11-14 22:15:00 UTC",
    ]
    assert by_class["Cron::Report"][6] == "running run-jid"
    assert by_class["Cron::Cleanup"][4] == "-" and by_class["Cron::Cleanup"][6] == "disabled"
    assert by_class["(unparseable)"][0] == "c" * 12
    assert shown["a" * 40]["running"] == "run-jid" and 0 < shown["a" * 40]["running_ttl"] <= 300
    assert shown["a" * 40]["last_run"] == 1_700_000_100
    next_run = shown["a" * 40]["next_run"]
    assert next_run > before and Schedule("*/5 * * * * UTC").slot(next_run) == next_run
    assert shown["b" * 40]["disabled"] is True
    assert shown["c" * 40]["problem"].startswith("not JSON")
