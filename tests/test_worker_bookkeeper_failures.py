"""Settling a job that ran when parts of the bookkeeping fail: an acknowledgement refused
twice and then allowed, counters and workers-hash writes that fail after a successful run,
and the status a hook's late decision must correct.

A real Manager against a real Redis throughout. Failures come from Redis: an ACL user that
loses ``lrem`` (the acknowledging script's one write), keys of the wrong type.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    WORKER_USER,
    AclServer,
    ExplodingMiddleware,
    Gate,
    all_settled,
    attempts_log,
    counter,
    fresh_runtime,
    private_config,
    release,
    running,
)

import cogworker
from cogworker import keys, status
from cogworker.worker import bookkeeper
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager

RUNS: list[str] = []
GATE = Gate()
HOOK: dict[str, Any] = {}


class GatedJob(cogworker.Job):
    name = "FMProc::Gated"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        GATE.pass_through()


class HookedJob(cogworker.Job, retry=5):
    name = "FMProc::Hooked"

    def perform(self, token: str) -> None:
        RUNS.append(token)

    @classmethod
    def retry_in(cls, count: int, error: BaseException, job: dict[str, Any]) -> Any:
        return HOOK.get("retry_in")


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS, HOOK, gate=GATE)


def nothing_left(r: redis.Redis, manager: Manager) -> None:
    """The job is nowhere: not queued, not in progress, not in retry or dead."""
    assert r.llen(keys.queue("default")) == 0
    assert r.llen(keys.inprogress(manager.identity)) == 0
    assert r.zcard(keys.RETRY) == 0
    assert r.zcard(keys.DEAD) == 0


# -- an acknowledgement refused twice, then allowed -------------------------------------------


def refused_lrem_calls(admin: redis.Redis) -> int:
    return sum(
        int(entry["count"])
        for entry in admin.acl_log()
        if entry["object"] == "lrem" and entry["username"] == WORKER_USER
    )


def test_ack_refused_twice_then_allowed_is_sent_three_times_without_an_error_line(
    acl: AclServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acknowledgement is retried after 0.1 s and 0.2 s. The test lifts the refusal
    during the second pause (the bookkeeper's clock is wrapped only to know when that pause
    begins): the third attempt succeeds, nothing is logged as an error, the job is gone."""
    admin = acl.admin
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 2:
            acl.allow("lrem")
        time.sleep(seconds)

    clock = SimpleNamespace(sleep=pause, time=time.time, monotonic=time.monotonic)
    monkeypatch.setattr(bookkeeper, "time", clock)
    cfg = private_config(acl.worker_url, concurrency=1, shutdown_timeout=2.0)
    manager = Manager(cfg, new_identity())
    try:
        with running(manager):
            cogworker.Client(cfg).enqueue(GatedJob, "acked-third-time")
            wait_for(GATE.entered.is_set)
            acl.deny("lrem")  # the acknowledging script's LREM is refused from now on
            GATE.open()
            wait_for(lambda: all_settled(admin, manager))
        assert pauses == [0.1, 0.2]
        # the turnover's (which then hands the ack to the bookkeeper) and the bookkeeper's
        # first two; the third went through
        assert refused_lrem_calls(admin) == 3
        assert manager.ledger.pending() == {}
        nothing_left(admin, manager)
        assert not [rec for rec in caplog.records if rec.levelname == "ERROR"]
        assert RUNS == ["acked-third-time"]
    finally:
        release(cfg)


# -- bookkeeping writes failing after a successful run ------------------------------------------


def break_counters(r: redis.Redis, manager: Manager) -> None:
    """The processed counter and this hour's (and the next hour's) throughput bucket hold
    values of the wrong type: INCRBY and HINCRBY fail with WRONGTYPE."""
    r.hset(keys.STATS_PROCESSED, "not", "a counter")
    hour = int(time.time()) // 3600
    for bucket in (keys.throughput(hour), keys.throughput(hour + 1)):
        r.set(bucket, "not a hash")


def break_workers_hash(r: redis.Redis, manager: Manager) -> None:
    """The process's workers hash is a string: registering (HSET) and deregistering (HDEL)
    the running job fail with WRONGTYPE."""
    r.set(keys.workers(manager.identity), "not a hash")


@pytest.mark.parametrize("broken", [break_counters, break_workers_hash])
def test_bookkeeping_failing_after_a_success_is_logged_once_each_as_ignored(
    config: cogworker.Config,
    r: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    broken: Callable[[redis.Redis, Manager], None],
) -> None:
    config.concurrency = 1
    config.shutdown_timeout = 2.0
    manager = Manager(config, new_identity())
    broken(r, manager)
    with running(manager):
        GatedJob.perform_async("ran-once")
        wait_for(GATE.entered.is_set)
        manager.bookkeeper.flush()  # the registration was sent (alone) before the job ends
        GATE.open()
        wait_for(lambda: all_settled(r, manager) and not manager.ledger.running())
    ignored = [
        rec.getMessage()
        for rec in caplog.records
        if rec.getMessage().startswith("Bookkeeping (ignored): ResponseError: WRONGTYPE")
    ]
    assert len(ignored) == 2, ignored  # INCRBY + HINCRBY, or HSET + HDEL: once each
    assert len([rec for rec in caplog.records if rec.levelname == "ERROR"]) == 2
    nothing_left(r, manager)
    assert manager.ledger.pending() == {}
    assert r.get(keys.STATS_FAILED) is None
    assert RUNS == ["ran-once"]


# -- a hook ending the job after a middleware raised ---------------------------------------------


@pytest.mark.parametrize(
    ("answer", "final"), [("kill", "failed"), ("discard", "failed"), (30, "retrying")]
)
def test_status_seen_as_retrying_is_corrected_when_the_hook_ends_the_job(
    config: cogworker.Config, r: redis.Redis, answer: Any, final: str
) -> None:
    """A middleware inside the status middleware raises before ``perform``: the status
    middleware records ``retrying`` (no decision was made yet). The hook consulted afterwards
    kills or discards the job: its status must end as ``failed``. A retry keeps
    ``retrying``."""
    config.concurrency = 1
    config.shutdown_timeout = 2.0
    HOOK["retry_in"] = answer
    status.enable(config, expiration=600)
    config.server_middleware.add(ExplodingMiddleware)  # added last: runs inside the status one
    manager = Manager(config, new_identity())
    jid = HookedJob.perform_async("never-performed")
    assert jid is not None
    with running(manager):
        wait_for(lambda: all_settled(r, manager) and counter(r, keys.STATS_FAILED) == 1)
    fields = status.get(jid, config=config)
    assert fields is not None
    assert fields["status"] == final
    assert fields["error_class"] == "LookupError"
    assert fields["error_message"] == "middleware exploded"
    assert RUNS == []
    outcome = {"kill": "killed", "discard": "discarded"}.get(str(answer), "retrying")
    assert [item["outcome"] for item in attempts_log(r, jid)] == [outcome]
    assert r.zcard(keys.DEAD) == (1 if answer == "kill" else 0)
    assert r.zcard(keys.RETRY) == (1 if answer == 30 else 0)
