"""Settling finished jobs in batches: one round trip for what many jobs leave to send.

With reliable fetch each processor thread acknowledges and counts its own jobs in its turnover
(``settle.py``); what is left comes here: the workers-hash registration of a job from the
fetcher, whatever a failed turnover carried, and with basic fetch every job's deregistration and
counts. This thread sends whatever has accumulated as one pipeline as soon as the previous one
returned, so under load many jobs share a round trip and when idle a write leaves within a
millisecond.

Acknowledging is the one write that matters: it is retried 3 times (0.1 s, 0.2 s apart), then
every half second until it succeeds (the job stays listed as in progress meanwhile and is never
run again by this process; at shutdown it is dropped from the list, not requeued). A job finished
but not yet acknowledged when its process is killed is recovered and runs again.
Registrations and counters are best-effort.

``queue_counts`` counts jobs processed and failed for the batches; the turnover script does the
same writes for its thread's jobs, and burials outside a processor count through
``count_burial``. Each run's job class and execution time are summed here and ride in the same
pipeline as one script call (``metrics.by_class``) at most every ``METRICS_EVERY`` seconds and
whenever the minute turns, so a busy worker adds one call a second, not one a job; an idle one
sends what is left after that second. Also best-effort.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from cogworker import keys, redis_errors
from cogworker.fetch import Work
from cogworker.fetch.strategy import FetchStrategy
from cogworker.metrics.by_class import Tallies
from cogworker.scripts import Batch
from cogworker.worker.ledger import ACK, Ledger

if TYPE_CHECKING:
    from redis.client import Pipeline

logger = logging.getLogger("cogworker")

ACK_ATTEMPTS = 3
UNACKED_RETRY = 0.5
METRICS_EVERY = 1.0  # seconds between sends of the per-class metrics, at most


def queue_counts(pipe: Pipeline, *, processed: int = 0, failed: int = 0) -> None:
    """Count jobs processed and failed: the totals and this hour's throughput bucket."""
    if not processed and not failed:
        return
    bucket = keys.throughput(int(time.time()) // 3600)
    if processed:
        pipe.incrby(keys.STATS_PROCESSED, processed)
        pipe.hincrby(bucket, "processed", processed)
    if failed:
        pipe.incrby(keys.STATS_FAILED, failed)
        pipe.hincrby(bucket, "failed", failed)
    pipe.expire(bucket, keys.THROUGHPUT_TTL)


def count_burial(client: redis.Redis, jid: str | None) -> None:
    """Count a job filed into dead outside a processor as failed, and forget the orphan
    counter of ``jid``: one round trip, each write best-effort on its own."""
    pipe = client.pipeline(transaction=False)
    queue_counts(pipe, failed=1)
    if jid is not None:
        pipe.delete(keys.orphanings(jid))
    try:
        replies = pipe.execute(raise_on_error=False)
    except redis.RedisError as error:
        redis_errors.reporter.report("Burial bookkeeping", error)
        return
    for reply in replies:
        if isinstance(reply, Exception):
            redis_errors.reporter.report("Burial bookkeeping", reply)


@dataclass
class _Batch:
    acks: list[tuple[Work, int]] = field(default_factory=list)  # (work, attempts so far)
    workers: dict[str, str | None] = field(default_factory=dict)  # tid -> entry, None = HDEL
    processed: int = 0
    failed: int = 0
    classes: Tallies = field(default_factory=Tallies)  # the runs by job class, for metrics
    classes_since: float = 0.0  # when the first of them finished (epoch): their minute

    def __bool__(self) -> bool:
        return bool(self.acks or self.workers or self.processed or self.failed or self.classes)


class Bookkeeper:
    def __init__(
        self, client: redis.Redis, identity: str, strategy: FetchStrategy, ledger: Ledger
    ) -> None:
        self._client = client
        self._workers_key = keys.workers(identity)
        self._strategy = strategy
        self._ledger = ledger
        self._unacked: dict[str, Work] = {}  # failed acks, retried every UNACKED_RETRY
        # raw -> (processed, failed): counted only if its ack still finds it listed
        self._counts_if_listed: dict[str, tuple[int, int]] = {}
        self._batch = _Batch()
        self._metrics = Tallies()  # runs not sent yet, since _metrics_since
        self._metrics_since = 0.0
        self._metrics_now = False  # flush asked for them
        self._cond = threading.Condition()
        self._stopping = False
        self._in_flight = False
        self._sending_workers: set[str] = set()  # the threads whose entries are being sent
        self._thread = threading.Thread(target=self._run, name="bookkeeper", daemon=True)

    # -- called by processor threads ---------------------------------------------------------

    def register(self, tid: str, entry: str) -> None:
        with self._cond:
            self._batch.workers[tid] = entry
            self._cond.notify()

    def finished(
        self,
        tid: str,
        *,
        processed: int = 0,
        failed: int = 0,
        job_class: str | None = None,
        seconds: float = 0.0,
    ) -> None:
        """A thread's job is done: deregister it and count it (and, when it ran, its
        ``job_class`` and execution time). Sent with the next batch (the acknowledgement, or
        ``wake``), so one job wakes this thread only once."""
        with self._cond:
            self._batch.workers[tid] = None
            self._batch.processed += processed
            self._batch.failed += failed
            if job_class is not None:
                self._add_run(job_class, seconds, failed > 0)

    def record_run(self, job_class: str, seconds: float, *, failed: bool) -> None:
        """A run's class and execution time, for the per-class metrics (sent within a second;
        only the first run of that second wakes this thread, to set its timer)."""
        with self._cond:
            self._add_run(job_class, seconds, failed)

    def _add_run(self, job_class: str, seconds: float, failed: bool) -> None:
        if not self._metrics:
            self._metrics_since = time.time()
            self._cond.notify()  # the thread sets its timer from the first run waiting
        self._metrics.add_run(job_class, seconds, failed)

    def withdraw(self, tid: str, timeout: float = 5.0) -> None:
        """Thread ``tid`` writes its entry itself from now on (its turnover): drop its
        registration if it wasn't sent yet, or wait until it was, so that it can't land
        after (and overwrite) what the thread writes."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._batch.workers.pop(tid, None)
            while tid in self._sending_workers and time.monotonic() < deadline:
                self._cond.wait(0.05)

    def deregister(self, tid: str) -> None:
        """Thread ``tid`` runs nothing now: remove its workers-hash entry soon."""
        with self._cond:
            self._batch.workers[tid] = None
            self._cond.notify()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def acknowledge(self, work: Work, counts: tuple[int, int] | None = None) -> None:
        """Send the acknowledgement soon; the ledger hears when it is done (or failed).
        ``counts`` (processed, failed) are counted only if the ack finds the job still listed:
        a turnover whose reply was lost took it off and counted it already."""
        with self._cond:
            if counts is not None:
                self._counts_if_listed[work.raw] = counts
            self._batch.acks.append((work, 0))
            self._cond.notify()

    def count(self, *, processed: int = 0, failed: int = 0) -> None:
        with self._cond:
            self._batch.processed += processed
            self._batch.failed += failed
            self._cond.notify()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Send everything still pending, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until everything handed over so far has been sent (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._metrics_now = bool(self._metrics)
            while (self._batch or self._in_flight or self._metrics) and time.monotonic() < deadline:
                self._cond.notify()
                self._cond.wait(0.01)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._wait_for_work()
                if not self._batch and self._stopping and not self._metrics:
                    return
                batch, self._batch = self._batch, _Batch()
                if self._metrics_due():
                    batch.classes, batch.classes_since = self._metrics, self._metrics_since
                    self._metrics, self._metrics_now = Tallies(), False
                self._in_flight = True
                self._sending_workers = set(batch.workers)
            try:
                self._send(batch)
            except Exception as error:
                redis_errors.reporter.report("Bookkeeping", error)
            finally:
                with self._cond:
                    self._in_flight = False
                    self._sending_workers = set()
                    self._cond.notify_all()

    def _wait_for_work(self) -> None:
        """Wait (holding the lock) until there is a batch, metrics to send, or a stop."""
        retry_at = time.monotonic() + UNACKED_RETRY
        while not self._batch and not self._stopping and not self._metrics_due():
            waits = [retry_at - time.monotonic()] if self._unacked else []
            if self._metrics:
                waits.append(self._metrics_since + METRICS_EVERY - time.time())
            self._cond.wait(max(0.0, min(waits)) if waits else None)
            # acks that failed are tried again every half second, so a job whose process is
            # killed soon after Redis came back isn't run twice
            if self._unacked and time.monotonic() >= retry_at and not self._batch:
                self._batch.acks.extend((work, ACK_ATTEMPTS - 1) for work in self._unacked.values())

    def _metrics_due(self) -> bool:
        if not self._metrics:
            return False
        if self._stopping or self._metrics_now:
            return True
        now = time.time()
        return (
            now - self._metrics_since >= METRICS_EVERY
            or int(now) // 60 != int(self._metrics_since) // 60
        )

    # -- one round trip ----------------------------------------------------------------------

    def _send(self, batch: _Batch) -> None:
        commands = Batch(self._client)
        acks = [work for work, _ in batch.acks]
        ack_at = self._strategy.current().queue_acknowledge(commands, acks) if acks else None
        self._queue_workers(commands.pipe, batch.workers)
        queue_counts(commands.pipe, processed=batch.processed, failed=batch.failed)
        batch.classes.queue(commands, batch.classes_since)
        try:
            replies = commands.execute()
        except redis.RedisError as error:
            redis_errors.reporter.report("Bookkeeping", error)
            self._retry_acks(batch.acks, error)
            return
        ack_reply = replies[ack_at] if ack_at is not None else None
        errors = [
            reply
            for at, reply in enumerate(replies)
            if at != ack_at and isinstance(reply, Exception)
        ]
        for ignored in errors:
            redis_errors.reporter.report("Bookkeeping (ignored)", ignored)
        if isinstance(ack_reply, Exception):
            self._retry_acks(batch.acks, ack_reply)
            return
        if not errors:
            redis_errors.reporter.recovered("Bookkeeping")
        self._count_if_listed(acks, ack_reply)
        for work in acks:  # with basic fetch BRPOP already removed them
            if self._unacked.pop(work.raw, None) is not None:
                self._ledger.settled(work)  # a late ack: finished was reported already
            else:
                self._ledger.finished(work)

    def _count_if_listed(self, acks: list[Work], removed: Any) -> None:
        """Count, with the next batch, the jobs whose ack removed them (see ``acknowledge``)."""
        if not self._counts_if_listed:
            return
        flags = removed if isinstance(removed, list) else [1] * len(acks)
        with self._cond:
            for work, flag in zip(acks, flags, strict=False):
                counts = self._counts_if_listed.pop(work.raw, None)
                if counts is not None and flag:
                    self._batch.processed += counts[0]
                    self._batch.failed += counts[1]
                    self._cond.notify()

    def _queue_workers(self, pipe: Pipeline, workers: dict[str, str | None]) -> None:
        entries: dict[Any, Any] = {tid: entry for tid, entry in workers.items() if entry}
        gone = [tid for tid, entry in workers.items() if entry is None]
        if gone:
            pipe.hdel(self._workers_key, *gone)
        if entries:
            pipe.hset(self._workers_key, mapping=entries)

    def _retry_acks(self, acks: list[tuple[Work, int]], error: BaseException) -> None:
        again = []
        for work, attempts in acks:
            if attempts + 1 < ACK_ATTEMPTS:
                again.append((work, attempts + 1))
            elif work.raw in self._unacked:  # a later retry of one already reported
                redis_errors.reporter.report("Acknowledging", error)
            else:
                logger.error(
                    "couldn't acknowledge finished job jid=%s after %d attempts (will retry; it "
                    "may run again if this process stops first): %s",
                    work.jid,
                    ACK_ATTEMPTS,
                    error,
                )
                self._unacked[work.raw] = work
                # it ran: count it now (should the lost turnover have counted it, twice)
                processed, failed = self._counts_if_listed.pop(work.raw, (0, 0))
                self.count(processed=processed, failed=failed)
                self._ledger.settle_later(work, ACK)
                self._ledger.finished(work)
        if again:
            time.sleep(0.1 * again[0][1])
            with self._cond:
                self._batch.acks[:0] = again
