"""A failed job's filing into retry or dead whose reply is lost on the way back: the write
landed, the worker saw a connection error. What follows (the interrupt, the reconcile of
the orphan check, the hand-back at shutdown) must find the job settled and write nothing:
one record per failed run, never a second.

The reply is really lost: the worker talks to Redis through ``ReplyDropper``, a TCP proxy
that throws away the reply to the filing script and cuts the connection.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from conftest import wait_for
from lost_reply_support import ReplyDropper
from runtime_support import all_settled, release, running, zset_entries

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
