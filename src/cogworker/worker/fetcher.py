"""The fetcher thread: feeds the processor threads, taking one job ahead while they are busy.

It waits until some processors are idle, takes that many jobs in one call (blocking
server-side when the queues are empty) and hands one to each.

With reliable fetch it also takes one job ahead, so that a thread finishing a job starts the
next one at once instead of waiting for a round trip (under steady load the threads would
otherwise queue behind each other for the fetcher). The job taken ahead is in this process's
in-progress list like a running one; if no thread takes it within ``AHEAD_HOLD`` it goes back
to the tail of its queue (it is next there) and taking ahead stops until a thread runs out of
work, so a process whose threads are all busy with long jobs doesn't sit on a job that another
process could run. Quiet (and stop) hands it back too and takes nothing new.
"""

from __future__ import annotations

import enum
import queue
import threading
import time
from collections import deque

from cogworker import redis_errors
from cogworker.fetch import UnsupportedError, Work
from cogworker.worker.ledger import Ledger
from cogworker.worker.processor import Mailbox
from cogworker.worker.settle import Settler
from cogworker.worker.strategy import FetchStrategy

QUIET_PAUSE = 0.5
FETCH_ERROR_PAUSE = 1.0
AHEAD_HOLD = 0.25  # seconds a job taken ahead may wait for a thread before it goes back
JOIN_GIVE_UP = 30.0


class _Signal(enum.Enum):
    WAKE = "look again"  # the job ahead was taken, or quiet began
    STOP = "stop"


class Fetcher:
    def __init__(
        self,
        strategy: FetchStrategy,
        ledger: Ledger,
        settler: Settler,
        stopping: threading.Event,
    ) -> None:
        self._strategy = strategy
        self._ledger = ledger
        self._settler = settler
        self._stopping = stopping
        self._quiet = threading.Event()
        self._inbox: queue.SimpleQueue[Mailbox | _Signal] = queue.SimpleQueue()
        self._ahead: deque[tuple[Work, float]] = deque()  # (job taken ahead, when): 0 or 1
        self._taking_ahead = True
        self._thread = threading.Thread(target=self._dispatch, name="fetcher", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def quiet(self) -> bool:
        return self._quiet.is_set()

    def set_quiet(self, quiet: bool) -> None:
        """Stop (or resume) taking jobs. Quiet can't be undone once stopping began."""
        if quiet:
            self._quiet.set()
            self._inbox.put(_Signal.WAKE)  # to hand back the job taken ahead
            self._wake_fetch()
        elif not self._stopping.is_set():
            self._quiet.clear()

    def stop(self) -> None:
        """Take nothing more and end the thread (the job taken ahead goes back)."""
        self._quiet.set()
        self._inbox.put(_Signal.STOP)
        if not self._thread.is_alive():
            return
        # the thread may be about to block when the first wake-up is sent: keep waking it
        give_up = time.monotonic() + JOIN_GIVE_UP
        while self._thread.is_alive() and time.monotonic() < give_up:
            self._wake_fetch()
            self._thread.join(0.05)

    def _wake_fetch(self) -> None:
        fetch = self._strategy.chosen()
        if fetch is not None:
            fetch.wake()

    # -- called by processor threads ---------------------------------------------------------

    def ready(self, mailbox: Mailbox) -> None:
        self._inbox.put(mailbox)

    def next_ahead(self) -> Work | None:
        """For a processor that finished a job: the job taken ahead, if there is one."""
        if self._quiet.is_set():
            return None
        work = self._pop_ahead()
        if work is not None:
            self._inbox.put(_Signal.WAKE)
        return work

    # -- the thread --------------------------------------------------------------------------

    def _dispatch(self) -> None:
        idle: list[Mailbox] = []
        while not self._stopping.is_set():
            if not self._collect(idle):
                break
            if self._quiet.is_set():
                self._return_ahead()
                self._stopping.wait(QUIET_PAUSE)
                continue
            self._hand_out(idle)
        self._return_ahead()  # stopping: it never started, it isn't "unfinished"

    def _collect(self, idle: list[Mailbox]) -> bool:
        """Wait until there is something to do: idle processors, or room to take a job
        ahead; meanwhile return a job ahead that waited too long. False at stop."""
        if not idle and not self._wants_ahead():
            try:
                message = self._inbox.get(timeout=self._hold_left())
            except queue.Empty:
                self._return_ahead(stale_only=True)
                return True
            if message is _Signal.STOP:
                return False
            if not isinstance(message, _Signal):
                idle.append(message)
        while True:
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                break
            if not isinstance(message, _Signal):
                idle.append(message)
        if idle:
            self._taking_ahead = True  # a thread ran out of work: taking ahead pays
        return True

    def _hand_out(self, idle: list[Mailbox]) -> None:
        while idle:
            work = self._pop_ahead()
            if work is None:
                break
            idle.pop().put(work)
        ahead = 1 if self._wants_ahead() else 0
        if not idle and not ahead:
            return
        works = self._retrieve(len(idle) + ahead, wait=bool(idle))
        if self._quiet.is_set():
            for work in works:  # quieted or stopping while we waited: don't start them
                self._settler.give_back(work)
            return
        if ahead and len(works) <= len(idle):
            self._taking_ahead = False  # the queues ran dry: nothing to take ahead
        for work in works:
            self._ledger.taken(work)
            if idle:
                idle.pop().put(work)
            else:
                self._ahead.append((work, time.monotonic()))

    def _pop_ahead(self) -> Work | None:
        try:
            work, _ = self._ahead.popleft()  # atomic: a processor may be taking it too
        except IndexError:
            return None
        return work

    def _wants_ahead(self) -> bool:
        # with basic fetch a job taken would only be in memory: nothing is taken ahead
        return self._taking_ahead and not self._ahead and self._strategy.mode == "reliable"

    def _hold_left(self) -> float | None:
        """How long the fetcher may wait for a processor before the job ahead is stale."""
        try:
            _, taken_at = self._ahead[0]
        except IndexError:
            return None
        return max(taken_at + AHEAD_HOLD - time.monotonic(), 0.0)

    def _return_ahead(self, *, stale_only: bool = False) -> None:
        """Give back the job taken ahead (with ``stale_only``, only once it waited
        ``AHEAD_HOLD``) and stop taking ahead until a thread runs out of work."""
        if stale_only and self._hold_left() != 0.0:
            return
        work = self._pop_ahead()
        if work is None:
            return
        self._taking_ahead = False
        self._settler.give_back(work)
        self._ledger.finished(work)

    def _retrieve(self, wanted: int, *, wait: bool) -> list[Work]:
        try:
            works = self._strategy.current().retrieve(wanted, wait=wait)
        except UnsupportedError as error:
            self._strategy.fall_back_to_basic(error)
            return []
        except Exception as error:
            redis_errors.reporter.report("Fetch", error)
            self._stopping.wait(FETCH_ERROR_PAUSE)
            return []
        redis_errors.reporter.recovered("Fetch")
        return works
