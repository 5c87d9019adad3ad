"""Hardening of reliable fetch and orphan recovery not covered by
test_runtime_recovery.py: repeat orphans, unusable parking keys, broken queue keys, write
ordering, the first orphan check, strays, unsettled failures at shutdown, and the reconcile
paths that must not file one job twice.

Faults are provoked with Redis itself: keys of the wrong type, an ACL user whose commands are
revoked at run time, CLIENT PAUSE WRITE (to hold two racing scripts until both are sent, or to
make a write time out while reads still answer) on a private server.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    AclServer,
    Gate,
    PoisonMiddleware,
    all_settled,
    counter,
    fresh_runtime,
    plant_orphan,
    private_config,
    queue_jobs,
    release,
    running,
    stopped_at_teardown,
    zset_entries,
)

import cogworker
from cogworker import graduation, keys, locks, wire
from cogworker.fetch import Filing, Work
from cogworker.fetch.reliable import ReliableFetch
from cogworker.local.server import RedisServer
from cogworker.locks import unique_digest
from cogworker.worker import recovery, scheduler
from cogworker.worker.identity import new_identity
from cogworker.worker.ledger import ACK
from cogworker.worker.manager import Manager
from cogworker.worker.scheduler import Scheduler

ServerFactory = Callable[..., RedisServer]

RUNS: list[str] = []
GATE = Gate()
CLASS_HOOK: list[tuple[dict[str, Any], BaseException]] = []
TWIN_LOCK = threading.Lock()


class RecJob(cogworker.Job):
    name = "HardRec::Job"

    def perform(self, token: str) -> None:
        RUNS.append(token)

    @classmethod
    def retries_exhausted(cls, job: dict[str, Any], error: BaseException) -> None:
        CLASS_HOOK.append((job, error))


class HeldJob(cogworker.Job):
    name = "HardRec::Held"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        GATE.pass_through()


class TwinJob(cogworker.Job):
    """The first copy to start waits at GATE; any later copy returns at once."""

    name = "HardRec::Twin"

    def perform(self, token: str) -> None:
        with TWIN_LOCK:
            RUNS.append(token)
            first = len(RUNS) == 1
        if first:
            GATE.pass_through()


class NoRetryJob(cogworker.Job, retry=False):
    name = "HardRec::NoRetry"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        raise KeyError(f"gone {token}")


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS, CLASS_HOOK, gate=GATE)


@pytest.fixture
def manager(config: cogworker.Config) -> Iterator[Manager]:
    config.concurrency = 1
    config.shutdown_timeout = 2.0
    yield from stopped_at_teardown(Manager(config, new_identity()))


@pytest.fixture
def handled(config: cogworker.Config) -> list[tuple[dict[str, Any], BaseException]]:
    """What ``config.death_handlers`` received."""
    seen: list[tuple[dict[str, Any], BaseException]] = []
    config.death_handlers = [lambda job, error: seen.append((job, error))]
    return seen


def payload(token: str, job_class: str = RecJob.name, **extra: Any) -> str:
    return wire.dumps(wire.normalize({"class": job_class, "args": [token], **extra}))


def jid(raw: str) -> str:
    return str(json.loads(raw)["jid"])


def inprogress(manager: Manager) -> str:
    return keys.inprogress(manager.identity)


def die_holding(cfg: cogworker.Config, r: redis.Redis) -> str:
    """A process takes the next job off the queue with reliable fetch, then dies (no presence,
    last beat long ago). Returns its identity."""
    identity = new_identity()
    fetch = ReliableFetch(cfg, identity, threading.Event())
    try:
        assert len(fetch.retrieve(1)) == 1
    finally:
        fetch.close()
    plant_orphan(r, identity, [])
    return identity


# -- a job that kills its process every time --------------------------------------------


def test_job_orphaned_more_than_three_times_is_buried_as_process_died(
    config: cogworker.Config,
    r: redis.Redis,
    manager: Manager,
    handled: list[tuple[dict[str, Any], BaseException]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = payload("oom", unique="until_executed")
    lock = keys.unique(unique_digest(json.loads(raw)))
    r.set(lock, jid(raw), ex=600)
    r.lpush(keys.queue("default"), raw)
    for orphaning in range(1, 4):
        die_holding(config, r)
        assert manager.orphans.recover(scan=False).moved == 1
        assert r.lrange(keys.queue("default"), 0, -1) == [raw]
        assert r.get(keys.orphanings(jid(raw))) == str(orphaning)
        assert r.zcard(keys.DEAD) == 0
    die_holding(config, r)
    manager.orphans.recover(scan=False)
    assert r.llen(keys.queue("default")) == 0
    assert r.llen(keys.REPEAT_ORPHANS) == 0
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["jid"] == jid(raw)
    assert entry["args"] == ["oom"]
    assert entry["error_class"] == "Cogworker::ProcessDied"
    assert "died while running it more than 3 times" in entry["error_message"]
    assert r.exists(keys.orphanings(jid(raw))) == 0
    assert counter(r, keys.STATS_FAILED) == 1
    assert r.exists(lock) == 0
    assert [type(error) for _, error in handled] == [recovery.JobOrphanedError]
    assert [type(error) for _, error in CLASS_HOOK] == [recovery.JobOrphanedError]
    assert f"jid={jid(raw)} orphaned too often, moved to dead" in caplog.text
    manager.orphans.recover(scan=False)  # nothing further happens
    assert r.zcard(keys.DEAD) == 1 and len(handled) == 1


def test_a_burial_counts_the_failure_in_an_expiring_throughput_bucket(
    r: redis.Redis, manager: Manager
) -> None:
    """Throughput buckets expire (90 000 s), EXPIRE on every increment,
    burials included."""
    r.rpush(keys.REPEAT_ORPHANS, payload("counted"))
    assert manager.orphans.bury_repeat_orphans() == 1
    [bucket] = r.keys(keys.THROUGHPUT_PREFIX + "*")
    assert r.hget(bucket, "failed") == "1"
    assert counter(r, keys.STATS_FAILED) == 1
    assert 0 < r.ttl(bucket) <= 90_000


def test_shutdown_requeues_never_count_as_orphanings(
    config: cogworker.Config, r: redis.Redis
) -> None:
    RecJob.perform_async("redeployed")
    for _ in range(5):
        stopping = Manager(config, new_identity())
        assert len(stopping.strategy.current().retrieve(1)) == 1
        stopping.stop(0)  # the job never started: requeued by the shutdown
        assert r.llen(keys.inprogress(stopping.identity)) == 0
    [job] = queue_jobs(r, "default")
    assert r.exists(keys.orphanings(job["jid"])) == 0
    assert r.zcard(keys.DEAD) == 0
    assert r.llen(keys.REPEAT_ORPHANS) == 0


# -- the parking list or the counter unusable -------------------------------------------


@pytest.mark.parametrize("broken", ["not-a-number", "wrong-type"])
def test_unusable_orphan_counter_is_reset_not_disabled(
    config: cogworker.Config, r: redis.Redis, manager: Manager, broken: str
) -> None:
    raw = payload("counted")
    if broken == "wrong-type":
        r.rpush(keys.orphanings(jid(raw)), "x")
    else:
        r.set(keys.orphanings(jid(raw)), "lots")
    plant_orphan(r, new_identity(), [raw])
    assert manager.orphans.recover(scan=False).moved == 1
    assert r.get(keys.orphanings(jid(raw))) == "1"
    for _ in range(3):  # the limit still applies: the 4th orphaning buries it
        die_holding(config, r)
        manager.orphans.recover(scan=False)
    assert r.llen(keys.queue("default")) == 0
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["error_class"] == "Cogworker::ProcessDied"


def test_parking_list_of_the_wrong_type_buries_raw_then_swaps(
    r: redis.Redis,
    manager: Manager,
    handled: list[tuple[dict[str, Any], BaseException]],
) -> None:
    r.set(keys.REPEAT_ORPHANS, "not a list")
    raw = payload("unparkable")
    r.set(keys.orphanings(jid(raw)), "3")
    plant_orphan(r, new_identity(), [raw])
    manager.orphans.recover(scan=False)
    [(entry, _)] = zset_entries(r, keys.DEAD)  # the proper entry only, the raw one is gone
    assert entry["jid"] == jid(raw)
    assert entry["error_class"] == "Cogworker::ProcessDied"
    assert r.llen(keys.queue("default")) == 0
    assert r.exists(keys.orphanings(jid(raw))) == 0
    assert counter(r, keys.STATS_FAILED) == 1
    assert [type(error) for _, error in handled] == [recovery.JobOrphanedError]
    assert r.get(keys.REPEAT_ORPHANS) == "not a list"


def test_failed_swap_of_a_raw_burial_is_retried_next_pass(acl: AclServer) -> None:
    admin = acl.admin
    cfg = private_config(acl.worker_url)
    seen: list[BaseException] = []
    cfg.death_handlers = [lambda job, error: seen.append(error)]
    checker = Manager(cfg, new_identity())
    try:
        admin.set(keys.REPEAT_ORPHANS, "not a list")
        raw = payload("swap-later")
        admin.set(keys.orphanings(jid(raw)), "3")
        dead = new_identity()
        plant_orphan(admin, dead, [raw])
        # the requeue script buries the raw payload (ZADD allowed), then the swap is refused
        assert checker.orphans.requeue(dead, if_dead_for=300) == 1
        assert admin.zrange(keys.DEAD, 0, -1) == [raw]
        acl.deny("zadd")
        checker.orphans.recover(scan=False)
        assert admin.zrange(keys.DEAD, 0, -1) == [raw]  # still the raw entry, nothing lost
        assert seen == []
        acl.allow("zadd")
        checker.orphans.recover(scan=False)
        [(entry, _)] = zset_entries(admin, keys.DEAD)
        assert entry["jid"] == jid(raw)
        assert entry["error_class"] == "Cogworker::ProcessDied"
        assert [type(error) for error in seen] == [recovery.JobOrphanedError]
        checker.orphans.recover(scan=False)
        assert admin.zcard(keys.DEAD) == 1 and len(seen) == 1
    finally:
        release(cfg)


# -- a job whose queue key is broken -------------------------------------------------------


def test_job_whose_queue_is_broken_stays_listed_and_the_rest_is_requeued(
    r: redis.Redis, manager: Manager, caplog: pytest.LogCaptureFixture
) -> None:
    r.set(keys.queue("broken"), "not a list")
    stuck, good = payload("stuck", queue="broken"), payload("good")
    dead = new_identity()
    plant_orphan(r, dead, [stuck, good])
    assert manager.orphans.recover(scan=False).moved == 1
    assert r.lrange(keys.queue("default"), 0, -1) == [good]
    assert r.lrange(keys.inprogress(dead), 0, -1) == [stuck]
    assert r.sismember(keys.INPROGRESS_IDENTITIES, dead) == 1
    assert r.hexists(keys.LAST_BEAT, dead)
    assert r.exists(keys.orphanings(jid(stuck))) == 0  # not counted: it wasn't put back
    assert f"1 job(s) left in progress by {dead} couldn't be put back" in caplog.text
    r.delete(keys.queue("broken"))
    assert manager.orphans.recover(scan=False).moved == 1  # retried next check
    assert r.lrange(keys.queue("broken"), 0, -1) == [stuck]
    assert r.exists(keys.inprogress(dead)) == 0


# -- every move writes the destination first ---------------------------------------------

RAW = payload("moved", queue="broken")
WORK = Work.taken("broken", RAW)
RECORD = json.dumps({"set": keys.DEAD, "score": 1, "payload": RAW})
Move = tuple[str, str, Callable[[], object]]  # source key, member that must stay, the move


def _give_back(r: redis.Redis, m: Manager) -> Move:
    r.set(keys.queue("broken"), "x")
    r.lpush(inprogress(m), RAW)
    return inprogress(m), RAW, lambda: m.strategy.current().give_back(WORK)


def _interrupt(r: redis.Redis, m: Manager) -> Move:
    r.set(keys.RETRY, "x")
    r.lpush(inprogress(m), RAW)
    filing = Filing(keys.RETRY, 1.0, RAW)
    return inprogress(m), RAW, lambda: m.strategy.current().file_instead(WORK, filing)


def _park(r: redis.Redis, m: Manager) -> Move:
    r.set(keys.UNSETTLED, "x")
    r.lpush(inprogress(m), RAW)
    m.ledger.settle_later(WORK, Filing(keys.DEAD, 1.0, RAW))
    return inprogress(m), RAW, lambda: m.reconciler.park_unsettled()


def _file(r: redis.Redis, m: Manager) -> Move:
    r.set(keys.DEAD, "x")
    r.rpush(keys.UNSETTLED, RECORD)
    return keys.UNSETTLED, RECORD, lambda: m.orphans.file_unsettled()


def _bury(r: redis.Redis, m: Manager) -> Move:
    r.set(keys.DEAD, "x")
    r.rpush(keys.REPEAT_ORPHANS, RAW)
    return keys.REPEAT_ORPHANS, RAW, lambda: m.orphans.bury_repeat_orphans()


def _graduate(r: redis.Redis, m: Manager) -> Move:
    r.set(keys.queue("broken"), "x")
    r.zadd(keys.RETRY, {RAW: 1})
    script_keys = [keys.RETRY, keys.QUEUES, keys.queue("broken")]
    return keys.RETRY, RAW, lambda: graduation.GRADUATE(m.client, script_keys, [RAW, "b", RAW])


def _bury_entry(r: redis.Redis, m: Manager) -> Move:
    r.set(keys.DEAD, "x")
    r.zadd(keys.RETRY, {"{not json": 1})
    script_keys = [keys.RETRY, keys.DEAD]
    return (
        keys.RETRY,
        "{not json",
        lambda: scheduler.BURY_ENTRY(m.client, script_keys, ["{not json", 1, "{}"]),
    )


def _members(r: redis.Redis, key: str) -> list[str]:
    if r.type(key) == "zset":
        return list(r.zrange(key, 0, -1))
    return list(r.lrange(key, 0, -1))


@pytest.mark.parametrize(
    "setup",
    [_give_back, _interrupt, _park, _file, _bury, _graduate, _bury_entry],
    ids=["requeue", "interrupt", "park", "file", "bury", "claim-and-requeue", "bury-entry"],
)
def test_a_move_whose_destination_fails_keeps_the_source(
    r: redis.Redis, manager: Manager, setup: Callable[[redis.Redis, Manager], Move]
) -> None:
    source, member, move = setup(r, manager)
    try:
        move()
    except redis.ResponseError as error:  # the script stopped at the destination write
        assert "WRONGTYPE" in str(error)
    assert _members(r, source) == [member]


# -- what counts as a completed first orphan check ----------------------------------------


def test_one_unprocessable_identity_does_not_stop_the_others(
    r: redis.Redis, manager: Manager, caplog: pytest.LogCaptureFixture
) -> None:
    r.sadd(keys.INPROGRESS_IDENTITIES, "ghost")
    r.set(keys.inprogress("ghost"), "not a list")
    raw = payload("rescued")
    plant_orphan(r, new_identity(), [raw])
    checks = Scheduler(manager)
    before = time.monotonic()
    checks.orphan_check()
    after = time.monotonic()
    assert r.lrange(keys.queue("default"), 0, -1) == [raw]
    assert checks.recovered_once.is_set()
    assert "Orphan recovery: skipped ghost" in caplog.text
    # the usual cadence, counted from the moment the check began
    interval = manager.config.orphan_check_interval
    assert before + interval <= checks._next_orphan_check <= after + interval


def test_connection_lost_mid_pass_is_not_a_first_recovery(
    redis_server_factory: ServerFactory,
) -> None:
    server = redis_server_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    # the next check comes after 5 s, or two heartbeat intervals if that is longer
    cfg = private_config(server.url, redis_socket_timeout=0.3, heartbeat_interval=1.0)
    checker = Manager(cfg, new_identity())
    checks = Scheduler(checker)
    raw = payload("after-the-stall")
    try:
        plant_orphan(admin, new_identity(), [raw])
        # reads answer, writes (the requeue script) stall past the socket timeout
        admin.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
        try:
            before = time.monotonic()
            checks.orphan_check()
            after = time.monotonic()
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")
        assert not checks.recovered_once.is_set()
        # rescheduled from the failure (between the check's start and its end), sooner than
        # the usual interval
        retry_in = max(scheduler.RETRY_AFTER_LOST_CONNECTION, 2 * cfg.heartbeat_interval)
        assert retry_in < cfg.orphan_check_interval
        assert before + retry_in <= checks._next_orphan_check <= after + retry_in
        before = time.monotonic()
        checks.orphan_check()
        after = time.monotonic()
        assert checks.recovered_once.is_set()
        wait_for(lambda: admin.llen(keys.queue("default")) == 1)
        assert admin.lrange(keys.queue("default"), 0, -1) == [raw]
        interval = cfg.orphan_check_interval
        assert before + interval <= checks._next_orphan_check <= after + interval
    finally:
        release(cfg)
        admin.close()


def test_no_readable_candidate_source_is_not_a_first_recovery(acl: AclServer) -> None:
    admin = acl.admin
    cfg = private_config(acl.worker_url)
    checker = Manager(cfg, new_identity())
    checks = Scheduler(checker)
    try:
        admin.set(keys.INPROGRESS_IDENTITIES, "not a set")
        acl.deny("scan")
        checks.orphan_check()
        assert not checks.recovered_once.is_set()
        acl.allow("scan")
        raw = payload("found-by-scan")
        dead = new_identity()
        admin.lpush(keys.inprogress(dead), raw)
        checks.orphan_check()
        assert checks.recovered_once.is_set()
        assert admin.lrange(keys.queue("default"), 0, -1) == [raw]
    finally:
        release(cfg)


def test_basic_process_with_an_unreadable_registry_is_not_a_first_recovery(
    config: cogworker.Config, r: redis.Redis
) -> None:
    config.fetch = "basic"
    checks = Scheduler(Manager(config, new_identity()))
    r.set(keys.INPROGRESS_IDENTITIES, "not a set")
    checks.orphan_check()
    assert not checks.recovered_once.is_set()
    r.delete(keys.INPROGRESS_IDENTITIES)
    checks.orphan_check()
    assert checks.recovered_once.is_set()


# -- strays in the own list ------------------------------------------------------------


def test_stray_is_requeued_only_on_the_second_pass(
    r: redis.Redis, manager: Manager, caplog: pytest.LogCaptureFixture
) -> None:
    manager.strategy.current()
    raw = payload("stray")
    r.lpush(inprogress(manager), raw)
    checks = Scheduler(manager)
    checks.orphan_check()
    assert r.lrange(inprogress(manager), 0, -1) == [raw]
    assert r.llen(keys.queue("default")) == 0
    checks.orphan_check()
    assert r.llen(inprogress(manager)) == 0
    assert r.lrange(keys.queue("default"), 0, -1) == [raw]
    assert f"requeued stray in-progress job jid={jid(raw)}" in caplog.text


def test_running_job_is_never_a_stray(r: redis.Redis, manager: Manager) -> None:
    with running(manager):
        HeldJob.perform_async("long")
        wait_for(GATE.entered.is_set)
        [raw] = r.lrange(inprogress(manager), 0, -1)
        r.delete(keys.workers(manager.identity))  # a lost workers hash changes nothing
        checks = Scheduler(manager)
        for _ in range(3):
            checks.orphan_check()
            assert r.lrange(inprogress(manager), 0, -1) == [raw]
            assert r.llen(keys.queue("default")) == 0
        GATE.open()
        wait_for(lambda: all_settled(r, manager))
    assert RUNS == ["long"]
    assert r.llen(keys.queue("default")) == 0


def test_pending_ack_is_settled_instead_of_requeued(r: redis.Redis, manager: Manager) -> None:
    manager.strategy.current()
    raw = payload("finished-unacked")
    r.lpush(inprogress(manager), raw)
    r.set(keys.orphanings(jid(raw)), "1")
    manager.ledger.settle_later(Work.taken("", raw), ACK)
    Scheduler(manager).orphan_check()
    assert manager.ledger.pending() == {}
    assert r.llen(inprogress(manager)) == 0
    assert r.llen(keys.queue("default")) == 0
    assert r.exists(keys.orphanings(jid(raw))) == 0


def test_same_payload_running_twice_stays_listed_until_both_finish(
    config: cogworker.Config, r: redis.Redis
) -> None:
    config.concurrency = 2
    manager = Manager(config, new_identity())
    raw = payload("twin", job_class=TwinJob.name)
    r.lpush(keys.queue("default"), raw, raw)
    with running(manager):
        wait_for(GATE.entered.is_set)
        # the second copy finished and was acknowledged: one copy left, still running
        wait_for(lambda: len(RUNS) == 2 and counter(r, keys.STATS_PROCESSED) == 1)
        manager.bookkeeper.flush()
        assert r.lrange(inprogress(manager), 0, -1) == [raw]
        checks = Scheduler(manager)
        for _ in range(3):
            checks.orphan_check()
            assert r.lrange(inprogress(manager), 0, -1) == [raw]
            assert r.llen(keys.queue("default")) == 0
        GATE.open()
        wait_for(lambda: all_settled(r, manager) and counter(r, keys.STATS_PROCESSED) == 2)
    assert RUNS == ["twin", "twin"]
    assert r.llen(keys.queue("default")) == 0


# -- unsettled failures at shutdown --------------------------------------------------


def test_unsettled_failure_is_filed_once_by_another_process_with_its_bookkeeping(
    config: cogworker.Config,
    r: redis.Redis,
    manager: Manager,
    handled: list[tuple[dict[str, Any], BaseException]],
) -> None:
    r.set(keys.DEAD, "not a sorted set")
    job_id = NoRetryJob.perform_async("unfiled")
    with running(manager):
        wait_for(lambda: len(manager.ledger.pending()) == 1)
        r.set(keys.orphanings(str(job_id)), "2")
        manager.stop(1.0)
    assert r.llen(inprogress(manager)) == 0
    assert r.llen(keys.queue("default")) == 0
    assert r.llen(keys.UNSETTLED) == 1
    assert handled == []
    r.delete(keys.DEAD)
    other = Manager(config, new_identity())
    checks = Scheduler(other)
    checks.orphan_check()
    checks.orphan_check()
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["jid"] == job_id
    assert entry["error_class"] == "KeyError"  # the original class
    assert r.llen(keys.UNSETTLED) == 0
    assert r.exists(keys.orphanings(str(job_id))) == 0
    [(hook_entry, error)] = handled
    assert hook_entry["jid"] == job_id
    assert isinstance(error, recovery.JobFailedError)
    assert str(error) == entry["error_message"] == "'gone unfiled'"
    assert RUNS == ["unfiled"]


def test_failure_that_cannot_even_be_parked_stays_listed_at_shutdown(
    r: redis.Redis, manager: Manager, caplog: pytest.LogCaptureFixture
) -> None:
    r.set(keys.DEAD, "not a sorted set")
    r.set(keys.UNSETTLED, "not a list")
    with running(manager):
        job_id = NoRetryJob.perform_async("unparkable")
        wait_for(lambda: len(manager.ledger.pending()) == 1)
        [raw] = r.lrange(inprogress(manager), 0, -1)
        manager.stop(1.0)
    assert r.lrange(inprogress(manager), 0, -1) == [raw]  # not requeued: it ran already
    assert r.llen(keys.queue("default")) == 0
    assert f"couldn't park unsettled jid={job_id}" in caplog.text


def test_unusable_unsettled_records_are_quarantined_and_the_rest_filed(
    r: redis.Redis, manager: Manager, caplog: pytest.LogCaptureFixture
) -> None:
    job = payload("filed")
    later = wire.now() + 100
    bad = [
        "{not json",
        "[1]",
        json.dumps({"set": keys.queue("default"), "score": 1, "payload": job}),
        json.dumps({"set": keys.DEAD, "score": True, "payload": job}),
        json.dumps({"set": keys.DEAD, "score": "1", "payload": job}),
        json.dumps({"set": keys.DEAD, "score": 1, "payload": {"jid": "x"}}),
    ]
    good = [
        json.dumps({"set": keys.RETRY, "score": later, "payload": job}),
        json.dumps({"set": keys.SCHEDULE, "score": later, "payload": payload("scheduled")}),
    ]
    r.rpush(keys.UNSETTLED, bad[0], good[0], *bad[1:], good[1])
    assert manager.orphans.file_unsettled() == 2
    assert r.llen(keys.UNSETTLED) == 0
    assert r.lrange(keys.UNSETTLED_QUARANTINE, 0, -1) == bad
    assert 30 * 86400 - 10 <= r.ttl(keys.UNSETTLED_QUARANTINE) <= 30 * 86400
    assert r.zrange(keys.RETRY, 0, -1) == [job]
    assert r.zscore(keys.RETRY, job) == pytest.approx(later)
    assert r.zcard(keys.SCHEDULE) == 1
    assert r.llen(keys.queue("default")) == 0
    assert caplog.text.count("unusable unsettled record quarantined") == len(bad)


# -- the orphan counter is cleared when the job is settled ---------------------------------------


def test_orphan_counter_is_cleared_when_an_interrupt_files_the_job(
    r: redis.Redis, manager: Manager
) -> None:
    manager.config.server_middleware.add(PoisonMiddleware)
    raw = payload("recovered-then-failed", job_class=NoRetryJob.name, retry=False)
    plant_orphan(r, new_identity(), [raw])
    assert manager.orphans.recover(scan=False).moved == 1
    assert r.get(keys.orphanings(jid(raw))) == "1"
    with running(manager):
        wait_for(lambda: r.zcard(keys.DEAD) == 1 and all_settled(r, manager))
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["interrupted_count"] == 1
    assert r.exists(keys.orphanings(jid(raw))) == 0


# -- two dead entries for one job, hooks more than once ---------------------------------


def held_clients(admin: redis.Redis) -> int:
    """Clients of this (private) server held by CLIENT PAUSE in the middle of a command."""
    return sum(1 for client in admin.client_list() if "b" in str(client.get("flags")))


def race_under_pause(admin: redis.Redis, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` on threads while writes are paused and let them go once each one is held
    at its first write (so each read what it needed before any wrote); their results."""
    results: list[Any] = [None] * len(calls)

    def call(index: int) -> None:
        results[index] = calls[index]()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
    admin.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: held_clients(admin) == len(calls))
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
    for thread in threads:
        thread.join(10)
    return results


