"""Orphan recovery: who counts as dead (presence key + last-beat stamp on Redis's clock), the
registry and the one-off SCAN, and where recovered jobs go."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from conftest import wait_for
from runtime_support import Gate, fresh_runtime, queue_jobs, redis_time, running

import cogworker
from cogworker import keys
from cogworker.fetch.reliable import ReliableFetch
from cogworker.worker.heartbeat import Beats, Heartbeat
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager
from cogworker.worker.recovery.requeue import requeue_list
from cogworker.worker.scheduler import Scheduler

RUNS: list[str] = []
GATE = Gate()


class RecoverJob(cogworker.Job):
    name = "RtRecover::Job"

    def perform(self, token: str) -> None:
        RUNS.append(token)


class HeldJob(cogworker.Job):
    name = "RtRecover::Held"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        GATE.pass_through()


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS, gate=GATE)


def payload(token: str, queue: str = "default") -> str:
    jid = (token.encode().hex() + "0" * 24)[:24]
    return json.dumps({"class": RecoverJob.name, "args": [token], "queue": queue, "jid": jid})


def leave_orphan(
    r: redis.Redis,
    identity: str,
    raws: list[str],
    *,
    beat_age: int | None = None,
    stamp: str | None = None,
    registered: bool = True,
    alive: bool = False,
) -> None:
    """What a process leaves behind: its in-progress list (head = newest), maybe its registry
    entry, last-beat stamp (``beat_age`` seconds ago on Redis's clock) and presence hash."""
    r.lpush(keys.inprogress(identity), *raws)
    if registered:
        r.sadd(keys.INPROGRESS_IDENTITIES, identity)
    if beat_age is not None:
        r.hset(keys.LAST_BEAT, identity, str(redis_time(r) - beat_age))
    if stamp is not None:
        r.hset(keys.LAST_BEAT, identity, stamp)
    if alive:
        r.hset(keys.process(identity), mapping={"info": "{}", "busy": "1", "quiet": "false"})
        r.expire(keys.process(identity), 60)


def untouched(r: redis.Redis, identity: str, raws: list[str]) -> bool:
    return (
        r.lrange(keys.inprogress(identity), 0, -1) == list(reversed(raws))
        and r.sismember(keys.INPROGRESS_IDENTITIES, identity) == 1
        and r.llen(keys.queue("default")) == 0
    )


@pytest.fixture
def manager(config: cogworker.Config) -> Manager:
    return Manager(config, new_identity())


# -- the dead verdict ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("threshold", "beat_age", "dead"),
    [(300, 120, False), (300, 301, True), (60, 90, True), (60, 30, False)],
)
def test_dead_only_when_the_last_beat_is_older_than_the_threshold(
    config: cogworker.Config,
    r: redis.Redis,
    manager: Manager,
    threshold: float,
    beat_age: int,
    dead: bool,
) -> None:
    config.orphan_threshold = threshold
    other = new_identity()
    raws = [payload("orphaned")]
    leave_orphan(r, other, raws, beat_age=beat_age)
    report = manager.orphans.recover(scan=False)
    if dead:
        assert report.moved == 1
        assert r.lrange(keys.queue("default"), 0, -1) == raws
        assert r.exists(keys.inprogress(other)) == 0
        assert r.hexists(keys.LAST_BEAT, other) is False  # stamp removed
        assert r.sismember(keys.INPROGRESS_IDENTITIES, other) == 0  # registry entry removed
    else:
        assert report.moved == 0
        assert untouched(r, other, raws)
        assert r.hexists(keys.LAST_BEAT, other) is True  # kept for the next check


def test_presence_key_means_alive_whatever_the_stamp(
    config: cogworker.Config, r: redis.Redis, manager: Manager
) -> None:
    other = new_identity()
    raws = [payload("running-elsewhere")]
    leave_orphan(r, other, raws, beat_age=10_000, alive=True)
    assert requeue_list(config, manager.client, other, if_dead_for=300).moved == -1
    assert manager.orphans.recover(scan=True).moved == 0
    assert untouched(r, other, raws)
    assert r.hexists(keys.LAST_BEAT, other) is True


