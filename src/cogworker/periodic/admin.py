"""Operating cron entries from outside a worker (the Web UI, the CLI, a console).

Entries are read from the published ``periodic:schedule`` hash, so this works for entries of
every process in the fleet, Ruby ones included.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import redis

from cogworker import keys, wire
from cogworker.client import Client
from cogworker.periodic.cron import CronError, Schedule
from cogworker.periodic.run_now import Outcome
from cogworker.periodic.run_now import run_now as run_now_of_entry


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
    running: str | None = None  # the jid holding the entry's running lock, if any
    running_ttl: int | None = None
    problem: str | None = None  # why the published value can't be read, if it can't

    @classmethod
    def parse(
        cls, pjid: str, raw: str, disabled: bool, last_slot: str | None, now: float
    ) -> PublishedEntry:
        """The entry published as ``raw``; one that isn't a readable JSON object comes back
        with class ``(unparseable)`` and its ``problem`` set, never as an exception."""
        problem: str | None
        try:
            value = wire.loads(raw)
        except (ValueError, RecursionError) as error:
            value, problem = {}, f"not JSON: {error}"
        else:
            problem = None if isinstance(value, dict) else "not a JSON object"
        if not isinstance(value, dict):
            value = {}
        cron = str(value.get("cron", ""))
        try:
            next_run: float | None = Schedule(cron).next_after(now)
        except CronError:
            next_run = None
        args = value.get("args")
        return cls(
            pjid=pjid,
            cron=cron,
            job=str(value.get("class", "")) if problem is None else "(unparseable)",
            args=args if isinstance(args, list) else [],
            retry=value.get("retry", 0),
            unique=unique if isinstance(unique := value.get("unique"), str) else None,
            queue=str(value.get("queue") or "default"),
            disabled=disabled,
            last_slot=int(last_slot) if last_slot and last_slot.lstrip("-").isdigit() else None,
            next_run=next_run,
            problem=problem,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "pjid": self.pjid,
            "cron": self.cron,
            "class": self.job,
            "args": self.args,
            "retry": self.retry,
            "unique": self.unique,
            "queue": self.queue,
            "disabled": self.disabled,
            "last_run": self.last_slot,
            "next_run": self.next_run,
            "running": self.running,
            "running_ttl": self.running_ttl,
            "problem": self.problem,
        }


def entries(client: redis.Redis) -> list[PublishedEntry]:
    """Every published entry with its state (last and next run, disabled, the run holding
    its running lock), in cron order; two round trips whatever the number of entries."""
    published = {str(k): str(v) for k, v in client.hgetall(keys.PERIODIC_SCHEDULE).items()}
    if not published:
        return []
    pjids = sorted(published)
    pipe = client.pipeline(transaction=False)
    pipe.smembers(keys.PERIODIC_DISABLED)
    pipe.mget([keys.periodic_last_slot(pjid) for pjid in pjids])
    for pjid in pjids:
        pipe.get(keys.periodic_running(pjid))
        pipe.ttl(keys.periodic_running(pjid))
    disabled_set, slots, *locks = pipe.execute(raise_on_error=False)
    disabled = set() if isinstance(disabled_set, Exception) else {str(p) for p in disabled_set}
    slots = [None] * len(pjids) if isinstance(slots, Exception) else slots
    now = wire.now()
    found = []
    for index, pjid in enumerate(pjids):
        entry = PublishedEntry.parse(
            pjid, published[pjid], pjid in disabled, _text(slots[index]), now
        )
        owner, ttl = locks[2 * index], locks[2 * index + 1]
        found.append(
            replace(
                entry,
                running=None if owner is None or isinstance(owner, Exception) else str(owner),
                running_ttl=ttl if isinstance(ttl, int) and ttl >= 0 else None,
            )
        )
    return sorted(found, key=lambda entry: (entry.job, entry.cron, entry.pjid))


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def disable(client: redis.Redis, pjid: str) -> None:
    """Stop claiming slots of ``pjid`` (its last slot doesn't advance while disabled)."""
    client.sadd(keys.PERIODIC_DISABLED, pjid)


def enable(client: redis.Redis, pjid: str) -> None:
    """Claim slots again; skipped slots are not fired in a burst."""
    client.srem(keys.PERIODIC_DISABLED, pjid)


class EntryBusy(RuntimeError):
    """Run now of an ``until_executed`` entry while an earlier run holds its running lock."""

    def __init__(self, pjid: str, holder: str | None) -> None:
        super().__init__(
            f"periodic entry {pjid!r} is until_executed and run jid={holder} still holds it: "
            "nothing pushed (try again once that run has ended)"
        )
        self.holder = holder


def run_now(client: Client, pjid: str) -> str | None:
    """Push one run of the entry now, on its queue, through ``client`` (see
    ``periodic.run_now``: no slot is taken; an ``until_executed`` entry's run holds the
    running lock, as a cron run does). Returns the jid, or None when a client middleware
    stopped the push. Raises KeyError if no such entry is published, ValueError if its
    published value can't be read, EntryBusy while an earlier run holds the entry."""
    done = run_now_of_entry(client.config, client.config.redis(), pjid, client)
    match done.outcome:
        case Outcome.GONE:
            raise KeyError(f"no periodic entry {pjid!r} is published")
        case Outcome.UNREADABLE:
            raise ValueError(f"periodic entry {pjid!r} is not a readable job")
        case Outcome.HELD:
            raise EntryBusy(pjid, done.holder)
    return done.jid
