"""A failure is one log record that says what the failure led to, with the job's traceback
on indented continuation lines of that record (cogworker's own frames left out); every other
record is one line.

The runs use a real Manager against a real Redis, logging through the same formatter a
worker installs (``logs.LineFormatter``); one test reads a real worker process's output.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    PoisonMiddleware,
    Worker,
    all_settled,
    cogworker_env,
    cogworker_logging_to,
    counter,
    fresh_runtime,
    release,
    running,
    stopped_at_teardown,
    zset_entries,
)

import cogworker
from cogworker import keys, logs
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager
from cogworker.worker.scheduler import Scheduler

HEAD = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ pid=\d+ tid=\S+ (DEBUG|INFO|WARNING|ERROR): ")
OWN_DIR = str(Path(cogworker.__file__).resolve().parent)
THIS_FILE = str(Path(__file__).resolve())
HOOK: dict[str, Any] = {}


def explode(token: str) -> None:
    raise ValueError(f"boom {token}")


class FailJob(cogworker.Job, retry=3):
    name = "LogLines::Fail"

    def perform(self, token: str) -> None:
        explode(token)


class NoRetryJob(cogworker.Job, retry=False):
    name = "LogLines::NoRetry"

    def perform(self, token: str) -> None:
        explode(token)


class HookedJob(cogworker.Job, retry=5):
    name = "LogLines::Hooked"

    def perform(self, token: str) -> None:
        explode(token)

    @classmethod
    def retry_in(cls, count: int, error: BaseException, job: dict[str, Any]) -> Any:
        return HOOK.get("retry_in")


class ChainedJob(cogworker.Job, retry=3):
    name = "LogLines::Chained"

    def perform(self, token: str) -> None:
        try:
            explode(token)
        except ValueError as cause:
            raise RuntimeError("while chaining") from cause


class OkJob(cogworker.Job):
    name = "LogLines::Ok"

    def perform(self, token: str) -> None:
        pass


class UserMiddleware:
    """The application's own middleware: its frame belongs in the traceback."""

    def __call__(
        self, worker: Any, job: dict[str, Any], queue: str, call_next: Callable[[], None]
    ) -> None:
        call_next()


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, HOOK)


@pytest.fixture
def manager(config: cogworker.Config) -> Iterator[Manager]:
    config.concurrency = 1
    config.shutdown_timeout = 2.0
    yield from stopped_at_teardown(Manager(config, new_identity()))


@contextlib.contextmanager
def formatted_log() -> Iterator[io.StringIO]:
    """What the ``cogworker`` logger writes inside the block, formatted as a worker does."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.LineFormatter())
    with cogworker_logging_to(handler, logging.INFO):
        yield stream


def records(text: str) -> list[list[str]]:
    """The records of a log, each as its lines: a record starts with a timestamped line,
    and every other line must be an indented continuation of the one before."""
    found: list[list[str]] = []
    for line in text.splitlines():
        if HEAD.match(line):
            found.append([line])
        else:
            assert line.startswith(logs.CONTINUATION), (
                f"neither a record nor a continuation: {line}"
            )
            assert found, "a continuation line before any record"
            found[-1].append(line)
    return found


def the_record(text: str, fragment: str) -> list[str]:
    [record] = [record for record in records(text) if fragment in record[0]]
    return record


def frames(record: list[str]) -> list[str]:
    """The ``File "...", line N, in name`` lines of a record's traceback."""
    return [line.strip() for line in record[1:] if line.strip().startswith('File "')]


def assert_user_traceback(record: list[str], last: str) -> None:
    """The traceback shows this file's frames, none of cogworker's, and ends with ``last``."""
    shown = frames(record)
    assert shown, record
    assert all(OWN_DIR not in frame for frame in shown), record
    assert any(THIS_FILE in frame and "in perform" in frame for frame in shown), record
    assert any("in explode" in frame for frame in shown), record
    assert record[1] == logs.CONTINUATION + "Traceback (most recent call last):"
    assert record[-1] == logs.CONTINUATION + last


def run_until(r: redis.Redis, manager: Manager, done: Callable[[], bool]) -> None:
    with running(manager, stop_timeout=2.0):
        wait_for(lambda: done() and all_settled(r, manager))


# -- what a failure led to ----------------------------------------------------------------------


