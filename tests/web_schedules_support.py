"""Helpers shared by the Schedules tab's tests (tests/test_web_tabs_schedules*.py); not a test
module: publish an entry as a worker's ticker does, find a table row, read a queue back.
"""

from __future__ import annotations

import json
import re
from typing import Any

import redis

from cogworker import keys
from cogworker.periodic import Entry


def publish(
    r: redis.Redis, cron: str, job: str, *, last_slot: int | None = None, **options: Any
) -> Entry:
    """Publish an entry as a worker's ticker does (and optionally its last claimed slot)."""
    entry = Entry(cron, job, **options)
    r.hset(keys.PERIODIC_SCHEDULE, entry.pjid, entry.published())
    if last_slot is not None:
        r.set(keys.periodic_last_slot(entry.pjid), last_slot)
    return entry


def row_of(html: str, text: str) -> str:
    """The table row that contains ``text``."""
    rows = [row for row in re.findall(r"<tr>.*?</tr>", html, re.S) if text in row]
    assert len(rows) == 1, f"{len(rows)} rows with {text!r}"
    return rows[0]


def queued(r: redis.Redis, queue: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange(keys.queue(queue), 0, -1)]


def three(r: redis.Redis) -> None:
    publish(r, "*/5 * * * *", "Reports::Daily", args=[{"section": "Finance"}])
    publish(r, "0 3 * * *", "Sessions::Purge")
    publish(r, "15 * * * *", "Inventory::Sync", args=["warehouse-7"])
