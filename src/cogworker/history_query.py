"""Reading the run history: the History tab's page query (sorted and filtered server-side)
and the daily counters.

In a testing mode both read ``testing.memory`` instead of Redis, whatever client they are
given. An entry written before ``duration`` existed gets the same value from its stamps
(``duration_ms``); an entry that can't be read shows as ``{"raw": ...}``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from cogworker import keys, testing, wire

SETS = {"all": keys.HISTORY_ALL, "success": keys.HISTORY_SUCCESS, "failed": keys.HISTORY_FAILED}
MAX_LIMIT = 1000
SCAN_CHUNK = 1000


def duration_ms(started_at: float, finished_at: float) -> int:
    """A run's ``duration``: whole milliseconds between its two stamps."""
    return round((finished_at - started_at) * 1000)


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
