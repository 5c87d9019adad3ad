"""Taking one job ahead (reliable fetch): held in the in-progress list, run next by the first
thread that frees up, handed back to the tail of its queue when no thread takes it in time,
at quiet and at stop; never with basic fetch.

A real Manager against a real Redis; a gated job keeps the only processor thread busy.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
import redis
from conftest import wait_for
from runtime_support import Gate, all_settled, fresh_runtime, holds, performing, running

import cogworker
from cogworker import keys
from cogworker.identity import new_identity
from cogworker.worker import fetcher as fetcher_module
from cogworker.worker.manager import Manager

RUNS: list[str] = []
GATE = Gate()


class HeldJob(cogworker.Job):
    name = "TakeAhead::Held"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        if token == "held":
            GATE.pass_through()


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS, gate=GATE)


@pytest.fixture
def one_thread(config: cogworker.Config) -> cogworker.Config:
    config.concurrency = 1
    config.shutdown_timeout = 5.0
    return config


def push_three(r: redis.Redis) -> list[str]:
    """ "held" (runs and waits at the gate), then "second" and "third"; their raw payloads."""
    for token in ("held", "second", "third"):
        HeldJob.perform_async(token)
    return list(reversed(r.lrange(keys.queue("default"), 0, -1)))  # oldest first


def inprogress(r: redis.Redis, manager: Manager) -> list[str]:
    return list(r.lrange(keys.inprogress(manager.identity), 0, -1))


def test_a_busy_thread_runs_the_job_taken_ahead_next(
    one_thread: cogworker.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fetcher_module, "AHEAD_HOLD", 30.0)  # not handed back during the test
    held, second, third = push_three(r)
    manager = Manager(one_thread, new_identity())
    with running(manager):
        wait_for(lambda: RUNS == ["held"] and len(inprogress(r, manager)) == 2)
        # one job ahead, not more: it is listed in progress (a kill -9 recovers it), the
        # third stays on its queue for any process
        assert set(inprogress(r, manager)) == {held, second}
        assert r.lrange(keys.queue("default"), 0, -1) == [third]
        assert second in manager.ledger.running() and second not in performing(manager)
        GATE.open()
        wait_for(lambda: len(RUNS) == 3 and all_settled(r, manager))
    assert RUNS == ["held", "second", "third"]


def test_a_job_ahead_no_thread_takes_in_time_goes_back_to_run_next(
    one_thread: cogworker.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fetcher_module, "AHEAD_HOLD", 0.2)
    held, second, third = push_three(r)
    manager = Manager(one_thread, new_identity())
    with running(manager):
        wait_for(lambda: RUNS == ["held"])
        # handed back to the tail of its queue, where it is the next to be taken
        wait_for(lambda: r.lrange(keys.queue("default"), 0, -1) == [third, second])
        assert inprogress(r, manager) == [held]
        assert second not in manager.ledger.running()
        # taking ahead stops while the thread stays busy: nothing is taken again (watched
        # for ten hold times)
        holds(lambda: inprogress(r, manager) == [held], 10 * fetcher_module.AHEAD_HOLD)
        GATE.open()
        wait_for(lambda: len(RUNS) == 3 and all_settled(r, manager))
    assert RUNS == ["held", "second", "third"]


def test_quiet_hands_the_job_ahead_back(
    one_thread: cogworker.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fetcher_module, "AHEAD_HOLD", 30.0)
    _, second, third = push_three(r)
    manager = Manager(one_thread, new_identity())
    with running(manager):
        wait_for(lambda: RUNS == ["held"] and len(inprogress(r, manager)) == 2)
        manager.set_quiet(True)
        wait_for(lambda: r.lrange(keys.queue("default"), 0, -1) == [third, second])
        GATE.open()
        wait_for(lambda: all_settled(r, manager))
        assert RUNS == ["held"]  # the running job finished; nothing new started
        assert r.lrange(keys.queue("default"), 0, -1) == [third, second]


def test_stop_hands_the_job_ahead_back_without_calling_it_unfinished(
    one_thread: cogworker.Config,
    r: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(fetcher_module, "AHEAD_HOLD", 30.0)
    held, second, third = push_three(r)
    manager = Manager(one_thread, new_identity())
    manager.start()
    wait_for(lambda: RUNS == ["held"] and len(inprogress(r, manager)) == 2)
    caplog.set_level(logging.WARNING, logger="cogworker")
    stopper = threading.Thread(target=manager.stop)
    stopper.start()
    try:
        # the fetcher hands it back as it ends, while the held job still runs
        wait_for(lambda: r.lrange(keys.queue("default"), 0, -1) == [third, second])
        assert inprogress(r, manager) == [held]
    finally:
        GATE.open()
        stopper.join(10)
    assert not stopper.is_alive()
    assert RUNS == ["held"]
    assert r.llen(keys.inprogress(manager.identity)) == 0
    assert "unfinished at shutdown" not in caplog.text


def test_basic_fetch_never_takes_a_job_ahead(
    one_thread: cogworker.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fetcher_module, "AHEAD_HOLD", 30.0)
    one_thread.fetch = "basic"
    held, second, third = push_three(r)
    manager = Manager(one_thread, new_identity())
    with running(manager):
        wait_for(lambda: RUNS == ["held"])
        # with basic fetch a job taken is only in memory: none is taken before a thread is
        # free (watched for a second)
        holds(lambda: r.lrange(keys.queue("default"), 0, -1) == [third, second], 1.0)
        assert manager.ledger.running() == {held}
        GATE.open()
        wait_for(lambda: len(RUNS) == 3)
    assert RUNS == ["held", "second", "third"]
