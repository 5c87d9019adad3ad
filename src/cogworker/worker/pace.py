"""The pace: how many of the processor threads may hold a job at once (their lanes).

The threads of one process share one GIL. When the jobs are short and the process's CPU is
saturated, every thread beyond the few that saturate it adds nothing but hand-offs: each wait on
Redis passes the GIL to another thread and back, and ten threads draining jobs of one Redis
command each spend more CPU per job than one thread (443 us against 258 in the README's peers
table) and drain no faster. So while the process is CPU-bound on short jobs, the pace halves the
lanes every window; as soon as the CPU has room again (the jobs wait on I/O, or the queues ran
dry) it doubles them, up to ``concurrency``. Jobs that cost more CPU than ``SHORT_JOB_CPU`` each
(or none finishing in a window) reopen them the same way: next to their work the hand-offs cost
little, and fewer threads would only make jobs queue behind each other.

A thread holds a lane from the moment it is handed a job until it finds no next one: the
fetcher reserves lanes before it takes jobs for idle threads, and a thread whose turnover
finds the lanes over the limit settles its job without taking the next. The limit is a soft
one: threads deciding at the same moment may cross it by a few, for one turnover. Judged over
windows of ``WINDOW`` seconds by the process's CPU clock (read once per window) and the jobs
finished. The limit never closes the lanes of jobs that have run a window or longer, and keeps
one more beside them: a long job never holds the only lane while others wait.
``adaptive_concurrency = False`` keeps every lane open.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("cogworker")

WINDOW = 0.1
SATURATED = 0.9  # CPU seconds per wall second, all threads: the GIL is the limit
# below this the CPU has room for more threads: one thread whose jobs wait on Redis about half
# of the time keeps it about half busy, and a second thread would mostly add hand-offs
ROOMY = 0.45
SHORT_JOB_CPU = 0.002  # CPU seconds per job under which the hand-offs weigh on a job


class Pace:
    """The lanes of one worker process: reserved by the fetcher, kept or given up by the
    processor threads at each turnover. Thread-safe; it does no I/O."""

    def __init__(
        self,
        concurrency: int,
        *,
        adaptive: bool = True,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self._most = concurrency
        self._adaptive = adaptive
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._limit = concurrency
        self._held = 0
        self._room = threading.Condition(threading.Lock())
        self._finished = 0  # jobs finished in this window
        self._running: dict[str, float] = {}  # thread id -> when its job started
        self._window_start = clock()
        self._cpu_start = cpu_clock()

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def held(self) -> int:
        return self._held

    # -- the fetcher -------------------------------------------------------------------------

    def reserve(self, wanted: int, timeout: float) -> int:
        """Lanes for up to ``wanted`` idle threads, waiting up to ``timeout`` for one to open;
        how many were reserved (0: none opened). Release those not handed a job."""
        with self._room:
            deadline = self._clock() + timeout
            while True:
                self._review()
                room = min(wanted, self._limit - self._held)
                if room > 0:
                    self._held += room
                    return room
                left = deadline - self._clock()
                if left <= 0:
                    return 0
                self._room.wait(min(left, WINDOW))

    def release(self, count: int) -> None:
        """``count`` of the lanes reserved are free again: no job came for them."""
        if count <= 0:
            return
        with self._room:
            self._held -= count
            self._room.notify()

    # -- the processor threads -----------------------------------------------------------------

    def starting(self, tid: str) -> None:
        """Thread ``tid`` starts running a job."""
        if self._adaptive:
            with self._room:
                self._running[tid] = self._clock()

    def idle(self, tid: str) -> None:
        """Thread ``tid`` found no next job (or its lane closed): its lane is free."""
        with self._room:
            self._running.pop(tid, None)  # a job whose run ended in a bug: it isn't running
            self._held -= 1
            self._room.notify()

    def keeps_lane(self, tid: str) -> bool:
        """May thread ``tid``, which holds a lane and just finished a job (or gave it back),
        take its next one?"""
        if not self._adaptive:
            return True
        with self._room:
            self._running.pop(tid, None)
            self._finished += 1
            self._review()
            return self._held <= self._limit

    # -- the limit -----------------------------------------------------------------------------

    def _review(self) -> None:
        """Once per window: close lanes, open more, or leave the limit. Called with the lock
        held."""
        now = self._clock()
        elapsed = now - self._window_start
        if not self._adaptive or elapsed < WINDOW:
            return
        cpu = self._cpu_clock()
        busy = (cpu - self._cpu_start) / elapsed
        # the process's CPU per job finished: unlike a job's wall time, it doesn't grow with
        # the time its thread spent waiting for the GIL
        per_job = (cpu - self._cpu_start) / self._finished if self._finished else 0.0
        short = self._finished > 0 and per_job < SHORT_JOB_CPU
        limit = self._limit
        if busy >= SATURATED and short:
            limit //= 2
        elif busy < ROOMY or not short:  # room, or jobs that need their threads back
            limit *= 2
        long_running = sum(1 for since in self._running.values() if now - since >= WINDOW)
        limit = max(min(limit, self._most), min(long_running + 1, self._most))
        if limit != self._limit:
            logger.debug(
                "pace: %d of %d threads may hold a job (CPU %.0f%% busy, %d jobs, %.2f ms each)",
                limit,
                self._most,
                busy * 100,
                self._finished,
                per_job * 1000,
            )
            if limit > self._limit:
                self._room.notify_all()
            self._limit = limit
        self._window_start, self._cpu_start = now, cpu
        self._finished = 0
