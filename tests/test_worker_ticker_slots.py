"""The cron ticker in-process, over time: backoff and unavailability, disabled entries,
races between tickers, catch-up, blocked slots, a tick with nothing to do, the published
schedule and the admin entry points. Claims and rollbacks are in test_worker_ticker.py.

Each test drives ``Ticker.tick(now)`` with an injected time; the ticker's own clock (its
backoff and blocked-slot timers) is a fake that follows that time, so no test sleeps. Redis
is real and faults are real: ACL revocation of one command, keys of the wrong type, a
read-only replica, a stopped server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    command_calls,
    commands_since,
    fresh_runtime,
    private_config,
    queue_jobs,
    release,
)
from ticker_support import (
    EVERY_5_MIN,
    EVERY_SECOND,
    SEEN_LOCKS,
    T0,
    FakeClock,
    Ticking,
    clock,
    failures_logged,
    last_slot,
    lock_key,
    messages,
    register,
    running_lock,
    slots_queued,
    ticking,
)

import cogworker
from cogworker import keys, locks
from cogworker.client import Client
from cogworker.local.server import RedisServer
from cogworker.periodic import admin
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager
from cogworker.worker.ticker import Ticker

# The shared fixtures, from ticker_support (named here so pytest finds them).
_fixtures = (clock, ticking)


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, SEEN_LOCKS)


# -- failures, backoff, unavailability -------------------------------------------------------------


def test_failing_entry_backs_off_exponentially_and_others_keep_firing(
    ticking: Ticking, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """One entry's claim fails (its last_slot is a hash); the other entry fires every
    slot; the failing one is retried after 5, 10, 20 ... 300, 300 s, and a success resets it."""
    broken = register(ticking.config, args=["broken"])
    register(ticking.config, args=["healthy"])
    r.hset(keys.periodic_last_slot(broken.pjid), "oops", "1")
    ticker = ticking.ticker()
    now = T0 + 1.0
    ticking.tick(ticker, now)
    delays = [5, 10, 20, 40, 80, 160, 300, 300]
    for expected, following in zip(delays, [*delays[1:], 300], strict=True):
        assert (
            failures_logged(caplog, broken)[-1]
            .split("(next try in ")[1]
            .startswith(f"{expected}s)")
        )
        logged = len(failures_logged(caplog, broken))
        ticking.tick(ticker, now + expected - 0.5)  # too early: not tried
        assert len(failures_logged(caplog, broken)) == logged
        now += expected
        ticking.tick(ticker, now)
        assert len(failures_logged(caplog, broken)) == logged + 1
        assert f"next try in {following}s" in failures_logged(caplog, broken)[-1]
    assert "WRONGTYPE" in failures_logged(caplog, broken)[-1]
    assert "(*/5 * * * * UTC)" in failures_logged(caplog, broken)[-1]
    # the healthy entry got every slot the ticks crossed, once each
    crossed = sorted({T0 + 300 * int((t - T0) // 300) for t in _tick_times(delays)})
    assert sorted(job["periodic_slot"] for job in queue_jobs(r, "default")) == crossed
    assert {job["args"][0] for job in queue_jobs(r, "default")} == {"healthy"}

    # repaired: its next try succeeds, and the backoff starts over at 5 s
    r.delete(keys.periodic_last_slot(broken.pjid))
    now += 300
    ticking.tick(ticker, now)
    assert [
        job["periodic_slot"] for job in queue_jobs(r, "default") if job["args"] == ["broken"]
    ] == [T0 + 300 * int((now - T0) // 300)]
    r.delete(keys.periodic_last_slot(broken.pjid))
    r.hset(keys.periodic_last_slot(broken.pjid), "oops", "1")
    now = (now // 300 + 1) * 300 + 1
    ticking.tick(ticker, now)
    assert "next try in 5s" in failures_logged(caplog, broken)[-1]


def _tick_times(delays: list[int]) -> list[float]:
    now, times = T0 + 1.0, [T0 + 1.0]
    for delay in delays:
        times += [now + delay - 0.5, now + delay]
        now += delay
    return times


def test_read_only_redis_is_unavailability_retried_every_5s_without_backoff(
    redis_server_factory: Callable[..., RedisServer],
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """READONLY (a replica) counts as unavailable: one outage line, a try every 5 s,
    no backoff; a tick with nothing to do doesn't announce a recovery; the first success does."""
    server = redis_server_factory()
    master = redis_server_factory()
    cfg = private_config(server.url)
    admin_client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        entry = register(cfg)
        ticking = Ticking(cfg, clock)
        ticker = ticking.ticker()
        admin_client.execute_command("REPLICAOF", "127.0.0.1", str(master.port))
        for offset in (1, 6, 11, 16):
            ticking.tick(ticker, T0 + offset)
            ticking.tick(ticker, T0 + offset + 2)  # nothing due: must not claim "recovered"
            assert not any("available again" in m for m in messages(caplog))
        outage = [m for m in messages(caplog) if m.startswith("Periodic tick: Redis unavailable")]
        # Redis 7 answers ReadOnlyError; 6.2 wraps "-READONLY" in a script error: both count
        assert len(outage) == 1 and ("ReadOnlyError" in outage[0] or "-READONLY" in outage[0])
        assert failures_logged(caplog, entry) == []  # no backoff report

        admin_client.execute_command("REPLICAOF", "NO", "ONE")
        ticking.tick(ticker, T0 + 21)
        assert slots_queued(admin_client) == [T0]
        recovered = [m for m in messages(caplog) if "available again" in m]
        assert len(recovered) == 1
        assert recovered[0].startswith("Periodic tick: Redis available again after 4 error(s)")
    finally:
        admin_client.close()
        release(cfg)


