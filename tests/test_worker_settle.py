"""Hardening of the processor and of the failure decision: bugs after a job ran, unusable
keys, interrupting when recording a failure fails, unstorable messages, class imports before
the threads start, the retry hook's answers, death hooks (the reconcile paths live in
test_hardening_recovery.py).

Every test runs a real Manager against a real Redis. Faults are provoked with Redis itself
(keys of the wrong type, a middleware making the job unserialisable); a monkeypatch appears
only where the case is a bug in our own code (a crash after the job ran, a raising
``max_retries``).

The status of a ``retry: false`` job that fails is checked in test_status_history.py, its
``max_retries(false) == 0`` in test_wire.py.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    ExplodingMiddleware,
    Gate,
    PoisonMiddleware,
    all_settled,
    attempts_log,
    counter,
    fresh_runtime,
    kill_session,
    pending_filing,
    queue_jobs,
    release,
    running,
    spawn_cogworker,
    stopped_at_teardown,
    zset_entries,
)

import cogworker
from cogworker import keys, registry, wire
from cogworker.fetch import Work
from cogworker.locks import unique_digest
from cogworker.worker import filing, recovery, scheduler
from cogworker.worker.filing import Filer
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager
from cogworker.worker.scheduler import Scheduler

RUNS: list[str] = []
THREADS: list[str] = []
GATE = Gate()
HOOK: dict[str, Any] = {}  # "retry_in": value or callable(count); "on_death": callable
RETRY_IN_CALLS: list[tuple[int, BaseException, dict[str, Any]]] = []
DEATHS: list[tuple[str, dict[str, Any], BaseException]] = []  # (who, entry, error)


class OkJob(cogworker.Job):
    name = "Hard::Ok"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        THREADS.append(threading.current_thread().name)


class FailJob(cogworker.Job, retry=3):
    name = "Hard::Fail"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        raise ValueError(f"boom {token}")


class NoRetryJob(cogworker.Job, retry=False):
    name = "Hard::NoRetry"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        raise KeyError("gone")


class HookedJob(cogworker.Job, retry=5):
    """Fails every time; its ``retry_in`` answers what the test put in HOOK."""

    name = "Hard::Hooked"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        THREADS.append(threading.current_thread().name)
        raise ValueError(f"hooked {token}")

    @classmethod
    def retry_in(cls, count: int, error: BaseException, job: dict[str, Any]) -> Any:
        RETRY_IN_CALLS.append((count, error, job))
        value = HOOK.get("retry_in")
        return value(count) if callable(value) else value

    @classmethod
    def retries_exhausted(cls, job: dict[str, Any], error: BaseException) -> None:
        DEATHS.append(("class", copy.deepcopy(job), error))
        action = HOOK.get("on_death")
        if action is not None:
            action(job, error)


class BrokenMessageError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("can't read my own message")


class BrokenMessageJob(cogworker.Job, retry=3):
    name = "Hard::BrokenMessage"

    def perform(self) -> None:
        RUNS.append("broken-message")
        raise BrokenMessageError()


class BadBytesJob(cogworker.Job, retry=3):
    name = "Hard::BadBytes"

    def perform(self, how: str) -> None:
        RUNS.append(how)
        if how == "bytes":
            raise ValueError(b"bad \xff")
        raise ValueError(b"bad \xff".decode("utf-8", "surrogateescape"))  # lone surrogate


class GatedJob(cogworker.Job, retry=3):
    name = "Hard::Gated"

    def perform(self, token: str) -> None:
        RUNS.append(token)
        GATE.pass_through()


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS, THREADS, HOOK, RETRY_IN_CALLS, DEATHS, gate=GATE)


@pytest.fixture
def small(config: cogworker.Config) -> cogworker.Config:
    config.concurrency = 1
    config.shutdown_timeout = 2.0
    return config


@pytest.fixture
def manager(small: cogworker.Config) -> Iterator[Manager]:
    yield from stopped_at_teardown(Manager(small, new_identity()))


def inprogress(manager: Manager) -> str:
    return keys.inprogress(manager.identity)


def nothing_left(r: redis.Redis, manager: Manager) -> None:
    """The job is nowhere: not queued, not in progress, not in retry or dead."""
    assert r.llen(keys.queue("default")) == 0
    assert r.llen(inprogress(manager)) == 0
    assert r.zcard(keys.RETRY) == 0
    assert r.zcard(keys.DEAD) == 0


def first_retry(r: redis.Redis, manager: Manager) -> tuple[dict[str, Any], float]:
    wait_for(lambda: r.zcard(keys.RETRY) == 1 and all_settled(r, manager))
    [(entry, score)] = zset_entries(r, keys.RETRY)
    return entry, score


def graduate_now(r: redis.Redis, client: redis.Redis) -> None:
    """Move the single retry entry onto its queue now (the real graduation script)."""
    [(_, score)] = zset_entries(r, keys.RETRY)
    assert scheduler.graduate_due(client, keys.RETRY, now=score + 1) == 1


def unique_lock(job_class: str, args: list[Any], queue: str = "default") -> str:
    return keys.unique(unique_digest({"class": job_class, "queue": queue, "args": args}))


# -- a bug after the job ran ---------------------------------------------------------------------


def test_bug_after_a_successful_run_still_acknowledges(
    manager: Manager,
    r: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_record(job_class: str, seconds: float, *, failed: bool) -> None:
        raise AttributeError("bug in the success bookkeeping")

    monkeypatch.setattr(manager.bookkeeper, "record_run", broken_record)
    with running(manager):
        jid = OkJob.perform_async("ran-once")
        wait_for(lambda: RUNS == ["ran-once"])
        wait_for(lambda: all_settled(r, manager))
    assert f"processing jid={jid} failed unexpectedly" in caplog.text
    nothing_left(r, manager)
    assert RUNS == ["ran-once"]


def test_bug_while_routing_a_failure_interrupts_into_dead(
    manager: Manager, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_route(self: Filer, job: Any, error: BaseException, run: Any) -> bool:
        raise AttributeError("bug in route_failure")

    monkeypatch.setattr(Filer, "route_failure", broken_route)
    handled: list[BaseException] = []
    manager.config.death_handlers = [lambda entry, error: handled.append(error)]
    with running(manager):
        jid = NoRetryJob.perform_async("routed-by-interrupt")
        wait_for(lambda: r.zcard(keys.DEAD) == 1 and all_settled(r, manager))
        wait_for(lambda: len(handled) == 1)
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["jid"] == jid
    assert entry["interrupted_count"] == 1
    assert entry["error_class"] == "KeyError"
    assert r.zcard(keys.RETRY) == 0
    assert r.llen(keys.queue("default")) == 0
    assert r.llen(inprogress(manager)) == 0
    assert isinstance(handled[0], KeyError)
    assert RUNS == ["routed-by-interrupt"]


@pytest.mark.parametrize("target", [keys.RETRY, keys.DEAD])
def test_bug_after_the_failure_was_filed_does_not_file_it_twice(
    manager: Manager, r: redis.Redis, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    """A bug in route_failure's after-steps (here the attempts log), once the retry / dead
    entry is written: falling back to interrupt would file the job a second time (two retry
    entries run it twice; two dead entries for one job)."""

    def broken_record(self: Filer, job: Any, attempt: int, outcome: str) -> None:
        raise AttributeError("bug in the attempts log")

    monkeypatch.setattr(Filer, "record_attempt", broken_record)
    job_class = FailJob if target == keys.RETRY else NoRetryJob
    with running(manager):
        jid = job_class.perform_async("filed-once")
        wait_for(lambda: r.zcard(target) >= 1 and all_settled(r, manager))
    assert [entry["jid"] for entry, _ in zset_entries(r, target)] == [jid]
    assert r.zcard(keys.RETRY) + r.zcard(keys.DEAD) == 1
    assert r.llen(keys.queue("default")) == 0
    assert RUNS == ["filed-once"]


# -- the workers hash is of the wrong type --------------------------------------------------------


def test_job_runs_when_the_workers_hash_is_a_string(manager: Manager, r: redis.Redis) -> None:
    r.set(keys.workers(manager.identity), "not a hash")
    with running(manager):
        OkJob.perform_async("registered-nowhere")
        wait_for(lambda: RUNS == ["registered-nowhere"])
        wait_for(lambda: all_settled(r, manager) and counter(r, keys.STATS_PROCESSED) == 1)
    nothing_left(r, manager)
    assert r.get(keys.STATS_FAILED) is None
    assert RUNS == ["registered-nowhere"]


# -- interrupting (recording the failure failed) --------------------------------------------------


def test_unserialisable_job_is_interrupted_from_the_original_payload(
    manager: Manager, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    manager.config.server_middleware.add(PoisonMiddleware)
    with running(manager):
        jid = FailJob.perform_async("nan")
        entry, score = first_retry(r, manager)
    assert entry["jid"] == jid
    assert "poisoned" not in entry  # built from the fetched payload, not the in-memory job
    assert entry["interrupted_count"] == 1
    assert entry["retry_count"] == 1
    assert entry["error_class"] == "ValueError"
    assert entry["error_message"] == "boom nan"
    assert score == pytest.approx(entry["failed_at"] + 30, abs=0.01)
    assert (
        f"fail: Hard::Fail jid={jid}: ValueError: boom nan; couldn't file it (ValueError: Out of "
        "range float values are not JSON compliant): retry 1/3 in 30s instead (interruption 1 "
        "of at most 3)"
    ) in caplog.text
    assert r.llen(keys.queue("default")) == 0
    assert RUNS == ["nan"]  # the loop is broken: it ran once and waits in retry


def test_interrupted_more_than_three_times_goes_to_dead(
    manager: Manager, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    manager.config.server_middleware.add(PoisonMiddleware)
    handled: list[dict[str, Any]] = []
    manager.config.death_handlers = [lambda entry, error: handled.append(entry)]
    with running(manager):
        jid = cogworker.Client(manager.config).push(
            {"class": FailJob.name, "args": ["fourth"], "retry": 25, "interrupted_count": 3}
        )
        wait_for(lambda: r.zcard(keys.DEAD) == 1 and all_settled(r, manager))
        wait_for(lambda: len(handled) == 1)
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["jid"] == jid
    assert entry["interrupted_count"] == 4
    assert r.zcard(keys.RETRY) == 0
    assert f"jid={jid}: ValueError: boom fourth; couldn't file it" in caplog.text
    assert "dead instead (interrupted more than 3 times)" in caplog.text
    assert handled[0]["jid"] == jid


@pytest.mark.parametrize(
    ("push", "hook"),
    [
        ({"class": NoRetryJob.name, "args": ["x"], "retry": False}, None),
        ({"class": FailJob.name, "args": ["x"], "retry": 2, "retry_count": 2}, None),
        ({"class": HookedJob.name, "args": ["x"], "retry": 10}, "kill"),
    ],
    ids=["retry-false", "attempt-past-budget", "hook-kill"],
)
def test_interrupt_of_a_job_with_no_retries_left_goes_to_dead(
    manager: Manager,
    r: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    push: dict[str, Any],
    hook: str | None,
) -> None:
    HOOK["retry_in"] = hook
    manager.config.server_middleware.add(PoisonMiddleware)
    with running(manager):
        jid = cogworker.Client(manager.config).push(push)
        wait_for(lambda: r.zcard(keys.DEAD) == 1 and all_settled(r, manager))
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["jid"] == jid
    assert entry["interrupted_count"] == 1
    assert entry["retry_count"] == push.get("retry_count", 0) + 1
    assert r.zcard(keys.RETRY) == 0
    assert f"jid={jid}: " in caplog.text
    assert "dead instead (no retries left)" in caplog.text


def test_interrupt_into_retry_extends_the_unique_lock(manager: Manager, r: redis.Redis) -> None:
    manager.config.server_middleware.add(PoisonMiddleware)
    jid = FailJob.set(unique="until_executed").perform_async("locked")
    lock = unique_lock(FailJob.name, ["locked"])
    assert r.get(lock) == jid
    r.expire(lock, 5)
    with running(manager):
        entry, _ = first_retry(r, manager)
    assert entry["interrupted_count"] == 1
    assert r.get(lock) == jid
    # 30 s interrupt delay + unique_lock_ttl
    assert 86_400 + 30 - 5 <= r.ttl(lock) <= 86_400 + 30


def test_interrupt_into_dead_releases_unique_and_running_locks(
    manager: Manager, r: redis.Redis
) -> None:
    manager.config.server_middleware.add(PoisonMiddleware)
    jid = cogworker.Client(manager.config).push(
        {
            "class": FailJob.name,
            "args": ["last-interrupt"],
            "retry": 25,
            "interrupted_count": 3,
            "unique": "until_executed",
            "periodic_pjid": "hard-pj-10",
        }
    )
    unique = unique_lock(FailJob.name, ["last-interrupt"])
    running_lock = keys.periodic_running("hard-pj-10")
    r.set(running_lock, str(jid), ex=300)
    other = keys.periodic_running("hard-pj-other")
    r.set(other, "somebody-else", ex=300)
    assert r.get(unique) == jid
    with running(manager):
        wait_for(lambda: r.zcard(keys.DEAD) == 1 and all_settled(r, manager))
    assert r.exists(unique) == 0
    assert r.exists(running_lock) == 0
    assert r.get(other) == "somebody-else"


# -- the interrupt write itself fails -----------------------------------------------------------


def test_unfileable_interrupt_is_remembered_then_filed_once_never_requeued(
    manager: Manager, r: redis.Redis
) -> None:
    r.set(keys.DEAD, "not a sorted set")  # route_failure's ZADD and the interrupt both fail
    errors: list[BaseException] = []
    manager.config.death_handlers = [lambda entry, error: errors.append(error)]
    with running(manager):
        jid = NoRetryJob.perform_async("pending-dead")
        wait_for(lambda: len(manager.ledger.pending()) == 1)
        [raw] = r.lrange(inprogress(manager), 0, -1)
        target = pending_filing(manager, raw).target
        assert target == keys.DEAD
        checks = Scheduler(manager)
        for _ in range(2):  # never treated as a stray
            checks.orphan_check()
            assert r.lrange(inprogress(manager), 0, -1) == [raw]
            assert r.llen(keys.queue("default")) == 0
        r.delete(keys.DEAD)
        checks.orphan_check()
        assert manager.ledger.pending() == {}
        [(entry, _)] = zset_entries(r, keys.DEAD)
        assert entry["jid"] == jid
        assert entry["error_class"] == "KeyError"
        assert r.llen(inprogress(manager)) == 0
        checks.orphan_check()  # nothing more to do: filed (and hooks run) once
    assert r.zcard(keys.DEAD) == 1
    assert len(errors) == 1 and isinstance(errors[0], recovery.JobFailedError)
    assert r.llen(keys.queue("default")) == 0
    assert RUNS == ["pending-dead"]


def test_bug_inside_interrupt_remembers_a_minimal_dead_entry(
    manager: Manager,
    r: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = wire.max_retries

    def max_retries(job: Any) -> int:
        if "interrupted_count" in job:  # only the call made inside interrupt
            raise RuntimeError("bug in max_retries")
        return real(job)

    monkeypatch.setattr(wire, "max_retries", max_retries)
    manager.config.server_middleware.add(PoisonMiddleware)
    with running(manager):
        jid = FailJob.perform_async("minimal")
        wait_for(lambda: len(manager.ledger.pending()) == 1)
        [raw] = r.lrange(inprogress(manager), 0, -1)
        filing = pending_filing(manager, raw)
        target, payload = filing.target, filing.payload
        assert target == keys.DEAD
        minimal = json.loads(payload)
        assert minimal["jid"] == jid
        assert minimal["error_class"] == "ValueError"
        assert minimal["error_message"] == "boom minimal"
        assert "poisoned" not in minimal
        line = (
            f"fail: Hard::Fail jid={jid}: ValueError: boom minimal; couldn't file it (ValueError: "
            "Out of range float values are not JSON compliant) nor interrupt it (RuntimeError: "
            "bug in max_retries): left in progress, filed into dead by the next reconcile"
        )
        wait_for(lambda: line in caplog.text)  # logged just after the settlement is remembered
        Scheduler(manager).orphan_check()  # reconcile files it
        assert manager.ledger.pending() == {}
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["jid"] == jid
    assert r.zcard(keys.RETRY) == 0
    assert r.llen(keys.queue("default")) == 0
    assert r.llen(inprogress(manager)) == 0
    assert RUNS == ["minimal"]


def test_a_minimal_dead_entry_that_cannot_be_the_job_wraps_the_raw_payload() -> None:
    """When the payload itself can't become the dead entry, the entry is the unparseable
    wrapper of its stored text, carrying the error and the jid read from it."""
    raw = '{"class":"Hard::Fail","jid":"j-minimal"}'  # no queue: not a job

    entry = json.loads(filing.last_resort_entry(Work.taken("", raw), ValueError("boom")))

    assert entry["class"] == "(unparseable)" and entry["jid"] == "j-minimal"
    assert (entry["error_class"], entry["error_message"]) == ("ValueError", "boom")
    assert entry["raw_payload"] == raw


def test_unparseable_payload_that_cannot_be_buried_does_not_stall_the_queue(
    manager: Manager, r: redis.Redis
) -> None:
    """An unparseable payload with the dead set unusable: burying its wrapper fails every
    time. Handing the payload back puts it next in line again, so a single thread would spin
    on it forever and the job behind it would never run; like any unrecordable failure it
    must be left in progress (filed by reconcile later) while the thread goes on."""
    handled: list[Any] = []
    manager.config.death_handlers = [lambda job, error: handled.append(job)]
    # a spin logs thousands of lines (with tracebacks) a second: count them, drop them
    spins: list[str] = []

    def count_spins(record: logging.LogRecord) -> bool:
        if "failed unexpectedly" in record.getMessage():
            spins.append(record.getMessage())
            return False
        return True

    logging.getLogger("cogworker").addFilter(count_spins)
    try:
        r.set(keys.DEAD, "not a sorted set")
        r.lpush(keys.queue("default"), "{not json")
        OkJob.perform_async("behind-the-garbage")
        with running(manager):
            wait_for(lambda: RUNS == ["behind-the-garbage"], timeout=3)
            wait_for(lambda: r.lrange(inprogress(manager), 0, -1) == ["{not json"])
            assert r.llen(keys.queue("default")) == 0
            r.delete(keys.DEAD)
            Scheduler(manager).orphan_check()  # reconcile files the remembered burial
            assert r.llen(inprogress(manager)) == 0
    finally:
        logging.getLogger("cogworker").removeFilter(count_spins)
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["class"] == "(unparseable)" and entry["raw_payload"] == "{not json"
    assert len(spins) <= 1
    assert handled == []  # no death hooks for an unparseable payload


# -- exception messages that can't be stored as they are ---------------------------------------


@pytest.mark.parametrize("how", ["bytes", "surrogate"])
def test_invalid_utf8_in_the_message_is_scrubbed(
    manager: Manager, r: redis.Redis, how: str
) -> None:
    with running(manager):
        cogworker.Client(manager.config).push({"class": BadBytesJob.name, "args": [how]})
        entry, _ = first_retry(r, manager)
    assert entry["error_message"] == "bad \ufffd"
    assert "interrupted_count" not in entry  # recorded normally
    assert list(RUNS) == [how]


def test_exception_whose_message_raises_is_recorded_by_class_name(
    manager: Manager, r: redis.Redis
) -> None:
    with running(manager):
        BrokenMessageJob.perform_async()
        entry, _ = first_retry(r, manager)
    assert entry["error_message"] == "#<BrokenMessageError>"
    assert entry["error_class"].endswith("BrokenMessageError")
    assert "interrupted_count" not in entry
    assert RUNS == ["broken-message"]


# A payload is valid JSON yet our encoder can't write it back: an escaped lone surrogate
# ("\\ud800", which a JavaScript producer emits for a broken string) decodes to a str that
# UTF-8 refuses. Like a NaN or an invalid message, recording its failure must not fail every time.

SURROGATE_JOB = json.dumps(
    {
        "class": "Hard::Fail",
        "args": ["\ud800"],
        "jid": "5e7707a7e5e7707a7e5e7707",
        "retry": 3,
        "queue": "default",
    }
)


def test_failure_of_a_payload_with_an_escaped_lone_surrogate_is_filed(
    manager: Manager, r: redis.Redis
) -> None:
    assert "\\ud800" in SURROGATE_JOB  # as stored: plain ASCII
    r.lpush(keys.queue("default"), SURROGATE_JOB)
    with running(manager):
        wait_for(lambda: len(RUNS) == 1)
        wait_for(lambda: r.zcard(keys.RETRY) == 1 and all_settled(r, manager), timeout=3)
        assert manager.ledger.pending() == {}
    [(entry, _)] = zset_entries(r, keys.RETRY)
    assert entry["jid"] == "5e7707a7e5e7707a7e5e7707"
    assert entry["retry_count"] == 1
    assert r.llen(keys.queue("default")) == 0


def test_an_unencodable_pending_failure_does_not_stop_the_shutdown_requeue(
    config: cogworker.Config, r: redis.Redis
) -> None:
    config.concurrency = 2
    manager = Manager(config, new_identity())
    r.lpush(keys.queue("default"), SURROGATE_JOB)
    with running(manager):
        wait_for(
            lambda: len(RUNS) == 1 and r.zcard(keys.RETRY) + len(manager.ledger.pending()) == 1
        )
        stuck = GatedJob.perform_async("stuck")
        wait_for(GATE.entered.is_set)
        manager.stop(0.2)  # "stuck" outlives the timeout: it must go back to its queue
    assert [job["jid"] for job in queue_jobs(r, "default")] == [stuck]
    assert r.lrange(inprogress(manager), 0, -1) in ([], [SURROGATE_JOB])


# -- job classes are imported before any thread starts ------------------------------------------

APP = textwrap.dedent(
    """
    import json
    import threading

    import cogworker

    _client = cogworker.default_config().redis()
    _client.set(
        "hard:threads_at_import", json.dumps(sorted(t.name for t in threading.enumerate()))
    )


    class LoadedJob(cogworker.Job):
        name = "Hard::Loaded"

        def perform(self, marker):
            cogworker.default_config().redis().set("hard:loaded:" + marker, "ran")
    """
)


def test_cli_loads_the_app_before_starting_any_thread(
    tmp_path: Path, r: redis.Redis, redis_url: str
) -> None:
    (tmp_path / "hard_app.py").write_text(APP)
    env = {**os.environ, "REDIS_URL": redis_url}
    log = tmp_path / "worker.out"
    worker = spawn_cogworker(["run", "-r", "hard_app.py", "-c", "2", "-t", "2"], tmp_path, log, env)
    try:
        producer = cogworker.Config(redis_url=redis_url)
        try:
            cogworker.Client(producer).push({"class": "Hard::Loaded", "args": ["m1"]})
        finally:
            release(producer)
        wait_for(lambda: r.get("hard:loaded:m1") == "ran", timeout=20)
        assert json.loads(r.get("hard:threads_at_import") or "null") == ["MainThread"]
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(15) == 0
    finally:
        if worker.poll() is None:
            kill_session(worker)
        print(log.read_text(errors="replace"))


def test_load_app_registers_job_classes_for_a_manager_started_later(
    tmp_path: Path, small: cogworker.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "hard_loaded_app.py"
    module.write_text(
        textwrap.dedent(
            """
            import cogworker

            RAN = []


            class EagerJob(cogworker.Job):
                name = "Hard::Eager"

                def perform(self, token):
                    RAN.append(token)
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(registry, "_classes", dict(registry._classes))
    with pytest.raises(registry.UnknownJobError):
        registry.resolve("Hard::Eager")
    registry.load_app(str(module))
    job_class = registry.resolve("Hard::Eager")  # registered before any thread exists
    assert job_class.__name__ == "EagerJob"
    assert registry.resolve("hard_loaded_app.EagerJob") is job_class
    manager = Manager(small, new_identity())
    with running(manager):
        cogworker.Client(small).push({"class": "Hard::Eager", "args": ["eager"]})
        wait_for(lambda: all_settled(r, manager) and counter(r, keys.STATS_PROCESSED) == 1)
    try:
        assert sys.modules["hard_loaded_app"].RAN == ["eager"]
    finally:
        sys.modules.pop("hard_loaded_app", None)