@pytest.fixture
def private(
    redis_server_factory: ServerFactory,
) -> Iterator[tuple[redis.Redis, cogworker.Config]]:
    server = redis_server_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    cfg = private_config(server.url)
    try:
        yield admin, cfg
    finally:
        release(cfg)
        admin.close()


def test_two_processes_burying_the_same_repeat_orphan_file_it_once(
    private: tuple[redis.Redis, cogworker.Config],
) -> None:
    admin, cfg = private
    seen: list[BaseException] = []
    cfg.death_handlers = [lambda job, error: seen.append(error)]
    raw = payload("buried-once")
    admin.rpush(keys.REPEAT_ORPHANS, raw)
    first, second = Manager(cfg, new_identity()), Manager(cfg, new_identity())
    results = race_under_pause(
        admin,
        [lambda: first.orphans.bury_repeat_orphans(), lambda: second.orphans.bury_repeat_orphans()],
    )
    assert sorted(results) == [0, 1]
    [(entry, _)] = zset_entries(admin, keys.DEAD)
    assert entry["jid"] == jid(raw)
    assert admin.llen(keys.REPEAT_ORPHANS) == 0
    assert counter(admin, keys.STATS_FAILED) == 1
    assert [type(error) for error in seen] == [recovery.JobOrphanedError]
    assert str(seen[0]) == "orphaned more than 3 times"
    assert [type(error) for _, error in CLASS_HOOK] == [recovery.JobOrphanedError]


