"""A processor thread's turnover: the bookkeeping of the job it just finished and the fetch of
its next job in one script call (``turnover.lua``), so a busy thread never waits for another
thread to feed it or to send its acknowledgement.

One call acknowledges the job (``LREM`` from the in-progress list, its orphan counter
deleted), counts it, and moves the next job from the tail of a queue (weighted order, paused
queues left out) onto the in-progress list, writing the thread's workers-hash entry for it;
with nothing waiting it removes the entry. The job taken is therefore listed in progress the
moment it leaves its queue, as with the fetcher, and a job finished but not yet acknowledged
is one round trip's worth of time: the call returns before the thread does anything else.

Reliable fetch only: with basic fetch, and whenever the call fails, what it carried goes to the
bookkeeper (which retries an acknowledgement 3 times, then every half second) and the thread
waits for the fetcher like an idle one. Nothing is taken once the process is quiet or
stopping; a job taken while quiet began goes straight back to its queue. Each processor thread
sends its calls on a connection of its own (no pool lock, no per-command wrappers: see
bench/redis_overhead.py).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from cogworker import connection, keys, redis_errors, scripts, wire
from cogworker.fetch import Work
from cogworker.fetch.reliable import ReliableFetch
from cogworker.worker.bookkeeper import Bookkeeper
from cogworker.worker.ledger import Ledger
from cogworker.worker.settle import Settler
from cogworker.worker.strategy import FetchStrategy

if TYPE_CHECKING:
    from redis.connection import AbstractConnection

logger = logging.getLogger("cogworker")

TURNOVER = scripts.load(__file__, "turnover")


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
        identity: str,
        strategy: FetchStrategy,
        ledger: Ledger,
        bookkeeper: Bookkeeper,
        settler: Settler,
        *,
        stopping: threading.Event,
        quiet: threading.Event,
    ) -> None:
        self._client = client
        self._workers_key = keys.workers(identity)
        self._strategy = strategy
        self._ledger = ledger
        self._bookkeeper = bookkeeper
        self._settler = settler
        self._stopping = stopping
        self._quiet = quiet
        self._openings: dict[str, str] = {}  # queue name -> its workers-entry opening
        self._threads = threading.local()  # each processor thread's own connection

    def next_job(self, tid: str, finished: Finished) -> Work | None:
        """Settle ``finished`` for thread ``tid`` and return its next job, if one waits."""
        fetch = self._strategy.chosen()
        if not isinstance(fetch, ReliableFetch):
            self._hand_to_bookkeeper(tid, finished)
            return None
        try:
            reply = self._call(fetch, tid, finished)
        except Exception as error:  # the job is finished: whatever failed, it must be settled
            self._report(error, finished.acknowledge)
            # a call that may have run (its reply lost) may have counted the job already
            self._hand_to_bookkeeper(tid, finished, may_have_run=not connection.not_sent(error))
            return None
        redis_errors.reporter.recovered("Turnover")
        if finished.acknowledge is not None:
            self._ledger.finished(finished.acknowledge)
        failures = reply[1]
        for at in range(0, len(failures), 2):
            site = "Fetch" if failures[at] == "fetch" else "Bookkeeping (ignored)"
            redis_errors.reporter.report(site, redis.ResponseError(failures[at + 1]))
        if len(reply) < 4:
            return None
        work = Work.taken(keys.queue_name(reply[2]), reply[3])
        self._ledger.taken(work)
        if self._quiet.is_set() or self._stopping.is_set():
            self._settler.give_back(work)  # quiet began while the call was out: don't start it
            self._ledger.finished(work)
            self._bookkeeper.deregister(tid)
            return None
        return work

    def _call(self, fetch: ReliableFetch, tid: str, finished: Finished) -> list[Any]:
        taking = finished.take_next and not (self._quiet.is_set() or self._stopping.is_set())
        order = fetch.queue_order() if taking else []  # may read the paused queues: Redis
        done = finished.acknowledge
        now = int(time.time())
        script_keys = [
            fetch.inprogress,
            keys.orphanings(done.jid) if done is not None else fetch.inprogress,
            self._workers_key,
            keys.STATS_PROCESSED,
            keys.STATS_FAILED,
            keys.throughput(now // 3600),
            *map(keys.queue, order),
        ]
        args = [
            done.raw if done is not None else "",
            tid,
            finished.processed,
            finished.failed,
            keys.THROUGHPUT_TTL,
            now,
            *map(self._opening, order),
        ]
        reply: list[Any] = TURNOVER.call_on(self._connection(), script_keys, args)
        return reply

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
        if not isinstance(self._strategy.chosen(), ReliableFetch):
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

    def _opening(self, queue: str) -> str:
        opening = self._openings.get(queue)
        if opening is None:
            opening = self._openings[queue] = wire.workers_entry_opening(queue)
        return opening
