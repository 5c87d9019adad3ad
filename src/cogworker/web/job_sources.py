"""The Jobs table's rows: which stored entry each one is, and what it shows.

The table reads five kinds of source. "All" shows them one after the other, always in this
order, each in its own natural order:

1. Running: the jobs live processes run now, by process, then thread;
2. Enqueued: each known queue by name, from the job a worker takes next;
3. Scheduled: soonest due first;
4. Retrying: soonest retry first;
5. Dead: latest death first.

A row names its stored entry exactly: its status, the queue it is on (Enqueued), a digest of
the entry's bytes, and a hint of where it was (the queue position, the score). The hint finds
the entry again after rows moved; the digest makes sure it is the same entry; actions then
act on the entry's exact text.
"""

from __future__ import annotations

import contextlib
import enum
import math
from dataclasses import dataclass
from typing import Any

from cogworker import keys, wire
from cogworker.api import JobRecord, Work
from cogworker.web import urls
from cogworker.web.rendering import compact_json

UNPARSEABLE = "(unparseable)"


class Status(enum.Enum):
    ENQUEUED = "Enqueued"
    RUNNING = "Running"
    SCHEDULED = "Scheduled"
    RETRYING = "Retrying"
    DEAD = "Dead"

    @property
    def slug(self) -> str:
        """The status in routes and entry names: ``enqueued``, ``retrying``..."""
        return self.value.lower()

    @property
    def tone(self) -> str:
        return TONES[self]

    @property
    def is_set(self) -> bool:
        return self in SET_KEYS

    @property
    def set_key(self) -> str:
        return SET_KEYS[self]


TONES = {
    Status.ENQUEUED: "neutral",
    Status.RUNNING: "accent",
    Status.SCHEDULED: "accent-2",
    Status.RETRYING: "warning",
    Status.DEAD: "danger",
}
SET_KEYS = {Status.SCHEDULED: keys.SCHEDULE, Status.RETRYING: keys.RETRY, Status.DEAD: keys.DEAD}
CONCATENATION = (Status.RUNNING, Status.ENQUEUED, Status.SCHEDULED, Status.RETRYING, Status.DEAD)
"""The order "All" lists the sources in."""
FILTERS = ("All", "Enqueued", "Running", "Scheduled", "Retrying", "Dead")
"""The status filter's choices, as the page shows them."""
BY_SLUG = {status.slug: status for status in Status}


def parse_filter(text: str | None) -> Status | None:
    """The ``status`` parameter: a status, or None for All (also when it is empty)."""
    if not text or text == "All":
        return None
    for status in Status:
        if status.value == text:
            return status
    raise urls.BadParameter(f"status must be one of {', '.join(FILTERS)} (got {text!r})")


@dataclass(frozen=True)
class Source:
    """One structure the table reads: a queue's list, or one of the three sorted sets."""

    status: Status
    queue: str | None = None  # ENQUEUED: which queue

    @property
    def key(self) -> str:
        if self.status is Status.ENQUEUED:
            return keys.queue(self.queue or "")
        return self.status.set_key

    @property
    def is_list(self) -> bool:
        return self.status is Status.ENQUEUED

    @property
    def order(self) -> str:
        """How the table reads it: a list from its next job, a set by score up or down."""
        if self.is_list:
            return "tail"
        return "desc" if self.status is Status.DEAD else "asc"


def score_hint(score: float) -> str:
    """A score as text that Redis parses back to the same double."""
    return repr(score)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class JobRow:
    """One row: the stored entry and where it was found."""

    status: Status
    record: JobRecord
    digest: str
    hint: str  # the queue position or the score it had ("" for a running job)
    queue: str | None  # the queue it is on, runs from, or goes back to
    position: int | None = None  # ENQUEUED: jobs ahead of it (0 = it is next)
    run_at: float | None = None  # RUNNING
    identity: str | None = None  # RUNNING: the process
    thread_id: str | None = None

    @property
    def jid(self) -> str:
        return self.record.jid

    @property
    def job_class(self) -> str:
        return self.record.job_class

    @property
    def args(self) -> list[Any]:
        return self.record.args

    @property
    def raw(self) -> str:
        return self.record.raw

    @property
    def readable(self) -> bool:
        return self.record.readable and self.job_class != UNPARSEABLE

    @property
    def requeueable(self) -> bool:
        """Offered Retry: a readable job (not a worker's unparseable wrapper) with a queue."""
        return self.readable and self.record.queue is not None

    def _field(self, name: str) -> Any:
        return (self.record.item or {}).get(name)

    @property
    def retry_count(self) -> int:
        count = self._field("retry_count")
        return count if isinstance(count, int) and not isinstance(count, bool) else 0

    @property
    def attempt(self) -> str:
        if self.status is Status.RUNNING:
            return str(self.retry_count + 1)
        if self.status in (Status.RETRYING, Status.DEAD):
            return f"{self.retry_count} of {wire.max_retries(self.record.item or {})}"
        return "—"

    @property
    def next_run(self) -> float | None:
        """When it runs next: the due time of a scheduled or retrying entry."""
        if self.status in (Status.SCHEDULED, Status.RETRYING):
            return self.record.score
        return None

    @property
    def at(self) -> float | None:
        """The time the table shows for it: created (enqueued, scheduled), started (running),
        failed (retrying), died (dead)."""
        if self.status is Status.RUNNING:
            return self.run_at
        if self.status is Status.DEAD:
            return self.record.score
        if self.status is Status.RETRYING:
            return _number(self._field("failed_at")) or _number(self._field("created_at"))
        if self.status is Status.ENQUEUED:
            return _number(self._field("created_at")) or _number(self._field("enqueued_at"))
        return _number(self._field("created_at"))

    @property
    def error(self) -> str | None:
        """``Class: message`` of its last failure (retrying and dead entries)."""
        if self.status in (Status.RETRYING, Status.DEAD):
            return self.record.error
        return None

    @property
    def entry(self) -> str:
        """The ``entry`` parameter that names this row: ``<status>:<digest>:<hint>``."""
        return f"{self.status.slug}:{self.digest}:{self.hint}"

    def matches(self, needle: str) -> bool:
        """The search rule: the lowercased ``needle`` is in the class, jid or args."""
        return (
            needle in self.job_class.lower()
            or needle in self.jid.lower()
            or needle in compact_json(self.args, None).lower()
        )


def stored_row(source: Source, raw: str, position: int, score: str | None) -> JobRow:
    """The row of an entry read from a queue (``position`` from its next job) or a set."""
    if source.is_list:
        record = JobRecord(raw)
        return JobRow(
            source.status, record, urls.digest(raw), str(position), source.queue, position
        )
    value = float(score or "nan")
    record = JobRecord(raw, value)
    return JobRow(source.status, record, urls.digest(raw), score_hint(value), record.queue)


def running_row(work: Work) -> JobRow:
    """The row of a job a live process runs (its entry is the process's work record)."""
    record = JobRecord(work.raw)
    if work.readable:
        with contextlib.suppress(TypeError, ValueError, RecursionError):
            record = JobRecord(wire.dumps(work.job))
    return JobRow(
        Status.RUNNING,
        record,
        urls.digest(work.raw),
        "",
        work.queue or record.queue,
        run_at=_number(work.run_at),
        identity=work.identity,
        thread_id=work.thread_id,
    )
