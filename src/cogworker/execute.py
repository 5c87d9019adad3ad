"""Running one job's code: resolve its class, build the worker, wrap ``perform`` in the
server middleware. Shared by the processor threads and the inline testing mode.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any

from cogworker import registry
from cogworker.middleware import Chain, JobInstance
from cogworker.wire import Payload

RunCoroutine = Callable[[Coroutine[Any, Any, Any]], Any]
OnError = Callable[[type[Any] | None, BaseException], None]
OnPerformed = Callable[[], None]


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


def execute(
    chain: Chain,
    job: Payload,
    queue: str,
    *,
    run_coroutine: RunCoroutine = _asyncio_run,
    on_error: OnError | None = None,
    on_performed: OnPerformed | None = None,
) -> None:
    """Run ``job`` through ``chain``; raises what the job (or a middleware) raised.

    An unknown class fails inside the chain, with ``worker`` None, like any other failure.
    ``on_error`` is called inside the chain when ``perform`` raises, so the failure decision
    is made before the middleware sees the exception. ``on_performed`` is called inside the
    chain as soon as ``perform`` has returned or raised, before any middleware goes on (the
    running lock's release must come after it). ``run_coroutine`` runs an ``async def
    perform``; a processor thread passes its own event loop.
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
