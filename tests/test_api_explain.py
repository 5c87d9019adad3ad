"""``api.explain``: where a job is and why it waits, read from a Redis state the test wrote
(queues, sets, locks, status, history, parked records). Jobs in progress are in
test_explain_in_progress.py (planted process state) and test_explain_workers.py (real worker
subprocesses: readers, quiet, busy, running, a process that died).
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pytest
import redis
from api_support import client
from api_support import payload as api_payload
from runtime_support import closing_pools, command_calls, commands_since, redis_time

from cogworker import api, keys, locks, wire
from cogworker.api import Place, Why

_fixtures = (client,)  # from api_support, named here for pytest

_close_pools = pytest.fixture(autouse=True)(closing_pools)


def payload(jid: str | None = None, **fields: Any) -> dict[str, Any]:
    """The sample job of these tests: the API tests' payload, of another class."""
    return api_payload(jid, **{"class": "Explain::Job", "args": [1], **fields})


def lpush(r: redis.Redis, queue: str, *jobs: dict[str, Any]) -> None:
    """Push in order: the first job given is the next to run."""
    r.lpush(keys.queue(queue), *(wire.dumps(job) for job in jobs))
    r.sadd(keys.QUEUES, queue)


def whys(found: api.Explanation) -> list[Why]:
    return [reason.why for reason in found.reasons]


def reason(found: api.Explanation, why: Why) -> api.Reason:
    (match,) = [item for item in found.reasons if item.why is why]
    return match


# -- queues ----------------------------------------------------------------------------------


def test_queued_job_position_counts_from_the_next_to_run(
    r: redis.Redis, client: redis.Redis
) -> None:
    jobs = [payload() for _ in range(4)]
    lpush(r, "default", *jobs)

    first = api.explain(client, jobs[0]["jid"])
    third = api.explain(client, jobs[2]["jid"])

    assert first.place is Place.QUEUED
    (location,) = first.locations
    assert (location.queue, location.position) == ("default", 0)
    assert location.record.item == jobs[0]
    assert Why.JOBS_AHEAD not in whys(first)
    assert third.locations[0].position == 2
    ahead = reason(third, Why.JOBS_AHEAD)
    assert ahead.count == 2 and "2 job(s) ahead" in ahead.text


def test_paused_queue_without_any_worker(r: redis.Redis, client: redis.Redis) -> None:
    job = payload(queue="mail")
    lpush(r, "mail", job)
    r.sadd(keys.PAUSED_QUEUES, "mail")

    found = api.explain(client, job["jid"])

    assert found.place is Place.QUEUED
    assert whys(found) == [Why.QUEUE_PAUSED, Why.NO_READER]
    assert "queue mail is paused" in found.reasons[0].text
    assert "no worker process is running" in found.reasons[1].text


def test_a_queue_the_status_names_is_searched_even_if_unregistered(
    r: redis.Redis, client: redis.Redis
) -> None:
    job = payload(queue="hidden")
    r.lpush(keys.queue("hidden"), wire.dumps(job))  # not in cogworker:queues
    r.hset(keys.status(job["jid"]), mapping={"status": "queued", "queue": "hidden"})

    found = api.explain(client, job["jid"])

    assert found.place is Place.QUEUED
    assert found.locations[0].queue == "hidden"
    assert found.status == {"status": "queued", "queue": "hidden"}


# -- sets ------------------------------------------------------------------------------------


def test_scheduled_job_says_when_it_is_due(r: redis.Redis, client: redis.Redis) -> None:
    due = redis_time(r) + 630.5  # 10m29s or 10m30s from now, whatever the fraction
    job = payload(at=due)
    r.zadd(keys.SCHEDULE, {wire.dumps(job): due})

    found = api.explain(client, job["jid"])

    assert found.place is Place.SCHEDULED
    assert found.locations[0].at == due
    not_due = reason(found, Why.NOT_DUE)
    assert not_due.at == due
    assert "in 10m" in not_due.text
    assert Why.NO_READER in whys(found)  # its queue has no reader either


def test_overdue_entry_without_any_process_says_nobody_polls(
    r: redis.Redis, client: redis.Redis
) -> None:
    job = payload()
    r.zadd(keys.SCHEDULE, {wire.dumps(job): redis_time(r) - 30})

    found = api.explain(client, job["jid"])

    assert found.reasons[0].why is Why.NO_POLLER
    assert "no live process polls the schedule" in found.reasons[0].text


def test_retry_shows_attempt_budget_due_time_and_error(r: redis.Redis, client: redis.Redis) -> None:
    due = redis_time(r) + 90.0
    job = payload(retry=5, retry_count=2, error_class="ValueError", error_message="boom")
    r.zadd(keys.RETRY, {wire.dumps(job): due})

    found = api.explain(client, job["jid"])

    assert found.place is Place.RETRY
    (location,) = found.locations
    assert (location.retry, location.max_retries) == (2, 5)
    assert location.at == due
    assert location.error == "ValueError: boom"
    assert reason(found, Why.NOT_DUE).at == due


