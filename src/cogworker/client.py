"""Pushing jobs: normalise, run the client middleware, then write to Redis.

A job to run now is LPUSHed onto ``cogworker:queue:<name>`` (stamped ``enqueued_at``); a job
with ``at`` is ZADDed to ``cogworker:schedule``. Either is one round trip: the queue name is
added to ``cogworker:queues`` in the same pipeline the first time this client sees it, and
never again. A bulk push sends up to 1,000 jobs per round trip.

``Enqueuer`` turns a job class and its arguments into a payload (what ``Job.perform_async``
and ``Job.set(...)`` use): it lives here, below ``job``, since a client enqueues classes too.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Generic, ParamSpec, Protocol

from cogworker import keys, testing, wire
from cogworker.config import Config, default_config
from cogworker.process_state import state

if TYPE_CHECKING:
    from redis.client import Pipeline

P = ParamSpec("P")
BULK_BATCH = 1000

logger = logging.getLogger("cogworker.client")


class Performer(Protocol[P]):
    """Anything with a ``perform`` method; lets mypy check enqueue arguments against it."""

    def perform(self, *args: P.args, **kwargs: P.kwargs) -> object: ...


class JobClass(Protocol):
    """What enqueuing reads of a job class (``cogworker.Job`` has both)."""

    name: ClassVar[str]
    options: ClassVar[dict[str, Any]]


def _epoch(when: datetime | float | int) -> float:
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(
                f"perform_at needs an aware datetime (with a tzinfo), got naive {when.isoformat()}"
            )
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, int | float) or not math.isfinite(when):
        raise TypeError(f"perform_at takes an aware datetime or epoch seconds, got {when!r}")
    return float(when)


def _seconds(interval: timedelta | float | int) -> float:
    if isinstance(interval, timedelta):
        return interval.total_seconds()
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        raise TypeError(f"perform_in takes seconds or a timedelta, got {interval!r}")
    if not math.isfinite(interval):
        raise ValueError(f"perform_in takes a finite number of seconds, got {interval!r}")
    return float(interval)


def _no_kwargs(name: str, kwargs: dict[str, Any]) -> None:
    if kwargs:
        raise TypeError(
            f"{name}: keyword arguments can't be enqueued ({', '.join(kwargs)}); "
            "pass them positionally"
        )


@dataclass(frozen=True, slots=True)
class _Arity:
    """What ``perform`` (without ``self``) accepts, worked out once per class: the counts of
    positional arguments that certainly bind, and the signature to word a refusal with."""

    signature: inspect.Signature
    fewest: float
    most: float

    @classmethod
    def of(cls, signature: inspect.Signature) -> _Arity:
        fewest, most = 0, 0.0
        for parameter in signature.parameters.values():
            if parameter.kind is parameter.VAR_POSITIONAL:
                most = math.inf
            elif parameter.kind is parameter.KEYWORD_ONLY:
                if parameter.default is parameter.empty:  # no positional call can fill it
                    return cls(signature, math.inf, 0.0)
            elif parameter.kind is not parameter.VAR_KEYWORD:
                most += 1
                if parameter.default is parameter.empty:
                    fewest += 1
        return cls(signature, fewest, most)


def _perform_arity(job_class: type[JobClass]) -> _Arity | None:
    """``perform``'s arity; None when there is nothing to check against (a class that only
    names a job run elsewhere, e.g. by Ruby workers, has no ``perform``)."""
    cached = job_class.__dict__.get("_perform_arity")
    if cached is not None or "_perform_arity" in job_class.__dict__:
        return cached
    perform = getattr(job_class, "perform", None)
    arity: _Arity | None = None
    if perform is not None:
        try:
            full = inspect.signature(perform)
        except (TypeError, ValueError):
            full = None
        if full is not None:
            arity = _Arity.of(
                full.replace(
                    parameters=list(full.parameters.values())[1:],
                    return_annotation=inspect.Signature.empty,
                )
            )
    type.__setattr__(job_class, "_perform_arity", arity)
    return arity


def _check_arity(job_class: type[JobClass], args: list[Any]) -> None:
    """Raise TypeError now if ``perform`` can't take ``args``, instead of failing every run."""
    arity = _perform_arity(job_class)
    # the count alone decides for most signatures: ``bind`` costs more than the rest of a push
    if arity is None or arity.fewest <= len(args) <= arity.most:
        return
    try:
        arity.signature.bind(*args)
    except TypeError as error:
        raise TypeError(
            f"{job_class.name}: can't enqueue {len(args)} argument(s) for "
            f"perform{arity.signature}: {error}"
        ) from None


