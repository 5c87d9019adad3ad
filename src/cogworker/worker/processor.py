"""A processor thread: runs a job through the server middleware, hands what came of it (an
``Outcome``) to the settle step, and gets its next job from its turnover. Never dies.

One job's path: listed as performing, registered in the workers hash, run on its own copy of
the payload; a failure is filed at once (``Settler.file_failure``), then the job is settled.
Its acknowledgement, deregistration and counts then leave with the fetch of the thread's next
job in one round trip (``Turnover.next_job``); only when no job waits (or fetching that way
isn't possible) does the thread wait for the fetcher. A job is never started once shutdown
began.
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from cogworker import execute, failure, redis_errors, wire
from cogworker.config import Config
from cogworker.failure import Rejection
from cogworker.fetch import Work
from cogworker.job import Job
from cogworker.worker.bookkeeper import Bookkeeper
from cogworker.worker.ledger import Ledger
from cogworker.worker.outcome import Next, Outcome, summary
from cogworker.worker.pace import Pace
from cogworker.worker.settle import Settler
from cogworker.worker.turnover import Finished, Turnover

if TYPE_CHECKING:
    import asyncio

logger = logging.getLogger("cogworker")

ERROR_BACKOFF = 1.0

Mailbox = queue.SimpleQueue[Work | None]
"""Where a processor receives its next job (None: stop)."""


class Feed(Protocol):
    """Where an idle processor gets work: the fetcher."""

    def ready(self, mailbox: Mailbox) -> None:
        """This processor is idle: send its next job to ``mailbox``."""

    def running(self) -> None:
        """A processor woke with the job it was sent and is starting it."""


class Processor:
    def __init__(
        self,
        index: int,
        *,
        config: Config,
        ledger: Ledger,
        bookkeeper: Bookkeeper,
        settler: Settler,
        turnover: Turnover,
        feed: Feed,
        pace: Pace,
        stopping: threading.Event,
    ) -> None:
        self.tid = secrets.token_hex(6)
        self.mailbox: Mailbox = queue.SimpleQueue()
        self._config = config
        self._ledger = ledger
        self._bookkeeper = bookkeeper
        self._settler = settler
        self._turnover = turnover
        self._feed = feed
        self._pace = pace
        self._stopping = stopping
        self._registered = False  # the turnover wrote this thread's workers-hash entry
        self._loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, name=f"processor-{index}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        work: Work | None = None
        try:
            self._turnover.open_thread()
            while True:
                if work is None:
                    self._feed.ready(self.mailbox)
                    work = self.mailbox.get()
                    if work is None:
                        return
                    self._feed.running()
                    self._registered = False
                try:
                    work = self.process(work)
                    self._registered = True  # a job from the turnover is registered by it
                except BaseException as error:
                    redis_errors.reporter.report("Processor", error)
                    self._bookkeeper.deregister(self.tid)
                    time.sleep(ERROR_BACKOFF)
                    work = None
                if work is None:
                    self._pace.idle(self.tid)  # its lane is free for another thread
        finally:
            self._turnover.close_thread()
            if self._loop is not None:
                self._loop.close()

    # -- one job -----------------------------------------------------------------------------

    def process(self, work: Work) -> Work | None:
        """Run and settle ``work``; the thread's next job, when its turnover took one."""
        if self._stopping.is_set():
            self._settler.give_back(work)  # never start a job once shutdown began
            self._ledger.finished(work)
            return self._turnover.next_job(self.tid, Finished())
        outcome = Outcome()
        with self._ledger.working():
            try:
                outcome.next = self._execute(work, outcome)
            except BaseException as error:
                outcome.next = outcome.after_bug(error)
                logger.error(
                    "processing jid=%s failed unexpectedly (%s); %s",
                    work.jid,
                    summary(error),
                    outcome.next.value,
                    exc_info=error,
                )
            finally:
                if outcome.started and not outcome.performed:
                    self._ledger.performed(work)
        if not self._registered:
            self._bookkeeper.withdraw(self.tid)  # the turnover writes the entry from now on
        ran = outcome.ran is not None
        finished = Finished(
            acknowledge=self._settler.finish(work, outcome),
            processed=int(ran and outcome.error is None),
            failed=int(ran and outcome.error is not None),
            take_next=self._pace.keeps_lane(self.tid),
        )
        return self._turnover.next_job(self.tid, finished)

    def _execute(self, work: Work, outcome: Outcome) -> Next:
        if isinstance(work.job, Rejection):
            return Next.BURY
        job = outcome.job = wire.copy_payload(work.job)
        if not self._ledger.starting(work):  # the shutdown hand-back began: it goes back
            return Next.GIVE_BACK
        outcome.started = True
        if not self._registered:
            entry = wire.workers_entry(work.queue, work.raw, int(time.time()))
            self._bookkeeper.register(self.tid, entry)
        logger.info("start: %s jid=%s", job["class"], work.jid)
        self._pace.starting(self.tid)
        started = time.monotonic()
        error = self._run_job(work, outcome)
        seconds = time.monotonic() - started
        outcome.ran = Next.INTERRUPT if error is not None else Next.ACKNOWLEDGE
        outcome.error = error
        # the class as fetched: a middleware changing the copy's doesn't move its metrics
        self._bookkeeper.record_run(work.job["class"], seconds, failed=error is not None)
        if error is None:
            logger.info("done: %s jid=%s in %.3fs", job["class"], job["jid"], seconds)
            return Next.ACKNOWLEDGE
        return self._settler.file_failure(work, outcome)

    def _run_job(self, work: Work, outcome: Outcome) -> BaseException | None:
        job = outcome.job
        if job is None:
            raise ValueError("a run needs its copy of the job")

        def decide(job_class: type[Job] | None, error: BaseException) -> None:
            decision = outcome.decision = failure.decide(job_class, job, error)
            if decision.hooked:
                job["failure_outcome"] = decision.outcome

        def performed() -> None:
            # before the middleware unwinds: the heartbeat must stop re-taking the job's cron
            # lock before the running-lock middleware releases it
            if not outcome.performed:
                outcome.performed = True
                self._ledger.performed(work)

        try:
            execute.execute(
                self._config.server_middleware,
                job,
                work.queue,
                run_coroutine=self._run_coroutine,
                on_error=decide,
                on_performed=performed,
            )
        except BaseException as error:
            return error
        return None

    def _run_coroutine(self, coroutine: Any) -> Any:
        if self._loop is None:
            import asyncio

            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coroutine)
