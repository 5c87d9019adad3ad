"""Operating cron entries from outside a worker (the Web UI, the CLI, a console).

Entries are read from the published ``periodic:schedule`` hash, so this works for entries of
every process in the fleet, Ruby ones included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from cogworker import keys, wire
from cogworker.client import Client
from cogworker.periodic.cron import CronError, Schedule


@dataclass(frozen=True)
class PublishedEntry:
    pjid: str
    cron: str
    job: str
    args: list[Any]
    retry: Any
    unique: str | None
    queue: str
    disabled: bool
    last_slot: int | None
    next_run: float | None  # None when the cron can't be read here

    @classmethod
    def parse(
        cls, pjid: str, raw: str, disabled: bool, last_slot: str | None, now: float
    ) -> PublishedEntry:
        value = wire.loads(raw)
        cron = str(value.get("cron", ""))
        try:
            next_run: float | None = Schedule(cron).next_after(now)
        except CronError:
            next_run = None
        return cls(
            pjid=pjid,
            cron=cron,
            job=str(value.get("class", "")),
            args=list(value.get("args") or []),
            retry=value.get("retry", 0),
            unique=value.get("unique"),
            queue=str(value.get("queue") or "default"),
            disabled=disabled,
            last_slot=int(last_slot) if last_slot and last_slot.lstrip("-").isdigit() else None,
            next_run=next_run,
        )


def entries(client: redis.Redis) -> list[PublishedEntry]:
    """Every published entry with its state, in cron order."""
    published = {str(k): str(v) for k, v in client.hgetall(keys.PERIODIC_SCHEDULE).items()}
    if not published:
        return []
    disabled = {str(pjid) for pjid in client.smembers(keys.PERIODIC_DISABLED)}
    pjids = sorted(published)
    slots = client.mget([keys.periodic_last_slot(pjid) for pjid in pjids])
    now = wire.now()
    found = [
        PublishedEntry.parse(pjid, published[pjid], pjid in disabled, _text(slot), now)
        for pjid, slot in zip(pjids, slots, strict=True)
    ]
    return sorted(found, key=lambda entry: (entry.job, entry.cron, entry.pjid))


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def disable(client: redis.Redis, pjid: str) -> None:
    """Stop claiming slots of ``pjid`` (its last slot doesn't advance while disabled)."""
    client.sadd(keys.PERIODIC_DISABLED, pjid)


def enable(client: redis.Redis, pjid: str) -> None:
    """Claim slots again; skipped slots are not fired in a burst."""
    client.srem(keys.PERIODIC_DISABLED, pjid)


def run_now(client: Client, pjid: str) -> str | None:
    """Push the entry's job once, now, as an ordinary job (no slot, no lock)."""
    raw = client.config.redis().hget(keys.PERIODIC_SCHEDULE, pjid)
    if raw is None:
        raise KeyError(f"no periodic entry {pjid!r} is published")
    value = wire.loads(str(raw))
    return client.push(
        {
            "class": value.get("class"),
            "args": value.get("args") or [],
            "retry": value.get("retry", 0),
            "queue": value.get("queue") or "default",
        }
    )
