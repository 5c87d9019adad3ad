"""The ledger: what this process holds, in memory, for the threads that need to know.

* running: every job taken for this process until it is settled or given back. Reconcile
  requeues what the in-progress list holds beyond these.
* performing: the jobs inside ``perform`` right now; the heartbeat keeps their cron locks
  alive, and at shutdown their jids are marked handed back. Once the shutdown hand-back
  begins (``close_starts``) no job may start: it is being requeued.
* pending: settlements that failed and wait to be retried (an acknowledgement, or a filing
  into retry / dead in place of the job), keyed by the raw payload.
* busy: how many processor threads are working on a job (the heartbeat reports it).

A payload is counted, not just listed: two identical payloads may be held at once.
Thread-safe; it does no I/O.
"""

from __future__ import annotations

import enum
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from cogworker.fetch import Filing, Work


class Ack(enum.Enum):
    """A pending acknowledgement: the job is settled but for its removal from the list."""

    ACK = "acknowledge"


ACK = Ack.ACK
Settlement = Ack | Filing
"""What is left to do for a job whose settling failed: acknowledge it, or file a payload in
its place."""


class Ledger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._perform_guard = threading.Lock()  # see while_performing
        self._running: Counter[str] = Counter()
        self._performing: Counter[str] = Counter()
        self._performing_works: dict[str, Work] = {}
        self._pending: dict[str, tuple[Work, Settlement]] = {}
        self._busy = 0
        self._starts_closed = False

    # -- running: taken until settled or given back ------------------------------------------

    def taken(self, work: Work) -> None:
        with self._lock:
            self._running[work.raw] += 1

    def finished(self, work: Work) -> None:
        with self._lock:
            _decrement(self._running, work.raw)

    def running(self) -> set[str]:
        with self._lock:
            return set(self._running)

    # -- performing: inside perform ------------------------------------------------------------

    def starting(self, work: Work) -> bool:
        """A processor is about to run it: the heartbeat keeps its cron lock alive. False
        once the shutdown hand-back began: it must not run here (it is going back)."""
        with self._lock:
            if self._starts_closed:
                return False
            self._performing[work.raw] += 1
            self._performing_works[work.raw] = work
            return True

    def close_starts(self) -> list[Work]:
        """No job starts from now on; the ones performing now (they run on, and are handed
        back all the same). A thread that checked for shutdown before it began and then
        lagged can't start a job after the hand-back requeued it."""
        with self._lock:
            self._starts_closed = True
            return list(self._performing_works.values())

    def performed(self, work: Work) -> None:
        """``perform`` returned: the heartbeat stops keeping the job's cron lock alive."""
        with self._perform_guard, self._lock:
            if not _decrement(self._performing, work.raw):
                self._performing_works.pop(work.raw, None)

    def performed_once(self, work: Work) -> Callable[[], None]:
        """``performed`` for ``work`` as a call that counts only the first time: the chain
        makes it as ``perform`` ends, the processor again in case ``perform`` was never
        reached (a middleware skipped it)."""
        done = False

        def end() -> None:
            nonlocal done
            if not done:
                done = True
                self.performed(work)

        return end

    def performing(self) -> list[Work]:
        with self._lock:
            return list(self._performing_works.values())

    def while_performing(self, work: Work, action: Callable[[], object]) -> None:
        """Run ``action`` only if ``work`` is still inside ``perform``, which can't end
        meanwhile (so the heartbeat never re-takes a cron lock its job has just released)."""
        with self._perform_guard:
            if work.raw in self._performing:
                action()

    # -- pending settlements -------------------------------------------------------------------

    def settle_later(self, work: Work, how: Settlement) -> None:
        with self._lock:
            self._pending[work.raw] = (work, how)

    def settled(self, work: Work) -> None:
        with self._lock:
            self._pending.pop(work.raw, None)

    def is_pending(self, work: Work) -> bool:
        with self._lock:
            return work.raw in self._pending

    def pending(self) -> dict[str, Settlement]:
        """What is left to do, by raw payload."""
        with self._lock:
            return {raw: how for raw, (_, how) in self._pending.items()}

    def pending_work(self) -> list[tuple[Work, Settlement]]:
        with self._lock:
            return list(self._pending.values())

    # -- busy threads ----------------------------------------------------------------------------

    @contextmanager
    def working(self) -> Iterator[None]:
        """A processor thread is busy with a job inside the block."""
        with self._lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1

    @property
    def busy(self) -> int:
        return self._busy


def _decrement(counter: Counter[str], raw: str) -> int:
    """Count one ``raw`` less; how many are left."""
    left = counter[raw] - 1
    if left <= 0:
        counter.pop(raw, None)
        return 0
    counter[raw] = left
    return left
