"""Running one job's code: resolve its class, build the worker, wrap ``perform`` in the
server middleware. ``run`` gives what came of it as a value (the processor threads);
``execute`` raises what the job raised (the inline testing mode).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from cogworker import failure, registry
from cogworker.failure import Decision
from cogworker.middleware import Chain, JobInstance
from cogworker.wire import Payload

RunCoroutine = Callable[[Coroutine[Any, Any, Any]], Any]
OnError = Callable[[type[Any] | None, BaseException], None]
Performed = Callable[[], None]


@dataclass(frozen=True, slots=True)
class Run:
    """What came of running a job through the chain."""

    error: BaseException | None  # what the job (or a middleware) raised; None: it succeeded
    decision: Decision | None  # the failure's fate, when ``perform`` itself raised
    seconds: float  # the whole chain's time


def _asyncio_run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    import asyncio  # only jobs with ``async def perform`` pay for importing asyncio

    return asyncio.run(coroutine)


def build_worker(job: Payload) -> tuple[JobInstance | None, BaseException | None]:
    """An instance of the job's class with its jid set, or the error resolving it."""
    try:
        job_class = registry.resolve(str(job.get("class")))
        worker = job_class()
    except Exception as error:
        return None, error
    worker.jid = str(job.get("jid", ""))
    return worker, None


def run(
    chain: Chain,
    job: Payload,
    queue: str,
    *,
    run_coroutine: RunCoroutine = _asyncio_run,
    performed: Performed | None = None,
) -> Run:
    """Run ``job`` through ``chain`` and say what came of it.

    When ``perform`` raises, the failure's fate is decided inside the chain, before any
    middleware sees the exception (a ``retry_in`` hook's choice is written into the job as
    ``failure_outcome`` for them). ``performed`` is called inside the chain as soon as
    ``perform`` has returned or raised, before any middleware goes on: the cron running lock's
    release must come after it.
    """
    decision: Decision | None = None

    def decide(job_class: type[Any] | None, error: BaseException) -> None:
        nonlocal decision
        decision = failure.decide(job_class, job, error)
        if decision.hooked:
            job["failure_outcome"] = decision.outcome

    started = time.monotonic()
    try:
        execute(
            chain, job, queue, run_coroutine=run_coroutine, on_error=decide, on_performed=performed
        )
    except BaseException as error:
        return Run(error, decision, time.monotonic() - started)
    return Run(None, None, time.monotonic() - started)


def execute(
    chain: Chain,
    job: Payload,
    queue: str,
    *,
    run_coroutine: RunCoroutine = _asyncio_run,
    on_error: OnError | None = None,
    on_performed: Performed | None = None,
) -> None:
    """Run ``job`` through ``chain``; raises what the job (or a middleware) raised.

    An unknown class fails inside the chain, with ``worker`` None, like any other failure.
    ``on_error`` and ``on_performed`` are called inside the chain (see ``run``).
    ``run_coroutine`` runs an ``async def perform``; a processor thread passes its own loop.
    """
    worker, error = build_worker(job)
    args = job.get("args")
    if not isinstance(args, list):
        args = []

    def perform() -> None:
        try:
            if worker is None:
                raise error or registry.UnknownJobError(f"unknown job class {job.get('class')!r}")
            try:
                result = worker.perform(*args)  # type: ignore[attr-defined]
                if inspect.iscoroutine(result):
                    run_coroutine(result)
            except BaseException as failure:
                if on_error is not None:
                    on_error(type(worker), failure)
                raise
        finally:
            if on_performed is not None:
                on_performed()

    chain.invoke(worker, job, queue, final=perform)
