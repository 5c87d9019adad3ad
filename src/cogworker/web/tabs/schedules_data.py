"""What the Schedules tab shows: every published cron entry, with its next and last run, its
unique mode and state, and whether a run holds its running lock.

Entries come from Redis only (``periodic:schedule``, published by every worker's ticker at
boot, Ruby ones included), so a dashboard that runs no worker shows them too. One page costs
two round trips, four commands, whatever the number of entries. A value that isn't a JSON
object still becomes a row, shown as unparseable, and so does a cron this process can't read.
A key that holds another type is named on the page instead of failing it.

Parsing a cron and finding its next fire time is the costly part (tens of microseconds), so
both are remembered per cron string. A remembered next fire time stays valid until it
passes: no fire time lies between the moment it was found and it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import redis

from cogworker import keys, wire
from cogworker.periodic.cron import CronError, Schedule
from cogworker.web import urls
from cogworker.web.rendering import clip, compact_json

RAW_SHOWN = 200  # characters of an unparseable value shown
CACHE_SIZE = 10_000  # cron strings remembered


@dataclass(frozen=True)
class ScheduleRow:
    pjid: str
    job_class: str
    cron: str
    args: list[Any]
    queue: str
    unique: str | None
    disabled: bool
    next_run: float | None
    next_zoned: str | None  # the next run as the entry's own time zone shows it
    last_run: int | None
    last_zoned: str | None
    zone: str | None  # that zone's name, or "host time (<abbreviation>)" for a cron without
    zone_named: bool  # the cron names its zone
    cron_problem: str | None  # why the cron can't be read here
    problem: str | None  # why the published value can't be read, if it can't
    raw: str  # the published value, cut for display
    running: str | None  # the jid holding the entry's running lock

    @property
    def readable(self) -> bool:
        return self.problem is None

    @property
    def segment(self) -> str:
        """The pjid as the path segment of its actions: ``-`` when it isn't plain text (the
        form's ``pjid`` field names it then; a line break would not match a route)."""
        return urls.segment(self.pjid) if urls.form_safe(self.pjid) else "-"


@dataclass(frozen=True)
class Schedules:
    rows: list[ScheduleRow]  # one page of the entries the search matched, by class, cron, pjid
    total: int  # entries published
    matched: int  # entries the search matched (all of them without one)
    page: int  # the page shown (a page past the end shows the last)
    pages: int
    first: int  # the position of the page's first row among the matched, from 1
    unreadable: list[str]  # keys holding another type than expected


@dataclass
class _Cron:
    schedule: Schedule | None
    problem: str | None
    next_fire: float | None = None


class CronCache:
    """Parsed crons and their next fire times, shared by every request of the process."""

    def __init__(self) -> None:
        self._found: dict[str, _Cron] = {}
        self._lock = threading.Lock()

    def parsed(self, cron: str) -> _Cron:
        with self._lock:
            found = self._found.get(cron)
        if found is None:
            try:
                found = _Cron(Schedule(cron), None)
            except CronError as error:
                found = _Cron(None, str(error))
            with self._lock:
                if len(self._found) >= CACHE_SIZE:
                    self._found.clear()
                self._found[cron] = found
        return found

    def clear(self) -> None:
        with self._lock:
            self._found.clear()

    def next_after(self, cron: str, now: float) -> tuple[float | None, str | None]:
        """(the first fire time after ``now``, None) or (None, why the cron can't be read)."""
        found = self.parsed(cron)
        if found.schedule is None:
            return None, found.problem
        upcoming = found.next_fire
        if upcoming is None or upcoming <= now:
            try:
                upcoming = found.schedule.next_after(now)
            except CronError as error:
                return None, str(error)
            found.next_fire = upcoming
        return upcoming, None


crons = CronCache()


def zone_of(cron: str) -> tuple[str, bool] | None:
    """(the name of the zone ``cron`` runs in, whether the cron names it), or None if it
    can't be read; a cron without a zone runs in each worker's local one, shown here in this
    host's (its abbreviation now)."""
    schedule = crons.parsed(cron).schedule
    if schedule is None:
        return None
    zone = schedule.zone
    if isinstance(zone, ZoneInfo) and zone.key == cron.split()[-1]:
        return zone.key, True
    return f"host time ({datetime.now(zone).strftime('%Z')})", False


def zoned(cron: str, moment: float | None, time_format: str) -> str | None:
    """``moment`` as the time zone of ``cron`` shows it (the host's when it names none)."""
    schedule = crons.parsed(cron).schedule
    if moment is None or schedule is None:
        return None
    try:
        shown = datetime.fromtimestamp(moment, schedule.zone)
    except (OverflowError, OSError, ValueError):
        return None
    return f"{shown.strftime(time_format)} {shown.strftime('%Z')}".strip()