def test_two_processes_filing_the_same_unsettled_record_file_it_once(
    private: tuple[redis.Redis, cogworker.Config],
) -> None:
    admin, cfg = private
    seen: list[tuple[dict[str, Any], BaseException]] = []
    cfg.death_handlers = [lambda job, error: seen.append((job, error))]
    job = json.loads(payload("filed-once"))
    job.update(error_class="ZeroDivisionError", error_message="division by zero", retry_count=1)
    record = json.dumps({"set": keys.DEAD, "score": wire.now(), "payload": wire.dumps(job)})
    admin.rpush(keys.UNSETTLED, record)
    first, second = Manager(cfg, new_identity()), Manager(cfg, new_identity())
    results = race_under_pause(
        admin, [lambda: first.orphans.file_unsettled(), lambda: second.orphans.file_unsettled()]
    )
    assert sorted(results) == [0, 1]
    assert admin.zcard(keys.DEAD) == 1
    [(entry, error)] = seen
    assert entry["error_class"] == "ZeroDivisionError"
    assert isinstance(error, recovery.JobFailedError)
    assert str(error) == "division by zero"
    assert len(CLASS_HOOK) == 1


def test_two_processes_swapping_the_same_raw_burial_leave_one_entry(
    private: tuple[redis.Redis, cogworker.Config],
) -> None:
    admin, cfg = private
    seen: list[BaseException] = []
    cfg.death_handlers = [lambda job, error: seen.append(error)]
    raw = payload("swapped-once")
    admin.zadd(keys.DEAD, {raw: 1})
    first, second = Manager(cfg, new_identity()), Manager(cfg, new_identity())
    for process in (first, second):  # each remembers it (both requeued the same list)
        process.orphans.remember_raw_burials([raw])
    race_under_pause(
        admin, [lambda: first.orphans.swap_raw_burials(), lambda: second.orphans.swap_raw_burials()]
    )
    [(entry, _)] = zset_entries(admin, keys.DEAD)
    assert entry["jid"] == jid(raw)
    assert entry["error_class"] == "Cogworker::ProcessDied"
    assert len(seen) == 1
    first.orphans.swap_raw_burials()  # forgotten once handled
    assert admin.zcard(keys.DEAD) == 1 and len(seen) == 1


