"""A processor thread: receives a fetched job, runs it, settles it. Never dies.

The rule it keeps: a job is never run again because of a failure that happened after it ran.
If bookkeeping fails *before* ``perform`` the job goes back to its queue; once it has run, it
is acknowledged, or filed into retry / dead, or (when even that fails) interrupted: filed with
a fixed delay, or remembered and settled later. Never put back on its queue.
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from cogworker import execute, failure, keys, locks, redis_errors, status, wire
from cogworker.failure import Decision
from cogworker.fetch import Work
from cogworker.fetch.reliable import jid_of
from cogworker.job import Job
from cogworker.wire import Payload

if TYPE_CHECKING:
    import asyncio

    from cogworker.worker.manager import Manager

logger = logging.getLogger("cogworker")

ERROR_BACKOFF = 1.0
MAX_INTERRUPTS = 3
INTERRUPT_DELAY = 30
ATTEMPTS_KEPT = 25
ATTEMPTS_TTL = 30 * 86400


@dataclass
class _Run:
    """What happened to the job being processed (read by the settling step)."""

    job: Payload | None = None
    ran: str | None = None  # "ack" or "interrupt" once perform has returned or raised
    performed: bool = False
    filed: bool = False  # the failure is written (or discarded): only an ack is left to do
    error: BaseException | None = None
    decision: Decision | None = None
    death: tuple[Payload, BaseException] | None = None


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
            self._give_back(work)  # never start a job once shutdown began
            manager.job_finished(work.raw)
            return
        run = _Run()
        manager.job_starting(work.raw)
        self.busy = True
        manager.change_busy(1)
        disposition = "give_back"
        try:
            disposition = self._execute(work, run)
        except BaseException as error:
            logger.error("processing jid=%s failed unexpectedly", jid_of(work.raw), exc_info=error)
            disposition = "ack" if run.filed else (run.ran or "give_back")
        finally:
            self.busy = False
            manager.change_busy(-1)
            if not run.performed:
                manager.job_performed(work.raw)
        self._settle(work, run, disposition)

    def _execute(self, work: Work, run: _Run) -> str:
        job, error_class, message = failure.parse_job(work.raw)
        if job is None:
            self._bury_unparseable(work, error_class, message)
            return "done"
        run.job = job
        bookkeeper = self.manager.bookkeeper
        bookkeeper.register(self.tid, self._workers_entry(work))
        counts = {"processed": 0, "failed": 0}
        try:
            logger.info("start: %s jid=%s", job.get("class"), job.get("jid"))
            started = time.monotonic()
            error = self._run_job(job, work.queue, run, work.raw)
            run.ran = "interrupt" if error is not None else "ack"
            run.error = error
            if error is None:
                counts["processed"] = 1
                logger.info(
                    "done: %s jid=%s in %.3fs",
                    job.get("class"),
                    job.get("jid"),
                    time.monotonic() - started,
                )
                return "ack"
            counts["failed"] = 1
            logger.warning(
                "fail: %s jid=%s: %s: %s",
                job.get("class"),
                job.get("jid"),
                failure.error_class_name(error),
                failure.error_message(error),
            )
            return "ack" if self._route_failure(job, error, run) else "interrupt"
        finally:
            bookkeeper.finished(self.tid, **counts)

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

    def _route_failure(self, job: Payload, error: BaseException, run: _Run) -> bool:
        """File the failed job into retry or dead; False if that write failed."""
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
        now = wire.now()
        job["error_class"] = failure.error_class_name(error)
        job["error_message"] = failure.error_message(error)
        job.setdefault("failed_at", now)
        job["retry_count"] = count
        client = self.manager.client
        if decision.outcome != "discard":
            delay = decision.delay if decision.delay is not None else failure.default_backoff(count)
            target = keys.RETRY if decision.outcome == "retry" else keys.DEAD
            score = now + delay if decision.outcome == "retry" else now
            try:
                payload = wire.dumps(job)
                client.zadd(target, {payload: score})
            except (ValueError, TypeError, redis.RedisError) as write_error:
                logger.error(
                    "couldn't record failure of jid=%s: %s: %s",
                    job.get("jid"),
                    type(write_error).__name__,
                    write_error,
                )
                return False
            run.filed = True
            if decision.outcome == "retry":
                locks.extend_for_retry(self.manager.config, client, job, delay)
            else:
                run.death = (wire.loads(payload), error)
        run.filed = True  # from here on (discard included) the job must only be acked
        if decision.cut_short or (decided_late and decision.outcome != "retry"):
            locks.release(client, job)
        if decision.cut_short and decided_late:  # the status middleware saw a retry coming
            status.mark_failed(self.manager.config, job, error)
        self._record_attempt(job, count, decision.attempt_outcome)
        return True

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
        jid = jid_of(work.raw)
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
            out_of_retries = attempt > wire.max_retries(payload) or cut_short
            if out_of_retries or count > MAX_INTERRUPTS:
                target, score, delay = keys.DEAD, wire.now(), 0
                reason = (
                    "moved to dead: no retries left"
                    if out_of_retries
                    else f"moved to dead: interrupted more than {MAX_INTERRUPTS} times"
                )
            else:
                delay = INTERRUPT_DELAY * count
                target, score = keys.RETRY, wire.now() + delay
                reason = f"retrying in {delay}s (interruption {count} of at most {MAX_INTERRUPTS})"
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
            logger.error(
                "couldn't record the failure of jid=%s (%s); %s",
                jid,
                failure.error_class_name(error),
                reason,
            )
        except Exception as interrupt_error:
            if not manager.is_pending(work.raw):
                manager.remember_for_dead(work.raw, error)
            logger.error(
                "couldn't record or interrupt jid=%s (left in progress): %s", jid, interrupt_error
            )

    def _bury_unparseable(self, work: Work, error_class: str, message: str) -> None:
        wrapper = failure.unparseable_job(work.raw, work.queue, error_class, message)
        filing = (keys.DEAD, float(wrapper["failed_at"]), wire.dumps(wrapper))
        try:
            self.manager.fetch().interrupt(work, *filing)
        except redis.RedisError as error:
            # giving it back would fetch it again at once, in a loop: it stays in progress
            # and is filed later (reconcile, or another process after shutdown)
            self.manager.settle_later(work.raw, filing)
            logger.error(
                "unparseable job on queue %s couldn't be moved to dead yet (will retry): %s",
                work.queue,
                error,
            )
            return
        self.manager.bookkeeper.count(failed=1)
        logger.error("unparseable job on queue %s moved to dead: %s", work.queue, message)

    # -- settling ----------------------------------------------------------------------------

    def _settle(self, work: Work, run: _Run, disposition: str) -> None:
        manager = self.manager
        if disposition == "ack" and run.death is None:
            manager.bookkeeper.acknowledge(work)  # job_finished once it is sent
            return
        manager.bookkeeper.wake()  # send this job's deregistration and counts
        try:
            if disposition == "ack":
                manager.acknowledge_now(work)  # death hooks run only after the ack
            elif disposition == "give_back":
                self._give_back(work)
            elif disposition == "interrupt":
                self._interrupt(work, run)
        finally:
            manager.job_finished(work.raw)
        if run.death is not None:
            manager.run_death_hooks(*run.death)

    def _give_back(self, work: Work) -> None:
        try:
            self.manager.fetch().give_back(work)
        except redis.RedisError as error:
            logger.error(
                "couldn't hand back jid=%s (left in progress): %s", jid_of(work.raw), error
            )
