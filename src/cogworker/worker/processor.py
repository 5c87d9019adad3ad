"""A processor thread: receives a fetched job, runs it, settles it. Never dies.

The rule it keeps: a job is never run again because of a failure that happened after it ran.
If bookkeeping fails *before* ``perform`` the job goes back to its queue; once it has run, it
is acknowledged, or filed into retry / dead, or (when even that fails) interrupted: filed with
a fixed delay, or remembered and settled later. Never put back on its queue.

A payload that is not a job (not valid UTF-8, not JSON, nested too deeply to parse, not an
object, no string ``class``, no non-empty ``queue``, no string ``jid``, ``args`` not a list)
never runs and never goes back on a queue, where it would only come back: it is filed into
dead at once. A failure is logged once, saying what it led to, with the job's traceback.
"""

from __future__ import annotations

import enum
import logging
import queue
import secrets
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import redis

from cogworker import execute, failure, keys, locks, logs, redis_errors, status, wire
from cogworker.failure import Decision, Rejection
from cogworker.fetch import Work
from cogworker.fetch.reliable import jid_of
from cogworker.job import Job
from cogworker.wire import Payload
from cogworker.worker import recovery

if TYPE_CHECKING:
    import asyncio

    from cogworker.worker.manager import Manager

logger = logging.getLogger("cogworker")

ERROR_BACKOFF = 1.0
MAX_INTERRUPTS = 3
INTERRUPT_DELAY = 30
ATTEMPTS_KEPT = 25
ATTEMPTS_TTL = 30 * 86400


class Disposition(enum.Enum):
    """What settling does with a job once processing it ended."""

    ACK = "acknowledge"  # it ran, and any failure is filed (or discarded)
    GIVE_BACK = "give back"  # it never ran: back to its queue
    INTERRUPT = "interrupt"  # it ran and failed, and filing the failure failed
    DONE = "done"  # nothing is left to do (a payload that is not a job went to dead)


_WHAT_NEXT = {
    Disposition.ACK: "it is acknowledged",
    Disposition.GIVE_BACK: "it goes back to its queue",
    Disposition.INTERRUPT: "its failure is filed with a fixed delay",
    Disposition.DONE: "nothing more is done with it",
}


@dataclass
class _Run:
    """What happened to the job being processed (read by the settling step)."""

    job: Payload | None = None
    jid: str | None = None  # as parsed, before any middleware could change the job
    started: bool = False  # listed as performing (the heartbeat keeps its cron lock alive)
    ran: Disposition | None = None  # ACK or INTERRUPT once perform has returned or raised
    performed: bool = False
    filed: bool = False  # the failure is written (or discarded): only an ack is left to do
    error: BaseException | None = None
    filing_error: BaseException | None = None  # why the failure couldn't be filed normally
    decision: Decision | None = None
    death: tuple[Payload, BaseException] | None = None


def _summary(error: BaseException | None) -> str:
    if error is None:
        return "unknown error"
    return f"{type(error).__name__}: {failure.error_message(error)}"