def test_swap_never_adds_an_entry_for_a_raw_burial_already_gone(
    r: redis.Redis, manager: Manager, handled: list[tuple[dict[str, Any], BaseException]]
) -> None:
    raw = payload("already-swapped")
    r.zadd(keys.DEAD, {raw: 1})
    manager.orphans.remember_raw_burials([raw, raw])  # e.g. remembered by two passes
    manager.orphans.swap_raw_burials()
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["error_class"] == "Cogworker::ProcessDied"
    assert len(handled) == 1
    r.zrem(keys.DEAD, wire.dumps(entry))  # deleted from the Web UI meanwhile
    manager.orphans.remember_raw_burials([raw])
    manager.orphans.swap_raw_burials()
    assert r.zcard(keys.DEAD) == 0
    assert len(handled) == 1


def test_reconcile_hooks_only_handlers_for_unloadable_classes_and_survive_lock_errors(
    r: redis.Redis, manager: Manager, handled: list[tuple[dict[str, Any], BaseException]]
) -> None:
    loadable = payload("loadable", unique="until_executed")
    lock = keys.unique(unique_digest(json.loads(loadable)))
    r.rpush(lock, "not a string")  # the lock release after the burial fails (deferred)
    unloadable = payload("ghost", job_class="HardRec::NotLoadedAnywhere")
    r.rpush(keys.REPEAT_ORPHANS, loadable, unloadable, "{not json")
    assert manager.orphans.bury_repeat_orphans() == 3
    assert r.zcard(keys.DEAD) == 3
    assert sorted(job["args"][0] for job, _ in handled) == ["ghost", "loadable"]
    assert [job["args"] for job, _ in CLASS_HOOK] == [["loadable"]]
    assert all(isinstance(error, recovery.JobOrphanedError) for _, error in handled)
    assert len(locks.deferred) == 1
    unreadable = [entry for entry, _ in zset_entries(r, keys.DEAD) if "raw_payload" in entry]
    assert [entry["raw_payload"] for entry in unreadable] == ["{not json"]
    assert unreadable[0]["error_class"] == "Cogworker::ProcessDied"