@pytest.mark.parametrize("stamp", ["garbage", None])
def test_missing_or_non_numeric_stamp_leaves_the_presence_key_to_decide(
    r: redis.Redis, manager: Manager, stamp: str | None
) -> None:
    other = new_identity()
    raws = [payload("no-stamp")]
    leave_orphan(r, other, raws, stamp=stamp)
    assert manager.orphans.recover(scan=False).moved == 1
    assert r.lrange(keys.queue("default"), 0, -1) == raws
    assert r.hexists(keys.LAST_BEAT, other) is False


def test_own_list_is_never_requeued_by_recovery(r: redis.Redis, manager: Manager) -> None:
    raws = [payload("mine")]
    leave_orphan(r, manager.identity, raws, beat_age=10_000)
    report = manager.orphans.recover(scan=True)
    assert report.moved == 0
    assert untouched(r, manager.identity, raws)


def test_a_live_worker_keeps_its_running_job_even_when_its_presence_key_lapsed(
    config: cogworker.Config, r: redis.Redis
) -> None:
    """The false-dead verdict: no presence key (an outage longer than its TTL) but a recent
    last beat on Redis's clock; another process must not requeue the running job."""
    config.concurrency = 1
    worker = Manager(config, new_identity())
    assert Heartbeat(config, worker, lambda message: None).beat()  # presence + stamp
    checker = Manager(config, new_identity())
    with running(worker):
        HeldJob.perform_async("long")
        wait_for(GATE.entered.is_set)
        [raw] = r.lrange(keys.inprogress(worker.identity), 0, -1)
        assert checker.orphans.recover(scan=True).moved == 0
        r.delete(keys.process(worker.identity))  # presence expired during an outage
        assert checker.orphans.recover(scan=True).moved == 0
        assert r.lrange(keys.inprogress(worker.identity), 0, -1) == [raw]
        assert r.llen(keys.queue("default")) == 0
        GATE.open()
        wait_for(lambda: r.llen(keys.inprogress(worker.identity)) == 0)
    assert RUNS == ["long"]


# -- candidates: the registry and the one-off SCAN -------------------------------------------


def test_unregistered_list_is_found_only_by_the_scan(r: redis.Redis, manager: Manager) -> None:
    other = new_identity()
    raws = [payload("pre-registry")]
    leave_orphan(r, other, raws, beat_age=1000, registered=False)
    report = manager.orphans.recover(scan=False)
    assert (report.moved, report.registry_read, report.scanned) == (0, True, False)
    assert r.lrange(keys.inprogress(other), 0, -1) == raws
    report = manager.orphans.recover(scan=True)
    assert (report.moved, report.scanned) == (1, True)
    assert r.lrange(keys.queue("default"), 0, -1) == raws


def test_reliable_scheduler_scans_once_then_uses_the_registry(
    config: cogworker.Config, r: redis.Redis, manager: Manager
) -> None:
    checks = Scheduler(manager)
    first, second, registered = new_identity(), new_identity(), new_identity()
    leave_orphan(r, first, [payload("first")], beat_age=1000, registered=False)
    checks.orphan_check()
    assert checks.recovered_once.is_set()
    assert [job["args"] for job in queue_jobs(r, "default")] == [["first"]]
    leave_orphan(r, second, [payload("second")], beat_age=1000, registered=False)
    leave_orphan(r, registered, [payload("registered")], beat_age=1000)
    checks.orphan_check()
    assert r.lrange(keys.inprogress(second), 0, -1) == [payload("second")]  # no second scan
    # each recovered job goes to the pop end: the latest recovered runs next
    assert [job["args"] for job in queue_jobs(r, "default")] == [["registered"], ["first"]]


