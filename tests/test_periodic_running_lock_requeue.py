"""Every script that puts a cron run back on its queue re-takes the run's running lock in
the same step (``periodic.running_lock.requeued_lock``): reliable fetch's give back, the
shutdown requeue of reliable and basic fetch, and orphan recovery. A lapsed lock is set again,
the process's own is extended, a newer run's is left alone.

MONITOR on a private server shows which writes the one script call made.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest
import redis
from monitor_support import SCRIPT_CALLS, Monitor
from runtime_support import (
    plant_orphan,
    private_config,
    release,
    ttl_was_set_to,
)

import cogworker
from cogworker import keys, wire
from cogworker.fetch.reliable import ReliableFetch
from cogworker.local.server import RedisServer
from cogworker.periodic.running_lock import active_ttl, queued_ttl
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager
from cogworker.worker.recovery.handback import hand_back_list, hand_back_registered

ServerFactory = Callable[..., RedisServer]


# -- requeueing a cron run re-takes its running lock in the same script ------------------------

PJID = "fm-fetch-pj"
LOCK = keys.periodic_running(PJID)
QUEUE = "cronq"


def cron_raw(token: str) -> str:
    job = {
        "class": "FMFetch::Idle",  # never run: only requeued
        "args": [token],
        "queue": QUEUE,
        "periodic_pjid": PJID,
        "periodic_until_executed": True,
    }
    return wire.dumps(wire.normalize(job))


def jid_of(raw: str) -> str:
    return str(json.loads(raw)["jid"])


Requeue = Callable[[cogworker.Config, redis.Redis, str], None]


def give_back(cfg: cogworker.Config, admin: redis.Redis, raw: str) -> None:
    """A job fetched but not started goes back (reliable fetch)."""
    cfg.queues = [QUEUE]
    admin.lpush(keys.queue(QUEUE), raw)
    fetch = ReliableFetch(cfg, new_identity(), threading.Event())
    try:
        [work] = fetch.retrieve(1, wait=False)
        fetch.give_back(work)
    finally:
        fetch.close()


def shutdown_requeue(cfg: cogworker.Config, admin: redis.Redis, raw: str) -> None:
    """A stopping reliable process puts its unfinished job back."""
    identity = new_identity()
    admin.lpush(keys.inprogress(identity), raw)
    assert hand_back_list(cfg, cfg.redis(), identity) == 1


def orphan_recovery(cfg: cogworker.Config, admin: redis.Redis, raw: str) -> None:
    """Another process requeues the list of a process that died running the job."""
    plant_orphan(admin, new_identity(), [raw])
    report = Manager(cfg, new_identity()).orphans.recover(scan=False)
    assert report.moved == 1


def basic_shutdown_requeue(cfg: cogworker.Config, admin: redis.Redis, raw: str) -> None:
    """A stopping basic-fetch process puts back what its workers hash says is running."""
    identity = new_identity()
    entry = {"queue": QUEUE, "payload": json.loads(raw), "run_at": int(time.time())}
    admin.hset(keys.workers(identity), "tid-1", json.dumps(entry))
    assert hand_back_registered(cfg, cfg.redis(), identity) == 1


REQUEUES: dict[str, Requeue] = {
    "give back": give_back,
    "shutdown requeue": shutdown_requeue,
    "orphan recovery": orphan_recovery,
    "basic shutdown requeue": basic_shutdown_requeue,
}


@pytest.mark.parametrize("path", list(REQUEUES))
def test_requeue_retakes_a_lapsed_cron_lock_in_the_script_that_pushes_the_run(
    redis_server_factory: ServerFactory, path: str
) -> None:
    """The run's lock expired while it was in progress: the script that puts the run back
    on its queue sets the lock again, so the entry is never open while its run waits."""
    server = redis_server_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    cfg = private_config(server.url)
    raw = cron_raw(path)
    try:
        started = time.monotonic()
        with Monitor(server.url) as monitor:
            REQUEUES[path](cfg, admin, raw)
        assert admin.lrange(keys.queue(QUEUE), 0, -1) == [raw]
        assert admin.get(LOCK) == jid_of(raw)
        assert ttl_was_set_to(admin, LOCK, queued_ttl(cfg), started)
        assert queued_ttl(cfg) > active_ttl(cfg)
        [group] = [
            group
            for group in monitor.script_writes()
            if ["RPUSH", keys.queue(QUEUE)] in [words[:2] for words in group]
        ]
        assert ["SET", LOCK, jid_of(raw), "EX", str(queued_ttl(cfg))] in group
        sent = [c.words for c in monitor.commands() if not c.by_script]
        assert not [words for words in sent if LOCK in words and words[0] not in SCRIPT_CALLS]
    finally:
        release(cfg)
        admin.close()


@pytest.mark.parametrize("path", list(REQUEUES))
@pytest.mark.parametrize("holder", ["own", "newer"])
def test_requeue_extends_its_own_lock_and_leaves_a_newer_runs_alone(
    redis_server_factory: ServerFactory, path: str, holder: str
) -> None:
    server = redis_server_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    cfg = private_config(server.url)
    raw = cron_raw(f"{path} {holder}")
    owner = jid_of(raw) if holder == "own" else "a-newer-run"
    admin.set(LOCK, owner, ex=50)
    try:
        started = time.monotonic()
        REQUEUES[path](cfg, admin, raw)
        assert admin.lrange(keys.queue(QUEUE), 0, -1) == [raw]
        assert admin.get(LOCK) == owner
        if holder == "own":
            assert ttl_was_set_to(admin, LOCK, queued_ttl(cfg), started)
        else:
            assert 0 < admin.ttl(LOCK) <= 50
    finally:
        release(cfg)
        admin.close()
