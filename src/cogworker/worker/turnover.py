"""A processor thread's turnover: the bookkeeping of the job it just finished and the fetch of
its next job in one call of the fetch's ``settle_and_take`` (reliable fetch: one script,
``fetch/turnover.lua``), so a busy thread never waits for another thread to feed it or to
send its acknowledgement.

One call acknowledges the job (``LREM`` from the in-progress list, its orphan counter
deleted), counts it, and moves the next job from the tail of a queue (weighted order, paused
queues left out) onto the in-progress list, writing the thread's workers-hash entry for it;
with nothing waiting it removes the entry. The job taken is therefore listed in progress the
moment it leaves its queue, as with the fetcher, and a job finished but not yet acknowledged
is one round trip's worth of time: the call returns before the thread does anything else.

When the fetch can't (basic fetch), and whenever the call fails, what it carried goes to the
bookkeeper (which retries an acknowledgement 3 times, then every half second) and the thread
waits for the fetcher like an idle one. Nothing is taken once the process is quiet or
stopping; a job taken while quiet began goes straight back to its queue. Each processor thread
sends its calls on a connection of its own (no pool lock, no per-command wrappers: see
bench/redis_overhead.py).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from cogworker import connection, redis_errors
from cogworker.fetch import Turn, Work
from cogworker.fetch.strategy import FetchStrategy
from cogworker.worker.bookkeeper import Bookkeeper
from cogworker.worker.ledger import Ledger
from cogworker.worker.settle import Settler

if TYPE_CHECKING:
    from redis.connection import AbstractConnection

logger = logging.getLogger("cogworker")


@dataclass(frozen=True, slots=True)
class Finished:
    """What a thread reports about the job it just finished: the job to acknowledge (None when
    settling already wrote its fate), the runs to count, and whether it may take its next job
    (False: its lane closed, see ``pace.py``)."""

    acknowledge: Work | None = None
    processed: int = 0
    failed: int = 0
    take_next: bool = True


class Turnover:
    def __init__(
        self,
        client: redis.Redis,
        strategy: FetchStrategy,
        ledger: Ledger,
        bookkeeper: Bookkeeper,
        settler: Settler,
        *,
        stopping: threading.Event,
        quiet: threading.Event,
    ) -> None:
        self._client = client
        self._strategy = strategy
        self._ledger = ledger
        self._bookkeeper = bookkeeper
        self._settler = settler
        self._stopping = stopping
        self._quiet = quiet
        self._threads = threading.local()  # each processor thread's own connection

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
            self._settler.give_back(work)  # quiet began while the call was out: don't start it
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
