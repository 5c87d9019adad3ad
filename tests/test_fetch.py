"""Fetching: queue weights, paused queues, NOSCRIPT, Redis without LMOVE, the version check,
requeueing payloads whose queue can't be read, and constructors that stay off Redis."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis
from conftest import wait_for
from runtime_support import AclServer, fresh_runtime, private_config, queue_jobs, release, running

import cogworker
from cogworker import keys, wire
from cogworker.failure import Rejection
from cogworker.fetch import Fetch, Filing, Work
from cogworker.fetch.basic import BasicFetch
from cogworker.fetch.reliable import FETCH_BATCH, TURNOVER, ReliableFetch
from cogworker.local.server import RedisServer, free_port
from cogworker.worker.heartbeat import Heartbeat
from cogworker.worker.identity import new_identity
from cogworker.worker.launcher import Launcher
from cogworker.worker.manager import Manager
from cogworker.worker.recovery.handback import hand_back_list
from cogworker.worker.scheduler import Scheduler

RUNS: list[str] = []
SAMPLE = 400


class FetchJob(cogworker.Job):
    name = "RtFetch::Job"

    def perform(self, token: str) -> None:
        RUNS.append(token)


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS)


def make_fetch(mode: str, config: cogworker.Config, identity: str | None = None) -> Fetch:
    fetch_class = ReliableFetch if mode == "reliable" else BasicFetch
    return fetch_class(config, identity or new_identity(), threading.Event())


def calls(r: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (Redis's own count)."""
    stats = r.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


