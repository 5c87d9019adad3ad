"""Filing a failed run: into retry (with its backoff) or dead, in place of the job as fetched,
or, when a hook says so, nowhere (discarded); the attempts log; the one log line of the failure.

When that write fails the run is **interrupted**: the job as fetched (a middleware's changes may
be what failed to encode) is filed with a fixed delay instead, into retry, or into dead once it
is out of retries or was interrupted more than ``MAX_INTERRUPTS`` times. When even that fails the
ledger keeps the filing for the next reconcile. Either way a job that ran is never put back on
its queue, and each write is by the job's exact entry, so a lost reply retried files nothing
twice.
"""

from __future__ import annotations

import logging

import redis

from cogworker import failure, keys, locks, logs, redis_errors, registry, status, wire
from cogworker.config import Config
from cogworker.failure import Decision, Rejection
from cogworker.fetch import Filing, Work
from cogworker.fetch.strategy import FetchStrategy
from cogworker.job import Job
from cogworker.wire import Payload
from cogworker.worker.ledger import Ledger
from cogworker.worker.outcome import Next, Outcome, summary

logger = logging.getLogger("cogworker")

MAX_INTERRUPTS = 3
INTERRUPT_DELAY = 30
ATTEMPTS_KEPT = 25
ATTEMPTS_TTL = 30 * 86400
_ENCODING_ERRORS = (ValueError, TypeError, RecursionError)


