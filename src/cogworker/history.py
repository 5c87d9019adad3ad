"""Run history (optional): every finished run, with a query API for the Web UI's History tab.

    cogworker.history.enable(config, retention_days=30, max_entries=50_000)

Each run is one JSON entry (jid, class, queue, args, status, started_at, finished_at, duration
and, for failures, error_class, error_message and up to 200 backtrace lines) in
``cogworker:history:all`` and in ``...:success`` or ``...:failed``, scored by finish time and
trimmed on every write by age, then by count; daily counters live in
``cogworker:history:daily:<UTC date>``. ``duration`` is whole milliseconds, the unit the History
tab sorts, filters and shows, computed from the two stamps by ``duration_ms`` (the stamps stay
epoch seconds); entries written before it existed get the same value from their stamps.

Writes are best-effort: they never change a job's fate or hide its exception, and a job never
waits for them: the middleware hands each entry to the config's background writer
(``status.Writer``, shared with job status so both keep their order). In a testing mode the
entries and counters live in ``testing.memory``: ``record``, ``query`` and ``daily_counts``
use it whatever client they are given.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import redis

from cogworker import failure, keys, status, testing, wire
from cogworker.config import Config
from cogworker.wire import Payload

if TYPE_CHECKING:
    from redis.client import Pipeline

    from cogworker.job import Job

logger = logging.getLogger("cogworker")

SETS = {"all": keys.HISTORY_ALL, "success": keys.HISTORY_SUCCESS, "failed": keys.HISTORY_FAILED}
MAX_LIMIT = 1000
SCAN_CHUNK = 1000
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


def duration_ms(started_at: float, finished_at: float) -> int:
    """A run's ``duration``: whole milliseconds between its two stamps."""
    return round((finished_at - started_at) * 1000)


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


def _queue_record(
    pipe: Pipeline, retention: Retention, member: str, outcome: str, finished_at: float
) -> None:
    daily = keys.history_daily(_day(finished_at))
    for key in (keys.HISTORY_ALL, SETS[outcome]):
        pipe.zadd(key, {member: finished_at})
        pipe.zremrangebyscore(key, "-inf", finished_at - retention.days * 86400)
        pipe.zremrangebyrank(key, 0, -(retention.max_entries + 1))
    pipe.hincrby(daily, outcome, 1)
    pipe.expire(daily, retention.daily_stats_days * 86400)


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
    pipe.execute()