class Processor:
    def __init__(self, manager: Manager, index: int) -> None:
        self.manager = manager
        self.tid = secrets.token_hex(6)
        self.mailbox: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self.busy = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, name=f"processor-{index}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        try:
            while True:
                work = self.manager.next_ahead()
                if work is None:
                    self.manager.idle.put(self)
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
        manager = self.manager
        if manager.stopping.is_set():
            manager.give_back(work)  # never start a job once shutdown began
            manager.job_finished(work.raw)
            return
        run = _Run()
        self.busy = True
        manager.change_busy(1)
        disposition = Disposition.GIVE_BACK
        try:
            disposition = self._execute(work, run)
        except BaseException as error:
            disposition = Disposition.ACK if run.filed else (run.ran or Disposition.GIVE_BACK)
            if disposition is Disposition.INTERRUPT:
                run.filing_error = run.filing_error or error
            logger.error(
                "processing jid=%s failed unexpectedly (%s); %s",
                jid_of(work.raw),
                _summary(error),
                _WHAT_NEXT[disposition],
                exc_info=error,
            )
        finally:
            self.busy = False
            manager.change_busy(-1)
            if run.started and not run.performed:
                manager.job_performed(work.raw)
        self._settle(work, run, disposition)

    def _execute(self, work: Work, run: _Run) -> Disposition:
        parsed = failure.parse_job(work.raw)
        if isinstance(parsed, Rejection):
            recovery.bury_unparseable(self.manager, work, parsed)
            return Disposition.DONE
        job = run.job = parsed
        run.jid = job["jid"]
        self.manager.job_starting(work.raw)
        run.started = True
        bookkeeper = self.manager.bookkeeper
        bookkeeper.register(self.tid, self._workers_entry(work))
        counts = {"processed": 0, "failed": 0}
        try:
            logger.info("start: %s jid=%s", job["class"], job["jid"])
            started = time.monotonic()
            error = self._run_job(job, work.queue, run, work.raw)
            run.ran = Disposition.INTERRUPT if error is not None else Disposition.ACK
            run.error = error
            if error is None:
                counts["processed"] = 1
                logger.info(
                    "done: %s jid=%s in %.3fs", job["class"], job["jid"], time.monotonic() - started
                )
                return Disposition.ACK
            counts["failed"] = 1
            fate = self._route_failure(job, error, run)
            if fate is None:
                return Disposition.INTERRUPT  # logged once the interrupt decided what happens
            self._log_failure(work, run, logging.WARNING, fate)
            return Disposition.ACK
        finally:
            bookkeeper.finished(self.tid, **counts)

    def _log_failure(self, work: Work, run: _Run, level: int, fate: str) -> None:
        """The one line of a failed run: the error, what it led to, then its traceback."""
        error = run.error or RuntimeError("unknown failure")
        job = run.job or {}
        logger.log(
            level,
            "fail: %s jid=%s: %s: %s; %s",
            job.get("class"),
            job.get("jid") or jid_of(work.raw),
            failure.error_class_name(error),
            failure.error_message(error),
            fate,
            exc_info=error,
            extra=logs.USER_TRACEBACK,
        )

    def _workers_entry(self, work: Work) -> str:
        # the payload is embedded as stored (it is a JSON object: parse_job checked)
        return (
            f'{{"queue":{wire.dumps(work.queue)},"payload":{work.raw},"run_at":{int(time.time())}}}'
        )

    def _run_job(self, job: Payload, queue_name: str, run: _Run, raw: str) -> BaseException | None:
        def decide(job_class: type[Job] | None, error: BaseException) -> None:
            run.decision = failure.decide(job_class, job, error)
            if run.decision.hooked:
                job["failure_outcome"] = run.decision.outcome

        def performed() -> None:
            # before the middleware unwinds: the heartbeat must stop re-taking the job's cron
            # lock before the running-lock middleware releases it
            if not run.performed:
                run.performed = True
                self.manager.job_performed(raw)

        try:
            execute.execute(
                self.manager.config.server_middleware,
                job,
                queue_name,
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

    # -- failures ----------------------------------------------------------------------------

    def _route_failure(self, job: Payload, error: BaseException, run: _Run) -> str | None:
        """File the failed job into retry or dead. Returns what that led to, for the log line,
        or None if the write failed (``run.filing_error`` says why)."""
        decided_late = run.decision is None
        decision = run.decision
        if decision is None:
            try:
                job_class = self._job_class(job)
                decision = failure.decide(job_class, job, error)
            except Exception:
                logger.error("couldn't decide the fate of jid=%s", job.get("jid"))
                decision = Decision("dead" if failure.is_terminal(job) else "retry")
        run.decision = decision
        job.pop("failure_outcome", None)
        count = failure.retry_count(job) + 1
        budget = wire.max_retries(job)
        now = wire.now()
        job["error_class"] = failure.error_class_name(error)
        job["error_message"] = failure.error_message(error)
        job.setdefault("failed_at", now)
        job["retry_count"] = count
        client = self.manager.client
        delay: float | None = None
        if decision.outcome != "discard":
            delay = decision.delay if decision.delay is not None else failure.default_backoff(count)
            target = keys.RETRY if decision.outcome == "retry" else keys.DEAD
            score = now + delay if decision.outcome == "retry" else now
            try:
                payload = wire.dumps(job)
                client.zadd(target, {payload: score})
            except (ValueError, TypeError, RecursionError, redis.RedisError) as write_error:
                run.filing_error = write_error
                return None
            run.filed = True
            if decision.outcome == "retry":
                locks.extend_for_retry(self.manager.config, client, job, delay)
            else:
                stored = failure.parse_object(payload)
                run.death = (job if isinstance(stored, Rejection) else stored, error)
        run.filed = True  # from here on (discard included) the job must only be acked
        if decision.cut_short or (decided_late and decision.outcome != "retry"):
            locks.release(client, job)
        if decision.cut_short and decided_late:  # the status middleware saw a retry coming
            status.mark_failed(self.manager.config, job, error)
        self._record_attempt(job, count, decision.attempt_outcome)
        return failure.fate_text(decision, count, budget, delay)

    def _job_class(self, job: Payload) -> type[Job] | None:
        from cogworker import registry

        try:
            return registry.resolve(str(job.get("class")))
        except registry.UnknownJobError:
            return None

    def _record_attempt(self, job: Payload, attempt: int, outcome: str) -> None:
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
            pipe = self.manager.client.pipeline(transaction=False)
            pipe.rpush(key, entry)
            pipe.ltrim(key, -ATTEMPTS_KEPT, -1)
            pipe.expire(key, ATTEMPTS_TTL)
            pipe.execute()
        except redis.RedisError as error:
            redis_errors.reporter.report("Attempts log", error)

    def _interrupt(self, work: Work, run: _Run) -> None:
        """Recording the failure failed: file the original payload with a fixed delay."""
        manager = self.manager
        error = run.error or RuntimeError("unknown failure")
        why = f"couldn't file it ({_summary(run.filing_error)})"
        later = "into dead"
        try:
            payload = wire.loads(work.raw)
            count = int(payload.get("interrupted_count") or 0) + 1
            attempt = failure.retry_count(payload) + 1
            payload.update(
                {
                    "interrupted_count": count,
                    "retry_count": attempt,
                    "error_class": failure.error_class_name(error),
                    "error_message": failure.error_message(error),
                    "failed_at": wire.now(),
                }
            )
            cut_short = run.decision is not None and run.decision.cut_short
            budget = wire.max_retries(payload)
            out_of_retries = attempt > budget or cut_short
            if out_of_retries or count > MAX_INTERRUPTS:
                target, score, delay = keys.DEAD, wire.now(), 0
                fate = (
                    "dead instead (no retries left)"
                    if out_of_retries
                    else f"dead instead (interrupted more than {MAX_INTERRUPTS} times)"
                )
            else:
                delay = INTERRUPT_DELAY * count
                target, score = keys.RETRY, wire.now() + delay
                fate = (
                    f"retry {attempt}/{budget} in {delay}s instead "
                    f"(interruption {count} of at most {MAX_INTERRUPTS})"
                )
            later = "into retry" if target == keys.RETRY else later
            encoded = wire.dumps(payload)
            try:
                written = manager.fetch().interrupt(work, target, score, encoded)
            except redis.RedisError:
                manager.settle_later(work.raw, (target, score, encoded))
                raise
            if target == keys.RETRY:
                locks.extend_for_retry(manager.config, manager.client, payload, delay)
            else:
                locks.release(manager.client, payload)
                if written:
                    run.death = (payload, error)
            self._log_failure(work, run, logging.ERROR, f"{why}: {fate}")
        except Exception as interrupt_error:
            if not manager.is_pending(work.raw):
                manager.remember_for_dead(work.raw, error)
                later = "into dead"
            self._log_failure(
                work,
                run,
                logging.ERROR,
                f"{why} nor interrupt it ({_summary(interrupt_error)}): left in progress, "
                f"filed {later} by the next reconcile (or handed over at shutdown)",
            )

    # -- settling ----------------------------------------------------------------------------

    def _settle(self, work: Work, run: _Run, disposition: Disposition) -> None:
        manager = self.manager
        if run.jid is not None:
            work = replace(work, jid=run.jid)  # no parsing it again to settle it
        if disposition is Disposition.ACK and run.death is None:
            manager.bookkeeper.acknowledge(work)  # job_finished once it is sent
            return
        manager.bookkeeper.wake()  # send this job's deregistration and counts
        try:
            if disposition is Disposition.ACK:
                manager.acknowledge_now(work)  # death hooks run only after the ack
            elif disposition is Disposition.GIVE_BACK:
                manager.give_back(work)
            elif disposition is Disposition.INTERRUPT:
                self._interrupt(work, run)
        finally:
            manager.job_finished(work.raw)
        if run.death is not None:
            manager.run_death_hooks(*run.death)
