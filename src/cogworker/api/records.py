"""``JobRecord``: one stored job (a queue item or a sorted-set member), read lazily.

Any entry can be wrapped, whatever it holds: one that is not a readable JSON object (invalid
UTF-8, not JSON, nested too deeply, not an object) reports class ``(unparseable)`` and a
pseudo-jid derived from its exact bytes, and can still be found, shown and deleted.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from cogworker import failure, locks
from cogworker.failure import Rejection
from cogworker.wire import Payload

PSEUDO_JID_PREFIX = "unparseable-"


@dataclass(frozen=True)
class JobRecord:
    """A job as stored. ``raw`` is its identity: every change acts on that exact string."""

    raw: str
    score: float | None = None
    item: Payload | None = field(init=False, repr=False, compare=False)
    problem: str | None = field(init=False, repr=False, compare=False)
    """Why the entry is not a readable JSON object (``UnicodeDecodeError: ...``), else None."""

    def __post_init__(self) -> None:
        parsed = failure.parse_object(self.raw)
        if isinstance(parsed, Rejection):
            object.__setattr__(self, "item", None)
            object.__setattr__(self, "problem", f"{parsed.error_class}: {parsed.message}")
        else:
            object.__setattr__(self, "item", parsed)
            object.__setattr__(self, "problem", None)

    @property
    def readable(self) -> bool:
        return self.item is not None

    def _get(self, name: str) -> Any:
        return self.item.get(name) if self.item is not None else None

    @property
    def jid(self) -> str:
        """The job's jid; for an entry without one, ``unparseable-`` and 12 hex digits of the
        SHA-1 of its stored bytes (the same for the same entry, in every process)."""
        jid = self._get("jid")
        if isinstance(jid, str):
            return jid
        return PSEUDO_JID_PREFIX + hashlib.sha1(failure.raw_bytes(self.raw)).hexdigest()[:12]

    @property
    def job_class(self) -> str:
        job_class = self._get("class")
        return job_class if isinstance(job_class, str) else "(unparseable)"

    @property
    def args(self) -> list[Any]:
        args = self._get("args")
        return args if isinstance(args, list) else []

    @property
    def queue(self) -> str | None:
        queue = self._get("queue")
        return queue if isinstance(queue, str) and queue else None

    @property
    def requeueable(self) -> bool:
        """Can go back on a queue: a readable job that names its queue."""
        return self.item is not None and self.queue is not None

    @property
    def error(self) -> str | None:
        error_class = self._get("error_class")
        if not error_class:
            return None
        return f"{error_class}: {self._get('error_message') or ''}"

    @property
    def raw_text(self) -> str:
        """``raw`` made safe to print or encode: any invalid byte (and any lone surrogate)
        replaced by U+FFFD. Equal to ``raw`` for every entry stored as valid UTF-8."""
        return failure.scrub(self.raw, len(self.raw))

    @property
    def raw_base64(self) -> str:
        """The exact stored bytes, base64-encoded (for entries whose ``raw_text`` differs)."""
        return base64.b64encode(failure.raw_bytes(self.raw)).decode("ascii")

    def to_dict(self) -> dict[str, Any]:
        """Printable fields: ``raw`` is ``raw_text``, plus ``raw_base64`` when that isn't
        the exact stored text."""
        shown: dict[str, Any] = {
            "jid": self.jid,
            "class": self.job_class,
            "queue": self.queue,
            "args": self.args,
            "score": self.score,
            "item": self.item,
            "raw": self.raw_text,
        }
        if shown["raw"] != self.raw:
            shown["raw_base64"] = self.raw_base64
        if self.problem is not None:
            shown["problem"] = self.problem
        return shown


def paged(page: Callable[[int, int], list[JobRecord]], size: int) -> Iterator[JobRecord]:
    """Every record ``page(offset, limit)`` can return, read ``size`` at a time."""
    offset = 0
    while True:
        batch = page(offset, size)
        yield from batch
        if len(batch) < size:
            return
        offset += size


def release_locks_of(client: redis.Redis, records: Iterable[JobRecord]) -> None:
    """Release the locks the jobs of ``records`` still own, each only while it holds that
    job's jid (an entry that isn't a readable job owns none)."""
    jobs = [record.item for record in records if record.item is not None]
    locks.release_owned(client, locks.owned_locks(*jobs))
