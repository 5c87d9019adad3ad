"""The heartbeat and orphan recovery when Redis refuses TIME (an ACL, or a proxy that hides
the command): the beat stamps the host's clock instead, and the recovery script judges a
process's last beat by the clock its caller sends.

The refusal is real: the worker's ACL user loses ``+time`` on a private server, which also
applies inside Lua scripts; the server's ACL LOG shows every refused call.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    WORKER_USER,
    AclServer,
    fresh_runtime,
    plant_orphan,
    private_config,
    release,
)

import cogworker
from cogworker import keys, redis_errors, wire
from cogworker.worker.heartbeat import Heartbeat
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request)


@pytest.fixture
def acl(acl: AclServer) -> AclServer:
    """The shared ``acl`` server, with TIME refused to the code under test."""
    acl.deny("time")
    return acl


@pytest.fixture
def cfg(acl: AclServer) -> Iterator[cogworker.Config]:
    worker_config = private_config(acl.worker_url, heartbeat_interval=0.05, queues=["stamped"])
    try:
        yield worker_config
    finally:
        release(worker_config)


def refused_time_calls(admin: redis.Redis, context: str) -> int:
    """How many TIME calls the server refused the worker's user, from ``context``
    (``toplevel`` for a command sent by the client, ``lua`` inside a script)."""
    return sum(
        int(entry["count"])
        for entry in admin.acl_log()
        if entry["object"] == "time"
        and entry["username"] == WORKER_USER
        and entry["context"] == context
    )


def test_beat_with_time_refused_stamps_the_host_clock(
    acl: AclServer, cfg: cogworker.Config
) -> None:
    admin = acl.admin
    manager = Manager(cfg, new_identity())
    heartbeat = Heartbeat(cfg, manager, lambda message: None)
    identity = manager.identity
    try:
        before = int(time.time())
        assert heartbeat.beat() is True
        after = int(time.time())
        assert heartbeat.beat_failed is False
        assert refused_time_calls(admin, "toplevel") == 1  # it asked, and was refused
        stamps = [
            int(admin.hget(keys.process(identity), "beat") or 0),
            int(admin.hget(keys.LAST_BEAT, identity) or 0),
            int(admin.zscore(keys.LIVE_QUEUES, "stamped") or 0),
        ]
        assert all(before <= stamp <= after for stamp in stamps), stamps
        assert admin.sismember(keys.PROCESSES, identity) == 1
        # the loop keeps beating without TIME: a stamp later than the first one appears
        assert heartbeat.start(abort_if=lambda: False) is True
        wait_for(lambda: int(admin.hget(keys.LAST_BEAT, identity) or 0) > after, timeout=10)
        assert not redis_errors.reporter.in_outage("Heartbeat")
        assert refused_time_calls(admin, "toplevel") >= 2
    finally:
        heartbeat.stop()
        if manager.strategy.mode is not None:
            manager.strategy.current().close()


def orphan(admin: redis.Redis, token: str, beat_age: int) -> tuple[str, str]:
    """A process without presence whose last beat is ``beat_age`` seconds old, with one job
    in progress. Returns (identity, raw job)."""
    identity = new_identity()
    raw = wire.dumps(wire.normalize({"class": "FMBeat::Job", "args": [token]}))
    plant_orphan(admin, identity, [raw], beat_age=beat_age)
    return identity, raw


def test_recovery_with_time_refused_judges_last_beats_by_the_callers_clock(
    acl: AclServer, cfg: cogworker.Config
) -> None:
    """Dead means: no presence key and a last beat older than ``orphan_threshold`` (300 s).
    With TIME refused inside the script, the age is taken from the caller's clock: the
    process that beat 120 s ago keeps its job, the one silent for 301 s has it requeued."""
    admin = acl.admin
    quiet_identity, quiet_job = orphan(admin, "beat-120s-ago", beat_age=120)
    dead_identity, dead_job = orphan(admin, "beat-301s-ago", beat_age=301)
    report = Manager(cfg, new_identity()).orphans.recover(scan=False)
    assert report.moved == 1
    assert admin.lrange(keys.queue("default"), 0, -1) == [dead_job]
    assert admin.llen(keys.inprogress(dead_identity)) == 0
    assert admin.hexists(keys.LAST_BEAT, dead_identity) is False  # its stamp is dropped
    assert admin.lrange(keys.inprogress(quiet_identity), 0, -1) == [quiet_job]
    assert admin.hexists(keys.LAST_BEAT, quiet_identity) is True
    assert refused_time_calls(admin, "lua") >= 2  # the script asked for each and was refused
    assert not redis_errors.reporter.in_outage("Orphan recovery")
