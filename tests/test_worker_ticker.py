"""The cron ticker in-process: claims and the enqueue, push failures and their rollback.
Backoff, disabled entries, races, catch-up, blocked slots and the published schedule are in
test_worker_ticker_slots.py.

Each test drives ``Ticker.tick(now)`` with an injected time; the ticker's own clock (its
backoff and blocked-slot timers) is a fake that follows that time, so no test sleeps. Redis
is real and faults are real: ACL revocation of one command, keys of the wrong type, a
read-only replica, a stopped server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from runtime_support import (
    AclServer,
    fresh_runtime,
    private_config,
    queue_jobs,
    release,
    ttl_was_set_to,
)
from ticker_support import (
    EVERY_5_MIN,
    SEEN_LOCKS,
    T0,
    FakeClock,
    LockProbeJob,
    Ticking,
    acl_config,
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
from cogworker import keys, testing
from cogworker.local.server import RedisServer

# The shared fixtures, from ticker_support (named here so pytest finds them).
_fixtures = (clock, ticking, acl_config)


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, SEEN_LOCKS)


# -- claim and enqueue ---------------------------------------------------------------------------


def test_won_claim_enqueues_one_job_with_the_periodic_fields(
    ticking: Ticking, r: redis.Redis
) -> None:
    plain = register(ticking.config, args=["plain"])
    held = register(ticking.config, args=["held"], unique="until_executed", retry=3, queue="cron")
    ticker = ticking.ticker()
    started = time.monotonic()
    ticking.tick(ticker, T0 + 61)

    [job] = queue_jobs(r, "default")
    assert job["class"] == "PTick::Report" and job["args"] == ["plain"]
    assert (job["periodic_pjid"], job["periodic_slot"], job["retry"]) == (plain.pjid, T0, 0)
    assert "periodic_until_executed" not in job and "unique" not in job
    [cron_job] = queue_jobs(r, "cron")
    assert cron_job["periodic_until_executed"] is True
    assert (cron_job["periodic_pjid"], cron_job["periodic_slot"], cron_job["retry"]) == (
        held.pjid,
        T0,
        3,
    )
    assert "unique" not in cron_job
    for entry in (plain, held):
        assert last_slot(r, entry) == str(T0)
        assert r.get(lock_key(entry, T0)) == "1"
        assert 0 < r.ttl(lock_key(entry, T0)) <= 20
    assert running_lock(r, plain) is None
    assert running_lock(r, held) == cron_job["jid"]
    assert ttl_was_set_to(r, keys.periodic_running(held.pjid), 86_400, started)


def test_claim_writes_the_running_lock_before_the_push(ticking: Ticking, r: redis.Redis) -> None:
    """The lock exists when the push happens (a client middleware looks at it)."""
    entry = register(ticking.config, unique="until_executed")
    seen: list[tuple[str, str | None]] = []

    class Probe:
        def __call__(
            self,
            job_class: str,
            job: dict[str, Any],
            queue: str,
            client: redis.Redis,
            call_next: Callable[[], None],
        ) -> None:
            seen.append((job["jid"], running_lock(r, entry)))
            call_next()

    ticking.config.client_middleware.add(Probe)
    ticking.tick(ticking.ticker(), T0 + 1)
    [job] = queue_jobs(r, "default")
    assert seen == [(job["jid"], job["jid"])]


def test_running_lock_is_short_until_the_push_is_done(ticking: Ticking, r: redis.Redis) -> None:
    """A process killed between its claim and its push leaves a lock naming a job that never
    existed: it must close the entry for seconds, not for unique_lock_ttl. Once the job is
    queued the lock lasts unique_lock_ttl."""
    entry = register(ticking.config, unique="until_executed")
    ttl_during_push: list[int] = []

    class Probe:
        def __call__(
            self,
            job_class: str,
            job: dict[str, Any],
            queue: str,
            client: redis.Redis,
            call_next: Callable[[], None],
        ) -> None:
            ttl_during_push.append(r.ttl(keys.periodic_running(entry.pjid)))
            call_next()

    ticking.config.client_middleware.add(Probe)
    started = time.monotonic()
    ticking.tick(ticking.ticker(), T0 + 1)
    [job] = queue_jobs(r, "default")
    assert len(ttl_during_push) == 1 and 0 < ttl_during_push[0] <= 20
    assert running_lock(r, entry) == job["jid"]
    assert ttl_was_set_to(r, keys.periodic_running(entry.pjid), 86_400, started)


def test_fast_job_run_inline_releases_the_lock_it_found_written(
    ticking: Ticking, r: redis.Redis
) -> None:
    """In inline mode the job runs inside the push; its lock must already be there for it
    to release, so nothing is left holding the entry."""
    entry = ticking.config.periodic.register(EVERY_5_MIN, LockProbeJob, unique="until_executed")
    ticker = ticking.ticker()
    with testing.inline():
        ticking.tick(ticker, T0 + 1)
    [(jid, seen)] = SEEN_LOCKS
    assert seen == [jid]
    assert running_lock(r, entry) is None
    assert last_slot(r, entry) == str(T0)
    with testing.inline():
        ticking.tick(ticker, T0 + 301)  # not blocked by a leftover lock
    assert len(SEEN_LOCKS) == 2


def test_entry_queue_option_sends_the_job_there(ticking: Ticking, r: redis.Redis) -> None:
    register(ticking.config, queue="reports")
    ticking.tick(ticking.ticker(), T0 + 1)
    assert slots_queued(r, "reports") == [T0]
    assert r.llen(keys.queue("default")) == 0
    assert r.sismember(keys.QUEUES, "reports")


def test_script_cache_flush_is_survived(ticking: Ticking, r: redis.Redis) -> None:
    register(ticking.config)
    ticker = ticking.ticker()
    ticking.tick(ticker, T0 + 1)
    r.script_flush()
    ticking.tick(ticker, T0 + 301)
    assert slots_queued(r) == [T0, T0 + 300]


def test_client_middleware_changing_args_in_place_does_not_change_the_entry(
    ticking: Ticking, r: redis.Redis
) -> None:
    """A client middleware may edit the payload it is given (e.g. tag the arguments); the
    registered entry, its pjid and the next slot's payload must not change with it."""

    class Tag:
        def __call__(
            self,
            job_class: str,
            job: dict[str, Any],
            queue: str,
            client: redis.Redis,
            call_next: Callable[[], None],
        ) -> None:
            job["args"].append("tagged")
            call_next()

    entry = register(ticking.config, args=["a"])
    pjid = entry.pjid
    ticking.config.client_middleware.add(Tag)
    ticker = ticking.ticker()
    ticking.tick(ticker, T0 + 1)
    assert entry.args == ["a"] and entry.pjid == pjid
    ticking.tick(ticker, T0 + 301)
    assert [job["args"] for job in queue_jobs(r, "default")] == [["a", "tagged"]] * 2
    assert [job["periodic_pjid"] for job in queue_jobs(r, "default")] == [pjid, pjid]


