"""What the ticker's tests (tests/test_worker_ticker*.py) share; not a test module.

``Ticking`` makes tickers over one config, as separate processes would run them, and drives
``Ticker.tick(now)`` with an injected time; ``clock`` is the fake ``time`` module the ticker
reads its backoff and blocked-slot timers from, so it follows that time and no test sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from runtime_support import AclServer, private_config, queue_jobs, release

import cogworker
from cogworker import keys
from cogworker.periodic.entries import Entry
from cogworker.worker import ticker as ticker_module
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager
from cogworker.worker.ticker import Ticker

T0 = 1_800_000_000  # a multiple of 3600: every */5 and per-second slot lines up with it
EVERY_5_MIN = "*/5 * * * * UTC"
EVERY_SECOND = "* * * * * * UTC"
SEEN_LOCKS: list[tuple[str, list[str]]] = []  # (jid, running locks) seen inside perform


class ReportJob(cogworker.Job):
    name = "PTick::Report"

    def perform(self, *args: Any) -> None:
        pass


class LockProbeJob(cogworker.Job):
    """Records the running locks that exist while it performs (inline mode)."""

    name = "PTick::LockProbe"

    def perform(self) -> None:
        client = cogworker.default_config().redis()
        held = [str(client.get(key)) for key in client.keys(keys.PERIODIC_RUNNING_PREFIX + "*")]
        SEEN_LOCKS.append((self.jid, held))


class FakeClock:
    """The ticker's ``time`` module: wall and monotonic time both follow ``now``."""

    def __init__(self) -> None:
        self.now = float(T0)

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(ticker_module, "time", fake)
    return fake


class Ticking:
    """Tickers over one config, each as a separate process would run it."""

    def __init__(self, cfg: cogworker.Config, clock: FakeClock) -> None:
        self.config = cfg
        self.clock = clock

    def ticker(self) -> Ticker:
        return Ticker(Manager(self.config, new_identity()), threading.Event())

    def tick(self, ticker: Ticker, at: float) -> None:
        self.clock.now = at
        ticker.tick(at)


@pytest.fixture
def ticking(config: cogworker.Config, clock: FakeClock) -> Ticking:
    return Ticking(config, clock)


@pytest.fixture
def acl_config(acl: AclServer) -> Iterator[cogworker.Config]:
    """A config whose connections run as the ACL user ``acl`` can restrict."""
    cfg = private_config(acl.worker_url)
    try:
        yield cfg
    finally:
        release(cfg)


def register(cfg: cogworker.Config, cron: str = EVERY_5_MIN, **options: Any) -> Entry:
    options.setdefault("args", ["r"])
    return cfg.periodic.register(cron, ReportJob, **options)


def lock_key(entry: Entry, slot: int) -> str:
    return keys.periodic_lock(entry.pjid, slot)


def last_slot(client: redis.Redis, entry: Entry) -> str | None:
    value = client.get(keys.periodic_last_slot(entry.pjid))
    return None if value is None else str(value)


def running_lock(client: redis.Redis, entry: Entry) -> str | None:
    value = client.get(keys.periodic_running(entry.pjid))
    return None if value is None else str(value)


def slots_queued(client: redis.Redis, queue: str = "default") -> list[int]:
    return [job["periodic_slot"] for job in queue_jobs(client, queue)]


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def failures_logged(caplog: pytest.LogCaptureFixture, entry: Entry) -> list[str]:
    return [m for m in messages(caplog) if m.startswith(f"Periodic tick: {entry.pjid} ")]
