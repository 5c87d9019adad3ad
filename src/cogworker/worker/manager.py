"""The Manager: builds the roles that run jobs in this process, starts and stops them.

* ``strategy`` - which fetch is in use (reliable, or basic on an old Redis);
* ``fetcher`` - the thread that takes jobs and hands them to idle processors (``fetcher.py``);
* ``processors`` - the threads that run one job each through the middleware;
* ``settler`` - turns what came of a run into an ack, a filing, an interrupt or a hand-back,
  and takes the thread's next job in the same call when it can (its turnover, ``settle.py``);
* ``bookkeeper`` - the thread that sends what the turnover doesn't (first registrations,
  per-class metrics, basic fetch's counts, acks to retry) in batches;
* ``ledger`` - what this process holds, in memory;
* ``orphans`` and ``reconciler`` - recovery of other processes' jobs and of our own
  leftovers (run by the scheduler thread, and by ``stop``).

Building one does no Redis I/O: a manager may be built before a fork or while Redis is down.
"""

from __future__ import annotations

import logging
import threading
import time

from cogworker import connection, locks
from cogworker.config import Config
from cogworker.fetch.strategy import FetchStrategy
from cogworker.worker.bookkeeper import Bookkeeper
from cogworker.worker.fetcher import Fetcher
from cogworker.worker.ledger import Ledger
from cogworker.worker.pace import Pace
from cogworker.worker.processor import Processor
from cogworker.worker.recovery import Orphans, Reconciler
from cogworker.worker.recovery.handback import HandBackFailed
from cogworker.worker.settle import Settler

logger = logging.getLogger("cogworker")


class Manager:
    def __init__(self, config: Config, identity: str) -> None:
        self.config = config
        self.identity = identity
        self.client = config.redis()
        self.stopping = threading.Event()
        self.ledger = Ledger()
        self.strategy = FetchStrategy(config, identity, self.stopping)
        self.bookkeeper = Bookkeeper(self.client, identity, self.strategy, self.ledger)
        quiet = threading.Event()
        self.settler = Settler(
            config,
            self.client,
            self.strategy,
            self.ledger,
            self.bookkeeper,
            stopping=self.stopping,
            quiet=quiet,
        )
        self.pace = Pace(config.concurrency, adaptive=config.adaptive_concurrency)
        self.fetcher = Fetcher(
            self.strategy,
            self.ledger,
            self.settler,
            self.bookkeeper,
            self.pace,
            self.stopping,
            quiet,
        )
        self.processors = [
            Processor(
                index,
                config=config,
                ledger=self.ledger,
                bookkeeper=self.bookkeeper,
                settler=self.settler,
                feed=self.fetcher,
                pace=self.pace,
                stopping=self.stopping,
            )
            for index in range(config.concurrency)
        ]
        self.orphans = Orphans(config, self.client, identity, self.settler)
        self.reconciler = Reconciler(
            config, self.client, identity, self.ledger, self.strategy, self.settler
        )

    def start(self) -> None:
        self.bookkeeper.start()
        for processor in self.processors:
            processor.start()
        self.fetcher.start()

    @property
    def quiet(self) -> bool:
        return self.fetcher.quiet

    def set_quiet(self, quiet: bool) -> None:
        """Stop (or resume) taking jobs; running ones finish. Stopping can't be undone."""
        self.fetcher.set_quiet(quiet)

    def stop(self, timeout: float | None = None) -> None:
        """Stop fetching, wait up to ``timeout`` for running jobs, hand back the rest."""
        timeout = self.config.shutdown_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        self.stopping.set()
        self.fetcher.stop()
        for processor in self.processors:
            processor.mailbox.put(None)
        for processor in self.processors:
            if processor.thread.is_alive():
                processor.thread.join(max(deadline - time.monotonic(), 0))
        self.bookkeeper.flush()
        self._hand_back()
        self.bookkeeper.stop()
        self.strategy.close()

    def _hand_back(self) -> None:
        """Requeue what this process still holds. The jobs still running are marked first:
        their runs here must not free the requeued copies' locks if they finish before the
        process exits (a run may finish while the requeue is under way)."""
        running = {work.jid for work in self.ledger.close_starts() if work.jid}
        locks.handed_back.update(running)
        try:
            self.reconciler.hand_back()
        except HandBackFailed as failed:
            logger.error("Requeueing unfinished jobs failed: %s", failed)
            if connection.not_sent(failed.error):
                # the failing command never left: what it didn't requeue holds no copy here,
                # so those runs free their own locks (any release skipped meanwhile is made)
                locks.withdraw_hand_back(self.client, running - failed.requeued)
            # else its reply was lost: the copies may be queued, holding the locks with the
            # same jids, so the marks stay and the locks lapse on their TTL (active_ttl)
        except Exception as error:
            logger.error("Requeueing unfinished jobs failed: %s", error)
