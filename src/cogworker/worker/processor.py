"""A processor thread: take a job, run it through the server middleware, settle it; the
settle step (``settle.py``) hands back the thread's next job when its turnover took one, else
the thread waits for the fetcher. Never dies.

A run is listed as performing in the ledger and made on the job's own copy of the payload; what
came of it (``Outcome``) is a value the settle step acts on. A job is never started once
shutdown began.
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from cogworker import execute, redis_errors, wire
from cogworker.config import Config
from cogworker.failure import Rejection
from cogworker.fetch import Work
from cogworker.worker.bookkeeper import Bookkeeper
from cogworker.worker.ledger import Ledger
from cogworker.worker.outcome import Next, Outcome, log_bug
from cogworker.worker.pace import Pace
from cogworker.worker.settle import Settler

if TYPE_CHECKING:
    import asyncio

logger = logging.getLogger("cogworker")

ERROR_BACKOFF = 1.0

Mailbox = queue.SimpleQueue[Work | None]
"""Where a processor receives its next job (None: stop)."""


class Feed(Protocol):
    """Where an idle processor gets work: the fetcher."""

    def ready(self, tid: str, mailbox: Mailbox) -> None:
        """Processor ``tid`` is idle: register its next job and send it to ``mailbox``."""

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
        self._feed = feed
        self._pace = pace
        self._stopping = stopping
        self._registered = False  # the last turnover wrote this thread's workers-hash entry
        self._loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, name=f"processor-{index}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        work: Work | None = None
        try:
            self._settler.open_thread()
            while True:
                if work is None:
                    self._feed.ready(self.tid, self.mailbox)
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
            self._settler.close_thread()
            if self._loop is not None:
                self._loop.close()

    # -- one job -----------------------------------------------------------------------------

    def process(self, work: Work) -> Work | None:
        """Run and settle ``work``; the thread's next job, when its turnover took one."""
        outcome = self._run_once(work)
        keeps_lane = self._pace.keeps_lane(self.tid)
        return self._settler.settle(
            self.tid, work, outcome, take_next=keeps_lane, registered=self._registered
        )

    def _run_once(self, work: Work) -> Outcome:
        outcome = Outcome()
        if self._stopping.is_set():
            return outcome  # never start a job once shutdown began: it goes back
        with self._ledger.working():
            performed = self._ledger.performed_once(work)
            try:
                outcome.next = self._perform(work, outcome, performed)
            except BaseException as error:
                outcome.next = outcome.after_bug(error)
                log_bug(work, error, outcome.next)
            finally:
                if outcome.started:
                    performed()  # perform may never have been reached
        return outcome

    def _perform(self, work: Work, outcome: Outcome, performed: execute.Performed) -> Next:
        if isinstance(work.job, Rejection):
            return Next.BURY
        job = outcome.job = wire.copy_payload(work.job)
        if not self._ledger.starting(work):  # the shutdown hand-back began: it goes back
            return Next.GIVE_BACK
        outcome.started = True
        logger.info("start: %s jid=%s", job["class"], work.jid)
        self._pace.starting(self.tid)
        # ``performed`` ends the ledger's performing entry inside the chain, as perform ends:
        # the heartbeat must stop re-taking the job's cron lock before the middleware frees it
        run = execute.run(
            self._config.server_middleware,
            job,
            work.queue,
            run_coroutine=self._run_coroutine,
            performed=performed,
        )
        outcome.error, outcome.decision, outcome.seconds = run.error, run.decision, run.seconds
        if run.error is not None:
            outcome.ran = Next.INTERRUPT  # until settling files the failure
        else:
            outcome.ran = Next.ACKNOWLEDGE
            logger.info("done: %s jid=%s in %.3fs", job["class"], job["jid"], run.seconds)
        return Next.ACKNOWLEDGE  # a failure is filed first, by the settle step

    def _run_coroutine(self, coroutine: Any) -> Any:
        if self._loop is None:
            import asyncio

            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coroutine)