# -- the hook's delay ---------------------------------------------------------------------------


def test_hook_delays_are_used_exactly_with_counts_0_1_2(manager: Manager, r: redis.Redis) -> None:
    HOOK["retry_in"] = lambda count: 600 * 2**count
    with running(manager):
        jid = None
        for attempt, delay in enumerate((600, 1200, 2400)):
            before = time.time()  # taken before the run can start, so before it fails
            if attempt:
                graduate_now(r, manager.client)
            else:
                jid = HookedJob.perform_async("exact")
            wait_for(
                lambda n=attempt: (
                    r.zcard(keys.RETRY) == 1
                    and zset_entries(r, keys.RETRY)[0][0]["retry_count"] == n + 1
                )
            )
            after = time.time()
            [(entry, score)] = zset_entries(r, keys.RETRY)
            assert before + delay <= score <= after + delay  # no jitter
            assert "failure_outcome" not in entry
    assert [count for count, _, _ in RETRY_IN_CALLS] == [0, 1, 2]
    assert all(isinstance(error, ValueError) for _, error, _ in RETRY_IN_CALLS)
    assert [job["jid"] for _, _, job in RETRY_IN_CALLS] == [jid] * 3
    assert [item["outcome"] for item in attempts_log(r, str(jid))] == ["retrying"] * 3


