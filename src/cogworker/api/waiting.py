"""Why a job found by ``api.explain`` waits: its queue's readers, its due time, its dead
process's recovery, the dead set, and the locks it owns or that others own in its name.

Each reason is a ``Reason`` with a sentence saying what happens next. The facts come from
the live processes (their presence hashes: queues read, quiet flag, busy count), the paused
queue set, the queue's latency and the lock keys; times compare with Redis's clock.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import redis

from cogworker import keys, locks
from cogworker.api.explanation import Location, Place, Reason, Why
from cogworker.api.locks import UniqueLock, read_locks
from cogworker.api.processes import Process
from cogworker.api.queues import Queue

WAITING = (Place.QUEUED, Place.SCHEDULED, Place.RETRY, Place.ORPHANED, Place.PARKED)


@dataclass(frozen=True)
class Fleet:
    """The state every reason is judged against, read once per explanation."""

    now: float  # Redis's clock
    processes: list[Process] = field(default_factory=list)  # the live ones
    paused: frozenset[str] = frozenset()


def when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def span(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h10m``, ``3d4h``: a duration for a sentence."""
    whole = max(round(seconds), 0)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600}h"


def queue_reasons(client: redis.Redis, queue: str, fleet: Fleet) -> list[Reason]:
    """Why nobody takes jobs from ``queue`` right now (nothing if someone can)."""
    found = []
    if queue in fleet.paused:
        found.append(
            Reason(
                Why.QUEUE_PAUSED,
                f"queue {queue} is paused: no worker takes its jobs until it is resumed",
                queue=queue,
            )
        )
    readers = [p for p in fleet.processes if queue in p.queues]
    if not readers:
        others = sorted({name for p in fleet.processes for name in p.queues})
        text = (
            f"no live process reads queue {queue} (they read {', '.join(others)}): it waits "
            f"until a worker reading {queue} starts"
            if others
            else f"no worker process is running, so nothing reads queue {queue}: it waits "
            "until one starts"
        )
        found.append(Reason(Why.NO_READER, text, queue=queue, queues=tuple(others)))
        return found
    names = tuple(p.identity for p in readers)
    if all(p.quiet for p in readers):
        found.append(
            Reason(
                Why.READERS_QUIET,
                f"every process reading {queue} is quiet ({', '.join(names)}): none takes "
                "new jobs until resumed or replaced",
                queue=queue,
                identities=names,
            )
        )
    elif all(p.quiet or p.busy >= p.concurrency > 0 for p in readers):
        latency = Queue(client, queue).latency()
        found.append(
            Reason(
                Why.READERS_BUSY,
                f"every process reading {queue} is busy or quiet ({', '.join(names)}); "
                f"its oldest job has waited {span(latency)}: it runs when a thread frees up",
                queue=queue,
                identities=names,
                latency=latency,
            )
        )
    return found


def _location_reasons(
    client: redis.Redis, location: Location, fleet: Fleet, orphanings: int
) -> list[Reason]:
    place, queue = location.place, location.queue
    found: list[Reason] = []
    if place is Place.QUEUED and location.position:
        found.append(
            Reason(
                Why.JOBS_AHEAD,
                f"{location.position} job(s) ahead of it on {queue}",
                queue=queue,
                count=location.position,
            )
        )
    if place in (Place.SCHEDULED, Place.RETRY) and location.at is not None:
        found.append(_due_reason(location.at, fleet))
    if place is Place.ORPHANED:
        found.append(_recovery_reason(location, fleet, orphanings))
    if place is Place.LOST:
        found.append(
            Reason(
                Why.LOST_WITH_PROCESS,
                f"its process {location.identity} is gone and kept no in-progress copy "
                "(basic fetch): the job is lost unless it was handed back to its queue",
                identities=(location.identity or "",),
            )
        )
    if place is Place.DEAD:
        died = f" since {when(location.at)}" if location.at is not None else ""
        found.append(
            Reason(
                Why.IN_DEAD_SET,
                f"in the dead set{died} ({location.error or 'no error recorded'}): it runs "
                "again only if it is retried from there",
                at=location.at,
            )
        )
    return found


def _due_reason(due: float, fleet: Fleet) -> Reason:
    if due > fleet.now:
        return Reason(
            Why.NOT_DUE,
            f"due at {when(due)}, in {span(due - fleet.now)}; then it goes to its queue",
            at=due,
        )
    if not fleet.processes:
        return Reason(
            Why.NO_POLLER,
            f"due since {when(due)}, but no live process polls the schedule: it moves to "
            "its queue when a worker starts",
            at=due,
        )
    return Reason(
        Why.NOT_DUE,
        f"due since {span(fleet.now - due)}: the next poll of a live process (every 5s by "
        "default) moves it to its queue",
        at=due,
    )


