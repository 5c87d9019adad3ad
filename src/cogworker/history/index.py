"""The history index: sorted sets that let a History page sort and filter without reading
every run (a Python-side extra: a Ruby process neither writes nor trims it).

For each run (named by its ref, ``ref_of`` its stored entry) the index holds its finish time
and duration (two sorted sets), one set per lowercased status, class and queue value (scored
by finish time), one sort set per text column (``<value> NUL <tie> NUL <ref>``, the first
100 bytes of the value) and a row to unindex it by. The history middleware indexes a run in
the same pipeline that stores it and trims the index by the same retention rules.

A Ruby process writes and trims only ``history:all/success/failed``. So a read first runs a
bounded catch-up (``sync``): runs of ``history:all`` from the cursor on (minus ``OVERLAP``
seconds, for late writers and clock skew) that the index lacks are indexed, at most
``SYNC_CAP`` per read, and refs older than the oldest run left are dropped. A ref whose entry
is gone from the middle of the set is dropped when a page meets it (``fetch``).
"""

from __future__ import annotations

import hashlib
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

import redis

from cogworker import keys, scripts

if TYPE_CHECKING:
    from redis.client import Pipeline

# one script per operation; all four take KEYS, then PREFIXES, then their own arguments
ADD = scripts.load(__file__, "index_add")
SYNC = scripts.load(__file__, "index_sync")
FETCH = scripts.load(__file__, "index_fetch")
SELECT = scripts.load(__file__, "index_select")
KEYS = (
    keys.HISTORY_ALL,
    keys.HISTORY_INDEX_TIME,
    keys.HISTORY_INDEX_DURATION,
    keys.HISTORY_INDEX_ROWS,
    keys.HISTORY_INDEX_META,
)
PREFIXES = (
    keys.HISTORY_INDEX_BY_PREFIX,
    keys.HISTORY_INDEX_VALUES_PREFIX,
    keys.HISTORY_INDEX_SORT_PREFIX,
)
EQUAL_COLUMNS = ("status", "class", "queue")
SORT_COLUMNS = ("class", "queue", "jid", "status", "args", "error")
SORT_FIELD = {column: 6 + at for at, column in enumerate(SORT_COLUMNS)}  # row fields, from 1
SORT_BYTES = 100
REF_DIGITS = 16
OVERLAP = 5.0  # seconds the catch-up reads back from its cursor
SYNC_CAP = 20_000  # runs the catch-up reads per call
TRIM_CAP = 1_000  # refs one write may drop


def ref_of(raw: str) -> str:
    """The ref of a stored entry: the first 16 hex digits of its SHA-1."""
    return hashlib.sha1(raw.encode("utf-8", "surrogateescape")).hexdigest()[:REF_DIGITS]


def equal_key(value: str) -> str:
    """How the index spells a value it matches by equality: ASCII letters lowercased (as
    Lua's ``string.lower`` does), NUL dropped."""
    lowered = value.encode("utf-8", "surrogateescape").lower()
    return lowered.decode("utf-8", "surrogateescape").replace("\0", "")


def queue_add(pipe: Pipeline, raw: str, finished_at: float, cutoff: float, max_runs: int) -> None:
    """Queue the indexing of one stored run, then the index's trim to ``cutoff`` (finish
    time) and ``max_runs``, on the background writer's pipeline.

    The call goes by SHA. A pipeline can't resend a script Redis forgot (after a restart or
    SCRIPT FLUSH), so the script is loaded ahead of the call at most every ``RELOAD_EVERY``
    seconds per connection pool; a run whose call met NOSCRIPT in between is still stored
    and the next read's catch-up indexes it."""
    pool, now = pipe.connection_pool, time.monotonic()
    if now - _loaded_at.get(pool, -RELOAD_EVERY) >= RELOAD_EVERY:
        pipe.script_load(ADD.source)
        _loaded_at[pool] = now
    args = (*PREFIXES, raw, repr(finished_at), repr(cutoff), max_runs, TRIM_CAP)
    pipe.evalsha(ADD.sha, len(KEYS), *KEYS, *args)


RELOAD_EVERY = 1.0
# connection pool -> when the script was last loaded; weak: a new pool that takes a freed
# one's id (a new client) must load the script again
_loaded_at: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Synced:
    added: int
    dropped: int
    behind: bool  # the read stopped at ``SYNC_CAP``: more runs wait for the next one


def sync(client: redis.Redis) -> Synced:
    """Index what other writers added to ``history:all``; drop what it no longer holds."""
    added, dropped, behind = SYNC(client, KEYS, [*PREFIXES, OVERLAP, SYNC_CAP])
    return Synced(int(added), int(dropped), bool(behind))


