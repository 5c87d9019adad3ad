"""The Jobs table's search: the rows whose class, jid or args hold a text (case ignored).

No index exists to search, so a search reads the stored entries of the view: in the table's
order (running, each queue, scheduled, retrying, dead), ``CHUNK`` entries per script call (a
short step each, so Redis never stalls), up to ``jobs_search_limit`` entries in all; the page
says when the limit left entries unsearched. Redis sends back only the entries whose text
holds the search text, and the ones that may be unparseable; each is then checked against
the rule exactly. A text that a job's JSON may store differently (non-ASCII, quotes,
backslashes, slashes, control characters) can't be looked for in the stored text, so every
entry read is sent back and checked. Reading 100,000 entries costs about 0.2 s when few hold
the text, 0.9 s when a third do, 1.4 s for a text looked for in every entry (bench/web.py);
a Live refresh of a searched view searches again.

Entries are read from the end they don't leave by (a queue's newest, a set's latest score),
so one that moves during the search is seen at worst twice, never skipped; each source's
matches are then put back in the table's order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import redis

from cogworker import scripts
from cogworker.web.job_pages import Counts, counts_of, running_rows, sizes_only
from cogworker.web.job_sources import JobRow, Source, Status, stored_row

CHUNK = 1000
SEARCH_SCRIPT = scripts.load(__file__, "job_search")


@dataclass(frozen=True)
class SearchResult:
    rows: list[JobRow]  # every match, in the table's order
    counts: Counts
    scanned: int  # stored entries read
    searchable: int  # stored entries in the view

    @property
    def complete(self) -> bool:
        return self.scanned >= self.searchable


def stored_form(needle: str) -> str:
    """The text to look for in stored JSON, or "" when JSON may write it otherwise."""
    plain = needle.isascii() and needle.isprintable() and "/" not in needle
    return needle if plain and json.dumps(needle)[1:-1] == needle else ""


def search(client: redis.Redis, status: Status | None, text: str, limit: int) -> SearchResult:
    """Every row of the view (one status or all) matching ``text``, reading at most
    ``limit`` stored entries."""
    needle = text.strip().lower()
    running = running_rows(client)
    stored, sizes = sizes_only(client)
    matches: list[JobRow] = []
    if status in (None, Status.RUNNING):
        matches = [row for row in running if row.matches(needle)]
    budget, scanned, searchable = limit, 0, 0
    for source, size in zip(stored, sizes, strict=True):
        if status not in (None, source.status) or size <= 0:
            continue
        searchable += size
        if budget > 0:
            found, read = scan_source(client, source, needle, budget)
            matches += found
            budget -= read
            scanned += read
    return SearchResult(matches, counts_of(stored, sizes, len(running)), scanned, searchable)


def scan_source(
    client: redis.Redis, source: Source, needle: str, budget: int
) -> tuple[list[JobRow], int]:
    """The matching rows of one source in its table order, and how many entries were read."""
    kind = "list" if source.is_list else "zset"
    prefilter = stored_form(needle)
    placed: list[tuple[int, JobRow]] = []
    read = 0
    while read < budget:
        step = min(CHUNK, budget - read)
        size, count, *found = SEARCH_SCRIPT(client, [source.key], [kind, read, step, prefilter])
        for at in range(0, len(found), 3):
            index, raw, score = int(found[at]), str(found[at + 1]), str(found[at + 2])
            position = table_position(source, int(size), index)
            row = stored_row(source, raw, position, score or None)
            if row.matches(needle):
                placed.append((position, row))
        read += int(count)
        if int(count) < step:
            break
    placed.sort(key=lambda pair: pair[0])
    return [row for _, row in placed], read


def table_position(source: Source, size: int, index: int) -> int:
    """Where an entry read at ``index`` (from the newest end) sits in the table's order."""
    if source.order == "desc":
        return index
    return max(size - 1 - index, 0)
