"""A processor thread: receives a fetched job, runs it through the server middleware, and
hands what came of it (an ``Outcome``) to the settle step. Never dies.

One job's path: listed as performing, registered in the workers hash, run on its own copy of
the payload; a failure is filed at once (``Settler.file_failure``), then the job is
deregistered and counted, then settled. A job is never started once shutdown began.
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
from cogworker.worker.settle import Settler

if TYPE_CHECKING:
    import asyncio

logger = logging.getLogger("cogworker")

ERROR_BACKOFF = 1.0

Mailbox = queue.SimpleQueue[Work | None]
"""Where a processor receives its next job (None: stop)."""


class Feed(Protocol):
    """Where a processor gets work: the fetcher."""

    def next_ahead(self) -> Work | None:
        """The job taken ahead, if there is one."""

    def ready(self, mailbox: Mailbox) -> None:
        """This processor is idle: send its next job to ``mailbox``."""


class Processor:
    def __init__(
        self,
        index: int,
        *,
        config: Config,
        ledger: Ledger,
        bookkeeper: Bookkeeper,
        settler: Settler,
        feed: Feed,
        stopping: threading.Event,
    ) -> None:
        self.tid = secrets.token_hex(6)
        self.mailbox: Mailbox = queue.SimpleQueue()
        self._config = config
        self._ledger = ledger
        self._bookkeeper = bookkeeper
        self._settler = settler
        self._feed = feed
        self._stopping = stopping
        self._loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, name=f"processor-{index}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        try:
            while True:
                work = self._feed.next_ahead()
                if work is None:
                    self._feed.ready(self.mailbox)
                    work = self.mailbox.get()
                if work is None:
                    return
                try:
                    self.process(work)
                except BaseException as error:
                    redis_errors.reporter.report("Processor", error)
                    time.sleep(ERROR_BACKOFF)
        finally:
            if self._loop is not None:
                self._loop.close()

    # -- one job -----------------------------------------------------------------------------

    def process(self, work: Work) -> None:
        if self._stopping.is_set():
            self._settler.give_back(work)  # never start a job once shutdown began
            self._ledger.finished(work)
            return
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
        self._settler.finish(work, outcome)

    def _execute(self, work: Work, outcome: Outcome) -> Next:
        if isinstance(work.job, Rejection):
            return Next.BURY
        job = outcome.job = wire.copy_payload(work.job)
        self._ledger.starting(work)
        outcome.started = True
        self._bookkeeper.register(
            self.tid, wire.workers_entry(work.queue, work.raw, int(time.time()))
        )
        processed = failed = 0
        job_class: str | None = None  # once it ran: its class and time, for the metrics
        seconds = 0.0
        try:
            logger.info("start: %s jid=%s", job["class"], work.jid)
            started = time.monotonic()
            error = self._run_job(work, outcome)
            seconds = time.monotonic() - started
            # the class as fetched: a middleware changing the copy's doesn't move its metrics
            job_class = work.job["class"]
            outcome.ran = Next.INTERRUPT if error is not None else Next.ACKNOWLEDGE
            outcome.error = error
            if error is None:
                processed = 1
                logger.info("done: %s jid=%s in %.3fs", job["class"], job["jid"], seconds)
                return Next.ACKNOWLEDGE
            failed = 1
            return self._settler.file_failure(work, outcome)
        finally:
            self._bookkeeper.finished(
                self.tid, processed=processed, failed=failed, job_class=job_class, seconds=seconds
            )

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