# -- push failures and rollback ------------------------------------------------------------------


@pytest.mark.parametrize("previous", [T0 - 300, None])
def test_push_failure_rolls_back_and_the_slot_runs_on_a_later_tick(
    acl: AclServer,
    acl_config: cogworker.Config,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    previous: int | None,
) -> None:
    """The claim is undone in one script (last_slot back to the previous slot, or
    slot - 1 when there was none; slot lock deleted; running lock released)."""
    ticking = Ticking(acl_config, clock)
    entry = register(acl_config, unique="until_executed")
    admin_client = acl.admin
    if previous is not None:
        admin_client.set(keys.periodic_last_slot(entry.pjid), previous)
    acl.deny("lpush")
    ticker = ticking.ticker()
    ticking.tick(ticker, T0 + 1)

    assert admin_client.llen(keys.queue("default")) == 0
    assert last_slot(admin_client, entry) == str(previous if previous is not None else T0 - 1)
    assert admin_client.exists(lock_key(entry, T0)) == 0
    assert running_lock(admin_client, entry) is None
    [failure] = failures_logged(caplog, entry)
    assert "failed (next try in 5s)" in failure and "NoPermissionError" in failure

    acl.allow("lpush")
    ticking.tick(ticker, T0 + 5.5)  # still backing off: nothing is tried
    assert admin_client.llen(keys.queue("default")) == 0
    ticking.tick(ticker, T0 + 6.5)
    [job] = queue_jobs(admin_client, "default")
    assert job["periodic_slot"] == T0
    assert last_slot(admin_client, entry) == str(T0)
    assert running_lock(admin_client, entry) == job["jid"]
    ticking.tick(ticker, T0 + 12)
    assert admin_client.llen(keys.queue("default")) == 1


