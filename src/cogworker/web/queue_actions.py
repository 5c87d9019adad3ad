"""What the Overview does to and reads about one queue, beyond ``cogworker.api``.

* ``share_of_set``: how many retry or dead entries belong to the queue, counted in Redis
  among the newest ``limit`` entries (a bounded cost per refresh, whatever the set's size);
* ``retry_all``: every retry entry of the queue back on it, each with the API's atomic claim
  (an entry someone else took meanwhile is skipped);
* ``find_near``: the entry a confirmation link names by fingerprint, looked up around the
  position it had when the page was drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from cogworker import api, keys, scripts, wire
from cogworker.web import urls

COUNT_QUEUE_SHARE = scripts.load(__file__, "count_queue_share")
FIND_WINDOW = 200
"""Entries looked at on each side of a confirmation link's position (producers push at the
head, so a job's position grows while the page is open)."""


@dataclass(frozen=True)
class Share:
    """``count`` entries of the queue among the ``scanned`` newest of ``total``."""

    count: int
    scanned: int
    total: int

    @property
    def complete(self) -> bool:
        return self.scanned >= self.total


def share_of_set(client: redis.Redis, key: str, queue: str, limit: int) -> Share:
    needle = '"queue":' + wire.dumps(queue)
    count, scanned, total = COUNT_QUEUE_SHARE(client, [key], [queue, needle, limit])
    return Share(int(count), int(scanned), int(total))


def retry_all(client: redis.Redis, queue: str) -> int:
    """Put every retry entry of ``queue`` back on it now; how many went back. The entries are
    listed first and claimed afterwards, so claiming doesn't shift the pages being read."""
    retries = api.retry_set(client)
    mine = [record.raw for record in retries if record.queue == queue]
    return sum(1 for raw in mine if retries.retry_now(raw) == "requeued")


def find_near(client: redis.Redis, queue: str, fingerprint: str, position: int) -> str | None:
    """The entry of ``queue`` whose ``urls.digest`` is ``fingerprint``, looked for from
    ``FIND_WINDOW`` before ``position`` to ``FIND_WINDOW`` after it (0 = newest)."""
    start = max(position - FIND_WINDOW, 0)
    for raw in client.lrange(keys.queue(queue), start, position + FIND_WINDOW):
        if urls.digest(str(raw)) == fingerprint:
            return str(raw)
    return None