def test_dead_job_says_when_and_why(r: redis.Redis, client: redis.Redis) -> None:
    job = payload(error_class="KeyError", error_message="'id'")
    r.zadd(keys.DEAD, {wire.dumps(job): 1_700_000_100.0})

    found = api.explain(client, job["jid"])

    assert found.place is Place.DEAD
    assert found.locations[0].at == 1_700_000_100.0
    dead = reason(found, Why.IN_DEAD_SET)
    assert "2023-11-14 22:15:00 UTC" in dead.text
    assert "KeyError: 'id'" in dead.text
    assert Why.NO_READER not in whys(found)  # a dead job isn't waiting for a reader


def test_a_job_in_several_places_reports_each_and_the_most_advanced(
    r: redis.Redis, client: redis.Redis
) -> None:
    jid = wire.new_jid()
    r.zadd(keys.DEAD, {wire.dumps(payload(jid, retry_count=1)): 1.0})
    r.zadd(keys.DEAD, {wire.dumps(payload(jid, retry_count=2)): 2.0})
    lpush(r, "default", payload(jid))

    found = api.explain(client, jid)

    assert found.place is Place.QUEUED
    assert [location.place for location in found.locations] == [
        Place.QUEUED,
        Place.DEAD,
        Place.DEAD,
    ]


# -- parked for filing -----------------------------------------------------------------------


def test_parked_repeat_orphans_and_unsettled_records(r: redis.Redis, client: redis.Redis) -> None:
    orphan, failed = payload(), payload()
    r.rpush(keys.REPEAT_ORPHANS, wire.dumps(orphan))
    record = {"set": keys.RETRY, "score": 5.0, "payload": wire.dumps(failed)}
    r.rpush(keys.UNSETTLED, "not a record", wire.dumps(record))

    parked = api.explain(client, orphan["jid"])
    unsettled = api.explain(client, failed["jid"])

    assert parked.place is Place.PARKED
    assert parked.locations[0].target == keys.DEAD
    assert unsettled.place is Place.PARKED
    assert unsettled.locations[0].target == keys.RETRY
    assert unsettled.scanned[keys.UNSETTLED] == 2


# -- finished, unknown -----------------------------------------------------------------------


def test_unknown_jid_with_status_and_history_off(r: redis.Redis, client: redis.Redis) -> None:
    lpush(r, "default", payload())

    found = api.explain(client, "no-such-jid")

    assert found.place is Place.UNKNOWN and not found.found
    assert found.locations == [] and found.status is None and found.runs == []
    assert found.history_kept is False
    (unknown,) = found.reasons
    assert unknown.why is Why.NOT_FOUND
    assert "there is no run history" in unknown.text
    assert "finished looks the same as an unknown jid" in unknown.text
    assert found.scanned[keys.queue("default")] == 1


def test_finished_according_to_status_only(r: redis.Redis, client: redis.Redis) -> None:
    jid = wire.new_jid()
    r.hset(keys.status(jid), mapping={"status": "complete", "update_time": "1700000000.5"})

    found = api.explain(client, jid)

    assert found.place is Place.FINISHED
    assert found.status == {"status": "complete", "update_time": "1700000000.5"}


def test_finished_according_to_history_newest_run_first(
    r: redis.Redis, client: redis.Redis
) -> None:
    jid = wire.new_jid()
    runs = [
        {
            "jid": jid,
            "class": "X",
            "queue": "default",
            "status": "failed",
            "started_at": 10.0,
            "finished_at": 11.0,
            "error_class": "ValueError",
            "error_message": "first",
        },
        {
            "jid": jid,
            "class": "X",
            "queue": "default",
            "status": "success",
            "started_at": 50.0,
            "finished_at": 52.5,
        },
    ]
    for run in runs:
        r.zadd(keys.HISTORY_ALL, {wire.dumps(run): run["finished_at"]})
    r.zadd(keys.HISTORY_ALL, {wire.dumps({**runs[1], "jid": "other"}): 60.0})

    found = api.explain(client, jid)

    assert found.place is Place.FINISHED
    assert found.history_kept is True
    assert [(run.status, run.finished_at, run.error) for run in found.runs] == [
        ("success", 52.5, None),
        ("failed", 11.0, "ValueError: first"),
    ]
    assert found.scanned[keys.HISTORY_ALL] == 3


# -- locks -----------------------------------------------------------------------------------


def unique_job(**fields: Any) -> dict[str, Any]:
    return payload(unique="until_executed", args=["report", 7], **fields)