def _parsed(raw: str) -> tuple[dict[str, Any], str | None]:
    try:
        value = wire.loads(raw)
    except (ValueError, RecursionError) as error:
        return {}, f"not JSON ({error})"
    if not isinstance(value, dict):
        return {}, f"not a JSON object (a {type(value).__name__})"
    return value, None


@dataclass(frozen=True)
class _Entry:
    pjid: str
    raw: str
    value: dict[str, Any]
    problem: str | None

    @property
    def job_class(self) -> str:
        job = self.value.get("class")
        return "(unparseable)" if self.problem is not None else str(job or "")

    @property
    def cron(self) -> str:
        cron = self.value.get("cron")
        return cron if isinstance(cron, str) else ""

    @property
    def args(self) -> list[Any]:
        args = self.value.get("args")
        return args if isinstance(args, list) else []

    def searched_text(self) -> str:
        return f"{self.job_class} {self.cron} {compact_json(self.args, None)}".lower()


def _read_published(client: redis.Redis) -> tuple[dict[str, str], set[str], list[str]]:
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.PERIODIC_SCHEDULE)
    pipe.smembers(keys.PERIODIC_DISABLED)
    published, disabled = pipe.execute(raise_on_error=False)
    unreadable = []
    if _wrong_type(published):
        unreadable.append(keys.PERIODIC_SCHEDULE)
        published = {}
    if _wrong_type(disabled):
        unreadable.append(keys.PERIODIC_DISABLED)
        disabled = set()
    for reply in (published, disabled):
        if isinstance(reply, Exception):
            raise reply
    return (
        {str(pjid): str(raw) for pjid, raw in published.items()},
        {str(pjid) for pjid in disabled},
        unreadable,
    )


def _wrong_type(reply: object) -> bool:
    return isinstance(reply, redis.ResponseError) and str(reply).startswith("WRONGTYPE")


def schedules(
    client: redis.Redis, q: str, time_format: str, page: int = 1, per_page: int = 100
) -> Schedules:
    """Page ``page`` of the published entries whose class, cron or args contain ``q`` (case
    ignored)."""
    published, disabled, unreadable = _read_published(client)
    found = [_Entry(pjid, raw, *_parsed(raw)) for pjid, raw in published.items()]
    found.sort(key=lambda entry: (entry.job_class, entry.cron, entry.pjid))
    wanted = q.strip().lower()
    matched = [entry for entry in found if wanted in entry.searched_text()] if wanted else found
    pages = max((len(matched) + per_page - 1) // per_page, 1)
    page = min(page, pages)
    offset = (page - 1) * per_page
    shown = matched[offset : offset + per_page]
    slots: list[Any] = []
    holders: list[Any] = []
    if shown:
        pipe = client.pipeline(transaction=False)
        pipe.mget([keys.periodic_last_slot(entry.pjid) for entry in shown])
        pipe.mget([keys.periodic_running(entry.pjid) for entry in shown])
        slots, holders = pipe.execute()
    now = wire.now()
    rows = [
        _row(entry, entry.pjid in disabled, slot, holder, now, time_format)
        for entry, slot, holder in zip(shown, slots, holders, strict=True)
    ]
    return Schedules(rows, len(found), len(matched), page, pages, offset + 1, unreadable)


def _row(
    entry: _Entry, disabled: bool, slot: Any, holder: Any, now: float, time_format: str
) -> ScheduleRow:
    value, cron = entry.value, entry.cron
    next_run, cron_problem = crons.next_after(cron, now) if entry.problem is None else (None, None)
    text = None if slot is None else str(slot)
    last_run = int(text) if text is not None and text.lstrip("-").isdigit() else None
    queue = value.get("queue")
    unique = value.get("unique")
    zone = zone_of(cron) if entry.problem is None else None
    return ScheduleRow(
        pjid=entry.pjid,
        job_class=entry.job_class,
        cron=cron,
        args=entry.args,
        queue=queue if isinstance(queue, str) and queue else "default",
        unique=unique if isinstance(unique, str) and unique else None,
        disabled=disabled,
        next_run=next_run,
        next_zoned=zoned(cron, next_run, time_format),
        last_run=last_run,
        last_zoned=zoned(cron, last_run, time_format),
        zone=None if zone is None else zone[0],
        zone_named=zone is not None and zone[1],
        cron_problem=cron_problem,
        problem=entry.problem,
        raw=clip(entry.raw, RAW_SHOWN),
        running=None if holder is None else str(holder),
    )