def test_basic_process_never_scans_but_still_recovers_registered_lists(
    config: cogworker.Config, r: redis.Redis
) -> None:
    config.fetch = "basic"
    checks = Scheduler(Manager(config, new_identity()))
    unregistered, registered = new_identity(), new_identity()
    leave_orphan(r, unregistered, [payload("hidden")], beat_age=1000, registered=False)
    leave_orphan(r, registered, [payload("listed")], beat_age=1000)
    checks.orphan_check()
    assert checks.recovered_once.is_set()
    assert [job["args"] for job in queue_jobs(r, "default")] == [["listed"]]
    assert r.lrange(keys.inprogress(unregistered), 0, -1) == [payload("hidden")]


# -- where recovered jobs go --------------------------------------------------------------------


def test_recovered_jobs_run_next_oldest_first(config: cogworker.Config, r: redis.Redis) -> None:
    dead = new_identity()
    for token in ("j1", "j2", "j3"):
        RecoverJob.perform_async(token)
    dead_fetch = ReliableFetch(config, dead, threading.Event())
    try:
        taken = dead_fetch.retrieve(3)  # the dead process took j1, j2, j3, in that order
    finally:
        dead_fetch.close()
    assert [json.loads(work.raw)["args"] for work in taken] == [["j1"], ["j2"], ["j3"]]
    RecoverJob.perform_async("j4")  # queued after they were taken
    r.sadd(keys.INPROGRESS_IDENTITIES, dead)
    r.hset(keys.LAST_BEAT, dead, str(redis_time(r) - 1000))
    config.concurrency = 1
    manager = Manager(config, new_identity())
    assert manager.orphans.recover(scan=False).moved == 3
    # back at the pop end of the queue, byte for byte, oldest first, ahead of j4
    assert r.lrange(keys.queue("default"), -3, -1) == [work.raw for work in reversed(taken)]
    jid = json.loads(taken[0].raw)["jid"]
    assert r.get(keys.orphanings(jid)) == "1"
    assert 0 < r.ttl(keys.orphanings(jid)) <= 7 * 86400
    with running(manager):
        wait_for(lambda: len(RUNS) == 4)
        wait_for(lambda: r.llen(keys.inprogress(manager.identity)) == 0)
    assert RUNS == ["j1", "j2", "j3", "j4"]
    assert r.exists(keys.orphanings(jid)) == 0  # cleared by the ack


def test_requeue_onto_a_queue_nobody_reads_registers_and_warns(
    r: redis.Redis, manager: Manager, caplog: pytest.LogCaptureFixture
) -> None:
    other = new_identity()
    leave_orphan(r, other, [payload("lonely", queue="nobody-reads")], beat_age=1000)
    assert manager.orphans.recover(scan=False).moved == 1
    assert r.sismember(keys.QUEUES, "nobody-reads") == 1
    assert "no live process reads: nobody-reads" in caplog.text
    assert f"requeued 1 job(s) left in progress by dead process {other}" in caplog.text


def test_a_running_scheduler_recovers_and_its_processors_run_the_jobs(
    config: cogworker.Config, r: redis.Redis
) -> None:
    config.concurrency = 1
    config.poll_interval = 0.05
    config.orphan_check_interval = 0.05
    manager = Manager(config, new_identity())
    checks = Scheduler(manager)
    with running(manager):
        checks.start()
        try:
            wait_for(checks.recovered_once.is_set)
            other = new_identity()
            leave_orphan(r, other, [payload("late-orphan")], beat_age=1000)
            wait_for(lambda: RUNS == ["late-orphan"])
        finally:
            checks.stop()
    assert r.exists(keys.inprogress(other)) == 0
    assert r.sismember(keys.INPROGRESS_IDENTITIES, other) == 0


# -- after a stall of our own ---------------------------------------------------------------


def test_beats_missed_for_two_intervals_count_as_a_stall() -> None:
    now = [100.0]
    beats = Beats(interval=1.0, clock=lambda: now[0])
    assert beats.succeeded() is False  # the first beat
    now[0] = 101.9  # late, but no beat missed
    assert beats.succeeded() is False and beats.resumed_at is None
    now[0] = 104.0  # more than two intervals since the last beat: frozen, starved...
    assert beats.succeeded() is True
    assert beats.resumed_at == 104.0 and beats.stalled_for == pytest.approx(2.1)
    beats.failed()  # an outage counts the same (and the reporter tells of it, not a stall)
    now[0] = 104.5
    assert beats.succeeded() is True and beats.resumed_at == 104.5
    assert beats.stalled_for is None