def test_a_retried_failure_says_which_retry_and_when(manager: Manager, r: redis.Redis) -> None:
    with formatted_log() as log:
        jid = FailJob.perform_async("r1")
        run_until(r, manager, lambda: r.zcard(keys.RETRY) == 1)
    [(entry, score)] = zset_entries(r, keys.RETRY)
    delay = round(score - entry["failed_at"])
    record = the_record(log.getvalue(), "fail: ")
    assert record[0].endswith(
        f"WARNING: fail: LogLines::Fail jid={jid}: ValueError: boom r1; retry 1/3 in {delay}s"
    )
    assert 16 <= delay <= 74
    assert_user_traceback(record, "ValueError: boom r1")


@pytest.mark.parametrize(
    ("push", "hook", "fate"),
    [
        ({"retry": 2, "retry_count": 2}, None, "dead (retries exhausted)"),
        ({"retry": False}, None, "dead (retries disabled)"),
        ({"retry": 5}, "kill", "dead (retry_in returned kill)"),
        ({"retry": 5}, "discard", "discarded (retry_in returned discard)"),
        ({"retry": 5}, 1.5, "retry 1/5 in 1.5s"),
        ({"retry": 5}, 600, "retry 1/5 in 600s"),
    ],
    ids=["exhausted", "retry-false", "kill", "discard", "fractional-delay", "hook-delay"],
)
def test_every_fate_is_named_on_the_failure_line(
    manager: Manager, r: redis.Redis, push: dict[str, Any], hook: Any, fate: str
) -> None:
    HOOK["retry_in"] = hook
    job_class = HookedJob if hook is not None else FailJob
    with formatted_log() as log:
        jid = cogworker.Client(manager.config).push(
            {"class": job_class.name, "args": ["fated"], **push}
        )
        run_until(r, manager, lambda: counter(r, keys.STATS_FAILED) == 1)
    record = the_record(log.getvalue(), "fail: ")
    assert record[0].endswith(f"fail: {job_class.name} jid={jid}: ValueError: boom fated; {fate}")
    assert_user_traceback(record, "ValueError: boom fated")


def test_an_interrupted_failure_says_what_was_done_instead(
    manager: Manager, r: redis.Redis
) -> None:
    manager.config.server_middleware.add(PoisonMiddleware)
    with formatted_log() as log:
        jid = FailJob.perform_async("nan")
        run_until(r, manager, lambda: r.zcard(keys.RETRY) == 1)
    record = the_record(log.getvalue(), "fail: ")
    assert record[0].endswith(
        f"ERROR: fail: LogLines::Fail jid={jid}: ValueError: boom nan; couldn't file it "
        "(ValueError: Out of range float values are not JSON compliant): retry 1/3 in 30s "
        "instead (interruption 1 of at most 3)"
    )
    assert_user_traceback(record, "ValueError: boom nan")
    # one event, one record: nothing else is logged about this job
    told = [rec[0] for rec in records(log.getvalue()) if f"jid={jid}" in rec[0]]
    assert len(told) == 2 and "INFO: start: " in told[0] and record[0] == told[1]


# -- the traceback --------------------------------------------------------------------------------


def test_the_application_middleware_and_chained_causes_stay_in_the_traceback(
    manager: Manager, r: redis.Redis
) -> None:
    manager.config.server_middleware.add(UserMiddleware)
    with formatted_log() as log:
        ChainedJob.perform_async("chained")
        run_until(r, manager, lambda: r.zcard(keys.RETRY) == 1)
    record = the_record(log.getvalue(), "fail: ")
    assert "fail: LogLines::Chained" in record[0]
    shown = frames(record)
    assert sum("in __call__" in frame and THIS_FILE in frame for frame in shown) == 1
    assert all(OWN_DIR not in frame for frame in shown)
    body = "\n".join(record)
    assert "ValueError: boom chained" in body
    assert "The above exception was the direct cause" in body
    assert record[-1] == logs.CONTINUATION + "RuntimeError: while chaining"


def test_an_unknown_class_keeps_the_one_frame_that_raised(manager: Manager, r: redis.Redis) -> None:
    with formatted_log() as log:
        cogworker.Client(manager.config).push(
            {"class": "LogLines::Missing", "args": [], "retry": False}
        )
        run_until(r, manager, lambda: r.zcard(keys.DEAD) == 1)
    record = the_record(log.getvalue(), "fail: ")
    assert "fail: LogLines::Missing jid=" in record[0]
    assert record[0].endswith("; dead (retries disabled)")
    assert len(frames(record)) == 1
    assert "UnknownJobError" in record[-1]


