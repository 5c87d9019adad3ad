"""Payloads that are not jobs never stall anything: each is filed into dead at once as an
``(unparseable)`` wrapper holding its exact bytes, and the jobs next to it run.

Every case runs a real Manager (fetcher, processors, bookkeeper, scheduler checks) against a
real Redis. Bad payloads are written as raw bytes, as a producer in any language could; they
are read back through a client that doesn't decode, so an assertion can compare bytes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import counter, fresh_runtime, redis_time, running, stopped_at_teardown

import cogworker
from cogworker import keys, redis_errors, wire
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager
from cogworker.worker.scheduler import Scheduler

RUNS: list[str] = []
DEATHS: list[dict[str, Any]] = []


class OkJob(cogworker.Job):
    name = "Poison::Ok"

    def perform(self, token: str) -> None:
        RUNS.append(token[:40])


class NoArgsJob(cogworker.Job):
    name = "Poison::NoArgs"

    def perform(self) -> None:
        RUNS.append("no-args")


def job(**fields: Any) -> bytes:
    """A payload like a producer writes it, with ``fields`` replacing (None: removing) some."""
    payload: dict[str, Any] = {
        "class": OkJob.name,
        "args": ["not-run"],
        "queue": "default",
        "jid": "bad0bad0bad0bad0bad0bad0",
        "retry": True,
    }
    for name, value in fields.items():
        if value is None:
            payload.pop(name)
        else:
            payload[name] = value
    return json.dumps(payload).encode()


DEEP = 200_000
MEGABYTES = 3_000_000

# case -> (stored bytes, error_class the processor records)
POISON: dict[str, tuple[bytes, str]] = {
    "invalid-utf8-in-a-job": (
        b'{"class":"Poison::Ok","args":["caf\xe9"],"queue":"default","jid":"bad1"}',
        "UnicodeDecodeError",
    ),
    "invalid-utf8-garbage": (b"\xff\xfe\x00 garbage \x80", "UnicodeDecodeError"),
    "nested-200000-deep": (b"[" * DEEP + b"]" * DEEP, "RecursionError"),
    "job-with-200000-deep-args": (
        b'{"class":"Poison::Ok","queue":"default","jid":"bad2","args":'
        + b"[" * DEEP
        + b"]" * DEEP
        + b"}",
        "RecursionError",
    ),
    "multi-megabyte-invalid-utf8": (
        b'{"class":"Poison::Ok","args":["' + b"x" * MEGABYTES + b'\xff"],"queue":"default"}',
        "UnicodeDecodeError",
    ),
    "not-json": (b"{not json", "json.JSONDecodeError"),
    "nan-is-not-json": (
        b'{"class":"Poison::Ok","args":[NaN],"queue":"default","jid":"bad3"}',
        "json.JSONDecodeError",
    ),
    "json-list": (b"[1, 2]", "TypeError"),
    "json-string": (b'"a string"', "TypeError"),
    "json-null": (b"null", "TypeError"),
    "args-not-a-list": (job(args="x"), "TypeError"),
    "queue-missing": (job(queue=None), "KeyError"),
    "queue-empty": (job(queue=""), "TypeError"),
    "queue-not-a-string": (job(queue=7), "TypeError"),
    "class-missing": (job(**{"class": None}), "KeyError"),
    "class-not-a-string": (job(**{"class": 12}), "TypeError"),
    "jid-missing": (job(jid=None), "KeyError"),
    "jid-not-a-string": (job(jid=1234), "TypeError"),
}
CASES = list(POISON)

# what the message names, for the shapes that are readable JSON objects
NAMED = {
    "args-not-a-list": 'args must be a list, got "x"',
    "queue-missing": "queue is missing (a job needs a non-empty string)",
    "queue-empty": 'queue must be a non-empty string, got ""',
    "queue-not-a-string": "queue must be a non-empty string, got 7",
    "class-missing": "class is missing (a job needs a string)",
    "class-not-a-string": "class must be a string, got 12",
    "jid-missing": "jid is missing (a job needs a string)",
    "jid-not-a-string": "jid must be a string, got 1234",
}


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS, DEATHS)


@pytest.fixture
def manager(config: cogworker.Config) -> Iterator[Manager]:
    config.concurrency = 3
    config.shutdown_timeout = 2.0
    config.death_handlers = [lambda entry, error: DEATHS.append(entry)]
    yield from stopped_at_teardown(Manager(config, new_identity()))


def good(token: str) -> bytes:
    return wire.dumps(wire.normalize({"class": OkJob.name, "args": [token]})).encode()


def dead_wrappers(b: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(member) for member in b.zrange(keys.DEAD, 0, -1)]


def original_bytes(wrapper: dict[str, Any]) -> bytes:
    """The stored bytes a wrapper stands for: its base64 copy when the text lost anything."""
    if "raw_payload_base64" in wrapper:
        return base64.b64decode(wrapper["raw_payload_base64"])
    return str(wrapper["raw_payload"]).encode()


def assert_filed_once(b: redis.Redis, poison: bytes, error_class: str | None = None) -> None:
    """The payload is in dead exactly once, as a wrapper holding its bytes, and nowhere
    else (no queue, schedule, retry set or in-progress list), so no restart can see it."""
    [wrapper] = dead_wrappers(b)
    assert wrapper["class"] == "(unparseable)"
    assert wrapper["retry"] is False and wrapper["retry_count"] == 0 and wrapper["args"] == []
    assert original_bytes(wrapper) == poison
    assert len(wrapper["raw_payload"]) <= 100_000
    if error_class is not None:
        assert wrapper["error_class"] == error_class
    for key in b.scan_iter(match=b"cogworker:*"):
        kind = b.type(key)
        if kind == b"list":
            assert poison not in b.lrange(key, 0, -1), key
        elif kind == b"zset" and key != keys.DEAD.encode():
            assert b.zscore(key, poison) is None, key
    assert DEATHS == []  # no death hooks for a payload that is not a job


def checks_of(manager: Manager) -> Scheduler:
    """The scheduler's checks for ``manager``, with its fetch chosen first, as in a worker
    (its first heartbeat chooses the fetch before the scheduler starts). A Manager started on
    its own leaves the choice to its fetcher thread; a check made before that thread got to
    it skips reconcile, which runs only once the fetch is known to be reliable."""
    manager.strategy.current()
    return Scheduler(manager)


def inprogress_empty(b: redis.Redis, manager: Manager) -> bool:
    manager.bookkeeper.flush()
    return b.llen(keys.inprogress(manager.identity)) == 0 and not manager.ledger.running()


# -- on a queue ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["reliable", "basic"])
@pytest.mark.parametrize("case", CASES)
def test_alone_on_a_queue_it_goes_to_dead_and_the_thread_goes_on(
    config: cogworker.Config, b: redis.Redis, r: redis.Redis, case: str, mode: str
) -> None:
    poison, error_class = POISON[case]
    config.concurrency = 1
    config.fetch = mode
    config.death_handlers = [lambda entry, error: DEATHS.append(entry)]
    b.lpush(keys.queue("default"), poison)
    manager = Manager(config, new_identity())
    with running(manager, stop_timeout=2.0):
        wait_for(lambda: b.zcard(keys.DEAD) == 1 and inprogress_empty(b, manager))
        OkJob.perform_async("after")  # the single thread is still working
        wait_for(lambda: RUNS == ["after"])
        wait_for(lambda: counter(r, keys.STATS_FAILED) == 1)
    assert_filed_once(b, poison, error_class)
    [wrapper] = dead_wrappers(b)
    assert wrapper["queue"] == "default"
    if case in NAMED:
        assert wrapper["error_message"] == NAMED[case]
    assert b.llen(keys.queue("default")) == 0
    assert counter(r, keys.STATS_PROCESSED) == 1


@pytest.mark.parametrize("case", CASES)
def test_in_one_batch_with_good_jobs_the_good_ones_run(
    manager: Manager, b: redis.Redis, r: redis.Redis, case: str
) -> None:
    poison, error_class = POISON[case]
    # pushed at the head, taken from the tail: one fetch moves all three
    b.lpush(keys.queue("default"), good("first"), poison, good("last"))
    with running(manager, stop_timeout=2.0):
        wait_for(lambda: sorted(RUNS) == ["first", "last"])
        wait_for(lambda: b.zcard(keys.DEAD) == 1 and inprogress_empty(b, manager))
        wait_for(lambda: counter(r, keys.STATS_FAILED) == 1)
    assert_filed_once(b, poison, error_class)
    assert counter(r, keys.STATS_PROCESSED) == 2
    # the next process starts clean: nothing is handed back, nothing found on its checks
    restarted = Manager(manager.config, new_identity())
    with running(restarted, stop_timeout=2.0):
        checks_of(restarted).orphan_check()
        OkJob.perform_async("after-restart")
        wait_for(lambda: "after-restart" in RUNS)
    assert_filed_once(b, poison, error_class)
    assert counter(r, keys.STATS_FAILED) == 1
    assert sorted(RUNS) == ["after-restart", "first", "last"]


def test_replies_with_invalid_bytes_decode_and_go_back_as_the_same_bytes(
    config: cogworker.Config, b: redis.Redis
) -> None:
    """The connection decodes losslessly and packs such a string back exactly (hiredis's own
    packer refuses it), so commands keep matching the stored bytes."""
    poison = POISON["invalid-utf8-garbage"][0]
    b.rpush("poison:list", poison, b"plain")
    b.zadd("poison:zset", {poison: 1.0})
    client = config.redis()
    [text, plain] = client.lrange("poison:list", 0, -1)
    assert plain == "plain" and text == poison.decode("utf-8", "surrogateescape")
    assert client.zscore("poison:zset", text) == 1.0
    pipe = client.pipeline(transaction=False)
    pipe.lpos("poison:list", text)
    pipe.lrem("poison:list", 1, text)
    assert pipe.execute() == [0, 1]
    assert b.lrange("poison:list", 0, -1) == [b"plain"]
    assert client.eval("return redis.call('ZREM', KEYS[1], ARGV[1])", 1, "poison:zset", text) == 1


def test_a_job_without_args_runs_with_none(
    config: cogworker.Config, b: redis.Redis, r: redis.Redis
) -> None:
    config.concurrency = 1
    b.lpush(keys.queue("default"), job(**{"class": NoArgsJob.name, "args": None}))
    manager = Manager(config, new_identity())
    with running(manager, stop_timeout=2.0):
        wait_for(lambda: RUNS == ["no-args"])
        wait_for(lambda: inprogress_empty(b, manager) and counter(r, keys.STATS_PROCESSED) == 1)
    assert b.zcard(keys.DEAD) == 0


def test_a_multi_megabyte_job_runs(manager: Manager, b: redis.Redis, r: redis.Redis) -> None:
    big = "y" * MEGABYTES
    jid = OkJob.perform_async(big)
    expected = [big[:40]]
    with running(manager, stop_timeout=2.0):
        wait_for(lambda: list(RUNS) == expected)
        wait_for(lambda: inprogress_empty(b, manager) and counter(r, keys.STATS_PROCESSED) == 1)
    assert b.zcard(keys.DEAD) == 0 and b.zcard(keys.RETRY) == 0
    assert jid is not None


def test_a_payload_handed_back_at_stop_goes_to_dead_not_back(
    config: cogworker.Config, b: redis.Redis
) -> None:
    """A job that never ran goes back on its queue; a payload that is not a job would only
    come back, so handing it back files it into dead."""
    poison, _ = POISON["nested-200000-deep"]
    config.concurrency = 1
    manager = Manager(config, new_identity())
    b.lpush(keys.queue("default"), poison)
    [work] = manager.strategy.current().retrieve(1)
    try:
        manager.stopping.set()
        manager.ledger.taken(work)  # what the fetcher does before handing it over
        manager.bookkeeper.start()
        manager.processors[0].process(work)  # after stop began: it must not run
        manager.bookkeeper.flush()
    finally:
        manager.bookkeeper.stop()
        manager.strategy.current().close()
    assert_filed_once(b, poison, "RecursionError")
    assert b.llen(keys.queue("default")) == 0


# -- in the schedule and retry sets ---------------------------------------------------------------


@pytest.mark.parametrize("source", [keys.SCHEDULE, keys.RETRY])
@pytest.mark.parametrize("case", CASES)
def test_in_a_sorted_set_it_goes_to_dead_and_the_entries_behind_it_graduate(
    manager: Manager, b: redis.Redis, source: str, case: str
) -> None:
    poison, _ = POISON[case]
    now = redis_time(b)
    b.zadd(source, {good("before"): now - 30, poison: now - 20, good("behind"): now - 10})
    with running(manager, stop_timeout=2.0):
        checks = checks_of(manager)
        checks.poll_once()
        assert b.zcard(source) == 0  # one poll: the bad entry holds nothing up
        wait_for(lambda: sorted(RUNS) == ["before", "behind"])
        wait_for(lambda: b.zcard(keys.DEAD) == 1 and inprogress_empty(b, manager))
        checks.poll_once()  # and the next poll has nothing left to trip on
    assert_filed_once(b, poison)
    assert not redis_errors.reporter.in_outage("Scheduled poll")


# -- in an in-progress list ---------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_left_by_a_dead_process_it_goes_to_dead_and_its_good_jobs_run(
    manager: Manager, b: redis.Redis, case: str
) -> None:
    poison, _ = POISON[case]
    dead = new_identity()
    b.rpush(keys.inprogress(dead), good("first"), poison, good("last"))
    b.sadd(keys.INPROGRESS_IDENTITIES, dead)
    b.hset(keys.LAST_BEAT, dead, str(redis_time(b) - 10_000))
    with running(manager, stop_timeout=2.0):
        checks_of(manager).orphan_check()
        assert b.exists(keys.inprogress(dead)) == 0
        wait_for(lambda: sorted(RUNS) == ["first", "last"])
        wait_for(lambda: b.zcard(keys.DEAD) == 1 and inprogress_empty(b, manager))
    assert_filed_once(b, poison)


@pytest.mark.parametrize(
    "case", ["invalid-utf8-garbage", "nested-200000-deep", "multi-megabyte-invalid-utf8"]
)
def test_a_stray_in_our_own_list_is_filed_by_reconcile_not_requeued(
    manager: Manager, b: redis.Redis, case: str
) -> None:
    poison, error_class = POISON[case]
    with running(manager, stop_timeout=2.0):
        b.lpush(keys.inprogress(manager.identity), poison)  # listed, not running here
        checks = checks_of(manager)
        checks.orphan_check()  # seen once: it may be a fetch still on its way
        assert b.lrange(keys.inprogress(manager.identity), 0, -1) == [poison]
        checks.orphan_check()
        wait_for(lambda: b.zcard(keys.DEAD) == 1 and inprogress_empty(b, manager))
    assert_filed_once(b, poison, error_class)
    assert b.llen(keys.queue("default")) == 0
