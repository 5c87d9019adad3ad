"""Run history (optional): every finished run, with a query API for the Web UI's History tab
(``query`` and ``daily_counts``, from ``reading``). The package: this module (the store and
its middleware), ``reading`` (pages and daily counts), ``filters`` (the filter model),
``plan`` (which path a page takes) and ``index`` (the index that lets a page skip a scan).

    cogworker.history.enable(config, retention_days=30, max_entries=50_000)

Each run is one JSON entry (jid, class, queue, args, status, started_at, finished_at, duration
and, for failures, error_class, error_message and up to 200 backtrace lines) in
``cogworker:history:all`` and in ``...:success`` or ``...:failed``, scored by finish time and
trimmed on every write by age, then by count; daily counters live in
``cogworker:history:daily:<UTC date>``; the history index (``index``), which lets
the History tab sort and filter without a scan, is written in the same pipeline.
``duration`` is whole milliseconds, the unit the History tab sorts, filters and shows,
computed from the two stamps by ``duration_ms`` (the stamps stay epoch seconds).

Writes are best-effort: they never change a job's fate or hide its exception, and a job never
waits for them: the middleware hands each entry to the config's background writer
(``status_writer``, shared with job status so both keep their order). In a testing mode the
entries and counters live in ``testing.memory``: ``record``, ``query`` and ``daily_counts``
use it whatever client they are given.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import redis
from redis.exceptions import NoScriptError

from cogworker import failure, keys, status_writer, testing, wire
from cogworker.config import Config
from cogworker.history import index as history_index
from cogworker.history.reading import MAX_LIMIT as MAX_LIMIT
from cogworker.history.reading import SETS as SETS
from cogworker.history.reading import daily_counts as daily_counts
from cogworker.history.reading import duration_ms as duration_ms
from cogworker.history.reading import duration_of as duration_of
from cogworker.history.reading import query as query
from cogworker.middleware import JobInstance
from cogworker.wire import Payload

if TYPE_CHECKING:
    from redis.client import Pipeline

logger = logging.getLogger("cogworker")

BACKTRACE_LINES = 200


@dataclass(frozen=True)
class Retention:
    days: float = 30
    max_entries: int = 50_000
    daily_stats_days: int = 400


def _check_positive(name: str, value: Any, whole: bool) -> None:
    kinds = int if whole else int | float
    if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:
        kind = "whole number" if whole else "number"
        raise ValueError(f"history {name} must be a positive {kind}, got {value!r}")


def enable(
    config: Config,
    *,
    retention_days: float = 30,
    max_entries: int = 50_000,
    daily_stats_retention_days: int = 400,
) -> None:
    """Record every run of jobs processed with ``config``."""
    _check_positive("retention_days", retention_days, whole=False)
    _check_positive("max_entries", max_entries, whole=True)
    _check_positive("daily_stats_retention_days", daily_stats_retention_days, whole=True)
    retention = Retention(retention_days, max_entries, daily_stats_retention_days)
    config.server_middleware.add(HistoryMiddleware, config, retention)


def _backtrace(error: BaseException) -> list[str]:
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    flat = [line.rstrip("\n") for chunk in lines for line in chunk.splitlines()]
    return [failure.scrub(line, failure.MAX_MESSAGE) for line in flat[-BACKTRACE_LINES:]]


def build_entry(
    job: Payload, queue: str, started_at: float, finished_at: float, error: BaseException | None
) -> dict[str, Any]:
    """One run's history entry."""
    entry: dict[str, Any] = {
        "jid": job.get("jid"),
        "class": job.get("class"),
        "queue": queue,
        "args": job.get("args", []),
        "status": "success" if error is None else "failed",
        "started_at": started_at,
        "finished_at": finished_at,
        "duration": duration_ms(started_at, finished_at),
    }
    if error is not None:
        entry["error_class"] = failure.error_class_name(error)
        entry["error_message"] = failure.error_message(error)
        entry["backtrace"] = _backtrace(error)
    return entry