def test_redis_down_at_a_fire_time_the_slot_is_retried_within_5s(
    redis_server_factory: Callable[..., RedisServer],
    clock: FakeClock,
) -> None:
    """Unavailability is retried in 5 s, also when Redis is already unreachable
    when the ticker reads ``periodic:disabled`` and sends the claims: the slot must not wait
    for the entry's next fire time (300 s later, when it is no longer the slot)."""
    server = redis_server_factory()
    cfg = private_config(server.url)
    admin_client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        register(cfg)
        ticking = Ticking(cfg, clock)
        ticker = ticking.ticker()
        server.stop()
        # if this raises, the thread logs "Periodic tick failed" and goes on: judged by the
        # outcome, the slot
        with contextlib.suppress(redis.ConnectionError):
            ticking.tick(ticker, T0 + 1)
        server.start()
        admin_client.connection_pool.disconnect()
        ticking.tick(ticker, T0 + 6.5)
        assert slots_queued(admin_client) == [T0]
    finally:
        admin_client.close()
        release(cfg)


# -- disabled entries ------------------------------------------------------------------------------


def test_unreadable_disabled_set_is_treated_as_enabled(
    ticking: Ticking, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The disabled set can't be read: the entry ticks as enabled, and that is logged."""
    register(ticking.config)
    r.set(keys.PERIODIC_DISABLED, "not a set")
    ticking.tick(ticking.ticker(), T0 + 1)
    assert slots_queued(r) == [T0]
    [line] = [m for m in messages(caplog) if "periodic:disabled" in m]
    assert "can't read periodic:disabled" in line and "as enabled" in line


def test_disabled_entry_claims_nothing_and_re_enabling_does_not_burst(
    ticking: Ticking, r: redis.Redis
) -> None:
    """Disabled with the admin helpers: no job, no lock, last_slot kept; re-enabled, the
    entry fires its next slot only (no burst of the missed ones)."""
    entry = register(ticking.config, unique="until_executed")
    other = register(ticking.config, args=["other"])
    r.set(keys.periodic_last_slot(entry.pjid), T0 - 300)
    admin.disable(r, entry.pjid)
    first = ticking.ticker()
    ticking.tick(first, T0 + 1)
    assert slots_queued(r) == [T0]  # only the other entry
    assert [job["periodic_pjid"] for job in queue_jobs(r, "default")] == [other.pjid]
    assert last_slot(r, entry) == str(T0 - 300)
    assert running_lock(r, entry) is None
    assert r.exists(lock_key(entry, T0)) == 0
    ticking.tick(first, T0 + 301)
    assert last_slot(r, entry) == str(T0 - 300)

    admin.enable(r, entry.pjid)
    ticking.tick(first, T0 + 302)  # this process already decided about this slot
    assert [job["periodic_pjid"] for job in queue_jobs(r, "default")].count(entry.pjid) == 0
    second = ticking.ticker()  # a process that hasn't checked it yet may still claim it
    ticking.tick(second, T0 + 303)
    ticking.tick(first, T0 + 304)
    mine = [job for job in queue_jobs(r, "default") if job["periodic_pjid"] == entry.pjid]
    assert [job["periodic_slot"] for job in mine] == [T0 + 300]
    assert last_slot(r, entry) == str(T0 + 300)


# -- races, catch-up -------------------------------------------------------------------------------


def release_running_locks(r: redis.Redis) -> None:
    """What the worker does once the queued ``until_executed`` runs have run."""
    for job in queue_jobs(r, "default"):
        if job.get("periodic_until_executed"):
            locks.delete_if_owned(r, keys.periodic_running(job["periodic_pjid"]), job["jid"])


def test_two_tickers_racing_enqueue_every_slot_exactly_once(
    ticking: Ticking, r: redis.Redis
) -> None:
    """Two processes tick at the same moments, concurrently, for 40 per-second slots."""
    register(ticking.config, EVERY_SECOND, unique="until_executed")
    plain = register(ticking.config, EVERY_SECOND, args=["plain"])
    tickers = [ticking.ticker(), ticking.ticker()]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    release_lock = threading.Lock()

    def run(ticker: Ticker) -> None:
        try:
            for second in range(40):
                barrier.wait(10)
                if ticker is tickers[0]:
                    ticking.clock.now = T0 + second + 0.5
                barrier.wait(10)
                ticker.tick(T0 + second + 0.5)
                barrier.wait(10)
                if ticker is tickers[0]:
                    with release_lock:  # the job "ran": its lock goes (as the worker would)
                        release_running_locks(r)
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(ticker,)) for ticker in tickers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    jobs = queue_jobs(r, "default")
    for pjid in {job["periodic_pjid"] for job in jobs}:
        slots = sorted(job["periodic_slot"] for job in jobs if job["periodic_pjid"] == pjid)
        assert slots == [T0 + second for second in range(40)], pjid
    assert len(jobs) == 80
    assert plain.pjid in {job["periodic_pjid"] for job in jobs}