@pytest.mark.parametrize("delay", [0, 1.5])
def test_hook_delay_zero_or_fractional(manager: Manager, r: redis.Redis, delay: float) -> None:
    HOOK["retry_in"] = delay
    with running(manager):
        HookedJob.perform_async("soon")
        entry, score = first_retry(r, manager)
    assert score - entry["failed_at"] == pytest.approx(delay, abs=1e-6)
    if delay == 0:  # due at once: the next poll moves it
        assert scheduler.graduate_due(r, keys.RETRY) == 1


@pytest.mark.parametrize(
    "value",
    [None, -5, "soon", math.nan, math.inf, -math.inf, "later", True, [30]],
    ids=["nil", "negative", "string", "nan", "inf", "-inf", "other-symbol", "bool", "list"],
)
def test_unusable_hook_values_fall_back_to_the_default_backoff(
    manager: Manager, r: redis.Redis, caplog: pytest.LogCaptureFixture, value: Any
) -> None:
    HOOK["retry_in"] = value
    with running(manager):
        jid = HookedJob.perform_async("fallback")
        entry, score = first_retry(r, manager)
    assert 16 - 1e-3 <= score - entry["failed_at"] <= 74 + 1e-3
    assert "interrupted_count" not in entry  # never an interrupt
    assert [item["outcome"] for item in attempts_log(r, str(jid))] == ["retrying"]
    warned = f"retry_in of Hard::Hooked returned {value!r} for jid={jid}; using the default"
    if value is None:
        assert "using the default backoff" not in caplog.text
    else:
        assert warned in caplog.text


