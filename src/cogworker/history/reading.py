"""Reading the run history: a History page (sorted, filtered and sliced on the server) and
the daily counters.

A page takes one of four paths (``Path``):

* ``FAST``: newest or oldest first with no filter: one range of the status's own set;
* ``INDEX``: every filter is one the history index answers (equality on status, class or
  queue, a range of finish time or duration, an exact jid; see ``index``), in any
  sort. One filter in its own order (a class newest first, a duration range by duration, a
  time range by time) or no filter in any order is read by rank: a deep page costs what the
  first does. One filter in another order walks that order's set from the nearer end while
  that asks fewer runs than reading the filter's; several filters read the smallest whole
  and ask the others of each run in it; the runs of a jid are read and sorted here;
* ``SCAN``: any other condition (text ``contains`` and the like, ``notEqual``, an ``OR``):
  the status's set is read newest first in chunks, every entry tested (its cost grows with
  the history; a ``contains`` text that shows verbatim in stored entries skips the entries
  lacking it before parsing);
* ``MEMORY``: in a testing mode the same scan over ``testing.memory``, whatever client.

An entry written before ``duration`` existed gets the same value from its stamps
(``duration_ms``); an entry that can't be read is a ``Run`` with ``readable`` false.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

import redis

from cogworker import keys, testing, wire
from cogworker.history import index as history_index
from cogworker.history.filters import MAX_LIMIT as MAX_LIMIT
from cogworker.history.filters import Query, column_value
from cogworker.history.filters import duration_ms as duration_ms
from cogworker.history.filters import duration_of as duration_of
from cogworker.history.plan import Plan, plan_of

SETS = {"all": keys.HISTORY_ALL, "success": keys.HISTORY_SUCCESS, "failed": keys.HISTORY_FAILED}
SCAN_CHUNK = 1000
JID_RUNS = 10_000  # runs of one jid read for a page


class Path(Enum):
    FAST = "fast"
    INDEX = "index"
    SCAN = "scan"
    MEMORY = "memory"


@dataclass(frozen=True)
class Run:
    """One stored run: its entry as stored, parsed (``{"raw": ...}`` when unreadable), its
    score (finish time) when known and its ref."""

    raw: str
    entry: dict[str, Any]
    score: float | None

    @property
    def readable(self) -> bool:
        return "raw" not in self.entry or len(self.entry) > 1

    @property
    def ref(self) -> str:
        return history_index.ref_of(self.raw)


@dataclass(frozen=True)
class Page:
    runs: list[Run]
    total: int
    path: Path
    catching_up: bool = False  # the index is still reading runs other writers stored


def parse_entry(raw: str) -> dict[str, Any]:
    try:
        value = wire.loads(raw)
    except ValueError:
        return {"raw": raw}
    return value if isinstance(value, dict) else {"raw": raw}


def run_of(raw: Any, score: float | None) -> Run:
    text = str(raw)
    return Run(text, parse_entry(text), score)


def page(client: redis.Redis, wanted: Query) -> Page:
    """The runs of ``wanted``'s page and how many match in all."""
    if testing.active():
        return _scan(_MemorySource(), wanted, Path.MEMORY)
    source = _RedisSource(client)
    if wanted.plain:
        return _fast(source, wanted)
    plan = plan_of(wanted)
    if plan is None:
        return _scan(source, wanted, Path.SCAN)
    synced = history_index.sync(client)
    found = _indexed(client, wanted, plan)
    return dataclasses.replace(found, catching_up=synced.behind) if synced.behind else found


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
    dict (or its JSON) of column -> filter model (see ``filters``). Malformed input
    means "none". An unreadable entry shows as ``{"raw": ...}``.
    """
    wanted = Query.parse(
        status=status, jid=jid, sort=sort, filters=filters, offset=offset, limit=limit
    )
    found = page(client, wanted)
    return [run.entry for run in found.runs], found.total


def _fast(source: _RedisSource, wanted: Query) -> Page:
    key = SETS[wanted.status]
    total = source.size(key)
    if wanted.limit == 0:
        return Page([], total, Path.FAST)
    stop = wanted.offset + wanted.limit - 1
    found = source.page(key, wanted.offset, stop, wanted.sort.descending)
    return Page([run_of(raw, score) for raw, score in found], total, Path.FAST)


def _indexed(client: redis.Redis, wanted: Query, plan: Plan) -> Page:
    if plan.empty:
        return Page([], 0, Path.INDEX)
    if wanted.jid is not None:
        return _jid_runs(client, wanted)
    column, descending = wanted.sort.column, wanted.sort.descending
    start, stop = wanted.offset, wanted.offset + wanted.limit - 1
    if not plan.sources:
        total, refs = history_index.ordered_page(client, column, descending, start, stop)
    elif plan.ranked_in(column):
        # sorted by the column it is equal on: equal values, newest first ascending (as in
        # that column's sort set), oldest first descending
        newest_first = not descending if plan.equal_in(column) else descending
        total, refs = history_index.ranked_page(client, plan.sources[0], newest_first, start, stop)
    else:
        total, refs = history_index.select(
            client, column, descending, wanted.offset, wanted.limit, plan.sources
        )
    runs = [run_of(raw, score) for score, raw in history_index.fetch(client, refs)]
    return Page(runs, total, Path.INDEX)


def _jid_runs(client: redis.Redis, wanted: Query) -> Page:
    """A jid has few runs: read them all, then filter and sort them here."""
    assert wanted.jid is not None
    _, refs = history_index.jid_page(client, wanted.jid, 0, JID_RUNS - 1)
    found = [run_of(raw, score) for score, raw in history_index.fetch(client, refs)]
    matched = [run for run in found if wanted.matches(run.entry)]
    matched.sort(key=lambda run: -(run.score or 0.0))
    matched.sort(key=lambda run: wanted.sort.key(run.entry), reverse=wanted.sort.descending)
    return Page(matched[wanted.offset : wanted.offset + wanted.limit], len(matched), Path.INDEX)


class _RedisSource:
    """Where pages and counters are read outside the testing modes."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def size(self, key: str) -> int:
        return int(self.client.zcard(key))

    def page(self, key: str, start: int, stop: int, descending: bool) -> list[tuple[str, float]]:
        fetch = self.client.zrevrange if descending else self.client.zrange
        found: list[Any] = list(fetch(key, start, stop, withscores=True))
        return [(str(pair[0]), float(pair[1])) for pair in found]

    def days(self, dates: list[str]) -> list[dict[str, Any]]:
        pipe = self.client.pipeline(transaction=False)
        for date in dates:
            pipe.hgetall(keys.history_daily(date))
        return list(pipe.execute())