def fetch(client: redis.Redis, refs: Sequence[str]) -> list[tuple[float, str]]:
    """``(finish time, stored entry)`` of each ref still stored, in order."""
    if not refs:
        return []
    found = FETCH(client, KEYS, [*PREFIXES, *refs])
    return [(float(found[at]), str(found[at + 1])) for at in range(0, len(found), 2)]


class Order(Enum):
    """The sets that hold every indexed run in one column's order."""

    TIME = "time"
    DURATION = "duration"
    TEXT = "text"


@dataclass(frozen=True)
class Source:
    """Refs a filter allows: every member of ``key``, or those scored from ``low`` to
    ``high`` (bounds as ZRANGEBYSCORE spells them)."""

    key: str
    low: str | None = None
    high: str | None = None

    def args(self) -> list[str]:
        if self.low is None or self.high is None:
            return ["set", self.key]
        return ["range", self.key, self.low, self.high]


def order_key(column: str) -> tuple[Order, str]:
    if column == "finished_at":
        return Order.TIME, keys.HISTORY_INDEX_TIME
    if column == "duration":
        return Order.DURATION, keys.HISTORY_INDEX_DURATION
    return Order.TEXT, keys.history_index_sort(column)


def select(
    client: redis.Redis,
    column: str,
    descending: bool,
    offset: int,
    limit: int,
    sources: Sequence[Source],
) -> tuple[int, list[str]]:
    """The total of refs in every source and the page of them sorted by ``column``: one
    source is read in that column's order (from the nearer end) when that asks fewer refs,
    else the smallest source is read whole, the others asked of each of its refs, and sorted."""
    order, key = order_key(column)
    sort = order.value if order is not Order.TEXT else str(SORT_FIELD[column])
    args: list[Any] = [*PREFIXES, sort, key, int(descending), offset, limit]
    args.append(len(sources))
    for source in sources:
        args.extend(source.args())
    found = SELECT(client, KEYS, args)
    return int(found[0]), [str(ref) for ref in found[1:]]


def ordered_page(
    client: redis.Redis, column: str, descending: bool, start: int, stop: int
) -> tuple[int, list[str]]:
    """Every indexed run in ``column``'s order: the total and the refs ranked start..stop."""
    _, key = order_key(column)
    if stop < start:
        return int(client.zcard(key)), []
    pipe = client.pipeline(transaction=False)
    pipe.zcard(key)
    (pipe.zrevrange if descending else pipe.zrange)(key, start, stop)
    total, found = pipe.execute()
    return int(total), [_ref(str(member)) for member in found]


def ranked_page(
    client: redis.Redis, source: Source, descending: bool, start: int, stop: int
) -> tuple[int, list[str]]:
    """One source in its own order (scores): its total and the refs ranked start..stop,
    by rank, so a deep page costs no more than the first."""
    low, high = (source.low or "-inf"), (source.high or "+inf")
    pipe = client.pipeline(transaction=False)
    pipe.zcount(source.key, low, high)
    if descending:
        pipe.zcount(source.key, _after(high), "+inf")
    else:
        pipe.zcount(source.key, "-inf", _before(low))
    total, skipped = (int(value) for value in pipe.execute())
    stop = min(stop, total - 1)
    if stop < start:
        return total, []
    fetch_range = client.zrevrange if descending else client.zrange
    found = fetch_range(source.key, skipped + start, skipped + stop)
    return total, [_ref(str(member)) for member in found]


def _after(bound: str) -> str:
    """The ZCOUNT low end of what lies above ``bound`` (an upper end)."""
    if bound == "+inf":
        return "(+inf"
    return bound[1:] if bound.startswith("(") else f"({bound}"


def _before(bound: str) -> str:
    """The ZCOUNT high end of what lies below ``bound`` (a lower end)."""
    if bound == "-inf":
        return "(-inf"
    return bound[1:] if bound.startswith("(") else f"({bound}"


def jid_page(client: redis.Redis, jid: str, start: int, stop: int) -> tuple[int, list[str]]:
    """The runs of one jid, newest first: their total and the refs ranked start..stop."""
    key, clean = keys.history_index_sort("jid"), jid.replace("\0", "")[:SORT_BYTES]
    low, high = f"[{clean}\0", f"[{clean}\x01"
    pipe = client.pipeline(transaction=False)
    pipe.zlexcount(key, low, high)
    pipe.zrangebylex(key, low, high, start, max(stop - start + 1, 0))
    total, found = pipe.execute()
    return int(total), [_ref(str(member)) for member in found]


def values(client: redis.Redis, column: str, limit: int = 500) -> list[str]:
    """The lowercased values of ``column`` (status, class or queue) the index holds."""
    return [str(value) for value in client.zrange(keys.history_index_values(column), 0, limit - 1)]


def _ref(member: str) -> str:
    return member[-REF_DIGITS:]
