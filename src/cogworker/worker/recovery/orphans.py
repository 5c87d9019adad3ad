"""Orphan recovery: getting other processes' jobs out of lists nobody will settle.

* A process is dead when its presence key is gone AND its last beat (Redis clock) is older
  than ``orphan_threshold``; its list is requeued in the same script that decides, oldest job
  first. A job recovered more than ``max_orphanings`` times is parked and then buried as "its
  process died while running it" instead of killing process after process.
* Unsettled records left by a process that stopped, and raw dead entries, are filed properly.
* A payload that is not a job is never put back on a queue to come back again: sent to the
  default queue by a requeue because no queue could be read in it, it is filed into dead at
  once as an ``(unparseable)`` wrapper.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import redis

from cogworker import failure, keys, redis_errors, scripts, wire
from cogworker.config import Config
from cogworker.failure import Rejection
from cogworker.worker.recovery.burials import (
    JobOrphanedError,
    buried_as_dead,
    bury_unnamed_requeues,
    filed_as_dead,
    process_died,
)
from cogworker.worker.recovery.requeue import requeue_list
from cogworker.worker.settle import Settler

logger = logging.getLogger("cogworker")

SWAP_DEAD = scripts.load(__file__, "swap_dead")
BURY_ORPHAN = scripts.load(__file__, "bury_orphan")
FILE_UNSETTLED = scripts.load(__file__, "file_unsettled")
QUARANTINE_RECORD = scripts.load(__file__, "quarantine_record")

QUARANTINE_TTL = 30 * 86400
UNSETTLED_TARGETS = (keys.RETRY, keys.DEAD, keys.SCHEDULE)


@dataclass
class RecoveryReport:
    registry_read: bool = False
    scanned: bool = False
    connection_lost: bool = False
    moved: int = 0


class Orphans:
    def __init__(
        self, config: Config, client: redis.Redis, identity: str, settler: Settler
    ) -> None:
        self._config = config
        self._client = client
        self._identity = identity
        self._settler = settler
        self._raw_burials: list[str] = []  # raws the requeue script put straight into dead
        self._lock = threading.Lock()

    def recover(self, *, scan: bool) -> RecoveryReport:
        """Requeue the in-progress lists of dead processes, then file parked and unsettled
        jobs."""
        report = RecoveryReport()
        for identity in sorted(self._candidates(report, scan=scan) - {self._identity}):
            try:
                self._recover_one(identity, report)
            except redis.RedisError as error:
                logger.error("Orphan recovery: skipped %s: %s", identity, error)
                _note(report, "Orphan recovery", error)
        for step in (self.bury_repeat_orphans, self.swap_raw_burials, self.file_unsettled):
            try:
                step()
            except redis.RedisError as error:
                _note(report, "Orphan recovery", error)
        if not report.connection_lost:
            redis_errors.reporter.recovered("Orphan recovery")
        return report

    def _recover_one(self, identity: str, report: RecoveryReport) -> None:
        moved = self.requeue(identity, if_dead_for=self._config.orphan_threshold)
        if moved == -1:
            return
        if self._client.llen(keys.inprogress(identity)) == 0:
            self._client.srem(keys.INPROGRESS_IDENTITIES, identity)
            self._client.hdel(keys.LAST_BEAT, identity)
        if moved > 0:
            report.moved += moved
            logger.warning(
                "requeued %d job(s) left in progress by dead process %s", moved, identity
            )

    def requeue(self, identity: str, *, if_dead_for: float) -> int:
        """Requeue ``identity``'s list if it is dead; how many jobs moved, -1 if it is alive.
        Raws buried straight into dead get their proper entry on the next pass."""
        done = requeue_list(self._config, self._client, identity, if_dead_for=if_dead_for)
        self.remember_raw_burials(done.buried)
        bury_unnamed_requeues(self._client, done.unnamed)
        return done.moved

    def _candidates(self, report: RecoveryReport, *, scan: bool) -> set[str]:
        """Identities that may own an in-progress list: the registry, plus a keyspace scan once
        per reliable process (lists written by versions without the registry)."""
        candidates: set[str] = set()
        try:
            members = self._client.smembers(keys.INPROGRESS_IDENTITIES)
            candidates.update(str(name) for name in members)
            report.registry_read = True
        except redis.RedisError as error:
            _note(report, "Orphan recovery", error)
        if scan:
            try:
                for key in self._client.scan_iter(match=keys.INPROGRESS_PREFIX + "*", count=500):
                    candidates.add(str(key)[len(keys.INPROGRESS_PREFIX) :])
                report.scanned = True
            except redis.RedisError as error:
                _note(report, "Orphan recovery (scan)", error)
        return candidates

    # -- jobs orphaned too often -------------------------------------------------------------

    def bury_repeat_orphans(self) -> int:
        buried = 0
        for raw in _strings(self._client.lrange(keys.REPEAT_ORPHANS, 0, -1)):
            entry, readable = process_died(raw, self._config.max_orphanings)
            moved = BURY_ORPHAN(
                self._client, [keys.REPEAT_ORPHANS, keys.DEAD], [raw, wire.now(), wire.dumps(entry)]
            )
            if moved:
                buried += 1
                logger.warning("jid=%s orphaned too often, moved to dead", entry.get("jid"))
                self._buried(entry, readable)
        return buried

    def remember_raw_burials(self, raws: Iterable[str]) -> None:
        with self._lock:
            self._raw_burials.extend(raws)

    def swap_raw_burials(self) -> None:
        """Replace each raw payload the requeue script put straight into dead with its proper
        entry (once: another process may have swapped it first)."""
        with self._lock:
            pending = list(self._raw_burials)
        for raw in pending:
            entry, readable = process_died(raw, self._config.max_orphanings)
            swapped = SWAP_DEAD(self._client, [keys.DEAD], [raw, wire.now(), wire.dumps(entry)])
            with self._lock:
                if raw in self._raw_burials:
                    self._raw_burials.remove(raw)
            if swapped:
                self._buried(entry, readable)

    def _buried(self, entry: wire.Payload, readable: bool) -> None:
        buried_as_dead(self._client, entry)
        if readable:
            error = JobOrphanedError(f"orphaned more than {self._config.max_orphanings} times")
            self._settler.run_death_hooks(entry, error)

    # -- failures left unsettled by a process that stopped -----------------------------------

    def file_unsettled(self) -> int:
        """File the records processes left in ``cogworker:unsettled`` when they stopped."""
        filed = 0
        for raw in _strings(self._client.lrange(keys.UNSETTLED, 0, -1)):
            record = _valid_record(raw)
            if record is None:
                script_keys = [keys.UNSETTLED, keys.UNSETTLED_QUARANTINE]
                if QUARANTINE_RECORD(self._client, script_keys, [raw, QUARANTINE_TTL]):
                    logger.error("unusable unsettled record quarantined: %s", raw[:200])
                continue
            target, score, payload = record
            script_keys = [keys.UNSETTLED, keys.orphanings(wire.jid_of(payload)), target]
            if FILE_UNSETTLED(self._client, script_keys, [raw, score, payload]):
                filed += 1
                if target == keys.DEAD:
                    filed_as_dead(self._client, self._settler, payload)
        return filed


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


def _note(report: RecoveryReport, site: str, error: BaseException) -> None:
    if redis_errors.is_unavailable(error):
        report.connection_lost = True
    redis_errors.reporter.report(site, error)


def _strings(values: object) -> list[str]:
    return [str(value) for value in values]  # type: ignore[attr-defined]
