"""A page of the Jobs table, read on the server whatever the number of jobs stored.

The running jobs (a few per process) are read whole. Everything else is one script call: it
takes the size of every queue and set, skips the sources that lie entirely before the page,
and reads only the one or two (or, with small queues, few) sources the page spans, with a
range read of just the rows shown. A refresh therefore costs the same with ten jobs or ten
million: one round trip for the queue names, one for the page, and those of the live process
listing (see ``cogworker.api.WorkSet``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from cogworker import api, scripts
from cogworker.web.job_sources import (
    CONCATENATION,
    JobRow,
    Source,
    Status,
    running_row,
    stored_row,
)

PAGE_SCRIPT = scripts.load(__file__, "job_page")


@dataclass(frozen=True)
class Counts:
    """How many entries each status has, and the keys left out for holding another type."""

    by_status: dict[Status, int]
    unreadable: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    def of(self, status: Status | None) -> int:
        return self.total if status is None else self.by_status.get(status, 0)


@dataclass(frozen=True)
class Page:
    rows: list[JobRow]
    counts: Counts
    offset: int  # rows of the view before this page


def sources(client: redis.Redis) -> list[Source]:
    """Every stored source in the table's order (the running jobs are not stored ones)."""
    queues = [Source(Status.ENQUEUED, name) for name in api.queue_names(client)]
    return queues + [Source(status) for status in CONCATENATION if status.is_set]


def running_rows(client: redis.Redis) -> list[JobRow]:
    return [running_row(work) for work in api.WorkSet(client)]


def read_page(client: redis.Redis, status: Status | None, offset: int, limit: int) -> Page:
    """Rows ``offset`` to ``offset + limit`` of the view (one status, or all of them)."""
    running = running_rows(client)
    rows: list[JobRow] = []
    skip = offset
    if status in (None, Status.RUNNING):
        rows = running[offset : offset + limit]
        skip = max(offset - len(running), 0)
    stored = sources(client)
    modes = [
        source.order if status in (None, source.status) else ("list" if source.is_list else "zset")
        for source in stored
    ]
    sizes, found = PAGE_SCRIPT(
        client, [source.key for source in stored], [skip, limit - len(rows), *modes]
    )
    for at in range(0, len(found), 4):
        index, position, raw, score = found[at : at + 4]
        source = stored[int(index) - 1]
        rows.append(stored_row(source, str(raw), int(position), str(score) or None))
    return Page(rows, counts_of(stored, [int(size) for size in sizes], len(running)), offset)


def counts_of(stored: list[Source], sizes: list[int], running: int) -> Counts:
    by_status = {status: 0 for status in CONCATENATION}
    by_status[Status.RUNNING] = running
    unreadable = []
    for source, size in zip(stored, sizes, strict=True):
        if size < 0:
            unreadable.append(source.key)
        else:
            by_status[source.status] += size
    return Counts(by_status, unreadable)


def sizes_only(client: redis.Redis) -> tuple[list[Source], list[int]]:
    """Every stored source and its size (-1: the key holds another type), in one call."""
    stored = sources(client)
    modes = ["list" if source.is_list else "zset" for source in stored]
    sizes, _ = PAGE_SCRIPT(client, [source.key for source in stored], [0, 0, *modes])
    return stored, [int(size) for size in sizes]
