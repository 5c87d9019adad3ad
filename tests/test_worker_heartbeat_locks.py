"""Hardening around shared keys, the heartbeat's lock upkeep and the Redis connection:
registry keys of the wrong type, cron locks kept alive, unreadable in-flight entries, outage
logging, KeyGuard, switching the URL, a broken queue registry.

Real Redis throughout: keys of the wrong type, an ACL user whose commands are revoked at run
time, a server turned into a read-only replica (READONLY, an "unavailable" reply) and back.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    AclServer,
    Gate,
    HoldAt,
    all_settled,
    fresh_runtime,
    performing,
    plant_orphan,
    private_config,
    release,
    running,
)

import cogworker
from cogworker import keys, redis_errors, wire
from cogworker.fetch import Work
from cogworker.local.server import RedisServer, free_port
from cogworker.periodic.running_lock import active_ttl
from cogworker.worker import key_guard, scheduler
from cogworker.worker.heartbeat import Heartbeat
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager
from cogworker.worker.scheduler import Scheduler

ServerFactory = Callable[..., RedisServer]
THIRTY_DAYS = 30 * 86400

RUNS: list[str] = []
GATE = Gate()


class CronJob(cogworker.Job):
    """Stands for a cron run: performs until the test opens GATE."""

    name = "HardKeys::Cron"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        GATE.pass_through()
        if token.startswith("fail"):
            raise RuntimeError(f"cron run {token} failed")


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS, gate=GATE)


def beating(cfg: cogworker.Config) -> tuple[Manager, Heartbeat]:
    manager = Manager(cfg, new_identity())
    return manager, Heartbeat(cfg, manager, lambda message: None)


def close(manager: Manager, heartbeat: Heartbeat) -> None:
    heartbeat.stop()
    if not manager.stopping.is_set():
        manager.stop(2.0)


def heartbeat_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [rec.getMessage() for rec in caplog.records if rec.getMessage().startswith("Heartbeat")]


def cron_payload(token: str, pjid: str) -> str:
    return wire.dumps(
        wire.normalize(
            {
                "class": CronJob.name,
                "args": [token],
                "periodic_pjid": pjid,
                "periodic_until_executed": True,
            }
        )
    )


# -- shared registry keys of the wrong type --------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "what"),
    [
        (keys.PROCESSES, "process registry"),
        (keys.QUEUES, "queue registry"),
        (keys.LIVE_QUEUES, "live queues"),
        (keys.INPROGRESS_IDENTITIES, "in-progress registry"),
        (keys.LAST_BEAT, "last beat"),
    ],
)
def test_registry_of_the_wrong_type_does_not_fail_the_beat(
    config: cogworker.Config,
    r: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    key: str,
    what: str,
) -> None:
    r.set(key, "not the right type")
    manager, heartbeat = beating(config)
    try:
        assert heartbeat.start(abort_if=lambda: True) is True  # the first beat succeeds
        assert heartbeat.beat_failed is False
        assert r.exists(keys.process(manager.identity)) == 1
        assert f"Heartbeat: {what} not written: WRONGTYPE" in caplog.text
        # the other writes of the beat were made
        if key != keys.PROCESSES:
            assert r.sismember(keys.PROCESSES, manager.identity) == 1
        if key != keys.LAST_BEAT:
            assert r.hexists(keys.LAST_BEAT, manager.identity)
        if key != keys.QUEUES:
            assert r.sismember(keys.QUEUES, "default") == 1
        assert r.get(key) == "not the right type"
        assert not redis_errors.reporter.in_outage("Heartbeat")
    finally:
        close(manager, heartbeat)


def test_presence_hash_is_the_one_mandatory_write(
    config: cogworker.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    manager, heartbeat = beating(config)
    r.set(keys.process(manager.identity), "not a hash")
    try:
        for _ in range(3):
            assert heartbeat.beat() is False
        assert heartbeat.beat_failed is True
        # not an outage: logged in full every time
        assert len([line for line in heartbeat_lines(caplog) if "WRONGTYPE" in line]) == 3
        r.delete(keys.process(manager.identity))
        assert heartbeat.beat() is True
        assert r.hget(keys.process(manager.identity), "busy") == "0"
    finally:
        close(manager, heartbeat)


# -- cron locks kept alive from the in-memory performing set ---------------------------------------


def test_cron_lock_is_kept_alive_from_memory_and_never_brought_back_unasked(
    acl: AclServer,
) -> None:
    admin = acl.admin
    cfg = private_config(acl.worker_url, concurrency=1, shutdown_timeout=1.0)
    manager, heartbeat = beating(cfg)
    lock = keys.periodic_running("hard-pj-101")
    ttl = active_ttl(cfg)
    raw = cron_payload("fail-later", "hard-pj-101")
    jid = json.loads(raw)["jid"]
    admin.set(lock, jid, ex=600)
    admin.lpush(keys.queue("default"), raw)
    try:
        with running(manager):
            wait_for(GATE.entered.is_set)
            admin.delete(keys.workers(manager.identity))  # lost (failover): memory decides
            admin.expire(lock, 5)
            assert heartbeat.beat() is True
            assert admin.get(lock) == jid
            assert ttl - 2 <= admin.ttl(lock) <= ttl
            admin.delete(lock)  # released (say by an operator): a normal beat leaves it gone
            assert heartbeat.beat() is True
            assert admin.exists(lock) == 0
            acl.deny("hset")  # a failed beat...
            assert heartbeat.beat() is False
            acl.allow("hset")
            assert heartbeat.beat() is True  # ...then the first good one re-takes it
            assert admin.get(lock) == jid
            assert ttl - 2 <= admin.ttl(lock) <= ttl
            admin.set(lock, "newer-run", ex=50)  # a newer run's lock is never touched
            acl.deny("hset")
            assert heartbeat.beat() is False
            acl.allow("hset")
            assert heartbeat.beat() is True
            assert admin.get(lock) == "newer-run"
            assert admin.ttl(lock) <= 50
            # perform returned (the thread is held at its "fail:" log line, the job not yet
            # settled): a failed beat followed by a good one brings nothing back
            hold = HoldAt(f"fail: {CronJob.name} jid={jid}")
            logging.getLogger("cogworker").addHandler(hold)
            try:
                admin.delete(lock)
                GATE.open()
                wait_for(hold.gate.entered.is_set)
                assert raw in manager.ledger.running() and raw not in performing(manager)
                acl.deny("hset")
                assert heartbeat.beat() is False
                acl.allow("hset")
                assert heartbeat.beat() is True
                assert admin.exists(lock) == 0
            finally:
                hold.gate.open()
                logging.getLogger("cogworker").removeHandler(hold)
            wait_for(lambda: all_settled(admin, manager) and admin.zcard(keys.RETRY) == 1)
    finally:
        close(manager, heartbeat)
        release(cfg)
    assert RUNS == ["fail-later"]


def test_a_beat_after_an_outage_never_retakes_a_lock_its_run_just_released(
    config: cogworker.Config, r: redis.Redis
) -> None:
    """The first beat after failed ones re-takes the cron locks of jobs inside ``perform``. A
    run whose perform has returned must not count: if that beat lands between the running-lock
    middleware's release and the processor's bookkeeping, the lock would come back with the
    active TTL and close the entry for minutes with nothing running (seen in a chaos run)."""
    config.concurrency = 1
    manager, heartbeat = beating(config)
    lock = keys.periodic_running("hard-pj-released")
    retaken: list[int] = []

    class BeatRightAfterRelease:
        """Outermost: runs after the running-lock middleware released the lock."""

        def __call__(
            self,
            worker: object,
            job: dict[str, object],
            queue: str,
            call_next: Callable[[], None],
        ) -> None:
            call_next()
            heartbeat._keep_locks_alive(retake=True)
            retaken.append(int(r.exists(lock)))

    config.server_middleware.prepend(BeatRightAfterRelease)
    raw = cron_payload("released", "hard-pj-released")
    r.set(lock, json.loads(raw)["jid"], ex=600)
    r.lpush(keys.queue("default"), raw)
    GATE.open()
    try:
        with running(manager):
            wait_for(lambda: retaken != [] and all_settled(r, manager))
    finally:
        close(manager, heartbeat)
    assert RUNS == ["released"]
    assert retaken == [0]
    assert r.exists(lock) == 0


# -- one unreadable in-flight entry ----------------------------------------------------------------


def test_one_unreadable_in_flight_entry_does_not_stop_the_other_refreshes(
    config: cogworker.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    config.concurrency = 2
    config.shutdown_timeout = 1.0
    manager, heartbeat = beating(config)
    good, broken = cron_payload("good", "hard-pj-good"), cron_payload("broken", "hard-pj-broken")
    good_lock = keys.periodic_running("hard-pj-good")
    r.set(good_lock, json.loads(good)["jid"], ex=600)
    r.rpush(keys.periodic_running("hard-pj-broken"), "a list, not a lock")
    r.lpush(keys.queue("default"), good, broken)
    # an unparseable entry listed as performing before the real runs (the ledger lists them
    # in the order they started), so the heartbeat meets it first
    unreadable = ["{not json 0"]
    entries = [Work.taken("", raw) for raw in unreadable]
    for entry in entries:
        manager.ledger.taken(entry)
        manager.ledger.starting(entry)
    try:
        with running(manager):
            wait_for(lambda: len(RUNS) == 2)
            assert [work.raw for work in manager.ledger.performing()][:1] == unreadable
            r.expire(good_lock, 5)
            assert heartbeat.beat() is True
            assert active_ttl(config) - 2 <= r.ttl(good_lock) <= active_ttl(config)
            for entry in entries:
                assert f"couldn't refresh the cron lock of {entry.raw}:" in caplog.text
                manager.ledger.finished(entry)
                manager.ledger.performed(entry)
            assert f"couldn't refresh the cron lock of {broken[:100]}" in caplog.text
            GATE.open()
            wait_for(lambda: all_settled(r, manager))
    finally:
        close(manager, heartbeat)


# -- an outage seen by a real heartbeat is a few lines, not a flood --------------------------------


def test_heartbeat_outage_is_one_line_then_one_recovery_line(
    redis_server_factory: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_server_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    cfg = private_config(server.url)
    manager, heartbeat = beating(cfg)
    try:
        assert heartbeat.beat() is True
        # demoted to a replica of a master that is gone: every write answers READONLY
        admin.replicaof("127.0.0.1", free_port())
        for _ in range(100):
            assert heartbeat.beat() is False
        [line] = heartbeat_lines(caplog)  # one line for a hundred failed beats
        assert line.startswith("Heartbeat: Redis unavailable — ReadOnlyError")
        admin.replicaof("NO", "ONE")
        assert heartbeat.beat() is True
        lines = heartbeat_lines(caplog)
        assert len(lines) == 2
        assert lines[1].startswith("Heartbeat: Redis available again after 100 error(s) over ")
    finally:
        close(manager, heartbeat)
        release(cfg)
        admin.close()


# -- KeyGuard --------------------------------------------------------------------------------------

QUARANTINED = re.compile(r"^cogworker:quarantine:(?P<key>.+):(?P<ms>\d{13}):(?P<hex>[0-9a-f]{8})$")


def copies_of(r: redis.Redis, key: str) -> list[str]:
    """Quarantined copies of ``key`` (exactly that key), oldest first."""
    found = []
    for name in r.scan_iter(match="cogworker:quarantine:*", count=1000):
        match = QUARANTINED.match(name)
        if match and match.group("key") == key:
            found.append((int(match.group("ms")), name))
    return [name for _, name in sorted(found)]


def _fixed(key: str, wrong: Callable[[redis.Redis, str], object]) -> Callable[..., str]:
    def setup(r: redis.Redis, config: cogworker.Config) -> str:
        wrong(r, key)
        return key

    return setup


def as_string(r: redis.Redis, key: str) -> None:
    r.set(key, "wrong")


def as_list(r: redis.Redis, key: str) -> None:
    r.rpush(key, "wrong")


def _configured_queue(r: redis.Redis, config: cogworker.Config) -> str:
    config.queues = ["default", "critical"]
    as_string(r, keys.queue("critical"))
    return keys.queue("critical")


def _registered_queue(r: redis.Redis, config: cogworker.Config) -> str:
    r.sadd(keys.QUEUES, "elsewhere")
    as_string(r, keys.queue("elsewhere"))
    return keys.queue("elsewhere")


def _process(r: redis.Redis, config: cogworker.Config) -> str:
    r.sadd(keys.PROCESSES, "host:1:abc")
    as_string(r, keys.process("host:1:abc"))
    return keys.process("host:1:abc")


def _workers(r: redis.Redis, config: cogworker.Config) -> str:
    r.sadd(keys.PROCESSES, "host:2:abc")
    as_list(r, keys.workers("host:2:abc"))
    return keys.workers("host:2:abc")


def _inprogress(r: redis.Redis, config: cogworker.Config) -> str:
    r.sadd(keys.INPROGRESS_IDENTITIES, "host:3:abc")
    as_string(r, keys.inprogress("host:3:abc"))
    return keys.inprogress("host:3:abc")


def _cron_running(r: redis.Redis, config: cogworker.Config) -> str:
    r.hset(keys.PERIODIC_SCHEDULE, "pj-guard", "{}")
    as_list(r, keys.periodic_running("pj-guard"))
    return keys.periodic_running("pj-guard")


def _cron_last_slot(r: redis.Redis, config: cogworker.Config) -> str:
    r.hset(keys.PERIODIC_SCHEDULE, "pj-guard", "{}")
    r.hset(keys.periodic_last_slot("pj-guard"), "slot", "1")
    return keys.periodic_last_slot("pj-guard")


WRONG_KEYS = {
    "retry": _fixed(keys.RETRY, as_string),
    "dead": _fixed(keys.DEAD, as_list),
    "schedule": _fixed(keys.SCHEDULE, as_string),
    "live_queues": _fixed(keys.LIVE_QUEUES, as_string),
    "queues": _fixed(keys.QUEUES, as_string),
    "processes": _fixed(keys.PROCESSES, as_list),
    "paused_queues": _fixed(keys.PAUSED_QUEUES, as_string),
    "inprogress_identities": _fixed(keys.INPROGRESS_IDENTITIES, as_string),
    "periodic_disabled": _fixed(keys.PERIODIC_DISABLED, as_string),
    "last_beat": _fixed(keys.LAST_BEAT, as_string),
    "periodic_schedule": _fixed(keys.PERIODIC_SCHEDULE, as_list),
    "repeat_orphans": _fixed(keys.REPEAT_ORPHANS, as_string),
    "unsettled": _fixed(keys.UNSETTLED, as_string),
    "stats_processed": _fixed(keys.STATS_PROCESSED, as_list),
    "stats_failed": _fixed(keys.STATS_FAILED, as_list),
    "configured_queue": _configured_queue,
    "registered_queue": _registered_queue,
    "process": _process,
    "workers": _workers,
    "inprogress": _inprogress,
    "cron_running": _cron_running,
    "cron_last_slot": _cron_last_slot,
}


@pytest.mark.parametrize("case", list(WRONG_KEYS))
def test_key_guard_quarantines_a_key_of_the_wrong_type(
    config: cogworker.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    key = WRONG_KEYS[case](r, config)
    kind = r.type(key)
    dump = r.dump(key)
    r.rpush(keys.queue("default"), "{}")
    moved = key_guard.check(config.redis(), config)
    assert moved == [key]
    assert r.exists(key) == 0
    [copy] = copies_of(r, key)
    assert r.type(copy) == kind and r.dump(copy) == dump  # kept as it was
    assert THIRTY_DAYS - 10 <= r.ttl(copy) <= THIRTY_DAYS
    assert f"{key} held a {kind}, not a " in caplog.text and f"moved to {copy}" in caplog.text
    assert r.llen(keys.queue("default")) == 1  # keys of the right type are left alone
    assert key_guard.check(config.redis(), config) == []


def test_quarantine_names_are_unique_within_one_second(
    config: cogworker.Config, r: redis.Redis
) -> None:
    client = config.redis()
    for content in ("first", "second", "third"):
        r.set(keys.RETRY, content)
        assert key_guard.check(client, config) == [keys.RETRY]
    copies = copies_of(r, keys.RETRY)
    assert len(copies) == 3
    stamps = [int(QUARANTINED.match(name).group("ms")) for name in copies]  # type: ignore[union-attr]
    assert max(stamps) - min(stamps) < 1000
    assert sorted(r.get(name) for name in copies) == ["first", "second", "third"]


def test_only_the_five_newest_copies_of_that_key_are_kept(
    config: cogworker.Config, r: redis.Redis
) -> None:
    old = [
        f"cogworker:quarantine:{keys.RETRY}:{1_000_000_000_000 + n}:0000000{n}" for n in range(6)
    ]
    for name in old:
        r.set(name, "old copy", ex=THIRTY_DAYS)
    # copies of other keys, and a name under the prefix that is no copy, are not this key's
    others = [
        f"cogworker:quarantine:{keys.DEAD}:{1_000_000_000_000 + n}:0000000{n}" for n in range(7)
    ]
    others += [
        f"cogworker:quarantine:{keys.RETRY}:extra:{1_000_000_000_000 + n}:0000000{n}"
        for n in range(7)
    ]
    others.append(f"cogworker:quarantine:{keys.RETRY}:notes")
    for name in others:
        r.set(name, "not ours")
    r.set(keys.RETRY, "newest")
    assert key_guard.check(config.redis(), config) == [keys.RETRY]
    kept = copies_of(r, keys.RETRY)
    assert len(kept) == 5
    assert r.get(kept[-1]) == "newest"
    assert kept[:-1] == old[2:]  # the four newest old ones
    assert all(r.exists(name) for name in others)


def test_pruning_escapes_glob_characters_in_the_key_name(
    config: cogworker.Config, r: redis.Redis
) -> None:
    queue = "we[i]rd*?"
    key = keys.queue(queue)
    config.queues = [queue]
    for n in range(6):
        r.set(f"cogworker:quarantine:{key}:{1_000_000_000_000 + n}:0000000{n}", "old")
    lookalike = f"cogworker:quarantine:{keys.queue('weirdXY')}:1000000000000:00000000"
    r.set(lookalike, "another key's copy")
    r.set(key, "wrong")
    assert key_guard.check(config.redis(), config) == [key]
    assert len(copies_of(r, key)) == 5
    assert r.exists(lookalike) == 1


def test_a_quarantined_key_is_recreated_by_the_next_write(
    config: cogworker.Config, r: redis.Redis
) -> None:
    r.set(keys.RETRY, "wrong")
    r.set(keys.queue("default"), "wrong")
    checks = Scheduler(Manager(config, new_identity()))
    checks.poll_once()  # the key check runs first, then graduation on clean keys
    assert r.exists(keys.RETRY) == 0
    jid = cogworker.Client(config).push({"class": "Some::Job", "args": []})
    assert [json.loads(raw)["jid"] for raw in r.lrange(keys.queue("default"), 0, -1)] == [jid]
    r.zadd(keys.RETRY, {wire.dumps({"class": "Some::Job", "queue": "default", "jid": "j2"}): 1})
    assert scheduler.graduate_due(r, keys.RETRY) == 1


# -- switching the Redis URL after the client was built --------------------------------------------


def test_changing_redis_url_after_use_switches_the_database(
    config: cogworker.Config, r: redis.Redis, redis_url: str
) -> None:
    producer = cogworker.Client(config)  # built before the switch
    assert config.redis().ping() is True
    assert config.redis().client_info()["db"] == 0
    config.redis_url = redis_url.rsplit("/", 1)[0] + "/14"
    assert config.redis().client_info()["db"] == 14
    jid = producer.push({"class": "Some::Job", "args": []})
    other = redis.Redis.from_url(config.redis_url or "", decode_responses=True)
    try:
        assert [json.loads(raw)["jid"] for raw in other.lrange(keys.queue("default"), 0, -1)] == [
            jid
        ]
    finally:
        other.close()
    assert r.llen(keys.queue("default")) == 0


def test_client_registers_its_queue_in_the_new_database_after_a_switch(
    config: cogworker.Config, r: redis.Redis, redis_url: str
) -> None:
    """A client remembers which queues it registered; after ``redis_url`` changed, that memory
    is about the old database: the new one must still learn the queue (Web UI, KeyGuard)."""
    producer = cogworker.Client(config)
    producer.push({"class": "Some::Job", "args": [], "queue": "moving"})
    assert r.smembers(keys.QUEUES) == {"moving"}
    config.redis_url = redis_url.rsplit("/", 1)[0] + "/14"
    jid = producer.push({"class": "Some::Job", "args": [], "queue": "moving"})
    other = redis.Redis.from_url(config.redis_url or "", decode_responses=True)
    try:
        assert [json.loads(raw)["jid"] for raw in other.lrange(keys.queue("moving"), 0, -1)] == [
            jid
        ]
        assert other.smembers(keys.QUEUES) == {"moving"}
    finally:
        other.close()


# -- the queue registry of the wrong type ----------------------------------------------------------


def test_bulk_push_with_a_broken_queue_registry_queues_each_job_once(
    config: cogworker.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    r.set(keys.QUEUES, "not a set")
    client = cogworker.Client(config)
    with caplog.at_level(logging.WARNING, logger="cogworker.client"):
        jids = client.push_bulk(
            [{"class": "Some::Job", "args": [n], "queue": "bulk"} for n in range(3)]
        )
    assert sorted(json.loads(raw)["jid"] for raw in r.lrange(keys.queue("bulk"), 0, -1)) == sorted(
        jids  # type: ignore[arg-type]
    )
    assert "couldn't register queue(s) bulk" in caplog.text
    r.delete(keys.QUEUES)  # repaired: the same client registers the queue on its next push
    client.push({"class": "Some::Job", "args": [], "queue": "bulk"})
    assert r.smembers(keys.QUEUES) == {"bulk"}
    assert r.llen(keys.queue("bulk")) == 4


def test_graduation_and_recovery_queue_once_despite_a_broken_registry(
    config: cogworker.Config, r: redis.Redis
) -> None:
    r.set(keys.QUEUES, "not a set")
    entry = wire.dumps({"class": "Some::Job", "queue": "due", "args": [], "jid": "due-1"})
    r.zadd(keys.RETRY, {entry: 1})
    assert scheduler.graduate_due(r, keys.RETRY) == 1
    assert r.zcard(keys.RETRY) == 0
    assert [json.loads(raw)["jid"] for raw in r.lrange(keys.queue("due"), 0, -1)] == ["due-1"]
    orphan = wire.dumps({"class": "Some::Job", "queue": "due", "args": [], "jid": "orphan-1"})
    plant_orphan(r, new_identity(), [orphan])
    assert Manager(config, new_identity()).orphans.recover(scan=False).moved == 1
    assert [json.loads(raw)["jid"] for raw in r.lrange(keys.queue("due"), 0, -1)] == [
        "due-1",
        "orphan-1",
    ]
    assert r.get(keys.QUEUES) == "not a set"