class Filer:
    def __init__(
        self, config: Config, client: redis.Redis, strategy: FetchStrategy, ledger: Ledger
    ) -> None:
        self._config = config
        self._client = client
        self._strategy = strategy
        self._ledger = ledger

    # -- a failed run: retry or dead ---------------------------------------------------------

    def file_failure(self, work: Work, outcome: Outcome) -> Next:
        """File the failed run into retry or dead (or discard it) and log it; INTERRUPT when
        the write failed (``interrupt`` then logs what happened)."""
        if outcome.job is None or outcome.error is None:
            raise ValueError("only a run that failed has a failure to file")
        fate = self.route_failure(work, outcome.job, outcome.error, outcome)
        if fate is None:
            return Next.INTERRUPT
        self.log_failure(work, outcome, logging.WARNING, fate)
        return Next.ACKNOWLEDGE

    def route_failure(
        self, work: Work, job: Payload, error: BaseException, outcome: Outcome
    ) -> str | None:
        """Write the failure's fields into ``job`` (the run's copy of ``work``) and file it in
        place of ``work``. Returns what that led to, for the log line, or None if the write
        failed (``outcome.filing_error`` says why)."""
        decided_late = outcome.decision is None
        decision = outcome.decision = outcome.decision or self._decide_late(job, error)
        job.pop("failure_outcome", None)
        count = failure.retry_count(job) + 1
        budget = wire.max_retries(job)
        now = wire.now()
        job["error_class"] = failure.error_class_name(error)
        job["error_message"] = failure.error_message(error)
        job.setdefault("failed_at", now)
        job["retry_count"] = count
        delay: float | None = None
        if decision.outcome != "discard":
            delay = decision.delay if decision.delay is not None else failure.default_backoff(count)
            filed = self._file(work, job, error, decision, (now, delay), outcome)
            if filed is None:
                return None
            if not filed:
                return "not filed: no longer held here (another process took it over)"
        outcome.filed = True  # from here on (discard included) the job must only be acked
        if decision.cut_short or (decided_late and decision.outcome != "retry"):
            locks.release(self._client, job)
        if decision.cut_short and decided_late:  # the status middleware saw a retry coming
            status.mark_failed(self._config, job, error)
        self.record_attempt(job, count, decision.attempt_outcome)
        return failure.fate_text(decision, count, budget, delay)

    def _decide_late(self, job: Payload, error: BaseException) -> Decision:
        """The fate of a failure raised outside ``perform`` (a middleware's, say)."""
        try:
            return failure.decide(_job_class(job), job, error)
        except Exception:
            logger.error("couldn't decide the fate of jid=%s", job.get("jid"))
            return Decision("dead" if failure.is_terminal(job) else "retry")

    def _file(
        self,
        work: Work,
        job: Payload,
        error: BaseException,
        decision: Decision,
        timing: tuple[float, float],
        outcome: Outcome,
    ) -> bool | None:
        """File ``job`` into retry or dead in place of ``work``, by the exact entry fetched: a
        reply lost after the write can't lead to a second record, since the interrupt or the
        reconcile that follows finds the entry settled. True if filed, False if ``work`` was no
        longer held (nothing written), None if the write failed."""
        now, delay = timing
        retry = decision.outcome == "retry"
        target, score = (keys.RETRY, now + delay) if retry else (keys.DEAD, now)
        try:
            filing = Filing(target, score, wire.dumps(job))
            written = self._strategy.current().file_instead(work, filing)
        except (*_ENCODING_ERRORS, redis.RedisError) as write_error:
            outcome.filing_error = write_error
            return None
        outcome.filed = True
        if not written:
            return False
        if retry:
            locks.extend_for_retry(self._config, self._client, job, delay)
        else:
            outcome.death = (wire.copy_payload(job), error)  # as filed, whatever happens next
        return True

    def record_attempt(self, job: Payload, attempt: int, outcome: str) -> None:
        jid = job.get("jid")
        if not isinstance(jid, str):
            return
        entry = wire.dumps(
            {
                "attempt": attempt,
                "failed_at": wire.now(),
                "outcome": outcome,
                "error_class": job.get("error_class"),
                "error_message": job.get("error_message"),
            }
        )
        key = keys.job_attempts(jid)
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.rpush(key, entry)
            pipe.ltrim(key, -ATTEMPTS_KEPT, -1)
            pipe.expire(key, ATTEMPTS_TTL)
            pipe.execute()
        except redis.RedisError as error:
            redis_errors.reporter.report("Attempts log", error)

    def log_failure(self, work: Work, outcome: Outcome, level: int, fate: str) -> None:
        """The one line of a failed run: the error, what it led to, then its traceback."""
        error = outcome.error or RuntimeError("unknown failure")
        job = outcome.job or {}
        logger.log(
            level,
            "fail: %s jid=%s: %s: %s; %s",
            job.get("class"),
            job.get("jid") or work.jid,
            failure.error_class_name(error),
            failure.error_message(error),
            fate,
            exc_info=error,
            extra=logs.USER_TRACEBACK,
        )

    # -- filing the failure failed: interrupt ------------------------------------------------

    def interrupt(self, work: Work, outcome: Outcome) -> None:
        """Recording the failure failed: file the job as fetched with a fixed delay."""
        error = outcome.error or RuntimeError("unknown failure")
        why = f"couldn't file it ({summary(outcome.filing_error)})"
        later = "into dead"
        try:
            filing, delay, payload, fate = self._interruption(work, outcome, error)
            later = "into retry" if filing.target == keys.RETRY else later
            try:
                written = self._strategy.current().file_instead(work, filing)
            except redis.RedisError:
                self._ledger.settle_later(work, filing)
                raise
            if filing.target == keys.RETRY:
                locks.extend_for_retry(self._config, self._client, payload, delay)
            else:
                locks.release(self._client, payload)
                if written:
                    outcome.death = (payload, error)
            self.log_failure(work, outcome, logging.ERROR, f"{why}: {fate}")
        except Exception as interrupt_error:
            if not self._ledger.is_pending(work):
                self.remember_for_dead(work, error)
                later = "into dead"
            self.log_failure(
                work,
                outcome,
                logging.ERROR,
                f"{why} nor interrupt it ({summary(interrupt_error)}): left in progress, "
                f"filed {later} by the next reconcile (or handed over at shutdown)",
            )

    def _interruption(
        self, work: Work, outcome: Outcome, error: BaseException
    ) -> tuple[Filing, float, Payload, str]:
        """The filing that stands for the run: the job as fetched (middleware changes may be
        what failed to encode), its delay, the payload filed and what it means."""
        if isinstance(work.job, Rejection):
            raise TypeError(f"not a job: {work.job.message}")
        payload: Payload = wire.copy_payload(work.job)
        count = int(payload.get("interrupted_count") or 0) + 1
        attempt = failure.retry_count(payload) + 1
        now = wire.now()
        payload.update(
            {
                "interrupted_count": count,
                "retry_count": attempt,
                "error_class": failure.error_class_name(error),
                "error_message": failure.error_message(error),
                "failed_at": now,
            }
        )
        budget = wire.max_retries(payload)
        out_of_retries = attempt > budget or bool(outcome.decision and outcome.decision.cut_short)
        if out_of_retries or count > MAX_INTERRUPTS:
            fate = (
                "dead instead (no retries left)"
                if out_of_retries
                else f"dead instead (interrupted more than {MAX_INTERRUPTS} times)"
            )
            return Filing(keys.DEAD, now, wire.dumps(payload)), 0, payload, fate
        delay = INTERRUPT_DELAY * count
        fate = (
            f"retry {attempt}/{budget} in {delay}s instead "
            f"(interruption {count} of at most {MAX_INTERRUPTS})"
        )
        return Filing(keys.RETRY, now + delay, wire.dumps(payload)), delay, payload, fate

    def remember_for_dead(self, work: Work, error: BaseException) -> None:
        """Remember the dead entry reconcile will file for a job whose interrupt failed."""
        entry = last_resort_entry(work, error)
        self._ledger.settle_later(work, Filing(keys.DEAD, wire.now(), entry))


def last_resort_entry(work: Work, error: BaseException) -> str:
    """The dead entry, encoded, filed later for a job whose failure couldn't be filed: the
    job as fetched with the error's fields, or, when that can't be encoded (it may be what
    failed) or it is not a job, the unparseable wrapper of its payload with them, under the
    jid read from it."""
    error_class, message = failure.error_class_name(error), failure.error_message(error)
    fields = {"error_class": error_class, "error_message": message, "failed_at": wire.now()}
    if not isinstance(work.job, Rejection):
        try:
            return wire.dumps({**work.job, **fields})
        except _ENCODING_ERRORS:
            pass
    jid = None if work.jid == "?" else work.jid
    return wire.dumps(failure.unparseable_job(work.raw, None, Rejection(error_class, message, jid)))


def _job_class(job: Payload) -> type[Job] | None:
    try:
        return registry.resolve(str(job.get("class")))
    except registry.UnknownJobError:
        return None
