"""Getting jobs out of in-progress lists that nobody will settle, and settling our own late.

* Orphan recovery: a process is dead when its presence key is gone AND its last beat (Redis
  clock) is older than ``orphan_threshold``; its list is requeued in the same script that
  decides, oldest job first. A job recovered more than ``max_orphanings`` times is parked and
  then buried as "its process died while running it" instead of killing process after process.
* Unsettled records left by a process that stopped, and raw dead entries, are filed properly.
* Reconcile (our own list): settle what we failed to settle earlier, and requeue strays (listed
  but not running here) once they have been seen on two checks in a row.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from cogworker import failure, keys, locks, redis_errors, scripts, wire
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
    job, error_class, _message = failure.parse_job(raw)
    readable = job is not None
    base = (
        job
        if job is not None
        else failure.unparseable_job(raw, None, error_class or "json.JSONDecodeError", "unreadable")
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
    client = manager.client
    locks.release(client, entry)
    bucket = keys.throughput(int(time.time()) // 3600)
    writes: list[tuple[str, ...]] = [
        ("INCR", keys.STATS_FAILED),
        ("HINCRBY", bucket, "failed", "1"),
        ("EXPIRE", bucket, "90000"),
    ]
    jid = entry.get("jid")
    if isinstance(jid, str):
        writes.append(("DEL", keys.orphanings(jid)))
    for command in writes:
        try:
            client.execute_command(*command)  # type: ignore[no-untyped-call]
        except redis.RedisError as error:
            redis_errors.reporter.report("Burial bookkeeping", error)


def _valid_record(raw: str) -> tuple[str, float, str] | None:
    try:
        record = wire.loads(raw)
    except ValueError:
        return None
    if not isinstance(record, dict):
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
        job, _, _ = failure.parse_job(payload)
        counter = keys.orphanings(jid_of(payload))
        if FILE_UNSETTLED(client, [keys.UNSETTLED, counter, target], [raw, score, payload]):
            filed += 1
            if target == keys.DEAD and job is not None:
                locks.release(client, job)
                manager.run_death_hooks(job, JobFailedError(str(job.get("error_message"))))
    return filed


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
            job, _, _ = failure.parse_job(payload)
            if written and target == keys.DEAD and job is not None:
                locks.release(manager.client, job)
                if job.get("class") != "(unparseable)":  # no hooks for unreadable payloads
                    manager.run_death_hooks(job, JobFailedError(str(job.get("error_message"))))
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
        fetch.give_back(reliable_work(raw))
        logger.warning("requeued stray in-progress job jid=%s", jid_of(raw))
    return strays - previous_strays