class StopServerOnPush:
    """Client middleware: the Redis server goes down while the push is on its way."""

    def __init__(self, server: RedisServer, once: list[bool]) -> None:
        self.server = server
        self.once = once

    def __call__(
        self,
        job_class: str,
        job: dict[str, Any],
        queue: str,
        client: redis.Redis,
        call_next: Callable[[], None],
    ) -> None:
        if not self.once:
            self.once.append(True)
            self.server.stop()
        call_next()


def test_rollback_failing_while_redis_is_down_is_retried_before_the_slot(
    redis_server_factory: Callable[..., RedisServer],
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The rollback is kept in memory and retried at the start of the next tick, so the
    slot (still recorded as claimed in the persisted data) runs once Redis is back."""
    server = redis_server_factory(config_lines=["appendonly yes", "appendfsync always"])
    cfg = private_config(server.url)
    admin_client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        ticking = Ticking(cfg, clock)
        entry = register(cfg, unique="until_executed")
        cfg.client_middleware.add(StopServerOnPush, server, [])
        ticker = ticking.ticker()
        ticking.tick(ticker, T0 + 1)
        assert any(f"couldn't roll back slot {T0} (will retry)" in m for m in messages(caplog))
        assert any("Periodic tick: Redis unavailable" in m for m in messages(caplog))

        server.start()  # the claim survived the restart: last_slot is this slot
        admin_client.connection_pool.disconnect()
        assert last_slot(admin_client, entry) == str(T0)
        ticking.tick(ticker, T0 + 6.5)  # unavailability: no backoff beyond 5 s
        [job] = queue_jobs(admin_client, "default")
        assert job["periodic_slot"] == T0
        assert running_lock(admin_client, entry) == job["jid"]
        ticking.tick(ticker, T0 + 12)
        assert admin_client.llen(keys.queue("default")) == 1
    finally:
        admin_client.close()
        release(cfg)


class ConcurrentWrites:
    """Client middleware: another party rewrites the entry's keys (from its own connection)
    while our push is on its way."""

    def __init__(self, admin_client: redis.Redis, writes: Callable[[redis.Redis], None]) -> None:
        self.admin = admin_client
        self.writes = writes

    def __call__(
        self,
        job_class: str,
        job: dict[str, Any],
        queue: str,
        client: redis.Redis,
        call_next: Callable[[], None],
    ) -> None:
        self.writes(self.admin)
        call_next()


def test_rollback_never_moves_last_slot_back_past_a_later_slot(
    acl: AclServer, acl_config: cogworker.Config, clock: FakeClock
) -> None:
    """Another process claimed a later slot meanwhile: it stays."""
    ticking = Ticking(acl_config, clock)
    entry = register(acl_config, unique="until_executed")
    later = T0 + 300
    acl_config.client_middleware.add(
        ConcurrentWrites,
        acl.admin,
        lambda c: c.set(keys.periodic_last_slot(entry.pjid), later),
    )
    acl.deny("lpush")
    ticking.tick(ticking.ticker(), T0 + 1)
    assert last_slot(acl.admin, entry) == str(later)
    assert acl.admin.exists(lock_key(entry, T0)) == 0
    assert running_lock(acl.admin, entry) is None


def test_rollback_with_wrong_typed_keys_counts_as_done(
    acl: AclServer,
    acl_config: cogworker.Config,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The last_slot and the running lock became lists: the rollback still completes (slot
    lock deleted), is not kept for retrying, and the entry claims again once they are fixed."""
    ticking = Ticking(acl_config, clock)
    entry = register(acl_config, unique="until_executed")

    def break_keys(c: redis.Redis) -> None:
        c.delete(keys.periodic_last_slot(entry.pjid), keys.periodic_running(entry.pjid))
        c.rpush(keys.periodic_last_slot(entry.pjid), "x")
        c.rpush(keys.periodic_running(entry.pjid), "x")

    acl_config.client_middleware.add(ConcurrentWrites, acl.admin, break_keys)
    acl.deny("lpush")
    ticker = ticking.ticker()
    ticking.tick(ticker, T0 + 1)
    assert acl.admin.exists(lock_key(entry, T0)) == 0
    assert not any("couldn't roll back" in m for m in messages(caplog))
    assert ticker._rollbacks == {}

    acl_config.client_middleware.remove(ConcurrentWrites)
    acl.admin.delete(keys.periodic_last_slot(entry.pjid), keys.periodic_running(entry.pjid))
    acl.allow("lpush")
    ticking.tick(ticker, T0 + 7)
    assert slots_queued(acl.admin) == [T0]
    assert not any("couldn't roll back" in m for m in messages(caplog))


def test_fractional_unique_lock_ttl_is_rounded_up(ticking: Ticking, r: redis.Redis) -> None:
    """A TTL of 3600.5 s is sent as 3601 (SET EX takes whole seconds only)."""
    ticking.config.unique_lock_ttl = 3600.5
    entry = register(ticking.config, unique="until_executed")
    started = time.monotonic()
    ticking.tick(ticking.ticker(), T0 + 1)
    assert slots_queued(r) == [T0]
    assert ttl_was_set_to(r, keys.periodic_running(entry.pjid), 3601, started)


def test_client_middleware_changing_the_jid_is_warned_about(
    ticking: Ticking, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The lock keeps the ticker's jid and expires on queued_ttl."""

    class NewJid:
        def __call__(
            self,
            job_class: str,
            job: dict[str, Any],
            queue: str,
            client: redis.Redis,
            call_next: Callable[[], None],
        ) -> None:
            job["jid"] = "f" * 24
            call_next()

    ticking.config.client_middleware.add(NewJid)
    entry = register(ticking.config, unique="until_executed")
    started = time.monotonic()
    ticking.tick(ticking.ticker(), T0 + 1)
    [job] = queue_jobs(r, "default")
    assert job["jid"] == "f" * 24
    original = running_lock(r, entry)
    assert original is not None and original != job["jid"]
    assert ttl_was_set_to(r, keys.periodic_running(entry.pjid), 86_400, started)
    warning = (
        f"periodic {entry.pjid}: a client middleware changed the job's jid ({original} -> "
        f"{'f' * 24}); its running lock won't be released by the job and keeps the entry "
        "closed for up to 86400s"
    )
    assert warning in messages(caplog)


def test_push_stopped_by_a_middleware_releases_the_running_lock(
    ticking: Ticking, r: redis.Redis
) -> None:
    """A client middleware that stops the push (no job) frees the running lock at once."""

    class Skip:
        def __call__(
            self,
            job_class: str,
            job: dict[str, Any],
            queue: str,
            client: redis.Redis,
            call_next: Callable[[], None],
        ) -> None:
            pass

    ticking.config.client_middleware.add(Skip)
    entry = register(ticking.config, unique="until_executed")
    ticker = ticking.ticker()
    ticking.tick(ticker, T0 + 1)
    assert r.llen(keys.queue("default")) == 0
    assert running_lock(r, entry) is None
    assert last_slot(r, entry) == str(T0)
    ticking.config.client_middleware.remove(Skip)
    ticking.tick(ticker, T0 + 301)  # not blocked
    assert slots_queued(r) == [T0 + 300]