class HistoryMiddleware:
    def __init__(self, config: Config, retention: Retention) -> None:
        self.config, self.retention = config, retention

    def __call__(
        self, worker: Job | None, job: Payload, queue: str, call_next: Callable[[], None]
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
        status.writer(self.config).submit(
            "History",
            jid,
            self.config.redis(),
            lambda pipe: _queue_record(pipe, retention, member, outcome, finished_at),
        )


# -- reading ---------------------------------------------------------------------------------


class _RedisSource:
    """Where ``query`` and ``daily_counts`` read outside the testing modes."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def size(self, key: str) -> int:
        return int(self.client.zcard(key))

    def page(self, key: str, start: int, stop: int, descending: bool) -> list[str]:
        fetch = self.client.zrevrange if descending else self.client.zrange
        return [str(raw) for raw in fetch(key, start, stop)]

    def days(self, dates: list[str]) -> list[dict[str, Any]]:
        pipe = self.client.pipeline(transaction=False)
        for date in dates:
            pipe.hgetall(keys.history_daily(date))
        return list(pipe.execute())


class _MemorySource:
    """The same reads from ``testing.memory``."""

    def size(self, key: str) -> int:
        return len(testing.memory.scored(key))

    def page(self, key: str, start: int, stop: int, descending: bool) -> list[str]:
        members = testing.memory.scored(key)
        return (members[::-1] if descending else members)[start : stop + 1]

    def days(self, dates: list[str]) -> list[dict[str, Any]]:
        with testing.memory.lock:
            return [dict(testing.memory.daily.get(date, {})) for date in dates]


_Source = _RedisSource | _MemorySource


def _source(client: redis.Redis) -> _Source:
    return _MemorySource() if testing.active() else _RedisSource(client)


def daily_counts(client: redis.Redis, days: int = 30, now: float | None = None) -> dict[str, Any]:
    """``{"YYYY-MM-DD": {"success": n, "failed": n}}`` for the last ``days`` UTC days."""
    today = datetime.fromtimestamp(time.time() if now is None else now, UTC).date()
    dates = [(today - timedelta(days=offset)).isoformat() for offset in range(days)]
    return {
        date: {"success": int(found.get("success", 0)), "failed": int(found.get("failed", 0))}
        for date, found in zip(dates, _source(client).days(dates), strict=True)
        if found
    }


_NUMBERS = (int, float)  # exact types: a bool is not a time


def duration_of(entry: dict[str, Any]) -> int:
    """The entry's ``duration`` in ms; for an entry without one, the same from its stamps
    (``duration_ms``); 0 if it has neither."""
    stored = entry.get("duration")
    if type(stored) is int:
        return stored
    if type(stored) is float:
        return round(stored)
    started: Any = entry.get("started_at")
    finished: Any = entry.get("finished_at")
    if type(started) in _NUMBERS and type(finished) in _NUMBERS:
        return duration_ms(started, finished)
    return 0


def _column(entry: dict[str, Any], column: str) -> Any:
    """A column's value as the History grid shows it (for sorting and filtering)."""
    if column == "finished_at":
        value = entry.get("finished_at")
        return float(value) if isinstance(value, int | float) else 0.0
    if column == "duration":
        return duration_of(entry)
    if column == "args":
        return wire.dumps(entry.get("args", []))
    if column == "error":
        if not entry.get("error_class"):
            return ""
        return f"{entry.get('error_class')}: {entry.get('error_message') or ''}"
    value = entry.get(column)
    return "" if value is None else str(value)


COLUMNS = ("finished_at", "class", "queue", "jid", "status", "args", "duration", "error")
NUMERIC = ("finished_at", "duration")


def _text_match(kind: str, value: str, wanted: Any) -> bool:
    value, wanted = value.lower(), str(wanted if wanted is not None else "").lower()
    tests: dict[str, Callable[[], bool]] = {
        "contains": lambda: wanted in value,
        "notContains": lambda: wanted not in value,
        "equals": lambda: value == wanted,
        "notEqual": lambda: value != wanted,
        "startsWith": lambda: value.startswith(wanted),
        "endsWith": lambda: value.endswith(wanted),
        "blank": lambda: value == "",
        "notBlank": lambda: value != "",
    }
    test = tests.get(kind)
    return test() if test is not None else True


def _number_match(kind: str, value: float, condition: dict[str, Any]) -> bool:
    if kind == "blank":
        return value is None
    if kind == "notBlank":
        return value is not None
    try:
        wanted = float(condition.get("filter"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True
    if kind == "inRange":
        upper = condition.get("filterTo")
        try:
            return wanted < value and (upper is None or value < float(upper))
        except (TypeError, ValueError):
            return wanted < value
    tests = {
        "equals": value == wanted,
        "notEqual": value != wanted,
        "lessThan": value < wanted,
        "lessThanOrEqual": value <= wanted,
        "greaterThan": value > wanted,
        "greaterThanOrEqual": value >= wanted,
    }
    return tests.get(kind, True)


def _condition_match(
    entry: dict[str, Any], column: str, condition: dict[str, Any], filter_type: str | None
) -> bool:
    kind = str(condition.get("type", ""))
    value = _column(entry, column)
    if (condition.get("filterType") or filter_type) == "number" or column in NUMERIC:
        try:
            number = float(value)
        except (TypeError, ValueError):
            return kind == "blank"
        return _number_match(kind, number, condition)
    return _text_match(kind, str(value), condition.get("filter"))


def _matches(entry: dict[str, Any], filters: dict[str, Any]) -> bool:
    for column, model in filters.items():
        if column not in COLUMNS or not isinstance(model, dict):
            continue
        conditions = model.get("conditions")
        if isinstance(conditions, list) and conditions:
            results = [
                _condition_match(entry, column, c, model.get("filterType"))
                for c in conditions
                if isinstance(c, dict)
            ]
            ok = any(results) if str(model.get("operator", "AND")).upper() == "OR" else all(results)
        else:
            ok = _condition_match(entry, column, model, model.get("filterType"))
        if not ok:
            return False
    return True


def _parse_json(text: str | None, kind: type) -> Any:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, kind) else None


def query(
    client: redis.Redis,
    *,
    status: str = "all",
    jid: str | None = None,
    sort: str | list[Any] | None = None,
    filters: str | dict[str, Any] | None = None,
    offset: int = 0,
    limit: int = 100,
) -> tuple[list[dict[str, Any]], int]:
    """A page of history entries and the total matching, sorted and filtered server-side.

    ``sort`` is a list (or its JSON) of ``{"colId", "sort": "asc"|"desc"}``; ``filters`` a
    dict (or its JSON) of column -> AG Grid filter model. Malformed input means "none".
    Unsorted and unfiltered pages are one ZRANGE; anything else scans newest first.
    """
    key = SETS.get(status, keys.HISTORY_ALL)
    offset, limit = max(offset, 0), min(max(limit, 0), MAX_LIMIT)
    sort_list = _parse_json(sort, list) if isinstance(sort, str) else sort
    filter_map = _parse_json(filters, dict) if isinstance(filters, str) else filters
    column, descending = "finished_at", True
    for item in sort_list or []:
        if isinstance(item, dict) and item.get("colId") in COLUMNS:
            column, descending = str(item["colId"]), item.get("sort") != "asc"
            break
    source = _source(client)
    if not jid and not filter_map and column == "finished_at":
        total = source.size(key)
        if limit == 0:
            return [], total
        raws = source.page(key, offset, offset + limit - 1, descending)
        return [_entry(raw) for raw in raws], total
    matched = [entry for entry in _scan(source, key, jid) if _matches(entry, filter_map or {})]
    matched.sort(key=lambda entry: _column(entry, column), reverse=descending)
    return matched[offset : offset + limit], len(matched)


def _entry(raw: Any) -> dict[str, Any]:
    try:
        value = wire.loads(raw)
    except ValueError:
        return {"raw": str(raw)}
    return value if isinstance(value, dict) else {"raw": str(raw)}


def _scan(source: _Source, key: str, jid: str | None) -> list[dict[str, Any]]:
    """Every entry of ``key``, newest first, read in chunks; cheap pre-filter by jid."""
    needle = f'"jid":{wire.dumps(jid)}' if jid else None
    found, start = [], 0
    while True:
        raws = source.page(key, start, start + SCAN_CHUNK - 1, descending=True)
        for raw in raws:
            if needle is not None and needle not in raw:
                continue
            entry = _entry(raw)
            if jid is None or entry.get("jid") == jid:
                found.append(entry)
        if len(raws) < SCAN_CHUNK:
            return found
        start += SCAN_CHUNK