class _MemorySource:
    """The same reads from ``testing.memory``."""

    def page(
        self, key: str, start: int, stop: int, descending: bool
    ) -> list[tuple[str, float | None]]:
        with testing.memory.lock:
            members = list(testing.memory.history.get(key, []))
        ordered = members[::-1] if descending else members
        return [(member, score) for score, member in ordered[start : stop + 1]]

    def days(self, dates: list[str]) -> list[dict[str, Any]]:
        with testing.memory.lock:
            return [dict(testing.memory.daily.get(date, {})) for date in dates]


def _scan(source: _RedisSource | _MemorySource, wanted: Query, path: Path) -> Page:
    """Every run of the status's set, newest first, read in chunks and tested; a stable sort
    keeps equal values newest first in both directions."""
    key = SETS[wanted.status]
    needle = f'"jid":{wire.dumps(wanted.jid)}' if wanted.jid else None
    texts = wanted.needles()
    found: list[Run] = []
    start = 0
    while True:
        chunk = source.page(key, start, start + SCAN_CHUNK - 1, descending=True)
        for raw, score in chunk:
            if needle is not None and needle not in raw:
                continue
            if texts:
                lowered = raw.lower()
                if not all(text in lowered for text in texts):
                    continue
            run = run_of(raw, score)
            if wanted.matches(run.entry, status_known=True):
                found.append(run)
        if len(chunk) < SCAN_CHUNK:
            break
        start += SCAN_CHUNK
    if not (wanted.sort.column == "finished_at" and wanted.sort.descending):
        column = wanted.sort.column
        found.sort(key=lambda run: column_value(run.entry, column), reverse=wanted.sort.descending)
    return Page(found[wanted.offset : wanted.offset + wanted.limit], len(found), path)


def _source(client: redis.Redis) -> _RedisSource | _MemorySource:
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