# -- weights and paused queues ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_a_queue_listed_three_times_is_taken_about_three_times_as_often(
    config: cogworker.Config, r: redis.Redis, mode: str
) -> None:
    config.queues = ["heavy,3", "light"]
    assert config.queues == ["heavy", "heavy", "heavy", "light"]
    for name in ("heavy", "light"):
        r.lpush(keys.queue(name), *[f"{name}-{i}" for i in range(SAMPLE)])
    fetch = make_fetch(mode, config)
    taken: Counter[str] = Counter()
    try:
        for _ in range(SAMPLE):
            [work] = fetch.retrieve(1)
            taken[work.queue] += 1
    finally:
        fetch.close()
    # expected 3/4 of 400 = 300 (sd ~8.7); unweighted would be ~200 (sd 10)
    assert 250 <= taken["heavy"] <= 350, taken
    assert taken["heavy"] + taken["light"] == SAMPLE


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_paused_queue_is_not_fetched(config: cogworker.Config, r: redis.Redis, mode: str) -> None:
    config.queues = ["held", "open"]
    r.sadd(keys.PAUSED_QUEUES, "held")
    r.lpush(keys.queue("held"), *[f"held-{i}" for i in range(5)])
    r.lpush(keys.queue("open"), *[f"open-{i}" for i in range(5)])
    fetch = make_fetch(mode, config)
    try:
        got = [work for _ in range(5) for work in fetch.retrieve(1)]
    finally:
        fetch.close()
    assert [work.raw for work in got] == [f"open-{i}" for i in range(5)]
    assert r.llen(keys.queue("held")) == 5


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_only_paused_queues_fetch_nothing(
    config: cogworker.Config, r: redis.Redis, mode: str
) -> None:
    config.queues = ["held"]
    r.sadd(keys.PAUSED_QUEUES, "held")
    r.lpush(keys.queue("held"), "held-0")
    fetch = make_fetch(mode, config)
    try:
        fetch.wake()  # cut the "no active queue" pause short
        assert fetch.retrieve(1) == []
    finally:
        fetch.close()
    assert r.lrange(keys.queue("held"), 0, -1) == ["held-0"]


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_pausing_takes_effect_once_the_cached_set_expires(
    config: cogworker.Config, r: redis.Redis, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The paused set is cached briefly (PAUSED_CACHE_SECONDS) to keep idle load low; once the
    cache has expired (an injected clock) no fetch takes from a paused queue."""
    import cogworker.fetch.queues as fetch_module

    clock = [1000.0]
    monkeypatch.setattr(fetch_module.time, "monotonic", lambda: clock[0])
    config.queues = ["held", "open"]
    r.lpush(keys.queue("held"), *[f"held-{i}" for i in range(30)])
    r.lpush(keys.queue("open"), *[f"open-{i}" for i in range(30)])
    fetch = make_fetch(mode, config)
    try:
        assert len(fetch.retrieve(1)) == 1  # the fetcher is running before the pause
        r.sadd(keys.PAUSED_QUEUES, "held")
        clock[0] += fetch_module.PAUSED_CACHE_SECONDS
        after_pause = [work.queue for _ in range(20) for work in fetch.retrieve(1)]
    finally:
        fetch.close()
    assert after_pause == ["open"] * 20


def test_manager_skips_a_paused_queue(config: cogworker.Config, r: redis.Redis) -> None:
    config.queues = ["held", "open"]
    config.concurrency = 1
    config.fetch_idle_max_interval = 0.05
    r.sadd(keys.PAUSED_QUEUES, "held")
    cogworker.Client(config).push({"class": FetchJob.name, "args": ["held"], "queue": "held"})
    manager = Manager(config, new_identity())
    with running(manager):
        for token in ("open-1", "open-2"):
            job = {"class": FetchJob.name, "args": [token], "queue": "open"}
            cogworker.Client(config).push(job)
        wait_for(lambda: RUNS == ["open-1", "open-2"])
    assert [job["args"] for job in queue_jobs(r, "held")] == [["held"]]


def test_stop_cuts_the_no_active_queue_pause_short(
    config: cogworker.Config, r: redis.Redis
) -> None:
    """With every queue paused the fetcher sleeps 2 s between looks; stop must not wait it out."""
    config.queues = ["held"]
    config.concurrency = 1
    r.sadd(keys.PAUSED_QUEUES, "held")
    manager = Manager(config, new_identity())
    with running(manager):
        wait_for(lambda: calls(r, "smembers") >= 1)  # it read the paused set: pausing now
        started = time.monotonic()
        manager.stop(1.0)
        assert time.monotonic() - started < 1.5


# -- NOSCRIPT, Redis without LMOVE ----------------------------------------------------------------


def test_script_flush_between_fetches_is_survived(config: cogworker.Config, r: redis.Redis) -> None:
    config.queues = ["first", "second"]  # several queues: every fetch runs the fetch script
    config.concurrency = 1
    config.fetch_idle_max_interval = 0.05
    manager = Manager(config, new_identity())
    inprogress = keys.inprogress(manager.identity)
    with running(manager):
        cogworker.Client(config).push({"class": FetchJob.name, "args": ["one"], "queue": "first"})
        wait_for(lambda: RUNS == ["one"] and r.llen(inprogress) == 0)
        evals_before = calls(r, "eval")
        r.script_flush()
        assert r.script_exists(FETCH_BATCH.sha, TURNOVER.sha) == [False, False]
        cogworker.Client(config).push({"class": FetchJob.name, "args": ["two"], "queue": "second"})
        wait_for(lambda: RUNS == ["one", "two"])
        wait_for(lambda: not manager.ledger.running() and r.llen(inprogress) == 0)  # acked too
        assert calls(r, "eval") > evals_before  # NOSCRIPT answered by re-sending the source
        assert r.script_exists(FETCH_BATCH.sha, TURNOVER.sha) == [True, True]
    assert r.llen(keys.queue("first")) == 0 and r.llen(keys.queue("second")) == 0
    assert RUNS == ["one", "two"]


def test_direct_fetch_after_script_flush(config: cogworker.Config, r: redis.Redis) -> None:
    config.queues = ["a", "b"]
    r.lpush(keys.queue("a"), "job-a")
    fetch = make_fetch("reliable", config)
    try:
        r.script_flush()
        [work] = fetch.retrieve(1)
    finally:
        fetch.close()
    assert (work.queue, work.raw) == ("a", "job-a")
    assert r.script_exists(FETCH_BATCH.sha) == [True]


@pytest.fixture
def no_lmove_server(redis_server_factory: Callable[..., RedisServer]) -> RedisServer:
    # exactly what a Redis older than 6.2 answers: "unknown command"
    return redis_server_factory(
        config_lines=['rename-command LMOVE ""', 'rename-command BLMOVE ""']
    )


def test_redis_without_lmove_falls_back_to_basic_once(
    no_lmove_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = private_config(no_lmove_server.url, concurrency=2, shutdown_timeout=2.0)
    admin = redis.Redis.from_url(no_lmove_server.url, decode_responses=True)
    client = cogworker.Client(cfg)
    manager = Manager(cfg, new_identity())
    try:
        client.enqueue(FetchJob, "before-start")
        with running(manager):
            wait_for(lambda: RUNS == ["before-start"])
            client.enqueue(FetchJob, "second")
            client.enqueue(FetchJob, "third")
            wait_for(lambda: sorted(RUNS) == ["before-start", "second", "third"])
            assert manager.strategy.mode == "basic"
        assert admin.llen(keys.queue("default")) == 0
        assert admin.keys(keys.INPROGRESS_PREFIX + "*") == []
        warnings = [rec for rec in caplog.records if "falling back to basic" in rec.getMessage()]
        assert len(warnings) == 1
        assert "isn't supported by this Redis" in warnings[0].getMessage()
        assert warnings[0].levelno == logging.WARNING
    finally:
        release(cfg)
        admin.close()


# -- the version check and constructors ------------------------------------------------------


def test_version_check_with_redis_unreachable_memoises_nothing(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    server.stop()
    cfg = private_config(server.url)
    manager = Manager(cfg, new_identity())
    try:
        with pytest.raises(redis.ConnectionError):
            manager.strategy.current()
        assert manager.strategy.mode is None
        beat = Heartbeat(cfg, manager, lambda message: None)
        assert beat.beat() is False  # the beat asks for the fetch mode first
        assert manager.strategy.mode is None
        server.start()
        assert manager.strategy.current().mode == "reliable"
        assert manager.strategy.mode == "reliable"
        manager.strategy.current().close()
    finally:
        release(cfg)


def test_version_check_refused_by_acl_assumes_support(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    acl = AclServer(redis_server_factory)
    acl.deny("info")
    cfg = private_config(acl.worker_url)
    manager = Manager(cfg, new_identity())
    try:
        assert manager.strategy.current().mode == "reliable"
        manager.strategy.current().close()
    finally:
        release(cfg)
        acl.close()


def test_constructors_do_no_redis_io(redis_server_factory: Callable[..., RedisServer]) -> None:
    server = redis_server_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    cfg = private_config(server.url)
    try:
        before = admin.info("stats")["total_connections_received"]
        Manager(cfg, new_identity())
        Launcher(cfg)  # Manager, Heartbeat and Scheduler inside
        after = admin.info("stats")["total_connections_received"]
        assert after == before
    finally:
        release(cfg)
        admin.close()


def test_manager_can_be_built_while_redis_is_unreachable() -> None:
    cfg = private_config(f"redis://127.0.0.1:{free_port()}/0")
    try:
        manager = Manager(cfg, new_identity())
        Scheduler(manager)
        Launcher(cfg)
        with pytest.raises(redis.ConnectionError):  # the port really is closed
            manager.strategy.current()
    finally:
        release(cfg)


# -- requeueing payloads whose queue can't be read --------------------------------------------

UNREADABLE = [
    "{not json",
    "[1]",
    '"a string"',
    '{"class":"X","queue":7}',
    '{"class":"X","queue":""}',
    '{"class":"X","args":[]}',
]


def test_shutdown_requeue_files_payloads_without_a_readable_queue_into_dead(
    config: cogworker.Config, r: redis.Redis
) -> None:
    """The requeue script sends a payload in which it can't read a queue to the default
    queue; as none of these is a job, each goes on from there to dead at once (whoever reads
    the default queue, if anyone)."""
    identity = new_identity()
    good = '{"class":"X","queue":"mail","jid":"0123456789abcdef01234567","args":[]}'
    r.rpush(keys.inprogress(identity), *UNREADABLE, good)
    moved = hand_back_list(config, config.redis(), identity)
    assert moved == len(UNREADABLE) + 1
    assert r.llen(keys.queue("default")) == 0
    wrappers = [json.loads(member) for member in r.zrange(keys.DEAD, 0, -1)]
    assert sorted(wrapper["raw_payload"] for wrapper in wrappers) == sorted(UNREADABLE)
    assert {wrapper["class"] for wrapper in wrappers} == {"(unparseable)"}
    assert {wrapper["queue"] for wrapper in wrappers} == {"default"}
    assert int(r.get(keys.STATS_FAILED) or 0) == len(UNREADABLE)
    assert r.lrange(keys.queue("mail"), 0, -1) == [good]
    assert r.llen(keys.inprogress(identity)) == 0


@pytest.mark.parametrize("raw", UNREADABLE)
def test_give_back_of_an_unreadable_payload_goes_to_default(
    config: cogworker.Config, r: redis.Redis, raw: str
) -> None:
    config.queues = ["elsewhere"]
    r.lpush(keys.queue("elsewhere"), raw)
    fetch = make_fetch("reliable", config)
    try:
        [work] = fetch.retrieve(1)
        fetch.give_back(work)
    finally:
        fetch.close()
    assert r.lrange(keys.queue("default"), 0, -1) == [raw]
    assert r.llen(keys.queue("elsewhere")) == 0


def test_unreadable_payload_handed_back_to_default_is_buried_there(
    config: cogworker.Config, r: redis.Redis
) -> None:
    config.queues = ["elsewhere"]
    r.lpush(keys.queue("elsewhere"), "{not json")
    fetch = make_fetch("reliable", config)
    try:
        [work] = fetch.retrieve(1)
        fetch.give_back(work)  # the fetch layer alone: to the default queue
    finally:
        fetch.close()
    assert r.lrange(keys.queue("default"), 0, -1) == ["{not json"]
    config.queues = ["default"]
    config.concurrency = 1
    manager = Manager(config, new_identity())
    with running(manager):
        wait_for(lambda: r.zcard(keys.DEAD) == 1)
    [entry] = [json.loads(member) for member in r.zrange(keys.DEAD, 0, -1)]
    assert entry["class"] == "(unparseable)"
    assert entry["queue"] == "default"
    assert entry["raw_payload"] == "{not json"


# -- a command refused by ACL halfway through a script ----------------------------------------


@pytest.mark.parametrize("step", ["give back", "interrupt", "park"])
def test_a_refused_removal_fails_the_whole_step_so_the_job_is_in_one_place(
    redis_server_factory: Callable[..., RedisServer], step: str
) -> None:
    """Redis keeps the writes a script made before the command ACL refused. These steps write
    the job's destination, then take it off the in-progress list: with LREM refused they must
    write nothing (else the job would be queued, or filed, and still in progress: run twice)."""
    from cogworker.worker.recovery.reconcile import PARK_UNSETTLED

    acl = AclServer(redis_server_factory)
    cfg = private_config(acl.worker_url, queues=["refused"])
    admin = acl.admin
    fetch = ReliableFetch(cfg, new_identity(), threading.Event())
    try:
        job = {"class": FetchJob.name, "args": ["once"], "queue": "refused"}
        raw = wire.dumps(wire.normalize(job))
        admin.lpush(keys.queue("refused"), raw)
        [work] = fetch.retrieve(1)
        acl.deny("lrem")
        with pytest.raises(redis.exceptions.NoPermissionError):
            if step == "give back":
                fetch.give_back(work)
            elif step == "interrupt":
                fetch.file_instead(work, Filing(keys.RETRY, time.time() + 30, work.raw))
            else:
                record = json.dumps({"set": keys.RETRY, "score": 0, "payload": work.raw})
                PARK_UNSETTLED(cfg.redis(), [fetch.inprogress, keys.UNSETTLED], [raw, record])
        assert admin.lrange(fetch.inprogress, 0, -1) == [raw]
        assert admin.llen(keys.queue("refused")) == 0
        assert admin.zcard(keys.RETRY) == 0 and admin.llen(keys.UNSETTLED) == 0
        acl.allow("lrem")
        fetch.give_back(work)  # allowed again: the step goes through whole
        assert admin.lrange(keys.queue("refused"), 0, -1) == [raw]
        assert admin.llen(fetch.inprogress) == 0
    finally:
        fetch.close()
        release(cfg)
        acl.close()


# -- a payload is parsed when it is taken -----------------------------------------------------


def test_work_carries_the_parsed_job_and_its_jid(config: cogworker.Config, r: redis.Redis) -> None:
    raw = wire.dumps(wire.normalize({"class": FetchJob.name, "args": [[1, {"a": 2}]]}))
    r.lpush(keys.queue("default"), raw)
    fetch = make_fetch("reliable", config)
    try:
        [work] = fetch.retrieve(1)
    finally:
        fetch.close()
    assert work.raw == raw and work.queue == "default"
    assert work.job == json.loads(raw)
    assert work.jid == json.loads(raw)["jid"]


@pytest.mark.parametrize(
    ("raw", "jid"),
    [
        ('{"class":"X","queue":"q","jid":"j-1","args":"x"}', "j-1"),  # args not a list
        ('{"class":"X","queue":"q","jid":"j-2","n":NaN}', "j-2"),  # NaN: read as cjson reads
        ("{not json", "?"),
        ('{"class":"X","queue":"q","jid":7}', "?"),
    ],
)
def test_work_of_a_payload_that_is_not_a_job_carries_why_and_the_jid_the_scripts_see(
    raw: str, jid: str
) -> None:
    work = Work.taken("q", raw)
    assert isinstance(work.job, Rejection)
    assert work.jid == jid  # names the same orphan counter as the scripts do


def test_a_copy_of_a_payload_shares_no_list_or_dict_with_it() -> None:
    job = {"class": "X", "args": [[1, 2], {"k": [3]}], "tags": ("a", "b")}
    copied = wire.copy_payload(job)
    assert copied == {"class": "X", "args": [[1, 2], {"k": [3]}], "tags": ["a", "b"]}
    copied["args"][0].append(9)
    copied["args"][1]["k"].append(9)
    assert job["args"] == [[1, 2], {"k": [3]}]  # what a JSON round trip would give, unshared
