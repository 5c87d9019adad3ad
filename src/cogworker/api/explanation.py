"""What ``api.explain`` answers: where a job is, and why it is not running (yet).

Plain data: ``Explanation`` holds the places the job was found (``Location``), the reasons it
waits (``Reason``), its status hash and its recorded runs; ``to_dict()`` gives the same as
JSON-ready values (enums as their string values, times as epoch seconds).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from cogworker.api.records import JobRecord


class Place(enum.Enum):
    RUNNING = "running"  # a processor thread of a live process runs it now
    TAKEN = "taken"  # on a live process's in-progress list, no thread shows it running
    ORPHANED = "orphaned"  # in progress at a process that is gone: recovery will requeue it
    LOST = "lost"  # was running at a gone process that kept no in-progress copy (basic fetch)
    QUEUED = "queued"
    RETRY = "retry"
    SCHEDULED = "scheduled"
    PARKED = "parked"  # handed over for filing into dead/retry by the next recovery pass
    DEAD = "dead"
    FINISHED = "finished"  # only its status or its run history know it
    MISSING = "missing"  # its status says it waits or runs, yet it is found nowhere
    UNKNOWN = "unknown"  # found nowhere, and no status or run history knows it


class Why(enum.Enum):
    JOBS_AHEAD = "jobs_ahead"
    QUEUE_PAUSED = "queue_paused"
    NO_READER = "no_reader"
    READERS_QUIET = "readers_quiet"
    READERS_BUSY = "readers_busy"
    NOT_DUE = "not_due"
    NO_POLLER = "no_poller"
    AWAITING_RECOVERY = "awaiting_recovery"
    LOST_WITH_PROCESS = "lost_with_process"
    IN_DEAD_SET = "in_dead_set"
    UNIQUE_LOCK = "unique_lock"
    CRON_LOCK = "cron_lock"
    MISSING = "missing"
    NOT_FOUND = "not_found"


@dataclass(frozen=True)
class Location:
    """One place the job is stored; only the fields that apply to that place are set."""

    place: Place
    record: JobRecord
    queue: str | None = None
    position: int | None = None  # QUEUED: 0 = the next a worker takes
    at: float | None = None  # due (SCHEDULED, RETRY), died (DEAD), started (RUNNING)
    retry: int | None = None  # RETRY: the number of the retry that is due
    max_retries: int | None = None
    error: str | None = None
    identity: str | None = None  # the process (RUNNING, TAKEN, ORPHANED, LOST)
    thread_id: str | None = None
    process_alive: bool | None = None
    last_beat: int | None = None  # the process's last beat, Redis clock
    recover_at: float | None = None  # ORPHANED: when recovery may requeue it (Redis clock)
    target: str | None = None  # PARKED: the set it will be filed into

    def to_dict(self) -> dict[str, Any]:
        values: dict[str, Any] = {"place": self.place.value}
        for name in (
            "queue",
            "position",
            "at",
            "retry",
            "max_retries",
            "error",
            "identity",
            "thread_id",
            "process_alive",
            "last_beat",
            "recover_at",
            "target",
        ):
            value = getattr(self, name)
            if value is not None:
                values[name] = value
        values["job"] = self.record.item
        if self.record.item is None:
            values["raw"] = self.record.raw
        return values


@dataclass(frozen=True)
class Reason:
    """One cause of waiting (or one fact that matters to it), with a sentence for humans
    that says what happens next."""

    why: Why
    text: str
    queue: str | None = None
    identities: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    at: float | None = None
    key: str | None = None
    owner: str | None = None
    ttl: int | None = None
    latency: float | None = None
    count: int | None = None

    def to_dict(self) -> dict[str, Any]:
        values: dict[str, Any] = {"why": self.why.value, "text": self.text}
        for name in ("queue", "at", "key", "owner", "ttl", "latency", "count"):
            value = getattr(self, name)
            if value is not None:
                values[name] = value
        if self.identities:
            values["identities"] = list(self.identities)
        if self.queues:
            values["queues"] = list(self.queues)
        return values


@dataclass(frozen=True)
class Run:
    """One finished run from the run history."""

    status: str
    queue: str | None
    started_at: float | None
    finished_at: float | None
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "queue": self.queue,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "error": self.error,
        }


# the place that best answers "where is it now", when a job shows up in several
_PRECEDENCE = [
    Place.RUNNING,
    Place.TAKEN,
    Place.ORPHANED,
    Place.QUEUED,
    Place.RETRY,
    Place.SCHEDULED,
    Place.PARKED,
    Place.DEAD,
    Place.LOST,
]


@dataclass(frozen=True)
class Explanation:
    jid: str
    checked_at: float  # Redis's clock when the search began
    locations: list[Location] = field(default_factory=list)
    reasons: list[Reason] = field(default_factory=list)
    status: dict[str, str] | None = None  # the job's status:<jid> hash, if any
    runs: list[Run] = field(default_factory=list)  # newest first
    history_kept: bool = False  # False: no run history in this Redis (off, or nothing ran)
    scanned: dict[str, int] = field(default_factory=dict)  # structure -> entries read

    @property
    def place(self) -> Place:
        """Where the job is now: the most active of its locations (running first, dead
        last); else FINISHED if its status says it ended (or, with no status, its run history
        knows it), MISSING if its status says it waits or runs, UNKNOWN if nothing knows it.

        A job can show in two places for an instant: a failure is filed into retry or dead
        before its in-progress copy is acknowledged. ``locations`` lists every copy."""
        found = {location.place for location in self.locations}
        for place in _PRECEDENCE:
            if place in found:
                return place
        if self.status is not None:
            ended = self.status.get("status") in ("complete", "failed")
            return Place.FINISHED if ended else Place.MISSING
        return Place.FINISHED if self.runs else Place.UNKNOWN

    @property
    def found(self) -> bool:
        return self.place is not Place.UNKNOWN

    def to_dict(self) -> dict[str, Any]:
        return {
            "jid": self.jid,
            "place": self.place.value,
            "checked_at": self.checked_at,
            "locations": [location.to_dict() for location in self.locations],
            "reasons": [reason.to_dict() for reason in self.reasons],
            "status": self.status,
            "runs": [run.to_dict() for run in self.runs],
            "history_kept": self.history_kept,
            "scanned": dict(self.scanned),
        }