def test_a_bug_in_cogworker_keeps_cogworker_frames(
    manager: Manager, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_record(job_class: str, seconds: float, **outcome: object) -> None:
        raise AttributeError("bug in the bookkeeping")

    monkeypatch.setattr(manager.bookkeeper, "record_run", broken_record)
    with formatted_log() as log:
        jid = OkJob.perform_async("ok")
        run_until(r, manager, lambda: "failed unexpectedly" in log.getvalue())
    record = the_record(log.getvalue(), "failed unexpectedly")
    assert record[0].endswith(
        f"ERROR: processing jid={jid} failed unexpectedly (AttributeError: bug in the "
        "bookkeeping); it is acknowledged"
    )
    assert any(OWN_DIR in frame and "settle.py" in frame for frame in frames(record))
    assert record[-1] == logs.CONTINUATION + "AttributeError: bug in the bookkeeping"


# -- records without an exception: one line each ---------------------------------------------


def test_burials_are_one_line_and_print_invalid_bytes_as_escapes(
    manager: Manager, r: redis.Redis, redis_url: str
) -> None:
    raw_client = redis.Redis.from_url(redis_url)
    try:
        raw_client.lpush(
            keys.queue("default"), b'{"class":"X","args":"x","queue":"default","jid":"j1"}'
        )
        raw_client.zadd(keys.SCHEDULE, {b"\xff not text\nsecond line": 1.0})
        with formatted_log() as log, running(manager, stop_timeout=2.0):
            Scheduler(manager).poll_once()
            wait_for(lambda: r.zcard(keys.DEAD) == 2 and all_settled(r, manager))
    finally:
        raw_client.close()
    text = log.getvalue()
    text.encode("utf-8")  # writable to any UTF-8 log file
    burial = the_record(text, "on queue default")
    assert len(burial) == 1
    assert burial[0].endswith(
        "ERROR: unparseable payload on queue default moved to dead as jid=j1: TypeError: args "
        'must be a list, got "x"'
    )
    scheduled = the_record(text, "unparseable entry in cogworker:schedule")
    assert len(scheduled) == 1
    assert "UnicodeDecodeError: not valid UTF-8" in scheduled[0]
    assert scheduled[0].endswith("\\xff not text\\nsecond line")
    assert all(len(rec) == 1 for rec in records(text))


# -- a real worker process ------------------------------------------------------------------------

APP = textwrap.dedent(
    """
    import cogworker


    def fail_here(token):
        raise LookupError("lost " + token)


    class AppFailJob(cogworker.Job, retry=2):
        name = "LogLines::AppFail"

        def perform(self, token):
            fail_here(token)
    """
)


def test_a_worker_writes_the_failure_as_one_record_with_its_traceback(
    tmp_path: Path, r: redis.Redis, redis_url: str
) -> None:
    (tmp_path / "log_app.py").write_text(APP)
    worker = Worker(
        ["run", "-r", "log_app.py", "-c", "1"],
        tmp_path,
        cogworker_env(redis_url),
        tmp_path / "worker.out",
    )
    try:
        worker.identity(r)
        producer = cogworker.Config(redis_url=redis_url)
        try:
            jid = cogworker.Client(producer).push(
                {"class": "LogLines::AppFail", "args": ["it"], "retry": 2}
            )
        finally:
            release(producer)
        worker.wait_output(f"fail: LogLines::AppFail jid={jid}")
        wait_for(lambda: r.zcard(keys.RETRY) == 1)
        assert worker.stop() == 0
    finally:
        worker.kill()
    text = worker.output()
    record = the_record(text, "fail: ")
    assert re.search(
        rf"WARNING: fail: LogLines::AppFail jid={jid}: LookupError: lost it; "
        r"retry 1/2 in \d+s$",
        record[0],
    )
    shown = frames(record)
    assert [frame.split(", in ")[-1] for frame in shown] == ["perform", "fail_here"]
    assert all("log_app.py" in frame for frame in shown)
    assert record[-1] == logs.CONTINUATION + "LookupError: lost it"
    others = [rec for rec in records(text) if rec is not record and "fail: " not in rec[0]]
    assert others and all(len(rec) == 1 for rec in others)
