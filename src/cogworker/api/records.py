"""``JobRecord``: one stored job (a queue item or a sorted-set member), read lazily."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from cogworker import wire
from cogworker.wire import Payload


@dataclass(frozen=True)
class JobRecord:
    """A job as stored. ``raw`` is its identity: every change acts on that exact string."""

    raw: str
    score: float | None = None
    item: Payload | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            parsed = wire.loads(self.raw)
        except ValueError:
            parsed = None
        object.__setattr__(self, "item", parsed if isinstance(parsed, dict) else None)

    @property
    def readable(self) -> bool:
        return self.item is not None

    def _get(self, name: str) -> Any:
        return self.item.get(name) if self.item is not None else None

    @property
    def jid(self) -> str:
        jid = self._get("jid")
        if isinstance(jid, str):
            return jid
        return "unparseable-" + hashlib.sha1(self.raw.encode("utf-8")).hexdigest()[:12]

    @property
    def job_class(self) -> str:
        return str(self._get("class")) if self.item is not None else "(unparseable)"

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "jid": self.jid,
            "class": self.job_class,
            "queue": self.queue,
            "args": self.args,
            "score": self.score,
            "item": self.item,
            "raw": self.raw,
        }


def paged(page: Callable[[int, int], list[JobRecord]], size: int) -> Iterator[JobRecord]:
    """Every record ``page(offset, limit)`` can return, read ``size`` at a time."""
    offset = 0
    while True:
        batch = page(offset, size)
        yield from batch
        if len(batch) < size:
            return
        offset += size


def with_jid(records: Iterable[JobRecord], jid: str) -> Iterator[JobRecord]:
    """The records of job ``jid`` (a cheap substring test before parsing)."""
    needle = f'"jid":{wire.dumps(jid)}'
    return (record for record in records if needle in record.raw and record.jid == jid)
