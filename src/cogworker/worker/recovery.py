"""Getting jobs out of in-progress lists that nobody will settle, and settling our own late.

* Orphan recovery: a process is dead when its presence key is gone AND its last beat (Redis
  clock) is older than ``orphan_threshold``; its list is requeued in the same script that
  decides, oldest job first. A job recovered more than ``max_orphanings`` times is parked and
  then buried as "its process died while running it" instead of killing process after process.
* Unsettled records left by a process that stopped, and raw dead entries, are filed properly.
* Reconcile (our own list): settle what we failed to settle earlier, and requeue strays (listed
  but not running here) once they have been seen on two checks in a row.
* A payload that is not a job is never put back on a queue to come back again: wherever it is
  found (fetched, handed back, a stray, sent to the default queue by a requeue because no queue
  could be read in it) it is filed into dead at once as an ``(unparseable)`` wrapper.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from cogworker import failure, keys, locks, redis_errors, scripts, wire
from cogworker.failure import Rejection
from cogworker.fetch import Work
from cogworker.fetch import reliable as reliable_fetch
from cogworker.fetch.reliable import jid_of
from cogworker.wire import Payload

if TYPE_CHECKING:
    from cogworker.worker.manager import Manager

logger = logging.getLogger("cogworker")

_FETCH_DIR = reliable_fetch.__file__
PARK_UNSETTLED = scripts.load(_FETCH_DIR, "park_unsettled")
FILE_UNSETTLED = scripts.load(_FETCH_DIR, "file_unsettled")
SWAP_DEAD = scripts.load(_FETCH_DIR, "swap_dead")
BURY_ORPHAN = scripts.load(_FETCH_DIR, "bury_orphan")
QUARANTINE_RECORD = scripts.load(_FETCH_DIR, "quarantine_record")

QUARANTINE_TTL = 30 * 86400
UNSETTLED_TARGETS = (keys.RETRY, keys.DEAD, keys.SCHEDULE)
DEFAULT_QUEUE = "default"  # where a requeue sends a payload in which no queue can be read


class JobFailedError(RuntimeError):
    """Passed to death hooks for a failure filed later from a stored record."""


class JobOrphanedError(RuntimeError):
    """Passed to death hooks for a job whose process died under it too often."""


_raw_burials: list[str] = []
_raw_burials_lock = threading.Lock()


def remember_raw_burials(raws: list[str]) -> None:
    """Raw payloads the requeue script put straight into dead; swapped on the next pass."""
    with _raw_burials_lock:
        _raw_burials.extend(raws)


def reset() -> None:
    """Forget process-memory state (a forked child starts clean)."""
    with _raw_burials_lock:
        _raw_burials.clear()


@dataclass
class RecoveryReport:
    registry_read: bool = False
    scanned: bool = False
    connection_lost: bool = False
    moved: int = 0


def recover_orphans(manager: Manager, *, scan: bool) -> RecoveryReport:
    """Requeue the in-progress lists of dead processes, then file parked and unsettled jobs."""
    client = manager.client
    report = RecoveryReport()
    candidates = _candidates(client, report, scan=scan)
    for identity in sorted(candidates - {manager.identity}):
        try:
            moved = reliable_fetch.requeue_list(
                manager.config, client, identity, if_dead_for=manager.config.orphan_threshold
            )
            if moved == -1:
                continue
            if client.llen(keys.inprogress(identity)) == 0:
                client.srem(keys.INPROGRESS_IDENTITIES, identity)
                client.hdel(keys.LAST_BEAT, identity)
            if moved > 0:
                report.moved += moved
                logger.warning(
                    "requeued %d job(s) left in progress by dead process %s", moved, identity
                )
        except redis.RedisError as error:
            logger.error("Orphan recovery: skipped %s: %s", identity, error)
            _note(report, "Orphan recovery", error)
    for step in (bury_repeat_orphans, swap_raw_burials, file_unsettled):
        try:
            step(manager)
        except redis.RedisError as error:
            _note(report, "Orphan recovery", error)
    if not report.connection_lost:
        redis_errors.reporter.recovered("Orphan recovery")
    return report


def _candidates(client: redis.Redis, report: RecoveryReport, *, scan: bool) -> set[str]:
    """Identities that may own an in-progress list: the registry, plus a keyspace scan once
    per reliable process (lists written by versions without the registry)."""
    candidates: set[str] = set()
    try:
        candidates.update(str(name) for name in client.smembers(keys.INPROGRESS_IDENTITIES))
        report.registry_read = True
    except redis.RedisError as error:
        _note(report, "Orphan recovery", error)
    if scan:
        try:
            for key in client.scan_iter(match=keys.INPROGRESS_PREFIX + "*", count=500):
                candidates.add(str(key)[len(keys.INPROGRESS_PREFIX) :])
            report.scanned = True
        except redis.RedisError as error:
            _note(report, "Orphan recovery (scan)", error)
    return candidates


def _note(report: RecoveryReport, site: str, error: BaseException) -> None:
    if redis_errors.is_unavailable(error):
        report.connection_lost = True
    redis_errors.reporter.report(site, error)


def _process_died(job: Payload, max_orphanings: int) -> Payload:
    entry = dict(job)
    entry.update(
        {
            "error_class": "Cogworker::ProcessDied",
            "failed_at": wire.now(),
            "error_message": (
                f"its process died while running it more than {max_orphanings} times "
                "(killed for memory? SIGKILL?) — not retried again"
            ),
        }
    )
    return entry


def _orphan_entry(raw: str, manager: Manager) -> tuple[Payload, bool]:
    parsed = failure.parse_job(raw)
    readable = not isinstance(parsed, Rejection)
    base = (
        failure.unparseable_job(raw, None, Rejection(parsed.error_class, "unreadable", parsed.jid))
        if isinstance(parsed, Rejection)
        else parsed
    )
    return _process_died(base, manager.config.max_orphanings), readable


def bury_repeat_orphans(manager: Manager) -> int:
    client = manager.client
    buried = 0
    for raw in _strings(client.lrange(keys.REPEAT_ORPHANS, 0, -1)):
        entry, readable = _orphan_entry(raw, manager)
        moved = BURY_ORPHAN(
            client, [keys.REPEAT_ORPHANS, keys.DEAD], [raw, wire.now(), wire.dumps(entry)]
        )
        if moved:
            buried += 1
            logger.warning("jid=%s orphaned too often, moved to dead", entry.get("jid"))
            _buried_as_dead(manager, entry)
            if readable:
                manager.run_death_hooks(entry, _orphaned(manager))
    return buried


def swap_raw_burials(manager: Manager) -> None:
    with _raw_burials_lock:
        pending = list(_raw_burials)
    for raw in pending:
        entry, readable = _orphan_entry(raw, manager)
        swapped = SWAP_DEAD(manager.client, [keys.DEAD], [raw, wire.now(), wire.dumps(entry)])
        with _raw_burials_lock:
            if raw in _raw_burials:
                _raw_burials.remove(raw)
        if swapped:
            _buried_as_dead(manager, entry)
            if readable:
                manager.run_death_hooks(entry, _orphaned(manager))


def _orphaned(manager: Manager) -> JobOrphanedError:
    return JobOrphanedError(f"orphaned more than {manager.config.max_orphanings} times")


def _buried_as_dead(manager: Manager, entry: Payload) -> None:
    """Bookkeeping for a job filed into dead outside a processor (each step best-effort)."""
    locks.release(manager.client, entry)
    jid = entry.get("jid")
    _count_burial(manager.client, jid if isinstance(jid, str) else None)


def _count_burial(client: redis.Redis, jid: str | None) -> None:
    """Count one burial as failed, and forget the orphan counter of ``jid``: each on its own,
    best-effort."""
    bucket = keys.throughput(int(time.time()) // 3600)
    writes: list[tuple[str, ...]] = [
        ("INCR", keys.STATS_FAILED),
        ("HINCRBY", bucket, "failed", "1"),
        ("EXPIRE", bucket, str(keys.THROUGHPUT_TTL)),
    ]
    if jid is not None:
        writes.append(("DEL", keys.orphanings(jid)))
    for command in writes:
        try:
            client.execute_command(*command)  # type: ignore[no-untyped-call]
        except redis.RedisError as error:
            redis_errors.reporter.report("Burial bookkeeping", error)


def _valid_record(raw: str) -> tuple[str, float, str] | None:
    record = failure.parse_object(raw)
    if isinstance(record, Rejection):
        return None
    target, score, payload = record.get("set"), record.get("score"), record.get("payload")
    if target not in UNSETTLED_TARGETS or not isinstance(payload, str):
        return None
    if isinstance(score, bool) or not isinstance(score, int | float):
        return None
    return str(target), float(score), payload


def file_unsettled(manager: Manager) -> int:
    """File the records processes left in ``cogworker:unsettled`` when they stopped."""
    client = manager.client
    filed = 0
    for raw in _strings(client.lrange(keys.UNSETTLED, 0, -1)):
        record = _valid_record(raw)
        if record is None:
            keys_ = [keys.UNSETTLED, keys.UNSETTLED_QUARANTINE]
            if QUARANTINE_RECORD(client, keys_, [raw, QUARANTINE_TTL]):
                logger.error("unusable unsettled record quarantined: %s", raw[:200])
            continue
        target, score, payload = record
        counter = keys.orphanings(jid_of(payload))
        if FILE_UNSETTLED(client, [keys.UNSETTLED, counter, target], [raw, score, payload]):
            filed += 1
            if target == keys.DEAD:
                _filed_as_dead(manager, payload)
    return filed


def _filed_as_dead(manager: Manager, payload: str) -> None:
    """After a stored failure was filed into dead: free its locks and run its death hooks,
    if it is a job (an unparseable wrapper gets neither)."""
    job = failure.parse_job(payload)
    if isinstance(job, Rejection) or job.get("class") == "(unparseable)":
        return
    locks.release(manager.client, job)
    manager.run_death_hooks(job, JobFailedError(str(job.get("error_message"))))


def settle_pending(manager: Manager) -> None:
    """Retry settlements that failed earlier (acks and filings of this process's jobs)."""
    fetch = manager.fetch()
    for raw, how in manager.pending().items():
        try:
            if isinstance(how, str):  # "ack"
                fetch.acknowledge([reliable_work(raw)])
                manager.settled(raw)
                continue
            target, score, payload = how
            written = fetch.interrupt(reliable_work(raw), target, score, payload)
            manager.settled(raw)
            if written and target == keys.DEAD:
                _filed_as_dead(manager, payload)
        except Exception as error:  # one entry must not stop the others
            logger.error("still couldn't settle jid=%s: %s", jid_of(raw), error)


def reliable_work(raw: str) -> Work:
    """A work unit for settling by raw payload (the scripts find the queue in it)."""
    return Work("", raw)


def _strings(values: object) -> list[str]:
    return [str(value) for value in values]  # type: ignore[attr-defined]


def park_unsettled(manager: Manager) -> list[str]:
    """At shutdown: hand failures we couldn't file to ``cogworker:unsettled``.

    Returns the raws that couldn't even be parked (they stay on the in-progress list).
    """
    keep = []
    inprogress = keys.inprogress(manager.identity)
    for raw, how in manager.pending().items():
        if isinstance(how, str):  # "ack": nothing to park
            continue
        target, score, payload = how
        record = wire.dumps({"set": target, "score": score, "payload": payload})
        try:
            PARK_UNSETTLED(manager.client, [inprogress, keys.UNSETTLED], [raw, record])
            manager.settled(raw)
        except Exception as error:  # one entry must not stop the others
            logger.error("couldn't park unsettled jid=%s: %s", jid_of(raw), error)
            keep.append(raw)
    return keep


def reconcile(manager: Manager, previous_strays: set[str]) -> set[str]:
    """Settle pending work and requeue strays seen twice; returns this pass's strays."""
    listed = set(_strings(manager.client.lrange(keys.inprogress(manager.identity), 0, -1)))
    strays = listed - manager.running()
    pending = manager.pending()
    if strays & pending.keys():
        settle_pending(manager)
    strays -= pending.keys()
    fetch = manager.fetch()
    for raw in strays & previous_strays:
        parsed = failure.parse_job(raw)
        if isinstance(parsed, Rejection):
            bury_unparseable(manager, reliable_work(raw), parsed)
            continue
        fetch.give_back(reliable_work(raw))
        logger.warning("requeued stray in-progress job jid=%s", jid_of(raw))
    return strays - previous_strays


def bury_unparseable(manager: Manager, work: Work, rejection: Rejection) -> None:
    """File a payload of this process's that is not a job into dead at once, wrapped, counted
    as failed, with no death hooks. If that write fails it stays in progress (handing it back
    would fetch it again at once, in a loop) and reconcile files it later."""
    wrapper = failure.unparseable_job(work.raw, work.queue or None, rejection)
    filing = (keys.DEAD, float(wrapper["failed_at"]), wire.dumps(wrapper))
    where = f"on queue {work.queue}" if work.queue else "in progress"
    try:
        written = manager.fetch().interrupt(work, *filing)
    except redis.RedisError as error:
        manager.settle_later(work.raw, filing)
        manager.bookkeeper.count(failed=1)
        logger.error(
            "unparseable payload %s (%s: %s) couldn't be moved to dead yet (%s); it stays in "
            "progress and the next reconcile files it",
            where,
            rejection.error_class,
            rejection.message,
            error,
        )
        return
    if written:
        manager.bookkeeper.count(failed=1)
        logger.error(
            "unparseable payload %s moved to dead as jid=%s: %s: %s",
            where,
            wrapper["jid"],
            rejection.error_class,
            rejection.message,
        )


def bury_unnamed_requeues(client: redis.Redis, raws: list[str]) -> None:
    """A requeue sent these payloads to the default queue because no queue could be read in
    them: move the ones that are not jobs on to dead now (nobody may read that queue). A job
    (one whose queue only cjson couldn't read) stays there and runs."""
    for raw in raws:
        rejection = failure.parse_job(raw)
        if not isinstance(rejection, Rejection):
            continue
        wrapper = failure.unparseable_job(raw, DEFAULT_QUEUE, rejection)
        jid = jid_of(raw)
        script_keys = [keys.queue(DEFAULT_QUEUE), keys.DEAD, keys.orphanings(jid)]
        try:
            moved = reliable_fetch.INTERRUPT(
                client, script_keys, [raw, wrapper["failed_at"], wire.dumps(wrapper)]
            )
        except redis.RedisError as error:  # it waits on the default queue to be buried there
            redis_errors.reporter.report("Burying an unparseable payload", error)
            continue
        if moved:
            _count_burial(client, None if jid == "?" else jid)
            logger.error(
                "unparseable payload left in progress moved to dead as jid=%s: %s: %s",
                wrapper["jid"],
                rejection.error_class,
                rejection.message,
            )
