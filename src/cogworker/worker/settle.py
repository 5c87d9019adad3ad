"""Settling a processed job, the one step between a run and the thread's next job: its fate
decided (an acknowledgement, a retry or dead filing, an interrupt, a hand-back or a burial) and
written by the fetch strategy, then, in the same call when the fetch can (reliable fetch:
``fetch/turnover.lua``), the thread's next job taken: its **turnover**.

The rule it keeps: a job is never run again because of a failure that happened after it ran.
If bookkeeping fails *before* ``perform`` the job goes back to its queue; once it has run, it
is acknowledged, or filed into retry / dead (``filing.py``), or (when even that fails)
interrupted: filed with a fixed delay, or remembered and settled later. Never put back on its
queue.

A payload that is not a job (not valid UTF-8, not JSON, nested too deeply to parse, not an
object, no string ``class``, no non-empty ``queue``, no string ``jid``, ``args`` not a list)
never runs and never goes back on a queue, where it would only come back: it is filed into
dead at once.

The turnover acknowledges the job (``LREM`` from the in-progress list, its orphan counter
deleted), counts it, and moves the next job from the tail of a queue (weighted order, paused
queues left out) onto the in-progress list, writing the thread's workers-hash entry for it;
with nothing waiting it removes the entry. When the fetch can't (basic fetch), and whenever
the call fails, what it carried goes to the bookkeeper (which retries an acknowledgement 3
times, then every half second) and the thread waits for the fetcher like an idle one. Nothing
is taken once the process is quiet or stopping; a job taken while quiet began goes straight
back to its queue. Each processor thread sends its calls on a connection of its own (no pool
lock, no per-command wrappers: see bench/redis_overhead.py).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from cogworker import connection, failure, keys, redis_errors, wire
from cogworker.config import Config
from cogworker.failure import Rejection
from cogworker.fetch import Filing, Turn, Work
from cogworker.fetch.strategy import FetchStrategy
from cogworker.wire import Payload
from cogworker.worker.bookkeeper import ACK_ATTEMPTS, Bookkeeper
from cogworker.worker.filing import Filer
from cogworker.worker.ledger import ACK, Ledger
from cogworker.worker.outcome import Next, Outcome, log_bug

if TYPE_CHECKING:
    from redis.connection import AbstractConnection

logger = logging.getLogger("cogworker")


@dataclass(frozen=True, slots=True)
class Finished:
    """What a turnover carries about the job just finished: the job to acknowledge (None when
    settling already wrote its fate), the runs to count, and whether the thread may take its
    next job (False: its lane closed, see ``pace.py``)."""

    acknowledge: Work | None = None
    processed: int = 0
    failed: int = 0
    take_next: bool = True


class Settler:
    def __init__(
        self,
        config: Config,
        client: redis.Redis,
        strategy: FetchStrategy,
        ledger: Ledger,
        bookkeeper: Bookkeeper,
        *,
        stopping: threading.Event,
        quiet: threading.Event,
    ) -> None:
        self._config = config
        self._client = client
        self._strategy = strategy
        self._ledger = ledger
        self._bookkeeper = bookkeeper
        self._stopping = stopping
        self._quiet = quiet
        self.filer = Filer(config, client, strategy, ledger)
        self._threads = threading.local()  # each processor thread's own connection

    # -- the one entry: settle a job, take the next ------------------------------------------

    def settle(
        self, tid: str, work: Work, outcome: Outcome, *, take_next: bool, registered: bool
    ) -> Work | None:
        """Settle what thread ``tid`` made of ``work`` and return its next job, if its turnover
        took one. ``registered``: the thread's workers-hash entry was written by its last
        turnover (else by the bookkeeper, for a job from the fetcher); ``take_next``: its lane
        is still open."""
        try:
            if outcome.ran is not None and not isinstance(work.job, Rejection):
                # the class as fetched: a middleware changing the copy's doesn't move metrics
                failed = outcome.error is not None
                self._bookkeeper.record_run(work.job["class"], outcome.seconds, failed=failed)
            if outcome.next is Next.ACKNOWLEDGE and outcome.error is not None and not outcome.filed:
                outcome.next = self.filer.file_failure(work, outcome)
        except BaseException as error:
            outcome.next = outcome.after_bug(error)
            log_bug(work, error, outcome.next)
        if not registered:
            self._bookkeeper.withdraw(tid)  # the turnover writes the entry from now on
        ran = outcome.ran is not None
        finished = Finished(
            acknowledge=self.finish(work, outcome),
            processed=int(ran and outcome.error is None),
            failed=int(ran and outcome.error is not None),
            take_next=take_next,
        )
        return self.next_job(tid, finished)

    # -- the end of one job ------------------------------------------------------------------

    def finish(self, work: Work, outcome: Outcome) -> Work | None:
        """Act on ``outcome.next``. A plain acknowledgement is left to the thread's turnover,
        which sends it with its next fetch: then ``work`` is returned, still running here
        until that is sent. Otherwise None: the job is no longer running here."""
        if outcome.next is Next.ACKNOWLEDGE and outcome.death is None:
            return work
        try:
            match outcome.next:
                case Next.ACKNOWLEDGE:
                    self.acknowledge_now(work)  # death hooks run only after the ack
                case Next.GIVE_BACK:
                    self.give_back(work)
                case Next.INTERRUPT:
                    self.filer.interrupt(work, outcome)
                case Next.BURY:
                    self.bury_unparseable(work)
        finally:
            self._ledger.finished(work)
        if outcome.death is not None:
            self.run_death_hooks(*outcome.death)
        return None

    def acknowledge_now(self, work: Work) -> None:
        """Acknowledge synchronously (before death hooks run), retrying like the bookkeeper."""
        for attempt in range(1, ACK_ATTEMPTS + 1):
            try:
                self._strategy.current().acknowledge([work])
                return
            except redis.RedisError as error:
                if attempt == ACK_ATTEMPTS:
                    logger.error(
                        "couldn't acknowledge finished job jid=%s after %d attempts (will "
                        "retry; it may run again if this process stops first): %s",
                        work.jid,
                        ACK_ATTEMPTS,
                        error,
                    )
                    self._ledger.settle_later(work, ACK)
                    return
                time.sleep(0.1 * attempt)

    def give_back(self, work: Work) -> None:
        """Put a job that did not run back on its queue. A payload that is not a job goes to
        dead instead: handed back, it would only come back."""
        if isinstance(work.job, Rejection):
            self.bury_unparseable(work)
            return
        try:
            self._strategy.current().give_back(work)
        except redis.RedisError as error:
            logger.error(
                "couldn't hand back jid=%s (left in progress; a later reconcile requeues it): %s",
                work.jid,
                error,
            )

    def run_death_hooks(self, entry: Payload, error: BaseException) -> None:
        failure.run_death_hooks(self._config.death_handlers, entry, error)

    # -- not a job ---------------------------------------------------------------------------

    def bury_unparseable(self, work: Work) -> None:
        """File a payload of this process's that is not a job into dead at once, wrapped, counted
        as failed, with no death hooks. If that write fails it stays in progress (handing it back
        would fetch it again at once, in a loop) and reconcile files it later."""
        rejection = work.job
        if not isinstance(rejection, Rejection):
            raise ValueError(f"jid={work.jid} is a job: it is settled, not buried")
        wrapper = failure.unparseable_job(work.raw, work.queue or None, rejection)
        filing = Filing(keys.DEAD, float(wrapper["failed_at"]), wire.dumps(wrapper))
        where = f"on queue {work.queue}" if work.queue else "in progress"
        try:
            written = self._strategy.current().file_instead(work, filing)
        except redis.RedisError as error:
            self._ledger.settle_later(work, filing)
            self._bookkeeper.count(failed=1)
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
            self._bookkeeper.count(failed=1)
            logger.error(
                "unparseable payload %s moved to dead as jid=%s: %s: %s",
                where,
                wrapper["jid"],
                rejection.error_class,
                rejection.message,
            )

    # -- the turnover ------------------------------------------------------------------------

    def next_job(self, tid: str, finished: Finished) -> Work | None:
        """Settle ``finished`` for thread ``tid`` and return its next job, if one waits."""
        fetch = self._strategy.chosen()
        taking = finished.take_next and not (self._quiet.is_set() or self._stopping.is_set())
        turn = Turn(finished.acknowledge, tid, finished.processed, finished.failed, taking)
        try:
            turned = fetch.settle_and_take(self._connection, turn) if fetch is not None else None
        except Exception as error:  # the job is finished: whatever failed, it must be settled
            self._report(error, finished.acknowledge)
            # a call that may have run (its reply lost) may have counted the job already
            self._hand_to_bookkeeper(tid, finished, may_have_run=not connection.not_sent(error))
            return None
        if turned is None:  # this fetch can't: the bookkeeper sends it, the fetcher feeds us
            self._hand_to_bookkeeper(tid, finished)
            return None
        redis_errors.reporter.recovered("Turnover")
        if finished.acknowledge is not None:
            self._ledger.finished(finished.acknowledge)
        for part, message in turned.failures:
            site = "Fetch" if part == "fetch" else "Bookkeeping (ignored)"
            redis_errors.reporter.report(site, redis.ResponseError(message))
        work = turned.taken
        if work is None:
            return None
        self._ledger.taken(work)
        if self._quiet.is_set() or self._stopping.is_set():
            self.give_back(work)  # quiet began while the call was out: don't start it
            self._ledger.finished(work)
            self._bookkeeper.deregister(tid)
            return None
        return work

    def _connection(self) -> AbstractConnection:
        held: AbstractConnection | None = getattr(self._threads, "connection", None)
        if held is None:
            held = self._threads.connection = connection.dedicated(self._client)
        return held

    def open_thread(self) -> None:
        """Open the calling thread's connection before its first job (the launcher starts
        the threads once a heartbeat chose the fetch). Opened on first use instead, every
        thread's handshake (several round trips) would come at once as the first jobs finish,
        and delay each thread's next job: by 30 ms at concurrency 20 here."""
        fetch = self._strategy.chosen()
        if fetch is None or not fetch.takes_in_turnover:
            return
        try:
            self._connection().connect()  # type: ignore[no-untyped-call]
        except Exception:  # Redis went away: the first call connects again and reports it
            return

    def close_thread(self) -> None:
        """The calling thread is done: close its connection, if it opened one."""
        held: AbstractConnection | None = getattr(self._threads, "connection", None)
        if held is not None:
            held.disconnect()  # type: ignore[no-untyped-call]
            self._threads.connection = None

    def _report(self, error: Exception, done: Work | None) -> None:
        if redis_errors.is_unavailable(error):
            redis_errors.reporter.report("Turnover", error)  # one line per outage
            return
        if not isinstance(error, redis.RedisError):  # a bug: its traceback, once per failure
            logger.error(
                "turnover failed unexpectedly (%s: %s); %s, and the thread waits for the fetcher",
                type(error).__name__,
                error,
                f"the bookkeeper acknowledges jid={done.jid}" if done else "nothing to acknowledge",
                exc_info=error,
            )
            return
        logger.warning(
            "turnover failed (%s: %s); %s, and the thread waits for the fetcher",
            type(error).__name__,
            error,
            f"the bookkeeper acknowledges jid={done.jid}" if done else "nothing to acknowledge",
        )

    def _hand_to_bookkeeper(self, tid: str, finished: Finished, may_have_run: bool = False) -> None:
        """The bookkeeper sends what the call carried. After a call that may have run, the
        counts of a job to acknowledge go with its ack and count only if the ack still finds
        it listed (the call, had it run, would have taken it off and counted it)."""
        processed, failed = finished.processed, finished.failed
        done = finished.acknowledge
        if done is not None:  # the ledger hears once sent
            if may_have_run:
                self._bookkeeper.acknowledge(done, counts=(processed, failed))
                processed = failed = 0
            else:
                self._bookkeeper.acknowledge(done)
        self._bookkeeper.finished(tid, processed=processed, failed=failed)
        self._bookkeeper.wake()
