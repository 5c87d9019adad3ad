"""Running one job's code: resolve its class, build the worker, wrap ``perform`` in the
server middleware. Shared by the processor threads and the inline testing mode.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from typing import Any

from cogworker import registry
from cogworker.job import Job
from cogworker.middleware import Chain
from cogworker.wire import Payload

RunCoroutine = Callable[[Coroutine[Any, Any, Any]], Any]


def build_worker(job: Payload) -> tuple[Job | None, BaseException | None]:
    """An instance of the job's class with its jid set, or the error resolving it."""
    try:
        job_class = registry.resolve(str(job.get("class")))
    except registry.UnknownJobError as error:
        return None, error
    worker = job_class()
    worker.jid = str(job.get("jid", ""))
    return worker, None


def execute(
    chain: Chain, job: Payload, queue: str, run_coroutine: RunCoroutine = asyncio.run
) -> None:
    """Run ``job`` through ``chain``; an unknown class fails inside the chain, like Ruby.

    ``run_coroutine`` runs an ``async def perform``; a processor thread passes its own loop's
    ``run_until_complete`` so one loop serves every job of the thread.
    """
    worker, error = build_worker(job)
    args = job.get("args")
    if not isinstance(args, list):
        args = []

    def perform() -> None:
        if worker is None:
            raise error or registry.UnknownJobError(job.get("class"))
        result = worker.perform(*args)  # type: ignore[attr-defined]
        if inspect.iscoroutine(result):
            run_coroutine(result)

    chain.invoke(worker, job, queue, final=perform)
