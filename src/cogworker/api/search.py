"""Finding a job by jid in a stored list or sorted set: one pass, a page at a time.

A search reads every entry once (a page per round trip) and parses only the entries whose
text holds the jid as a JSON string, so its cost is the structure's size in entries read,
not in entries parsed. Pages are read in the order that is safe against the runtime moving
entries meanwhile: a queue from its head (workers take from the tail, producers push to the
head, so an entry present throughout is never skipped, at worst seen twice), a sorted set from
its highest score (due entries leave from the lowest).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from cogworker import wire
from cogworker.api.records import PSEUDO_JID_PREFIX, JobRecord

SEARCH_PAGE = 1000


@dataclass
class Found:
    """The entries of one structure that carry the jid, and how many entries were read."""

    records: list[JobRecord] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)  # queues only: 0 = next to run
    scanned: int = 0


def _candidate(raw: str, needle: str, pseudo: bool) -> bool:
    # a pseudo-jid (an unreadable entry's, a hash of its bytes) can only be matched by
    # computing it for every entry
    return pseudo or needle in raw


def search_list(client: redis.Redis, key: str, jid: str, page: int = SEARCH_PAGE) -> Found:
    """Every copy of job ``jid`` in the list ``key``, with its position counted from the tail
    (0 = the next a worker takes). Each page is read together with the list's length in one
    MULTI, so a position is exact for the moment its page was read."""
    found = Found()
    needle, pseudo = wire.dumps(jid), jid.startswith(PSEUDO_JID_PREFIX)
    offset = 0
    while True:
        pipe = client.pipeline(transaction=True)
        pipe.lrange(key, offset, offset + page - 1)
        pipe.llen(key)
        raws, length = pipe.execute()
        for index, raw in enumerate(raws, start=offset):
            text = str(raw)
            if _candidate(text, needle, pseudo) and (record := JobRecord(text)).jid == jid:
                found.records.append(record)
                found.positions.append(max(int(length) - 1 - index, 0))
        found.scanned += len(raws)
        if len(raws) < page:
            return found
        offset += page


def search_sorted_set(client: redis.Redis, key: str, jid: str, page: int = SEARCH_PAGE) -> Found:
    """Every entry of job ``jid`` in the sorted set ``key`` (a job can be there twice)."""
    found = Found()
    needle, pseudo = wire.dumps(jid), jid.startswith(PSEUDO_JID_PREFIX)
    offset = 0
    while True:
        members = client.zrevrange(key, offset, offset + page - 1, withscores=True)
        pairs: list[tuple[str, float]] = members  # type: ignore[assignment]
        for raw, score in pairs:
            text = str(raw)
            if _candidate(text, needle, pseudo):
                record = JobRecord(text, float(score))
                if record.jid == jid:
                    found.records.append(record)
        found.scanned += len(pairs)
        if len(pairs) < page:
            return found
        offset += page
