"""The Manager: a pool of processor threads fed by one fetcher thread.

The fetcher thread waits until some processors are idle, takes that many jobs in one call
(blocking server-side when the queues are empty) and hands one to each.

With reliable fetch it also takes one job ahead, so that a thread finishing a job starts the
next one at once instead of waiting for a round trip (under steady load the threads would
otherwise queue behind each other for the fetcher). The job taken ahead is in this process's
in-progress list like a running one; if no thread takes it within ``AHEAD_HOLD`` it goes back
to the tail of its queue (it is next there) and taking ahead stops until a thread runs out of
work, so a process whose threads are all busy with long jobs doesn't sit on a job that another
process could run.

The Manager also keeps the in-memory records the rest of the process relies on: which raw
payloads are running (reconcile), which are inside ``perform`` (the heartbeat keeps their cron
locks alive), and settlements that failed and wait to be retried.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable

import redis

from cogworker import failure, keys, locks, redis_errors, wire
from cogworker.config import Config
from cogworker.failure import Rejection
from cogworker.fetch import Fetch, UnsupportedError, Work
from cogworker.fetch.basic import BasicFetch
from cogworker.fetch.reliable import ReliableFetch, jid_of, supported
from cogworker.wire import Payload
from cogworker.worker.bookkeeper import ACK_ATTEMPTS, Bookkeeper
from cogworker.worker.processor import Processor

logger = logging.getLogger("cogworker")

QUIET_PAUSE = 0.5
FETCH_ERROR_PAUSE = 1.0
AHEAD_HOLD = 0.25  # seconds a job taken ahead may wait for a thread before it goes back
_WAKE = "wake"  # tells the fetcher to look again (the job ahead was taken, or quiet)
Settlement = str | tuple[str, float, str]  # "ack" or (target set, score, payload)


class Manager:
    def __init__(self, config: Config, identity: str) -> None:
        # no Redis I/O here: a manager may be built before a fork or while Redis is down
        self.config = config
        self.identity = identity
        self.client = config.redis()
        self.stopping = threading.Event()
        # the fetcher's inbox: idle processors, _WAKE, or None at stop
        self.idle: queue.SimpleQueue[Processor | str | None] = queue.SimpleQueue()
        self._ahead: deque[tuple[Work, float]] = deque()  # (job taken ahead, when): 0 or 1
        self._taking_ahead = True
        self.processors = [Processor(self, index) for index in range(config.concurrency)]
        self.bookkeeper = Bookkeeper(
            self.client, identity, self.fetch, self.job_finished, self._ack_failed, self.settled
        )
        self._quiet = threading.Event()
        self._fetch: Fetch | None = None
        self._fetch_lock = threading.Lock()
        self._records_lock = threading.Lock()
        self._perform_guard = threading.Lock()  # see while_performing
        self._running: Counter[str] = Counter()
        self._performing: Counter[str] = Counter()
        self._pending: dict[str, Settlement] = {}
        self._busy = 0
        self.beats_resumed_at: float | None = None  # set when beats succeed again after failing
        self._fetcher = threading.Thread(target=self._dispatch, name="fetcher", daemon=True)

    # -- fetch strategy ----------------------------------------------------------------------

    def fetch(self) -> Fetch:
        """The fetch strategy, decided on first use (a Redis < 6.2 gets basic fetch)."""
        current = self._fetch
        if current is not None:
            return current
        with self._fetch_lock:
            if self._fetch is None:
                self._fetch = self._build_fetch()
            return self._fetch

    def _build_fetch(self) -> Fetch:
        if self.config.fetch == "reliable":
            if supported(self.client):  # a connection error propagates: decide later
                return ReliableFetch(self.config, self.identity, self.stopping)
            logger.warning(
                "config.fetch = reliable needs Redis >= 6.2; falling back to basic "
                "(a job is lost if its process dies mid-job)"
            )
        return BasicFetch(self.config, self.identity, self.stopping)

    def fall_back_to_basic(self, error: BaseException) -> None:
        with self._fetch_lock:
            if self._fetch is not None and self._fetch.mode == "basic":
                return
            logger.warning(
                "config.fetch = reliable isn't supported by this Redis (%s); falling back to "
                "basic (a job is lost if its process dies mid-job)",
                str(error)[:120],
            )
            old, self._fetch = self._fetch, BasicFetch(self.config, self.identity, self.stopping)
        if old is not None:
            old.close()

    @property
    def fetch_mode(self) -> str | None:
        return self._fetch.mode if self._fetch is not None else None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.bookkeeper.start()
        for processor in self.processors:
            processor.start()
        self._fetcher.start()

    @property
    def quiet(self) -> bool:
        return self._quiet.is_set()

    def set_quiet(self, quiet: bool) -> None:
        """Stop (or resume) taking jobs; running ones finish. Stopping can't be undone."""
        if quiet:
            self._quiet.set()
            self.idle.put(_WAKE)  # to hand back the job taken ahead
            if self._fetch is not None:
                self._fetch.wake()
        elif not self.stopping.is_set():
            self._quiet.clear()

    def stop(self, timeout: float | None = None) -> None:
        """Stop fetching, wait up to ``timeout`` for running jobs, hand back the rest."""
        timeout = self.config.shutdown_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        self._quiet.set()
        self.stopping.set()
        self.idle.put(None)
        self._join_fetcher()
        for processor in self.processors:
            processor.mailbox.put(None)
        for processor in self.processors:
            if processor.thread.is_alive():
                processor.thread.join(max(deadline - time.monotonic(), 0))
        self.bookkeeper.flush()
        # jobs still running are handed back; their runs here must not free the requeued
        # copies' locks if they finish before the process exits
        locks.handed_back.update(jid_of(raw) for raw in self.performing())
        try:
            self._requeue_unfinished()
        except Exception as error:
            logger.error("Requeueing unfinished jobs failed: %s", error)
        self.bookkeeper.stop()
        if self._fetch is not None:
            self._fetch.close()

    def _join_fetcher(self) -> None:
        if not self._fetcher.is_alive():
            return
        # the fetcher may be about to block when the first wake-up is sent: keep waking it
        give_up = time.monotonic() + 30
        while self._fetcher.is_alive() and time.monotonic() < give_up:
            if self._fetch is not None:
                self._fetch.wake()
            self._fetcher.join(0.05)

    def _requeue_unfinished(self) -> None:
        fetch = self._fetch
        if fetch is None:
            return
        keep: list[str] = []
        if fetch.mode == "reliable":
            from cogworker.worker import recovery

            recovery.settle_pending(self)
            keep = recovery.park_unsettled(self)
        with self._records_lock:
            finished = [raw for raw, how in self._pending.items() if how == "ack"]
        count = fetch.requeue_in_progress(self.identity, finished=finished, keep=keep)
        for raw in finished:
            self.settled(raw)
        if count > 0:
            logger.warning("requeued %d job(s) unfinished at shutdown", count)

    # -- the fetcher thread ------------------------------------------------------------------

    def _dispatch(self) -> None:
        idle: list[Processor] = []
        while not self.stopping.is_set():
            if not self._collect(idle):
                break
            if self._quiet.is_set():
                self._return_ahead()
                self.stopping.wait(QUIET_PAUSE)
                continue
            self._hand_out(idle)
        self._return_ahead()  # stopping: it never started, it isn't "unfinished"

    def _collect(self, idle: list[Processor]) -> bool:
        """Wait until there is something to do: idle processors, or room to take a job
        ahead; meanwhile return a job ahead that waited too long. False at stop."""
        if not idle and not self._wants_ahead():
            try:
                message = self.idle.get(timeout=self._hold_left())
            except queue.Empty:
                self._return_ahead(stale_only=True)
                return True
            if message is None:
                return False
            if isinstance(message, Processor):
                idle.append(message)
        while True:
            try:
                message = self.idle.get_nowait()
            except queue.Empty:
                break
            if isinstance(message, Processor):
                idle.append(message)
        if idle:
            self._taking_ahead = True  # a thread ran out of work: taking ahead pays
        return True

    def _hand_out(self, idle: list[Processor]) -> None:
        while idle:
            work = self._pop_ahead()
            if work is None:
                break
            idle.pop().mailbox.put(work)
        ahead = 1 if self._wants_ahead() else 0
        if not idle and not ahead:
            return
        works = self._retrieve(len(idle) + ahead, wait=bool(idle))
        if self._quiet.is_set():
            for work in works:  # quieted or stopping while we waited: don't start them
                self.give_back(work)
            return
        if ahead and len(works) <= len(idle):
            self._taking_ahead = False  # the queues ran dry: nothing to take ahead
        for work in works:
            self.job_taken(work.raw)
            if idle:
                idle.pop().mailbox.put(work)
            else:
                self._ahead.append((work, time.monotonic()))

    def _pop_ahead(self) -> Work | None:
        try:
            work, _ = self._ahead.popleft()  # atomic: a processor may be taking it too
        except IndexError:
            return None
        return work

    def _wants_ahead(self) -> bool:
        return (
            self._taking_ahead
            and not self._ahead
            and self._fetch is not None
            and self._fetch.mode == "reliable"
        )

    def _hold_left(self) -> float | None:
        """How long the fetcher may wait for a processor before the job ahead is stale."""
        try:
            _, taken_at = self._ahead[0]
        except IndexError:
            return None
        return max(taken_at + AHEAD_HOLD - time.monotonic(), 0.0)

    def next_ahead(self) -> Work | None:
        """For a processor that finished a job: the job taken ahead, if there is one."""
        if self._quiet.is_set():
            return None
        work = self._pop_ahead()
        if work is not None:
            self.idle.put(_WAKE)
        return work

    def _return_ahead(self, *, stale_only: bool = False) -> None:
        """Give back the job taken ahead (with ``stale_only``, only once it waited
        ``AHEAD_HOLD``) and stop taking ahead until a thread runs out of work."""
        if stale_only and self._hold_left() != 0.0:
            return
        work = self._pop_ahead()
        if work is None:
            return
        self._taking_ahead = False
        self.give_back(work)
        self.job_finished(work.raw)

    def _retrieve(self, wanted: int, *, wait: bool = True) -> list[Work]:
        try:
            fetch = self.fetch()
            if isinstance(fetch, ReliableFetch):
                works = fetch.retrieve(wanted, wait=wait)
            else:
                works = fetch.retrieve(wanted)
        except UnsupportedError as error:
            self.fall_back_to_basic(error)
            return []
        except Exception as error:
            redis_errors.reporter.report("Fetch", error)
            self.stopping.wait(FETCH_ERROR_PAUSE)
            return []
        redis_errors.reporter.recovered("Fetch")
        return works

    def give_back(self, work: Work) -> None:
        """Put a job that did not run back on its queue. A payload that is not a job goes to
        dead instead: handed back, it would only come back."""
        parsed = failure.parse_job(work.raw)
        if isinstance(parsed, Rejection):
            from cogworker.worker import recovery

            recovery.bury_unparseable(self, work, parsed)
            return
        try:
            self.fetch().give_back(work)
        except redis.RedisError as error:
            logger.error(
                "couldn't hand back jid=%s (left in progress; a later reconcile requeues it): %s",
                jid_of(work.raw),
                error,
            )

    # -- in-memory records -------------------------------------------------------------------

    def change_busy(self, delta: int) -> None:
        with self._records_lock:
            self._busy += delta

    @property
    def busy(self) -> int:
        return self._busy

    def job_taken(self, raw: str) -> None:
        """Fetched for this process: listed as running until it is settled or given back."""
        with self._records_lock:
            self._running[raw] += 1

    def job_starting(self, raw: str) -> None:
        """A processor is about to run it: the heartbeat keeps its cron lock alive."""
        with self._records_lock:
            self._performing[raw] += 1

    def job_performed(self, raw: str) -> None:
        """``perform`` returned: the heartbeat stops keeping the job's cron lock alive."""
        with self._perform_guard, self._records_lock:
            self._decrement(self._performing, raw)

    def while_performing(self, raw: str, action: Callable[[], object]) -> None:
        """Run ``action`` only if ``raw`` is still inside ``perform``, which can't end meanwhile
        (so the heartbeat never re-takes a cron lock its job has just released)."""
        with self._perform_guard:
            if raw in self._performing:
                action()

    def job_finished(self, raw: str) -> None:
        with self._records_lock:
            self._decrement(self._running, raw)

    @staticmethod
    def _decrement(counter: Counter[str], raw: str) -> None:
        if counter[raw] <= 1:
            counter.pop(raw, None)
        else:
            counter[raw] -= 1

    def running(self) -> set[str]:
        with self._records_lock:
            return set(self._running)

    def performing(self) -> set[str]:
        with self._records_lock:
            return set(self._performing)

    def settle_later(self, raw: str, how: Settlement) -> None:
        with self._records_lock:
            self._pending[raw] = how

    def settled(self, raw: str) -> None:
        with self._records_lock:
            self._pending.pop(raw, None)

    def is_pending(self, raw: str) -> bool:
        return raw in self._pending

    def pending(self) -> dict[str, Settlement]:
        with self._records_lock:
            return dict(self._pending)

    def remember_for_dead(self, raw: str, error: BaseException) -> None:
        """Remember the dead entry reconcile will file for a job whose interrupt failed."""
        jid = jid_of(raw)
        encoded = failure.last_resort_dead_entry(raw, error, None if jid == "?" else jid)
        self.settle_later(raw, (keys.DEAD, wire.now(), encoded))

    # -- settling helpers used by processors -------------------------------------------------

    def acknowledge_now(self, work: Work) -> None:
        """Acknowledge synchronously (before death hooks run), retrying like the bookkeeper."""
        for attempt in range(1, ACK_ATTEMPTS + 1):
            try:
                self.fetch().acknowledge([work])
                return
            except redis.RedisError as error:
                if attempt == ACK_ATTEMPTS:
                    logger.error(
                        "couldn't acknowledge finished job jid=%s after %d attempts (will "
                        "retry; it may run again if this process stops first): %s",
                        jid_of(work.raw),
                        ACK_ATTEMPTS,
                        error,
                    )
                    self.settle_later(work.raw, "ack")
                    return
                time.sleep(0.1 * attempt)

    def _ack_failed(self, raw: str) -> None:
        self.settle_later(raw, "ack")
        self.job_finished(raw)

    def run_death_hooks(self, entry: Payload, error: BaseException) -> None:
        failure.run_death_hooks(self.config.death_handlers, entry, error)