def test_raising_hook_falls_back_to_the_default_backoff(
    manager: Manager, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(count: int) -> Any:
        raise RuntimeError("hook exploded")

    HOOK["retry_in"] = explode
    with running(manager):
        jid = HookedJob.perform_async("raising-hook")
        entry, score = first_retry(r, manager)
    assert 16 - 1e-3 <= score - entry["failed_at"] <= 74 + 1e-3
    assert entry["error_class"] == "ValueError"  # the job's error, not the hook's
    assert (
        f"retry_in of Hard::Hooked raised for jid={jid} (using the default backoff): "
        "RuntimeError: hook exploded"
    ) in caplog.text


# -- kill, discard, the last failure ---------------------------------------------------------


def test_kill_goes_to_dead_and_runs_hooks_once_class_first(
    manager: Manager, r: redis.Redis
) -> None:
    HOOK["retry_in"] = "kill"
    order: list[str] = []
    HOOK["on_death"] = lambda job, error: order.append("class")
    manager.config.death_handlers = [lambda job, error: order.append("handler")]
    with running(manager):
        jid = HookedJob.set(retry=10).perform_async("killed")
        wait_for(lambda: r.zcard(keys.DEAD) == 1 and all_settled(r, manager))
        wait_for(lambda: len(order) == 2)
    # the manager is stopped: every hook that was going to run has run
    assert order == ["class", "handler"]
    [(entry, _)] = zset_entries(r, keys.DEAD)
    assert entry["jid"] == jid
    assert entry["retry_count"] == 1
    assert "failure_outcome" not in entry
    assert r.zcard(keys.RETRY) == 0
    assert [item["outcome"] for item in attempts_log(r, str(jid))] == ["killed"]
    assert len(RETRY_IN_CALLS) == 1
    assert RUNS == ["killed"]


def test_discard_files_nothing_releases_the_lock_and_counts_a_failure(
    manager: Manager, r: redis.Redis
) -> None:
    HOOK["retry_in"] = "discard"
    handled: list[Any] = []
    manager.config.death_handlers = [lambda job, error: handled.append(job)]
    jid = HookedJob.set(unique="until_executed").perform_async("discarded")
    lock = unique_lock(HookedJob.name, ["discarded"])
    assert r.get(lock) == jid
    with running(manager):
        wait_for(lambda: RUNS == ["discarded"])
        wait_for(lambda: all_settled(r, manager) and counter(r, keys.STATS_FAILED) == 1)
    nothing_left(r, manager)
    assert r.exists(lock) == 0
    assert [item["outcome"] for item in attempts_log(r, str(jid))] == ["discarded"]
    assert DEATHS == [] and handled == []
    # the lock is free: the same job can be pushed again
    assert HookedJob.set(unique="until_executed").perform_async("discarded") is not None


def test_hook_is_not_consulted_on_the_last_failure(manager: Manager, r: redis.Redis) -> None:
    HOOK["retry_in"] = 5
    with running(manager):
        jid = HookedJob.set(retry=1).perform_async("twice")
        first_retry(r, manager)
        assert len(RETRY_IN_CALLS) == 1
        graduate_now(r, manager.client)
        wait_for(lambda: r.zcard(keys.DEAD) == 1 and all_settled(r, manager))
        HookedJob.set(retry=False).perform_async("no-retries")
        wait_for(lambda: r.zcard(keys.DEAD) == 2 and all_settled(r, manager))
    assert [count for count, _, _ in RETRY_IN_CALLS] == [0]  # only the first failure of "twice"
    assert [item["outcome"] for item in attempts_log(r, str(jid))] == ["retrying", "dead"]
    assert RUNS == ["twice", "twice", "no-retries"]


# -- death hooks ------------------------------------------------------------------------------


def test_hooks_see_the_stored_entry_and_their_copies_are_their_own(
    manager: Manager, r: redis.Redis
) -> None:
    HOOK["retry_in"] = "kill"

    def vandalise(job: dict[str, Any], error: BaseException) -> None:
        job["error_class"] = "Vandalised"
        job["args"].append("extra")

    HOOK["on_death"] = vandalise
    seen: list[dict[str, Any]] = []
    manager.config.death_handlers = [lambda job, error: seen.append(job)]
    with running(manager):
        jid = HookedJob.perform_async("stored")
        wait_for(lambda: r.zcard(keys.DEAD) == 1 and len(seen) == 1)
    [(stored, _)] = zset_entries(r, keys.DEAD)
    [(_, class_copy, error)] = DEATHS
    assert class_copy == stored  # as parsed back from the JSON written
    assert seen == [stored]  # the class hook's mutation reached neither
    assert stored["args"] == ["stored"] and stored["error_class"] == "ValueError"
    assert stored["jid"] == jid
    assert stored["error_message"] == "hooked stored"
    assert stored["retry_count"] == 1
    assert isinstance(stored["failed_at"], float)
    assert isinstance(error, ValueError)


def test_raising_or_exiting_hooks_are_isolated(
    manager: Manager, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    HOOK["retry_in"] = "kill"
    HOOK["on_death"] = lambda job, error: sys.exit(3)
    later: list[str] = []

    def failing_handler(job: dict[str, Any], error: BaseException) -> None:
        raise RuntimeError("handler broke")

    manager.config.death_handlers = [failing_handler, lambda job, error: later.append(job["jid"])]
    jid = HookedJob.set(unique="until_executed").perform_async("exiting")
    lock = unique_lock(HookedJob.name, ["exiting"])
    with running(manager):
        wait_for(lambda: len(later) == 1)
        OkJob.perform_async("next")  # the same thread goes on
        wait_for(lambda: "next" in RUNS and all_settled(r, manager))
    assert later == [jid]
    assert len(DEATHS) == 1
    assert r.zcard(keys.DEAD) == 1
    assert r.exists(lock) == 0
    assert f"retries_exhausted failed for jid={jid}: SystemExit" in caplog.text
    assert f"death handler failed for jid={jid}: RuntimeError: handler broke" in caplog.text
    assert THREADS == ["processor-0", "processor-0"]


def test_slow_death_hook_runs_after_the_job_left_the_in_progress_list(
    manager: Manager, r: redis.Redis
) -> None:
    HOOK["retry_in"] = "kill"
    listed_in_class_hook: list[int] = []
    HOOK["on_death"] = lambda job, error: listed_in_class_hook.append(r.llen(inprogress(manager)))
    hook_gate = Gate()
    manager.config.death_handlers = [lambda job, error: hook_gate.pass_through()]
    with running(manager):
        HookedJob.perform_async("slow-hook")
        wait_for(hook_gate.entered.is_set)
        # while the hook is held: the job is filed and no longer in progress anywhere
        assert r.llen(inprogress(manager)) == 0
        assert manager.ledger.running() == set()
        assert r.zcard(keys.DEAD) == 1
        assert r.llen(keys.queue("default")) == 0
        hook_gate.open()
    assert listed_in_class_hook == [0]


# -- the decision taken after a middleware raised ------------------------------------------------


@pytest.mark.parametrize("outcome", ["kill", "discard"])
def test_decision_after_a_middleware_raised(manager: Manager, r: redis.Redis, outcome: str) -> None:
    HOOK["retry_in"] = outcome
    manager.config.server_middleware.add(ExplodingMiddleware)
    jid = HookedJob.set(unique="until_executed").perform_async("never-performed")
    lock = unique_lock(HookedJob.name, ["never-performed"])
    with running(manager):
        wait_for(lambda: len(RETRY_IN_CALLS) == 1)
        wait_for(lambda: all_settled(r, manager) and counter(r, keys.STATS_FAILED) == 1)
    [(count, error, _)] = RETRY_IN_CALLS
    assert count == 0 and isinstance(error, LookupError)
    assert RUNS == []  # perform never ran
    assert r.zcard(keys.RETRY) == 0
    assert r.exists(lock) == 0
    if outcome == "kill":
        [(entry, _)] = zset_entries(r, keys.DEAD)
        assert entry["jid"] == jid
        assert entry["error_class"] == "LookupError"
        assert [item["outcome"] for item in attempts_log(r, str(jid))] == ["killed"]
    else:
        assert r.zcard(keys.DEAD) == 0
        assert [item["outcome"] for item in attempts_log(r, str(jid))] == ["discarded"]


# -- a retry series outlasting the unique lock --------------------------------------------------


def test_retry_extends_unique_and_running_locks_beyond_their_ttl(
    manager: Manager, r: redis.Redis
) -> None:
    HOOK["retry_in"] = 100_000
    jid = HookedJob.set(unique="until_executed", periodic_pjid="hard-pj-34").perform_async("far")
    unique = unique_lock(HookedJob.name, ["far"])
    running_lock = keys.periodic_running("hard-pj-34")
    r.set(running_lock, str(jid), ex=30)
    assert r.ttl(unique) <= 86_400
    with running(manager):
        first_retry(r, manager)
    for lock in (unique, running_lock):
        assert r.get(lock) == jid
        assert 100_000 + 86_400 - 10 <= r.ttl(lock) <= 100_000 + 86_400


# -- a death recorded by interrupt runs its hooks once --------------------------------------------


def test_interrupt_into_dead_runs_hooks_once_after_the_ack(
    manager: Manager, r: redis.Redis
) -> None:
    manager.config.server_middleware.add(PoisonMiddleware)
    seen: list[tuple[dict[str, Any], BaseException, int]] = []
    manager.config.death_handlers = [
        lambda job, error: seen.append((job, error, r.llen(inprogress(manager))))
    ]
    with running(manager):
        jid = NoRetryJob.perform_async("interrupted-death")
        wait_for(lambda: len(seen) == 1 and all_settled(r, manager))
        Scheduler(manager).orphan_check()  # nothing pending: reconcile files nothing again
    [(entry, _)] = zset_entries(r, keys.DEAD)
    [(hook_entry, error, listed)] = seen
    assert hook_entry["jid"] == entry["jid"] == jid
    assert isinstance(error, KeyError)
    assert listed == 0
    assert queue_jobs(r, "default") == []
