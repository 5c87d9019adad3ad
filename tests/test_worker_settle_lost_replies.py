"""Every fate of a job whose reply is lost on the way back: the write landed, the worker saw
a connection error. The filing of a failure into retry or dead, the acknowledgement in the
turnover (with the next job it took), the hand-back of an unstarted job, the interrupt, the
burial of a payload that is not a job. What follows (the interrupt, the reconcile of the
orphan check, the hand-back at shutdown) must find the job settled and write nothing: one
record per run, each job counted once, never a second record.

The reply is really lost: the worker talks to Redis through ``ReplyDropper``, a TCP proxy
that throws away the reply to the armed command and cuts the connection.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from conftest import wait_for
from lost_reply_support import ReplyDropper
from runtime_support import (
    PoisonMiddleware,
    all_settled,
    queue_jobs,
    release,
    running,
    zset_entries,
)

import cogworker
from cogworker import keys
from cogworker.fetch import basic, reliable
from cogworker.local.server import RedisServer
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager
from cogworker.worker.scheduler import Scheduler

RUNS: list[str] = []


class RetriedJob(cogworker.Job, retry=3):
    name = "LostReply::Retried"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        raise ValueError(f"boom {token}")


class DeadJob(cogworker.Job, retry=False):
    name = "LostReply::Dead"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        raise KeyError("gone")


@pytest.fixture
def dropper(redis_server: RedisServer) -> Iterator[ReplyDropper]:
    with ReplyDropper(redis_server.port) as proxy:
        yield proxy


@pytest.fixture
def proxied(r: redis.Redis, dropper: ReplyDropper) -> Iterator[cogworker.Config]:
    RUNS.clear()
    config = cogworker.Config(redis_url=dropper.url, concurrency=1, shutdown_timeout=2.0)
    previous = cogworker.config._default.config
    cogworker.set_default_config(config)  # perform_async pushes through the proxy too
    try:
        yield config
    finally:
        cogworker.config._default.config = previous
        release(config)


FILING_SCRIPTS = {"reliable": reliable.FILE_INSTEAD, "basic": basic.FILE_ONCE}


@pytest.mark.parametrize("mode", ["reliable", "basic"])
@pytest.mark.parametrize(("job_class", "target"), [(RetriedJob, keys.RETRY), (DeadJob, keys.DEAD)])
def test_a_lost_filing_reply_leaves_exactly_one_record(
    proxied: cogworker.Config,
    dropper: ReplyDropper,
    r: redis.Redis,
    mode: str,
    job_class: type[cogworker.Job],
    target: str,
) -> None:
    proxied.fetch = mode
    script = FILING_SCRIPTS[mode]
    r.script_load(script.source)  # else its first call is an EVAL of the source, not by SHA
    dropper.arm(script.sha.encode())
    other = keys.DEAD if target == keys.RETRY else keys.RETRY
    manager = Manager(proxied, new_identity())
    with running(manager):  # stopped on the way out: the hand-back at shutdown runs too
        jid = job_class.perform_async("lost-reply")
        wait_for(lambda: dropper.dropped == 1 and r.zcard(target) >= 1)
        wait_for(lambda: RUNS == ["lost-reply"] and all_settled(r, manager))
        checks = Scheduler(manager)
        for _ in range(2):  # reconcile: strays are requeued on their second sighting
            checks.orphan_check()
    assert manager.stopping.is_set()
    assert manager.ledger.pending() == {}
    assert r.llen(keys.inprogress(manager.identity)) == 0
    assert not dropper.armed()
    assert [entry["jid"] for entry, _ in zset_entries(r, target)] == [jid]
    assert r.zcard(other) == 0
    assert r.llen(keys.queue("default")) == 0
    assert RUNS == ["lost-reply"]  # and it never ran again


# -- the other fates: ack (the turnover), give back, interrupt, burial --------------------------


class NoteJob(cogworker.Job):
    name = "LostReply::Note"

    def perform(self, token: str) -> None:
        RUNS.append(token)


def test_a_lost_turnover_reply_acks_once_counts_once_and_runs_the_next_job_once(
    proxied: cogworker.Config, dropper: ReplyDropper, r: redis.Redis
) -> None:
    """The turnover acknowledged the first job, counted it and took the second onto the
    in-progress list; its reply is lost. The bookkeeper's ack of the first then finds nothing
    to remove, and the second, held by nobody in memory, is requeued by the reconcile and runs
    once. Each job is counted once."""
    from cogworker.fetch.reliable import TURNOVER

    r.script_load(TURNOVER.source)
    dropper.arm(TURNOVER.sha.encode())
    NoteJob.perform_async("first")
    NoteJob.perform_async("second")
    manager = Manager(proxied, new_identity())
    with running(manager):
        wait_for(lambda: dropper.dropped == 1)
        checks = Scheduler(manager)
        for _ in range(2):  # the second job is a stray: requeued on its second sighting
            checks.orphan_check()
        wait_for(lambda: sorted(RUNS) == ["first", "second"] and all_settled(r, manager))
    assert RUNS == ["first", "second"]
    assert int(r.get(keys.STATS_PROCESSED) or 0) == 2
    assert r.llen(keys.queue("default")) == 0
    assert r.llen(keys.inprogress(manager.identity)) == 0
    assert not dropper.armed()


GIVE_BACK_MARKERS = {"reliable": reliable.GIVE_BACK.sha.encode(), "basic": b"RPUSH"}


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_a_lost_give_back_reply_leaves_the_job_once_on_its_queue(
    proxied: cogworker.Config, dropper: ReplyDropper, r: redis.Redis, mode: str
) -> None:
    """A job taken and handed back unstarted (a stop before it began); the reply to the hand
    back is lost. Reconcile and the shutdown hand-back that follow put it nowhere else: it is
    on its queue once."""
    proxied.fetch = mode
    if mode == "reliable":
        r.script_load(reliable.GIVE_BACK.source)
    jid = NoteJob.perform_async("given-back")
    manager = Manager(proxied, new_identity())
    try:
        [work] = manager.strategy.current().retrieve(1, wait=False)
        manager.ledger.taken(work)
        dropper.arm(GIVE_BACK_MARKERS[mode])
        manager.settler.give_back(work)
        manager.ledger.finished(work)
        assert dropper.dropped == 1
        checks = Scheduler(manager)
        for _ in range(2):
            checks.orphan_check()
    finally:
        manager.stop(2.0)
    assert [entry["jid"] for entry in queue_jobs(r, "default")] == [jid]
    assert r.llen(keys.inprogress(manager.identity)) == 0
    assert manager.ledger.pending() == {}


INTERRUPT_SCRIPTS = {"reliable": reliable.FILE_INSTEAD, "basic": basic.FILE_ONCE}


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_a_lost_interrupt_reply_leaves_exactly_one_retry_entry(
    proxied: cogworker.Config, dropper: ReplyDropper, r: redis.Redis, mode: str
) -> None:
    """The failed job's copy can't be encoded (a middleware put a NaN in it), so its failure
    is filed by the interrupt, as fetched, with a fixed delay; that reply is lost. The reconcile
    and the hand-back that follow file nothing more: one retry entry."""
    proxied.fetch = mode
    proxied.server_middleware.add(PoisonMiddleware)
    script = INTERRUPT_SCRIPTS[mode]
    r.script_load(script.source)
    dropper.arm(script.sha.encode())
    manager = Manager(proxied, new_identity())
    with running(manager):
        jid = RetriedJob.perform_async("interrupted")
        wait_for(lambda: dropper.dropped == 1 and r.zcard(keys.RETRY) >= 1)
        wait_for(lambda: RUNS == ["interrupted"] and all_settled(r, manager))
        checks = Scheduler(manager)
        for _ in range(2):
            checks.orphan_check()
    entries = zset_entries(r, keys.RETRY)
    assert [(entry["jid"], entry["interrupted_count"]) for entry, _ in entries] == [(jid, 1)]
    assert r.zcard(keys.DEAD) == 0 and r.llen(keys.queue("default")) == 0
    assert manager.ledger.pending() == {}
    assert RUNS == ["interrupted"]


@pytest.mark.parametrize("mode", ["reliable", "basic"])
def test_a_lost_burial_reply_leaves_exactly_one_dead_entry(
    proxied: cogworker.Config, dropper: ReplyDropper, r: redis.Redis, mode: str
) -> None:
    """A payload that is not a job is filed into dead as a wrapper; the reply is lost. The
    reconcile that files what was left pending writes the same entry, not a second one."""
    proxied.fetch = mode
    marker = reliable.FILE_INSTEAD.sha.encode() if mode == "reliable" else b"ZADD"
    if mode == "reliable":
        r.script_load(reliable.FILE_INSTEAD.source)
    r.lpush(keys.queue("default"), "{not json")
    r.sadd(keys.QUEUES, "default")
    dropper.arm(marker)
    manager = Manager(proxied, new_identity())
    with running(manager):
        wait_for(lambda: dropper.dropped == 1 and r.zcard(keys.DEAD) >= 1)
        checks = Scheduler(manager)
        for _ in range(2):
            checks.orphan_check()
        wait_for(lambda: all_settled(r, manager) and manager.ledger.pending() == {})
    [(wrapper, _)] = zset_entries(r, keys.DEAD)
    assert wrapper["class"] == "(unparseable)"
    assert r.llen(keys.queue("default")) == 0 and r.zcard(keys.RETRY) == 0