def test_after_a_stall_others_are_judged_only_once_our_beats_have_been_back_two_intervals(
    config: cogworker.Config, r: redis.Redis, manager: Manager
) -> None:
    """Whatever froze this process may have frozen the others: their last beats are old too.
    The verdict waits two heartbeats from our first beat after the stall."""
    config.heartbeat_interval = 5
    clock = [time.monotonic() - 60]
    beats = Beats(interval=config.heartbeat_interval, clock=lambda: clock[0])
    beats.succeeded()
    clock[0] = time.monotonic()  # a minute without a beat, then one
    assert beats.succeeded() is True
    other = new_identity()
    raws = [payload("frozen-with-us")]
    leave_orphan(r, other, raws, beat_age=1000)
    checks = Scheduler(manager, beats)

    checks.orphan_check()
    assert untouched(r, other, raws)
    assert checks._next_orphan_check == clock[0] + 2 * config.heartbeat_interval

    beats.resumed_at = time.monotonic() - 2 * config.heartbeat_interval - 0.1
    checks.orphan_check()
    assert r.lrange(keys.queue("default"), 0, -1) == raws


# -- a swarm child its supervisor reaped ------------------------------------------------------


def test_a_reaped_childs_list_is_requeued_counted_and_its_presence_removed(
    config: cogworker.Config, r: redis.Redis, manager: Manager
) -> None:
    """The supervisor knows: no verdict (its presence may not have expired yet), and nothing
    of any other process is touched."""
    child, neighbour = new_identity(), new_identity()
    raws = [payload("reaped-1"), payload("reaped-2")]
    leave_orphan(r, child, raws, beat_age=0, alive=True)
    r.sadd(keys.PROCESSES, child, neighbour)
    r.hset(keys.workers(child), "tid", "{}")
    neighbours = [payload("neighbour")]
    leave_orphan(r, neighbour, neighbours, beat_age=0, alive=True)

    done = requeue_list(config, manager.client, child, reaped=True)

    assert (done.moved, done.failed, done.parked) == (2, 0, 0)
    assert sorted(r.lrange(keys.queue("default"), 0, -1)) == sorted(raws)
    for raw in raws:
        assert r.get(keys.orphanings(json.loads(raw)["jid"])) == "1"
    assert not r.exists(keys.inprogress(child), keys.process(child), keys.workers(child))
    assert r.smembers(keys.PROCESSES) == {neighbour}
    assert r.smembers(keys.INPROGRESS_IDENTITIES) == {neighbour}
    assert r.hkeys(keys.LAST_BEAT) == [neighbour]
    assert r.lrange(keys.inprogress(neighbour), 0, -1) == neighbours
    assert r.exists(keys.process(neighbour)) == 1


def test_a_reaped_childs_job_recovered_too_often_is_parked_not_requeued(
    config: cogworker.Config, r: redis.Redis, manager: Manager
) -> None:
    config.max_orphanings = 2
    child = new_identity()
    raw = payload("crashes-everything")
    r.set(keys.orphanings(json.loads(raw)["jid"]), 2)
    leave_orphan(r, child, [raw], beat_age=0)

    done = requeue_list(config, manager.client, child, reaped=True)

    assert (done.moved, done.parked) == (1, 1)
    assert r.llen(keys.queue("default")) == 0
    assert r.lrange(keys.REPEAT_ORPHANS, 0, -1) == [raw]
    assert manager.orphans.bury_repeat_orphans() == 1
    assert [json.loads(e)["jid"] for e in r.zrange(keys.DEAD, 0, -1)] == [json.loads(raw)["jid"]]


def test_a_verdict_and_reaped_together_are_refused(
    config: cogworker.Config, manager: Manager
) -> None:
    with pytest.raises(ValueError, match="pass one of the two"):
        requeue_list(config, manager.client, new_identity(), if_dead_for=5, reaped=True)