def test_same_ticker_same_slot_enqueues_once(ticking: Ticking, r: redis.Redis) -> None:
    register(ticking.config)
    ticker = ticking.ticker()
    for offset in (1, 2, 100, 299.9):
        ticking.tick(ticker, T0 + offset)
    assert slots_queued(r) == [T0]


def test_cold_start_without_catch_up_primes_even_with_two_racing_tickers(
    ticking: Ticking, r: redis.Redis
) -> None:
    """Nothing is enqueued for the current slot; both processes have decided (their next
    tick in the slot sends nothing); the next slot fires exactly once."""
    ticking.config.periodic_catch_up = False
    entry = register(ticking.config, unique="until_executed")
    tickers = [ticking.ticker(), ticking.ticker()]
    ticking.clock.now = T0 + 1
    barrier = threading.Barrier(2)
    threads = [
        threading.Thread(target=lambda t=ticker: (barrier.wait(10), t.tick(T0 + 1)))
        for ticker in tickers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert r.llen(keys.queue("default")) == 0
    assert last_slot(r, entry) == str(T0)
    assert running_lock(r, entry) is None
    assert r.exists(lock_key(entry, T0)) == 0

    before = command_calls(r)
    for ticker in tickers:
        ticking.tick(ticker, T0 + 2)
    assert commands_since(r, before) == {}

    for ticker in tickers:
        ticking.tick(ticker, T0 + 301)
    assert slots_queued(r) == [T0 + 300]


def test_without_catch_up_an_entry_with_a_last_slot_still_catches_up_once(
    ticking: Ticking, r: redis.Redis
) -> None:
    ticking.config.periodic_catch_up = False
    entry = register(ticking.config)
    r.set(keys.periodic_last_slot(entry.pjid), T0 - 3000)
    ticker = ticking.ticker()
    ticking.tick(ticker, T0 + 1)
    ticking.tick(ticking.ticker(), T0 + 2)
    assert slots_queued(r) == [T0]


def test_with_catch_up_a_fresh_redis_fires_every_entry_once(
    ticking: Ticking, r: redis.Redis
) -> None:
    register(ticking.config, args=["a"])
    register(ticking.config, "0 0 1 1 * UTC", args=["yearly"])
    ticking.tick(ticking.ticker(), T0 + 1)
    assert sorted(slots_queued(r)) == [1798761600, T0]  # 2027-01-01T00:00Z and this slot


# -- blocked slots ---------------------------------------------------------------------------------


def test_blocked_slot_fires_once_the_lock_is_gone(ticking: Ticking, r: redis.Redis) -> None:
    """A blocked slot is not recorded (last_slot unchanged), is tried again, and fires once
    the lock is gone."""
    entry = register(ticking.config, unique="until_executed")
    r.set(keys.periodic_running(entry.pjid), "previous-run")
    ticker = ticking.ticker()
    ticking.tick(ticker, T0 + 1)
    ticking.tick(ticker, T0 + 2.5)
    assert r.llen(keys.queue("default")) == 0
    assert last_slot(r, entry) is None
    assert r.exists(lock_key(entry, T0)) == 0
    r.delete(keys.periodic_running(entry.pjid))
    ticking.tick(ticker, T0 + 4)
    [job] = queue_jobs(r, "default")
    assert job["periodic_slot"] == T0 and running_lock(r, entry) == job["jid"]


def test_blocked_slot_is_skipped_after_15s(ticking: Ticking, r: redis.Redis) -> None:
    entry = register(ticking.config, unique="until_executed")
    r.set(keys.periodic_running(entry.pjid), "previous-run")
    ticker = ticking.ticker()
    for offset in range(1, 16):
        ticking.tick(ticker, T0 + offset)
    assert ticker._states[entry.pjid].checked_slot is None  # still being retried
    ticking.tick(ticker, T0 + 16.5)  # 15.5 s after it was first found blocked
    r.delete(keys.periodic_running(entry.pjid))
    before = command_calls(r)
    ticking.tick(ticker, T0 + 20)
    assert commands_since(r, before) == {}  # decided: skipped
    assert r.llen(keys.queue("default")) == 0
    ticking.tick(ticker, T0 + 301)
    assert slots_queued(r) == [T0 + 300]


def test_own_deferred_release_runs_before_claiming(ticking: Ticking, r: redis.Redis) -> None:
    """A release this process couldn't send earlier lands first, so the slot isn't
    blocked by our own stale lock."""
    entry = register(ticking.config, unique="until_executed")
    r.set(keys.periodic_running(entry.pjid), "finished-run")
    locks.deferred.add(keys.periodic_running(entry.pjid), "finished-run")
    ticking.tick(ticking.ticker(), T0 + 1)
    [job] = queue_jobs(r, "default")
    assert job["periodic_slot"] == T0 and running_lock(r, entry) == job["jid"]
    assert len(locks.deferred) == 0


# -- a tick with nothing to do ---------------------------------------------------------------------


def test_tick_without_a_new_slot_sends_no_command_and_logs_nothing(
    redis_server_factory: Callable[..., RedisServer],
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tick that sent no command to Redis never logs "available again"."""
    server = redis_server_factory()
    cfg = private_config(server.url)
    admin_client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        register(cfg, args=["a"])
        register(cfg, "*/10 * * * * UTC", args=["b"], unique="until_executed")
        ticking = Ticking(cfg, clock)
        ticker = ticking.ticker()
        ticking.tick(ticker, T0 + 1)
        assert admin_client.llen(keys.queue("default")) == 2
        caplog.clear()
        caplog.set_level(logging.DEBUG)
        before = command_calls(admin_client)
        for offset in (1.5, 2, 60, 299.999):
            ticking.tick(ticker, T0 + offset)
        assert commands_since(admin_client, before) == {}
        assert caplog.records == []
        ticking.tick(ticker, T0 + 300)
        assert commands_since(admin_client, before) != {}
        assert admin_client.llen(keys.queue("default")) == 3
    finally:
        admin_client.close()
        release(cfg)


# -- the published schedule, the thread ------------------------------------------------------------


def published(r: redis.Redis) -> dict[str, dict[str, Any]]:
    return {str(k): json.loads(v) for k, v in r.hgetall(keys.PERIODIC_SCHEDULE).items()}


def test_start_publishes_the_entries_and_replace_publishes_exactly_them(
    config: cogworker.Config, r: redis.Redis
) -> None:
    r.hset(keys.PERIODIC_SCHEDULE, "stale", json.dumps({"cron": "@daily", "class": "Old"}))
    plain = register(config, args=["p"])
    queued = register(
        config,
        "0 9 * * * Europe/Berlin",
        args=[1, 2.0],
        unique="until_executed",
        retry=2,
        queue="cron",
    )
    first = Ticker(Manager(config, new_identity()), threading.Event())
    first.start()
    first.stop()
    assert set(published(r)) == {"stale", plain.pjid, queued.pjid}

    config.periodic.replace = True
    second = Ticker(Manager(config, new_identity()), threading.Event())
    second.start()
    second.stop()
    values = published(r)
    assert set(values) == {plain.pjid, queued.pjid}
    assert values[plain.pjid] == {
        "cron": EVERY_5_MIN,
        "class": "PTick::Report",
        "retry": 0,
        "unique": None,
        "args": ["p"],
    }
    assert values[queued.pjid] == {
        "cron": "0 9 * * * Europe/Berlin",
        "class": "PTick::Report",
        "retry": 2,
        "unique": "until_executed",
        "args": [1, 2.0],
        "queue": "cron",
    }
    assert r.hget(keys.PERIODIC_SCHEDULE, queued.pjid) == (
        '{"cron":"0 9 * * * Europe/Berlin","class":"PTick::Report","retry":2,'
        '"unique":"until_executed","args":[1,2.0],"queue":"cron"}'
    )


def test_replace_with_no_entries_empties_the_published_schedule(
    config: cogworker.Config, r: redis.Redis
) -> None:
    r.hset(keys.PERIODIC_SCHEDULE, "stale", "{}")
    config.periodic.replace = True
    ticker = Ticker(Manager(config, new_identity()), threading.Event())
    ticker.start()
    ticker.stop()
    assert r.exists(keys.PERIODIC_SCHEDULE) == 0


def test_publish_failure_is_logged_and_the_thread_ticks_once_ready(
    config: cogworker.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """On the real thread and clock: the schedule can't be written (wrong type), the
    error is logged, and once the process is ready a per-second entry fires."""
    r.set(keys.PERIODIC_SCHEDULE, "not a hash")
    register(config, EVERY_SECOND)
    ready = threading.Event()
    ticker = Ticker(Manager(config, new_identity()), ready)
    ticker.start()
    try:
        assert any(m.startswith("Periodic schedule not published: ") for m in messages(caplog))
        assert r.llen(keys.queue("default")) == 0  # not ready: no tick
        ready.set()
        wait_for(lambda: r.llen(keys.queue("default")) >= 2, timeout=5)
    finally:
        ticker.stop()
    slots = slots_queued(r)
    assert len(set(slots)) == len(slots)


# -- admin -----------------------------------------------------------------------------------------


def test_admin_entries_disable_enable_and_run_now(config: cogworker.Config, r: redis.Redis) -> None:
    plain = register(config, args=["p"], retry=4, queue="reports")
    zoned = register(config, "0 9 * * * Europe/Berlin", args=["z"], unique="until_executed")
    ticker = Ticker(Manager(config, new_identity()), threading.Event())
    ticker.start()
    ticker.stop()
    r.hset(
        keys.PERIODIC_SCHEDULE,
        "f" * 40,
        json.dumps(
            {"cron": "0 0 * * * &", "class": "Ruby::Only", "retry": 0, "unique": None, "args": []}
        ),
    )
    r.set(keys.periodic_last_slot(plain.pjid), T0)
    admin.disable(r, zoned.pjid)

    found = {entry.pjid: entry for entry in admin.entries(r)}
    assert set(found) == {plain.pjid, zoned.pjid, "f" * 40}
    assert (found[plain.pjid].job, found[plain.pjid].queue, found[plain.pjid].retry) == (
        "PTick::Report",
        "reports",
        4,
    )
    assert found[plain.pjid].last_slot == T0 and not found[plain.pjid].disabled
    assert found[zoned.pjid].disabled and found[zoned.pjid].last_slot is None
    assert found[zoned.pjid].unique == "until_executed"
    next_run = found[zoned.pjid].next_run
    assert next_run is not None and zoned.schedule.slot(next_run) == next_run
    assert found["f" * 40].next_run is None  # a cron this process can't read
    admin.enable(r, zoned.pjid)
    assert not any(entry.disabled for entry in admin.entries(r))

    client = Client(config)
    jid = admin.run_now(client, plain.pjid)
    [job] = queue_jobs(r, "reports")
    assert job["jid"] == jid and job["args"] == ["p"] and job["retry"] == 4
    assert not any(key.startswith("periodic_") for key in job)
    assert r.exists(keys.periodic_running(plain.pjid)) == 0
    assert last_slot(r, plain) == str(T0)
    with pytest.raises(KeyError):
        admin.run_now(client, "0" * 40)