def _recovery_reason(location: Location, fleet: Fleet, orphanings: int) -> Reason:
    identity = location.identity or "?"
    recover_at = location.recover_at if location.recover_at is not None else fleet.now
    beat = (
        f"last beat {span(fleet.now - location.last_beat)} ago"
        if location.last_beat is not None
        else "no last beat recorded"
    )
    if recover_at > fleet.now:
        timing = (
            f"recovery requeues it at about {when(recover_at)} (in {span(recover_at - fleet.now)})"
        )
    else:
        timing = "recovery may requeue it now"
    if not fleet.processes:
        timing += ", but no live process runs recovery: it waits until a worker starts"
    else:
        timing += " (a live process checks for orphans every minute by default)"
    earlier = f"; recovered {orphanings} time(s) before" if orphanings else ""
    return Reason(
        Why.AWAITING_RECOVERY,
        f"left in progress by process {identity}, which is gone ({beat}): {timing}{earlier}",
        identities=(identity,),
        at=recover_at,
        count=orphanings or None,
    )


def lock_reasons(client: redis.Redis, jid: str, locations: list[Location]) -> list[Reason]:
    """The unique lock and cron running lock each found payload may own, as they are now."""
    digests: dict[str, None] = {}
    cron: dict[str, None] = {}
    for location in locations:
        job = location.record.item
        if job is None:
            continue
        if locks.is_until_executed(job):
            with contextlib.suppress(UnicodeEncodeError):  # such a job took no lock
                digests[locks.unique_digest(job)] = None
        pjid = job.get("periodic_pjid")
        if isinstance(pjid, str) and job.get("periodic_until_executed") is True:
            cron[pjid] = None
    found = [_unique_reason(jid, lock) for lock in read_locks(client, list(digests))]
    for pjid in cron:
        pipe = client.pipeline(transaction=False)
        pipe.get(keys.periodic_running(pjid))
        pipe.ttl(keys.periodic_running(pjid))
        owner, ttl = pipe.execute(raise_on_error=False)
        found.append(_cron_reason(jid, pjid, owner, ttl))
    return found


def _unique_reason(jid: str, lock: UniqueLock) -> Reason:
    key, owner, ttl = lock.key, lock.owner, lock.ttl
    if lock.problem:
        text = f"its unique lock {key} {lock.problem}: identical pushes fail until it is fixed"
    elif owner == jid:
        text = (
            f"it holds its unique lock {key} (TTL {span(ttl or 0)}): an identical job pushed "
            "now is refused until this one ends"
        )
    elif owner is not None:
        text = (
            f"its unique lock {key} is held by another job, {owner}: identical pushes are "
            f"refused until that job ends; this job's end won't release it"
        )
    else:
        text = (
            f"its unique lock {key} is not held (expired or released): an identical job "
            "can be pushed now"
        )
    return Reason(Why.UNIQUE_LOCK, text, key=key, owner=owner, ttl=ttl)


def _cron_reason(jid: str, pjid: str, owner: object, ttl: object) -> Reason:
    key = keys.periodic_running(pjid)
    seconds = ttl if isinstance(ttl, int) and ttl >= 0 else None
    if isinstance(owner, Exception):
        text, holder = f"its cron entry's running lock {key} holds another type", None
    elif owner == jid:
        text, holder = (
            f"it holds its cron entry's running lock {key}: the entry fires no new run "
            "until this one ends",
            jid,
        )
    elif owner is not None:
        text = f"its cron entry's running lock {key} is held by another run, {owner}"
        holder = str(owner)
    else:
        text, holder = f"its cron entry's running lock {key} is not held", None
    return Reason(Why.CRON_LOCK, text, key=key, owner=holder, ttl=seconds)


def missing_reason(status: dict[str, str]) -> Reason:
    """For a job whose status says it waits or runs, found nowhere."""
    state = status.get("status", "?")
    try:
        updated = f", updated {when(float(status['update_time']))}"
    except (KeyError, ValueError, OverflowError):
        updated = ""
    return Reason(
        Why.MISSING,
        f"its status says {state!r}{updated}, but it is in no queue, set or in-progress "
        "list: it was deleted, lost with a process that kept no in-progress copy (basic "
        "fetch), or it moved while the search ran (search again)",
    )


def not_found_reason(history_kept: bool) -> Reason:
    """For a jid that nothing knows: say what can't be told apart, rather than guess."""
    history = (
        "the run history holds no run of it"
        if history_kept
        else "there is no run history (off, or nothing recorded)"
    )
    return Reason(
        Why.NOT_FOUND,
        "not in any queue, the schedule, retry or dead set, or in progress; no status hash, "
        f"and {history}. A job that finished looks the same as an unknown jid when status "
        "and history are off",
    )


def reasons(
    client: redis.Redis, jid: str, locations: list[Location], fleet: Fleet, orphanings: int
) -> list[Reason]:
    """Every reason the job waits, for each place it waits in, then its locks."""
    found: list[Reason] = []
    queues_checked: set[str] = set()
    for location in locations:
        found.extend(_location_reasons(client, location, fleet, orphanings))
        if location.place in WAITING and location.queue and location.queue not in queues_checked:
            queues_checked.add(location.queue)
            found.extend(queue_reasons(client, location.queue, fleet))
    return found + lock_reasons(client, jid, locations)
