"""Pushing jobs: normalise, run the client middleware, then write to Redis.

A job to run now is LPUSHed onto ``cogworker:queue:<name>`` (stamped ``enqueued_at``); a job
with ``at`` is ZADDed to ``cogworker:schedule``. Either is one round trip: the queue name is
added to ``cogworker:queues`` in the same pipeline the first time this client sees it, and
never again. A bulk push sends up to 1,000 jobs per round trip.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ParamSpec

from cogworker import keys, testing, wire
from cogworker.config import Config, default_config
from cogworker.job import Enqueuer, Job, Performer

if TYPE_CHECKING:
    from redis.client import Pipeline

P = ParamSpec("P")
BULK_BATCH = 1000

logger = logging.getLogger("cogworker.client")


class Client:
    """Pushes jobs through ``config``'s client middleware into ``config``'s Redis."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or default_config()
        self._registered_queues: set[str] = set()
        self._registered_on: object = None  # the Redis client the memo above is about
        self._lock = threading.Lock()

    # -- typed helpers ------------------------------------------------------------------------

    def enqueue(self, job: type[Performer[P]], *args: P.args, **kwargs: P.kwargs) -> str | None:
        """``job.perform_async(*args)`` through this client."""
        return self._enqueuer(job).perform_async(*args, **kwargs)

    def enqueue_in(
        self,
        interval: timedelta | float,
        job: type[Performer[P]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> str | None:
        return self._enqueuer(job).perform_in(interval, *args, **kwargs)

    def enqueue_at(
        self,
        when: datetime | float,
        job: type[Performer[P]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> str | None:
        return self._enqueuer(job).perform_at(when, *args, **kwargs)

    def _enqueuer(self, job: type[Performer[P]]) -> Enqueuer[P]:
        job_class: type[Job] = job  # type: ignore[assignment]
        return Enqueuer(job_class, {}, self)

    # -- low level ----------------------------------------------------------------------------

    def push(self, item: Mapping[str, Any]) -> str | None:
        """Push one job given as a payload dict; its jid, or None if middleware stopped it."""
        job = wire.normalize(item)
        if self._through_middleware(job, lambda: self._dispatch([job])):
            return str(job["jid"])
        return None

    def push_bulk(self, items: Iterable[Mapping[str, Any]]) -> list[str | None]:
        """Push many jobs, one round trip per batch of up to 1,000; a jid or None for each."""
        results: list[str | None] = []
        batch: list[wire.Payload] = []
        for item in items:
            job = wire.normalize(item)
            if self._through_middleware(job, functools.partial(batch.append, job)):
                results.append(str(job["jid"]))
            else:
                results.append(None)
            if len(batch) >= BULK_BATCH:
                self._dispatch(batch)
                batch = []
        if batch:
            self._dispatch(batch)
        return results

    def _through_middleware(self, job: wire.Payload, final: Any) -> bool:
        chain = self.config.client_middleware
        return chain.invoke(job["class"], job, job["queue"], self.config.redis(), final=final)

    def _dispatch(self, jobs: list[wire.Payload]) -> None:
        mode = testing.current_mode()
        if mode is not testing.Mode.DISABLED:
            for job in jobs:
                testing.dispatch(self.config, job)
            return
        stamp = wire.now()
        by_queue: dict[str, list[str]] = {}
        scheduled: dict[str, float] = {}
        for job in jobs:
            at = job.get("at")
            if at is not None:
                scheduled[wire.dumps(job)] = float(at)
            else:
                job["enqueued_at"] = stamp
                by_queue.setdefault(job["queue"], []).append(wire.dumps(job))
        redis = self.config.redis()
        if redis is not self._registered_on:  # another server or db: register afresh
            self._registered_queues, self._registered_on = set(), redis
        new_queues = [name for name in by_queue if name not in self._registered_queues]
        if len(jobs) == 1 and not new_queues:
            # the common case: one command, no pipeline object
            if scheduled:
                redis.zadd(keys.SCHEDULE, scheduled)
            else:
                ((name, payloads),) = by_queue.items()
                redis.lpush(keys.queue(name), *payloads)
            return
        pipe = redis.pipeline(transaction=False)
        for name, payloads in by_queue.items():
            pipe.lpush(keys.queue(name), *payloads)
        if scheduled:
            pipe.zadd(keys.SCHEDULE, scheduled)
        if new_queues:
            pipe.sadd(keys.QUEUES, *new_queues)
        self._execute(pipe, new_queues)

    def _execute(self, pipe: Pipeline, new_queues: list[str]) -> None:
        replies = pipe.execute(raise_on_error=False)
        if new_queues:
            registered = replies.pop()
            if isinstance(registered, Exception):
                # the jobs are queued; failing the push now would make callers push them twice
                logger.warning(
                    "couldn't register queue(s) %s: %s", ", ".join(new_queues), registered
                )
            else:
                with self._lock:
                    self._registered_queues.update(new_queues)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply


_default_clients: dict[int, Client] = {}
_default_lock = threading.Lock()


def default_client() -> Client:
    """A client for the process-wide default config (used by ``Job.perform_async``)."""
    config = default_config()
    client = _default_clients.get(id(config))
    if client is None or client.config is not config:
        with _default_lock:
            client = Client(config)
            _default_clients.clear()
            _default_clients[id(config)] = client
    return client