def test_unique_lock_held_by_the_job_itself(r: redis.Redis, client: redis.Redis) -> None:
    job = unique_job()
    lpush(r, "default", job)
    key = keys.unique(locks.unique_digest(job))
    r.set(key, job["jid"], ex=3600)

    lock = reason(api.explain(client, job["jid"]), Why.UNIQUE_LOCK)

    assert (lock.key, lock.owner) == (key, job["jid"])
    assert lock.ttl is not None and 3500 < lock.ttl <= 3600
    assert "it holds its unique lock" in lock.text


def test_unique_lock_held_by_a_newer_duplicate(r: redis.Redis, client: redis.Redis) -> None:
    job = unique_job(error_class="E", error_message="x")
    r.zadd(keys.DEAD, {wire.dumps(job): 1.0})
    key = keys.unique(locks.unique_digest(job))
    r.set(key, "newer-jid")

    lock = reason(api.explain(client, job["jid"]), Why.UNIQUE_LOCK)

    assert lock.owner == "newer-jid" and lock.ttl is None
    assert "held by another job, newer-jid" in lock.text


def test_unique_lock_not_held(r: redis.Redis, client: redis.Redis) -> None:
    job = unique_job()
    lpush(r, "default", job)

    lock = reason(api.explain(client, job["jid"]), Why.UNIQUE_LOCK)

    assert lock.owner is None
    assert "not held" in lock.text


def test_cron_run_reports_its_running_lock(r: redis.Redis, client: redis.Redis) -> None:
    job = payload(periodic_pjid="p" * 40, periodic_until_executed=True, periodic_slot=60)
    lpush(r, "default", job)
    r.set(keys.periodic_running("p" * 40), job["jid"], ex=100)

    lock = reason(api.explain(client, job["jid"]), Why.CRON_LOCK)

    assert (lock.key, lock.owner) == (keys.periodic_running("p" * 40), job["jid"])
    assert "fires no new run until this one ends" in lock.text


# -- cost, bad entries, JSON -----------------------------------------------------------------


def test_each_structure_is_read_once_a_page_at_a_time(r: redis.Redis, client: redis.Redis) -> None:
    size = 2500
    jid = f"{size - 1:024x}"
    for key in (keys.SCHEDULE, keys.RETRY, keys.DEAD):
        r.zadd(key, {wire.dumps(payload(f"{i:024x}")): float(i) for i in range(size)})
    lpush(r, "default", *(payload(f"{i:024x}") for i in range(size)))
    before = command_calls(r)

    found = api.explain(client, jid)

    pages = math.ceil(size / 1000) + (size % 1000 == 0)
    calls = commands_since(r, before)
    assert calls["lrange"] == pages + 2  # the queue, plus the repeat-orphan and unsettled lists
    assert calls["zrevrange"] == 3 * pages + 1  # three sets, plus the (empty) history
    assert [location.place for location in found.locations] == [
        Place.SCHEDULED,
        Place.RETRY,
        Place.QUEUED,
        Place.DEAD,
    ]
    assert found.locations[2].position == size - 1
    assert {key: found.scanned[key] for key in (keys.SCHEDULE, keys.queue("default"))} == {
        keys.SCHEDULE: size,
        keys.queue("default"): size,
    }


def test_bad_entries_never_break_a_search_and_a_pseudo_jid_is_found(
    r: redis.Redis, client: redis.Redis
) -> None:
    bad = [b"\xff\xfe not utf-8", b"[" * 5000, b'"just a string"', b"{not json"]
    r.lpush(keys.queue("default"), *bad)
    r.sadd(keys.QUEUES, "default")
    r.zadd(keys.DEAD, {raw: float(n) for n, raw in enumerate(bad)})
    good = payload()
    lpush(r, "default", good)
    pseudo = next(record.jid for record in api.dead_set(client) if record.raw.startswith("\udcff"))

    assert api.explain(client, good["jid"]).locations[0].position == len(bad)
    found = api.explain(client, pseudo)

    assert [location.place for location in found.locations] == [Place.QUEUED, Place.DEAD]
    assert all(location.record.item is None for location in found.locations)
    json.dumps(found.to_dict())  # plain values all the way down


def test_to_dict_is_plain_json(r: redis.Redis, client: redis.Redis) -> None:
    job = unique_job(retry_count=1, error_class="E", error_message="m")
    r.zadd(keys.RETRY, {wire.dumps(job): time.time() + 60})

    shown = json.loads(json.dumps(api.explain(client, job["jid"]).to_dict()))

    assert shown["place"] == "retry"
    assert shown["locations"][0]["retry"] == 1
    assert shown["locations"][0]["job"]["jid"] == job["jid"]
    assert [item["why"] for item in shown["reasons"]] == ["not_due", "no_reader", "unique_lock"]
    assert shown["scanned"][keys.RETRY] == 1