class Enqueuer(Generic[P]):
    """Enqueues one job class with per-call option overrides: ``Job.set(queue=...)``."""

    def __init__(
        self, job_class: type[JobClass], overrides: dict[str, Any], client: Client | None = None
    ) -> None:
        self._job_class = job_class
        self._overrides = overrides
        self._client = client

    def _client_or_default(self) -> Client:
        return self._client if self._client is not None else default_client()

    def item(self, args: Iterable[Any], at: float | None = None) -> wire.Payload:
        """The payload this enqueuer would push for ``args`` (before normalisation)."""
        name = self._job_class.name
        item: wire.Payload = {**self._job_class.options, **self._overrides, "class": name}
        item["args"] = wire.check_args(args, name)
        _check_arity(self._job_class, item["args"])
        if at is not None:
            item["at"] = at
        return item

    def perform_async(self, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Enqueue now; returns the jid, or None if a client middleware stopped the push."""
        _no_kwargs(self._job_class.name, kwargs)
        return self._client_or_default().push(self.item(args))

    def perform_in(
        self, interval: timedelta | float, *args: P.args, **kwargs: P.kwargs
    ) -> str | None:
        """Enqueue to run after ``interval`` (seconds or a timedelta) from now."""
        _no_kwargs(self._job_class.name, kwargs)
        return self._client_or_default().push(self.item(args, wire.now() + _seconds(interval)))

    def perform_at(self, when: datetime | float, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Enqueue to run at ``when``: an aware datetime or epoch seconds."""
        _no_kwargs(self._job_class.name, kwargs)
        return self._client_or_default().push(self.item(args, _epoch(when)))

    def perform_bulk(self, args_list: Iterable[Sequence[Any]]) -> list[str | None]:
        """Enqueue one job per argument list, in round trips of up to 1,000 jobs."""
        items = []
        for args in args_list:
            if isinstance(args, str | bytes) or not isinstance(args, Sequence):
                raise TypeError(
                    f"{self._job_class.name}.perform_bulk takes a list of argument lists, "
                    f"got {args!r} as one of them"
                )
            items.append(self.item(args))
        return self._client_or_default().push_bulk(items)


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
        job_class: type[JobClass] = job  # type: ignore[assignment]
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

    def close(self) -> None:
        """Close the connections of this client's config (``Config.close``)."""
        self.config.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _dispatch(self, jobs: list[wire.Payload]) -> None:
        defer = self.config.defer_push
        if defer is not None and defer(jobs, functools.partial(self._send, jobs)):
            return
        self._send(jobs)

    def _send(self, jobs: list[wire.Payload]) -> None:
        if testing.active():
            for job in jobs:
                testing.dispatch(self.config, job)
            return
        by_queue, scheduled = _by_destination(jobs, wire.now())
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


def _by_destination(
    jobs: list[wire.Payload], stamp: float
) -> tuple[dict[str, list[str]], dict[str, float]]:
    """The encoded jobs by queue (stamped ``enqueued_at``), and the scheduled ones with their
    due times."""
    by_queue: dict[str, list[str]] = {}
    scheduled: dict[str, float] = {}
    for job in jobs:
        at = job.get("at")
        if at is not None:
            scheduled[wire.dumps(job)] = float(at)
        else:
            job["enqueued_at"] = stamp
            by_queue.setdefault(job["queue"], []).append(wire.dumps(job))
    return by_queue, scheduled


class DefaultClient:
    """The client of the default config (a process-state part): one, so its memo of the
    queues it registered lasts, and a new one when another config becomes the default."""

    def __init__(self) -> None:
        self._client: Client | None = None
        self._lock = threading.Lock()

    def get(self) -> Client:
        config = default_config()
        client = self._client
        if client is None or client.config is not config:
            with self._lock:
                client = self._client
                if client is None or client.config is not config:
                    client = self._client = Client(config)
        return client

    def reset(self) -> None:
        with self._lock:
            self._client = None


_default = state.hold("default client", DefaultClient())


def default_client() -> Client:
    """A client for the process-wide default config (used by ``Job.perform_async``)."""
    return _default.get()
