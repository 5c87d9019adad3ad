"""Removing jobs through the API releases the locks they own, owner-checked and in batches:
``Queue.delete`` / ``Queue.clear`` and ``JobSet.delete`` / ``JobSet.clear`` of the schedule,
retry and dead sets; and the unique-lock listing and release of ``api.locks``.

A lock is deleted only while it holds the removed job's jid: a newer duplicate's lock stays.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import redis
from api_support import client
from runtime_support import closing_pools, command_calls, commands_since

import cogworker
from cogworker import api, keys, locks, wire
from cogworker.api import queues as api_queues
from cogworker.api import sets as api_sets

_fixtures = (client,)  # from api_support, named here for pytest

_close_pools = pytest.fixture(autouse=True)(closing_pools)


def unique(n: int, **fields: Any) -> dict[str, Any]:
    return {
        "class": "Locks::Job",
        "args": [n],
        "queue": "default",
        "jid": wire.new_jid(),
        "unique": "until_executed",
        **fields,
    }


def lock_key(job: dict[str, Any]) -> str:
    return keys.unique(locks.unique_digest(job))


def plant(r: redis.Redis, jobs: list[dict[str, Any]], owner: str | None = None) -> None:
    """Each job's unique lock, held by the job itself (or by ``owner``)."""
    pipe = r.pipeline(transaction=False)
    for job in jobs:
        pipe.set(lock_key(job), owner or job["jid"], ex=3600)
    pipe.execute()


# -- queues ----------------------------------------------------------------------------------


def test_queue_clear_releases_own_locks_and_spares_a_newer_owner(
    r: redis.Redis, client: redis.Redis, config: cogworker.Config
) -> None:
    producer = cogworker.Client(config)
    mine = [producer.push(unique(n)) for n in range(3)]  # the real client takes the locks
    assert None not in mine and len(r.keys(keys.UNIQUE_PREFIX + "*")) == 3
    superseded = unique(9)
    r.lpush(keys.queue("default"), wire.dumps(superseded))
    plant(r, [superseded], owner="newer-duplicate")
    cron = {**unique(10), "periodic_pjid": "c" * 40, "periodic_until_executed": True}
    del cron["unique"]
    r.lpush(keys.queue("default"), wire.dumps(cron), wire.dumps({**unique(11), "unique": None}))
    r.set(keys.periodic_running("c" * 40), cron["jid"])

    assert api.Queue(client, "default").clear() == 6

    assert r.exists(keys.queue("default")) == 0
    assert r.keys(keys.UNIQUE_PREFIX + "*") == [lock_key(superseded)]
    assert r.get(lock_key(superseded)) == "newer-duplicate"
    assert r.exists(keys.periodic_running("c" * 40)) == 0
    assert producer.push(unique(0)) is not None  # the digest is free again


def test_queue_clear_of_many_jobs_takes_a_few_round_trips(
    r: redis.Redis, client: redis.Redis
) -> None:
    count = 10_000
    jobs = [unique(n) if n % 2 else {**unique(n), "unique": None} for n in range(count)]
    for start in range(0, count, 2000):
        r.lpush(keys.queue("default"), *(wire.dumps(job) for job in jobs[start : start + 2000]))
    holders = [job for job in jobs if job["unique"]]
    plant(r, holders)
    before = command_calls(r)

    assert api.Queue(client, "default").clear() == count

    calls = commands_since(r, before)
    takes = math.ceil(count / api_queues.CLEAR_BATCH)
    releases_per_take = math.ceil(api_queues.CLEAR_BATCH / locks.RELEASE_BATCH)
    scripts = calls.get("evalsha", 0) + calls.get("eval", 0)
    assert takes < scripts <= takes * (1 + releases_per_take)
    assert r.keys(keys.UNIQUE_PREFIX + "*") == []


def test_queue_clear_survives_unreadable_entries(r: redis.Redis, client: redis.Redis) -> None:
    job = unique(1)
    r.lpush(keys.queue("default"), b"\xff until_executed", b"[" * 5000, wire.dumps(job))
    plant(r, [job])

    assert api.Queue(client, "default").clear() == 3

    assert r.exists(keys.queue("default"), lock_key(job)) == 0


def test_queue_delete_releases_only_what_it_removed(r: redis.Redis, client: redis.Redis) -> None:
    job = unique(1)
    raw = wire.dumps(job)
    r.lpush(keys.queue("default"), raw)
    plant(r, [job])
    queue = api.Queue(client, "default")

    r.lpop(keys.queue("default"))  # a worker took it meanwhile: it still needs its lock
    assert queue.delete(raw) == 0
    assert r.get(lock_key(job)) == job["jid"]

    r.lpush(keys.queue("default"), raw)
    assert queue.delete(raw) == 1
    assert r.exists(lock_key(job)) == 0


# -- sets ------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["scheduled_set", "retry_set", "dead_set"])
def test_set_delete_releases_own_lock_not_a_newer_one(
    r: redis.Redis, client: redis.Redis, which: str
) -> None:
    job_set = getattr(api, which)(client)
    own, superseded = unique(1), unique(2)
    r.zadd(job_set.key, {wire.dumps(own): 1.0, wire.dumps(superseded): 2.0})
    plant(r, [own])
    plant(r, [superseded], owner="newer-duplicate")

    assert job_set.delete(wire.dumps(own)) is True
    assert job_set.delete(wire.dumps(superseded)) is True

    assert r.exists(lock_key(own)) == 0
    assert r.get(lock_key(superseded)) == "newer-duplicate"
    assert job_set.size() == 0