def _day(finished_at: float) -> str:
    return datetime.fromtimestamp(finished_at, UTC).strftime("%Y-%m-%d")


def store(pipe: Pipeline, retention: Retention, entry: dict[str, Any]) -> None:
    """Queue the writes of one built entry (``build_entry``) on ``pipe``, at its own finish
    time: both sets it lands in and their trims, its day's counter, and the history index
    (indexed, then trimmed by the same rules)."""
    _queue_record(pipe, retention, wire.dumps(entry), entry["status"], entry["finished_at"])


def _queue_record(
    pipe: Pipeline, retention: Retention, member: str, outcome: str, finished_at: float
) -> None:
    daily = keys.history_daily(_day(finished_at))
    cutoff = finished_at - retention.days * 86400
    for key in (keys.HISTORY_ALL, SETS[outcome]):
        pipe.zadd(key, {member: finished_at})
        pipe.zremrangebyscore(key, "-inf", cutoff)
        pipe.zremrangebyrank(key, 0, -(retention.max_entries + 1))
    pipe.hincrby(daily, outcome, 1)
    pipe.expire(daily, retention.daily_stats_days * 86400)
    history_index.queue_add(pipe, member, finished_at, cutoff, retention.max_entries)


def _remember(retention: Retention, member: str, outcome: str, finished_at: float) -> None:
    """The testing modes' ``_queue_record``: the same trimming, in memory."""
    memory, cutoff = testing.memory, finished_at - retention.days * 86400
    with memory.lock:
        for key in (keys.HISTORY_ALL, SETS[outcome]):
            memory.add_scored(key, finished_at, member, cutoff, retention.max_entries)
        counts = memory.daily.setdefault(_day(finished_at), {})
        counts[outcome] = counts.get(outcome, 0) + 1


def record(
    client: redis.Redis,
    retention: Retention,
    job: Payload,
    queue: str,
    started_at: float,
    error: BaseException | None = None,
) -> None:
    """Write one run's entry now, trim both sets it lands in, count it for its day."""
    finished_at = wire.now()
    entry = build_entry(job, queue, started_at, finished_at, error)
    member, outcome = wire.dumps(entry), entry["status"]
    if testing.active():
        _remember(retention, member, outcome, finished_at)
        return
    pipe = client.pipeline(transaction=False)
    _queue_record(pipe, retention, member, outcome, finished_at)
    for reply in pipe.execute(raise_on_error=False):
        # a Redis that forgot the index's script: the run is stored, the next read indexes it
        if isinstance(reply, Exception) and not isinstance(reply, NoScriptError):
            raise reply


class HistoryMiddleware:
    def __init__(self, config: Config, retention: Retention) -> None:
        self.config, self.retention = config, retention

    def __call__(
        self, worker: JobInstance | None, job: Payload, queue: str, call_next: Callable[[], None]
    ) -> None:
        started_at = wire.now()
        try:
            call_next()
        except BaseException as error:
            self._record(job, queue, started_at, error)
            raise
        self._record(job, queue, started_at, None)

    def _record(
        self, job: Payload, queue: str, started_at: float, error: BaseException | None
    ) -> None:
        finished_at, jid = wire.now(), str(job.get("jid"))
        try:
            entry = build_entry(job, queue, started_at, finished_at, error)
            member = wire.dumps(entry)
        except (ValueError, TypeError) as build_error:
            logger.error(
                "History: %s: %s; no entry for jid=%s", type(build_error).__name__, build_error, jid
            )
            return
        outcome, retention = entry["status"], self.retention
        if testing.active():
            _remember(retention, member, outcome, finished_at)
            return
        status_writer.writer(self.config).submit(
            "History",
            jid,
            self.config.redis(),
            lambda pipe: _queue_record(pipe, retention, member, outcome, finished_at),
        )
