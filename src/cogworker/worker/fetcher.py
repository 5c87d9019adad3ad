"""The fetcher thread: feeds the processor threads that have nothing to do.

A busy thread takes its next job itself, with the acknowledgement of the one it finished (its
turnover, ``settle.py``). A thread that found nothing there (or whose lane closed: ``pace.py``)
tells the fetcher it is idle; the fetcher waits until some are and lanes are open for them,
takes that many jobs in one call (blocking server-side when the queues are empty, so idle
threads cost one waiting connection, not one each), registers each in the workers hash
(through the bookkeeper) and hands one to each.
Quiet (and stop) takes nothing new; jobs that arrive while quiet began go back to their queue.
"""

from __future__ import annotations

import enum
import queue
import threading
import time
from dataclasses import dataclass

from cogworker import redis_errors, wire
from cogworker.failure import Rejection
from cogworker.fetch import UnsupportedError, Work
from cogworker.fetch.strategy import FetchStrategy
from cogworker.worker.bookkeeper import Bookkeeper
from cogworker.worker.ledger import Ledger
from cogworker.worker.pace import WINDOW, Pace
from cogworker.worker.processor import Mailbox
from cogworker.worker.settle import Settler

QUIET_PAUSE = 0.5
# After handing out jobs the fetcher waits (at most this long) until the first thread it woke
# is running before it fetches again: that fetch would hold the GIL while the thread wakes,
# which delayed an idle worker's pickups by about 0.2 ms (bench/worker.py w4).
HEAD_START = 0.002
FETCH_ERROR_PAUSE = 1.0
JOIN_GIVE_UP = 30.0


class _Signal(enum.Enum):
    WAKE = "look again"  # quiet began
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class Idle:
    """A processor thread waiting for a job: its id and where to send the job."""

    tid: str
    mailbox: Mailbox


class Fetcher:
    def __init__(
        self,
        strategy: FetchStrategy,
        ledger: Ledger,
        settler: Settler,
        bookkeeper: Bookkeeper,
        pace: Pace,
        stopping: threading.Event,
        quiet: threading.Event,
    ) -> None:
        self._strategy = strategy
        self._pace = pace
        self._ledger = ledger
        self._settler = settler
        self._bookkeeper = bookkeeper
        self._stopping = stopping
        self._quiet = quiet
        self._inbox: queue.SimpleQueue[Idle | _Signal] = queue.SimpleQueue()
        self._woken = threading.Event()
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
            self._inbox.put(_Signal.WAKE)
            self._wake_fetch()
        elif not self._stopping.is_set():
            self._quiet.clear()

    def stop(self) -> None:
        """Take nothing more and end the thread."""
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

    def ready(self, tid: str, mailbox: Mailbox) -> None:
        self._inbox.put(Idle(tid, mailbox))

    def running(self) -> None:
        self._woken.set()

    # -- the thread --------------------------------------------------------------------------

    def _dispatch(self) -> None:
        idle: list[Idle] = []
        while not self._stopping.is_set():
            if not self._collect(idle):
                break
            if self._quiet.is_set():
                self._stopping.wait(QUIET_PAUSE)
                continue
            self._hand_out(idle)

    def _collect(self, idle: list[Idle]) -> bool:
        """Wait until some processor is idle, then gather every one that is. False at stop."""
        if not idle:
            message = self._inbox.get()
            if message is _Signal.STOP:
                return False
            if not isinstance(message, _Signal):
                idle.append(message)
        while True:
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                break
            if message is _Signal.STOP:
                return False
            if not isinstance(message, _Signal):
                idle.append(message)
        return True

    def _hand_out(self, idle: list[Idle]) -> None:
        if not idle:
            return
        room = self._pace.reserve(len(idle), timeout=WINDOW)
        if not room:  # every open lane is busy: look at the inbox again, then wait again
            return
        works = self._retrieve(room)
        if self._quiet.is_set():
            for work in works:  # quieted or stopping while we waited: don't start them
                self._settler.give_back(work)
            self._pace.release(room)
            return
        self._pace.release(room - len(works))
        self._woken.clear()
        now = int(time.time())
        for work in works:
            self._ledger.taken(work)
            thread = idle.pop()
            if not isinstance(work.job, Rejection):  # the workers hash shows it running there
                self._bookkeeper.register(thread.tid, wire.workers_entry(work.queue, work.raw, now))
            thread.mailbox.put(work)
        if works:
            self._woken.wait(HEAD_START)

    def _retrieve(self, wanted: int) -> list[Work]:
        try:
            works = self._strategy.current().retrieve(wanted, wait=True)
        except UnsupportedError as error:
            self._strategy.fall_back_to_basic(error)
            return []
        except Exception as error:
            redis_errors.reporter.report("Fetch", error)
            self._stopping.wait(FETCH_ERROR_PAUSE)
            return []
        redis_errors.reporter.recovered("Fetch")
        return works
