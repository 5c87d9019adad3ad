"""The scheduler thread: due scheduled and retry jobs onto their queues, and the periodic
housekeeping every process shares (orphan recovery, reconcile, key checks).

Each step is guarded on its own: one failing never stops the others or the thread. The first
orphan check runs at once at boot (the cron ticker waits for it), then every
``orphan_check_interval``; after a lost connection the next one comes in 5 s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis

from cogworker import failure, graduation, keys, redis_errors, scripts, wire
from cogworker.failure import Rejection
from cogworker.worker import key_guard
from cogworker.worker.bookkeeper import count_burial
from cogworker.worker.heartbeat import Beats

if TYPE_CHECKING:
    from cogworker.worker.manager import Manager

logger = logging.getLogger("cogworker")

BATCH = 50
DEFER_DELAY = 60
RETRY_AFTER_LOST_CONNECTION = 5.0
SETS = (keys.SCHEDULE, keys.RETRY)

BURY_ENTRY = scripts.load(__file__, "bury_entry")


def graduate_due(client: redis.Redis, source: str, now: float | None = None) -> int:
    """Move due entries of ``source`` onto their queues; returns how many moved.

    An entry that is not a job is buried into dead; one that can't be moved now is deferred a
    minute (never removed, never lost); neither holds up the entries behind it.
    """
    moment = wire.now() if now is None else now
    moved = 0
    entries = client.zrangebyscore(source, "-inf", moment, start=0, num=BATCH)
    for entry in [str(member) for member in entries]:
        try:
            moved += _graduate_one(client, source, entry)
        except Exception as error:
            logger.error(
                "Graduating an entry of %s failed (deferred %ds): %s: %s",
                source,
                DEFER_DELAY,
                type(error).__name__,
                error,
            )
            try:
                client.zadd(source, {entry: wire.now() + DEFER_DELAY}, xx=True)
            except redis.RedisError as defer_error:
                redis_errors.reporter.report("Scheduled poll", defer_error)
    return moved


def _graduate_one(client: redis.Redis, source: str, entry: str) -> int:
    requeue = graduation.requeueable(entry, source)
    if isinstance(requeue, Rejection):
        _bury(client, source, entry, requeue)
        return 0
    return int(graduation.move_to_queue(client, source, entry, *requeue))


def _bury(client: redis.Redis, source: str, entry: str, rejection: Rejection) -> None:
    wrapper = failure.unparseable_job(entry, None, rejection)
    if BURY_ENTRY(client, [source, keys.DEAD], [entry, wrapper["failed_at"], wire.dumps(wrapper)]):
        count_burial(client, None)
        logger.error(
            "unparseable entry in %s moved to dead as jid=%s: %s: %s: %s",
            source,
            wrapper["jid"],
            rejection.error_class,
            rejection.message,
            entry[:200],
        )


class Scheduler:
    def __init__(self, manager: Manager, beats: Beats | None = None) -> None:
        """``beats``: the heartbeat's record of this process's beats (without one, the
        orphan check never waits for beats to come back)."""
        self.manager = manager
        self.config = manager.config
        self.beats = beats if beats is not None else Beats()
        self.recovered_once = threading.Event()
        self._stopping = threading.Event()
        self._scanned = False
        self._next_orphan_check = 0.0
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)
        self._next_key_check = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.poll_once()
            self._stopping.wait(self.config.poll_interval)

    def poll_once(self) -> None:
        if time.monotonic() >= self._next_key_check:
            self._next_key_check = time.monotonic() + self.config.orphan_check_interval
            self._guarded("Key check", lambda: key_guard.check(self.manager.client, self.config))
        if time.monotonic() >= self._next_orphan_check:
            self._guarded("Orphan check", self.orphan_check)
        if not self.manager.quiet:
            for source in SETS:  # one unreadable set doesn't stop the other
                self._guarded(
                    "Scheduled poll",
                    lambda s=source: graduate_due(  # type: ignore[misc]
                        self.manager.client, s
                    ),
                )

    def _guarded(self, site: str, step: Callable[[], object]) -> None:
        try:
            step()
        except Exception as error:
            redis_errors.reporter.report(site, error)
        else:
            redis_errors.reporter.recovered(site)

    def orphan_check(self) -> None:
        resumed = self.beats.resumed_at
        settle = 2 * self.config.heartbeat_interval
        if resumed is not None and time.monotonic() - resumed < settle:
            # our beats just came back after an outage, and so do everyone else's: give the
            # others two beats to reappear before judging them dead
            self._next_orphan_check = resumed + settle
            return
        self._next_orphan_check = time.monotonic() + self.config.orphan_check_interval
        listing = self.manager.strategy.current().keeps_in_progress
        try:
            report = self.manager.orphans.recover(scan=listing and not self._scanned)
        except redis.RedisError as error:
            if redis_errors.is_unavailable(error):
                self._next_orphan_check = time.monotonic() + self._after_lost_connection()
            raise
        if report.connection_lost:
            self._next_orphan_check = time.monotonic() + self._after_lost_connection()
            return
        # with basic fetch nothing is listed in progress: only the pending settlements
        self._guarded("Reconcile", self.manager.reconciler.reconcile)
        if report.scanned:
            self._scanned = True
        if report.registry_read or report.scanned:
            self.recovered_once.set()

    def _after_lost_connection(self) -> float:
        # after an outage every process's last beat is old: give the others two beats to
        # reappear before judging them dead, or their running jobs would be taken
        return max(RETRY_AFTER_LOST_CONNECTION, 2 * self.config.heartbeat_interval)