def test_two_processes_quarantining_the_same_unusable_record_keep_one_copy(
    private: tuple[redis.Redis, cogworker.Config],
) -> None:
    admin, cfg = private
    admin.rpush(keys.UNSETTLED, "{not json")
    first, second = Manager(cfg, new_identity()), Manager(cfg, new_identity())
    race_under_pause(
        admin,
        [lambda: first.orphans.file_unsettled(), lambda: second.orphans.file_unsettled()],
    )
    assert admin.llen(keys.UNSETTLED) == 0
    assert admin.lrange(keys.UNSETTLED_QUARANTINE, 0, -1) == ["{not json"]  # one record, once


def test_orphan_counter_is_cleared_when_a_finished_job_is_dropped_at_shutdown(
    acl: AclServer,
) -> None:
    admin = acl.admin
    cfg = private_config(acl.worker_url, concurrency=1, shutdown_timeout=2.0)
    manager = Manager(cfg, new_identity())
    try:
        with running(manager):
            cogworker.Client(cfg).enqueue(HeldJob, "finished-unacked")
            wait_for(GATE.entered.is_set)
            [raw] = admin.lrange(inprogress(manager), 0, -1)
            admin.set(keys.orphanings(jid(raw)), "2")  # it was recovered twice before
            acl.deny("lrem")
            GATE.open()
            wait_for(lambda: manager.ledger.pending() == {raw: ACK})
            manager.stop(2.0)
        assert admin.llen(inprogress(manager)) == 0
        assert admin.llen(keys.queue("default")) == 0
        assert admin.exists(keys.orphanings(jid(raw))) == 0
        assert RUNS == ["finished-unacked"]
    finally:
        release(cfg)
