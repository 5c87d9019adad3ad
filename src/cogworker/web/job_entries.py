"""Finding again the exact entry a page named, and the actions on a whole set.

A row names its entry as ``<status>:<digest>:<hint>`` (``JobRow.entry``), plus its queue
for an enqueued job. ``locate`` finds it again, never by position alone:

* in a sorted set, among the entries that have the hinted score (an entry rescheduled
  meanwhile has a new score, and so is not the entry the page showed);
* in a queue, within ``FIND_WINDOW`` positions of the hinted one (workers take jobs from the
  end positions count from, and a stopping worker hands jobs back there);
* among the running jobs, by digest.

The digest then makes sure it is the same entry, byte for byte.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import redis

from cogworker import api
from cogworker.web import urls
from cogworker.web.job_sources import (
    BY_SLUG,
    JobRow,
    Source,
    Status,
    running_row,
    score_hint,
    stored_row,
)

FIND_WINDOW = 200
SAME_SCORE_LIMIT = 100
"""Entries with the hinted score looked at (many jobs may share a due time)."""
RETRY_PAGE = 500
_DIGEST = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class EntryName:
    """What a page sent to name an entry (see the module docstring)."""

    status: Status
    digest: str
    hint: str
    queue: str | None = None

    @property
    def source(self) -> Source:
        return Source(self.status, self.queue)


def parse_entry(text: str, queue: str | None) -> EntryName:
    """The ``entry`` parameter (with the queue of an enqueued job), or a one-line error."""
    slug, _, rest = text.partition(":")
    digest, _, hint = rest.partition(":")
    status = BY_SLUG.get(slug)
    if status is None or not _DIGEST.fullmatch(digest):
        raise urls.BadParameter(f"entry must be <status>:<digest>:<where> (got {text!r})")
    if status is Status.ENQUEUED:
        if not hint.isdigit():
            raise urls.BadParameter(f"entry {text!r} needs a queue position after its digest")
        if not queue:
            raise urls.BadParameter(f"entry {text!r} is an enqueued job: its queue is missing")
        return EntryName(status, digest, str(int(hint)), queue)
    if status.is_set:
        try:
            if math.isnan(float(hint)):
                raise ValueError(hint)
        except ValueError:
            raise urls.BadParameter(f"entry {text!r} needs a score after its digest") from None
    return EntryName(status, digest, hint)


def locate(client: redis.Redis, name: EntryName) -> JobRow | None:
    """The entry ``name`` names, where it is now; None if it is no longer there."""
    if name.status is Status.RUNNING:
        for work in api.WorkSet(client):
            if urls.digest(work.raw) == name.digest:
                return running_row(work)
        return None
    source = name.source
    if source.is_list:
        return _near(client, source, name.digest, int(name.hint))
    members = client.zrangebyscore(
        source.key, name.hint, name.hint, start=0, num=SAME_SCORE_LIMIT, withscores=True
    )
    pairs: list[tuple[str, float]] = members  # type: ignore[assignment]
    for raw, score in pairs:
        if urls.digest(str(raw)) == name.digest:
            return stored_row(source, str(raw), 0, score_hint(float(score)))
    return None


def _near(client: redis.Redis, source: Source, digest: str, position: int) -> JobRow | None:
    """The queue entry with ``digest`` nearest to ``position`` (0 = the next to run)."""
    low, high = max(position - FIND_WINDOW, 0), position + FIND_WINDOW
    pipe = client.pipeline(transaction=True)
    pipe.lrange(source.key, -(high + 1), -(low + 1))
    pipe.llen(source.key)
    items, length = pipe.execute()
    first_index = max(int(length) - (high + 1), 0)  # head index of items[0]
    best: JobRow | None = None
    for offset, raw in enumerate(items):
        if urls.digest(str(raw)) != digest:
            continue
        found_at = int(length) - 1 - (first_index + offset)
        row = stored_row(source, str(raw), found_at, None)
        if best is None or abs(found_at - position) < abs((best.position or 0) - position):
            best = row
    return best


@dataclass(frozen=True)
class RetryAll:
    requeued: int
    left: int  # entries that can't go back on a queue (unreadable, no queue): still there


def retry_all(client: redis.Redis, status: Status) -> RetryAll:
    """Put every entry of a set back on its queue, lowest score first, each with the atomic
    claim (an entry someone else took meanwhile is skipped). Entries arriving meanwhile are
    handled only up to the number the set held when this began."""
    job_set = api.JobSet(client, status.set_key)
    budget = job_set.size()
    requeued = left = 0
    while budget > 0:
        # the entries that stayed sit at the lowest ranks: read past them
        batch = client.zrange(job_set.key, left, left + min(RETRY_PAGE, budget) - 1)
        if not batch:
            break
        budget -= len(batch)
        for raw in batch:
            outcome = job_set.retry_now(str(raw))
            if outcome == "requeued":
                requeued += 1
            elif outcome == "invalid":
                left += 1
    return RetryAll(requeued, left)


def delete_all(client: redis.Redis, status: Status) -> int:
    """Remove every entry of a set with its retry history and locks; how many."""
    return api.JobSet(client, status.set_key).clear()