def test_set_delete_of_an_entry_already_gone_keeps_the_lock(
    r: redis.Redis, client: redis.Redis
) -> None:
    """The scheduler moved it to its queue first: the job lives on and still owns its lock."""
    job = unique(1)
    plant(r, [job])

    assert api.scheduled_set(client).delete(wire.dumps(job)) is False

    assert r.get(lock_key(job)) == job["jid"]


def test_set_clear_releases_every_lock_and_history_in_batches(
    r: redis.Redis, client: redis.Redis
) -> None:
    count = 3000
    jobs = [unique(n) for n in range(count)]
    r.zadd(keys.RETRY, {wire.dumps(job): float(n) for n, job in enumerate(jobs)})
    r.zadd(keys.RETRY, {b"\xff broken": 0.5})
    plant(r, jobs)
    r.rpush(keys.job_attempts(jobs[7]["jid"]), "{}")
    r.rpush(keys.job_attempts("elsewhere"), "{}")
    before = command_calls(r)

    assert api.retry_set(client).clear() == count + 1

    calls = commands_since(r, before)
    batches = math.ceil((count + 1) / api_sets.CLEAR_BATCH)
    assert calls["zpopmin"] == batches
    scripts = calls.get("evalsha", 0) + calls.get("eval", 0)
    assert scripts <= batches * math.ceil(api_sets.CLEAR_BATCH / locks.RELEASE_BATCH)
    assert r.exists(keys.RETRY, keys.job_attempts(jobs[7]["jid"])) == 0
    assert r.keys(keys.UNIQUE_PREFIX + "*") == []
    assert r.llen(keys.job_attempts("elsewhere")) == 1


def test_a_key_of_another_type_is_skipped_not_fatal(r: redis.Redis, client: redis.Redis) -> None:
    jobs = [unique(n) for n in range(3)]
    plant(r, [jobs[0], jobs[2]])
    r.rpush(lock_key(jobs[1]), "not a lock")

    assert locks.release_owned(client, locks.owned_locks(*jobs)) == 2

    assert r.llen(lock_key(jobs[1])) == 1
    assert r.exists(lock_key(jobs[0]), lock_key(jobs[2])) == 0


# -- listing and releasing locks -------------------------------------------------------------


def test_unique_locks_lists_owner_and_ttl(r: redis.Redis, client: redis.Redis) -> None:
    jobs = [unique(n) for n in range(1500)]
    plant(r, jobs)
    r.set(keys.unique("forever"), "j-forever")
    r.hset(keys.unique("broken"), "x", "y")
    r.set("cogworker:uniqueness", "not a lock key")

    found = {lock.digest: lock for lock in api.unique_locks(client)}

    assert len(found) == 1502
    assert found[locks.unique_digest(jobs[0])].owner == jobs[0]["jid"]
    assert 3500 < (found[locks.unique_digest(jobs[0])].ttl or 0) <= 3600
    assert (found["forever"].owner, found["forever"].ttl) == ("j-forever", None)
    assert found["broken"].owner is None and found["broken"].problem


def test_release_by_digest_is_owner_checked(r: redis.Redis, client: redis.Redis) -> None:
    job = unique(1)
    plant(r, [job])
    digest = locks.unique_digest(job)

    assert api.release_lock(client, digest, owner="someone-else") is api.Release.HELD_BY_OTHER
    assert r.get(lock_key(job)) == job["jid"]
    assert api.release_lock(client, keys.unique(digest)) is api.Release.RELEASED
    assert r.exists(lock_key(job)) == 0
    assert api.release_lock(client, digest) is api.Release.NOT_HELD


def test_release_by_owner_releases_only_that_jobs_locks(
    r: redis.Redis, client: redis.Redis
) -> None:
    jobs = [unique(n) for n in range(3)]
    plant(r, jobs[:2], owner="stuck-jid")
    plant(r, jobs[2:])

    released = api.release_owned_by(client, "stuck-jid")

    assert sorted(lock.digest for lock in released) == sorted(
        locks.unique_digest(job) for job in jobs[:2]
    )
    assert r.keys(keys.UNIQUE_PREFIX + "*") == [lock_key(jobs[2])]


def test_killing_a_retry_releases_its_lock_once_it_moved(
    r: redis.Redis, client: redis.Redis
) -> None:
    """A killed job ends for good, like one out of retries: an identical job can be pushed."""
    job = unique(1, retry_count=1, error_class="E", error_message="m")
    raw = wire.dumps(job)
    r.zadd(keys.RETRY, {raw: 1.0})
    plant(r, [job])
    retry = api.retry_set(client)

    assert retry.kill(raw) is True
    assert r.exists(lock_key(job)) == 0 and r.zcard(keys.DEAD) == 1

    plant(r, [job])  # gone from retry now: a second kill moves nothing and keeps the lock
    assert retry.kill(raw) is False
    assert r.get(lock_key(job)) == job["jid"]
