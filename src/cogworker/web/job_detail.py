"""The Jobs tab's detail panel: the selected entry, its failed attempts, where the job is and
why it isn't running.

The panel refreshes with the table, so on each refresh it reads only what is cheap: the entry
(``job_entries.locate``) and the job's attempts log. Where the job is and why it waits comes
from ``cogworker.api.explain``, which reads every queue and set in full (about a second per
500,000 stored entries), so it is read once when a panel opens (and again on request), never
at every refresh; with it comes the backtrace of the job's last failed run, which only the
run history keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis

from cogworker import api, history
from cogworker.api import Explanation, Location, Place
from cogworker.web.job_entries import EntryName, locate
from cogworker.web.job_sources import JobRow, Status, score_hint
from cogworker.web.urls import digest

ATTEMPTS_SHOWN = 5
OUTCOMES = {
    "retrying": "failed, retried later",
    "dead": "failed, moved to the dead set",
    "killed": "killed by retry_in, moved to the dead set",
    "discarded": "discarded by retry_in",
}
PLACE_SENTENCES = {
    Place.RUNNING: "It is running now.",
    Place.TAKEN: "A live process has taken it and is about to run it.",
    Place.ORPHANED: "Its process is gone while it was in progress: recovery puts it back.",
    Place.LOST: "It was running on a process that is gone and kept no copy of it.",
    Place.QUEUED: "It waits on a queue.",
    Place.RETRY: "It failed and waits for its next retry.",
    Place.SCHEDULED: "It is scheduled for later.",
    Place.PARKED: "It waits for the next recovery pass to file it.",
    Place.DEAD: "It is in the dead set: it runs again only if retried from there.",
    Place.FINISHED: "It is no longer stored anywhere: it finished.",
    Place.MISSING: "Its status says it waits or runs, yet it is stored nowhere.",
    Place.UNKNOWN: "Nothing stored knows this job.",
}


@dataclass(frozen=True)
class Attempt:
    number: str
    outcome: str  # the recorded outcome: retrying, dead, killed, discarded
    failed_at: float | None
    error: str

    @property
    def label(self) -> str:
        return OUTCOMES.get(self.outcome, "failed")

    @property
    def tone(self) -> str:
        return "warning" if self.outcome == "retrying" else "danger"


@dataclass(frozen=True)
class Detail:
    jid: str
    name: EntryName | None  # the exact entry the page named, if any
    row: JobRow | None  # that entry where it is now; None if gone (or none named)
    attempts: list[Attempt] = field(default_factory=list)  # newest first
    attempts_total: int = 0

    @property
    def gone(self) -> bool:
        return self.name is not None and self.row is None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def attempts_of(client: redis.Redis, jid: str) -> tuple[list[Attempt], int]:
    """The newest ``ATTEMPTS_SHOWN`` recorded failures of ``jid``, and how many there are."""
    recorded = api.attempts(client, jid)
    shown = []
    for entry in reversed(recorded[-ATTEMPTS_SHOWN:]):
        error_class, message = entry.get("error_class"), entry.get("error_message")
        error = f"{error_class or 'Error'}: {message or ''}" if error_class or message else ""
        shown.append(
            Attempt(
                number=str(entry.get("attempt", "?")),
                outcome=str(entry.get("outcome", "")),
                failed_at=_number(entry.get("failed_at")),
                error=error,
            )
        )
    return shown, len(recorded)


def detail(client: redis.Redis, jid: str, name: EntryName | None) -> Detail:
    row = locate(client, name) if name is not None else None
    shown_jid = row.jid if row is not None else jid
    attempts, total = attempts_of(client, shown_jid) if shown_jid else ([], 0)
    return Detail(shown_jid, name, row, attempts, total)


@dataclass(frozen=True)
class Whereabouts:
    """One place the job was found, in words, with the entry to select it by (if shown in
    the table)."""

    place: Place
    label: str
    detail: str
    at: float | None = None
    at_label: str = ""
    entry: str | None = None
    queue: str | None = None


@dataclass(frozen=True)
class Why:
    explanation: Explanation
    places: list[Whereabouts]
    backtrace: list[str]  # of the last failed run the history kept
    failure: str | None  # its error

    @property
    def scanned(self) -> int:
        return sum(self.explanation.scanned.values())

    @property
    def sentence(self) -> str:
        return PLACE_SENTENCES.get(self.explanation.place, "")


def whereabouts(location: Location) -> Whereabouts:
    record, place = location.record, location.place
    at_process = location.identity or "?"
    if place is Place.QUEUED:
        ahead = location.position or 0
        text = f"on {location.queue}, " + (f"{ahead:,} jobs ahead of it" if ahead else "next")
        entry = f"enqueued:{digest(record.raw)}:{ahead}"
        return Whereabouts(place, "Enqueued", text, entry=entry, queue=location.queue)
    if place in (Place.SCHEDULED, Place.RETRY, Place.DEAD):
        status = {
            Place.SCHEDULED: Status.SCHEDULED,
            Place.RETRY: Status.RETRYING,
            Place.DEAD: Status.DEAD,
        }[place]
        score = location.at
        named = None if score is None else f"{status.slug}:{digest(record.raw)}:{score_hint(score)}"
        if place is Place.RETRY:
            text = f"retry {location.retry} of {location.max_retries}"
            return Whereabouts(place, "Retrying", text, score, "due", named)
        if place is Place.SCHEDULED:
            return Whereabouts(place, "Scheduled", "", score, "due", named)
        return Whereabouts(place, "Dead", location.error or "", score, "since", named)
    if place is Place.RUNNING:
        text = f"on process {at_process}, thread {location.thread_id}"
        return Whereabouts(place, "Running", text, location.at, "since")
    if place is Place.TAKEN:
        return Whereabouts(place, "Taken", f"by process {at_process}, not yet on a thread")
    if place is Place.ORPHANED:
        text = f"left in progress by process {at_process}, which is gone"
        return Whereabouts(place, "Orphaned", text, location.recover_at, "recovery from")
    if place is Place.LOST:
        return Whereabouts(place, "Lost", f"was running on process {at_process}, which is gone")
    text = f"waiting for the next recovery pass to file it into {location.target}"
    return Whereabouts(place, "Parked", text)


def explain_job(client: redis.Redis, jid: str, orphan_threshold: float) -> Why:
    found = api.explain(client, jid, orphan_threshold=orphan_threshold)
    failed, _ = history.query(client, status="failed", jid=jid, limit=1)
    last = failed[0] if failed else {}
    trace = last.get("backtrace")
    error_class = last.get("error_class")
    failure = f"{error_class}: {last.get('error_message') or ''}" if error_class else None
    return Why(
        found,
        [whereabouts(location) for location in found.locations],
        [str(line) for line in trace] if isinstance(trace, list) else [],
        failure,
    )
