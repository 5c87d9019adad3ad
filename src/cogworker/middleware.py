"""Client and server middleware: ordered chains wrapped around a push or a job's run.

A middleware is a class. The chain builds a fresh instance of every entry on each invoke (so
an instance may keep per-job state) and calls it with the job's context and ``call_next``, a
function that runs the rest of the chain. Not calling it stops the push (client side) or skips
``perform`` (server side). Order for ``[a, b]``: a before, b before, final, b after, a after.

Client middleware::

    class AddTenant:
        def __call__(self, job_class: str, job: Payload, queue: str,
                     redis: Redis, call_next: Callable[[], None]) -> None:
            job["tenant"] = current_tenant()
            call_next()

Server middleware::

    class Timing:
        def __call__(self, worker: Job | None, job: Payload, queue: str,
                     call_next: Callable[[], None]) -> None:
            started = time.monotonic()
            try:
                call_next()
            finally:
                log(job["jid"], time.monotonic() - started)

On the server side ``worker`` is the job's instance (a ``cogworker.Job``, its ``jid`` set), or
None when the job's class could not be resolved, and anything a middleware raises counts as the
job failing, so its own bookkeeping should not raise.

This module is the contract every feature added as middleware builds on (unique jobs, status,
history, cron running locks): it imports nothing of cogworker at run time, so a feature that
imports it depends on nothing of the worker runtime.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import redis

    from cogworker.wire import Payload


class JobInstance(Protocol):
    """What a server middleware is handed as ``worker``: the instance of the job's class about
    to perform (a ``cogworker.Job``; typed by what every one has, as this module sits below the
    one defining ``Job``)."""

    jid: str


class ClientMiddleware(Protocol):
    def __call__(
        self,
        job_class: str,
        job: Payload,
        queue: str,
        redis: redis.Redis,
        call_next: Callable[[], None],
    ) -> None: ...


class ServerMiddleware(Protocol):
    def __call__(
        self, worker: JobInstance | None, job: Payload, queue: str, call_next: Callable[[], None]
    ) -> None: ...


class Chain:
    """An ordered list of middleware classes with their constructor arguments."""

    def __init__(self) -> None:
        self._entries: list[tuple[type[Any], tuple[Any, ...], dict[str, Any]]] = []

    def add(self, middleware: type[Any], *args: Any, **kwargs: Any) -> None:
        """Append ``middleware`` (re-adding one moves it to the end with the new arguments)."""
        self.remove(middleware)
        self._entries.append((middleware, args, kwargs))

    def prepend(self, middleware: type[Any], *args: Any, **kwargs: Any) -> None:
        self.remove(middleware)
        self._entries.insert(0, (middleware, args, kwargs))

    def insert_before(
        self, before: type[Any], middleware: type[Any], *args: Any, **kwargs: Any
    ) -> None:
        """Insert ``middleware`` just before ``before`` (at the end if it isn't there)."""
        self.remove(middleware)
        for index, entry in enumerate(self._entries):
            if entry[0] is before:
                self._entries.insert(index, (middleware, args, kwargs))
                return
        self._entries.append((middleware, args, kwargs))

    def remove(self, middleware: type[Any]) -> None:
        self._entries = [entry for entry in self._entries if entry[0] is not middleware]

    def clear(self) -> None:
        self._entries.clear()

    def arguments(self, middleware: type[Any]) -> tuple[Any, ...] | None:
        """The positional arguments ``middleware`` was added with; None if it isn't here."""
        for entry in self._entries:
            if entry[0] is middleware:
                return entry[1]
        return None

    def __contains__(self, middleware: object) -> bool:
        return any(entry[0] is middleware for entry in self._entries)

    def __iter__(self) -> Iterator[type[Any]]:
        return iter([entry[0] for entry in self._entries])

    def __len__(self) -> int:
        return len(self._entries)

    def copy(self) -> Chain:
        clone = Chain()
        clone._entries = list(self._entries)
        return clone

    def invoke(self, *call_args: Any, final: Callable[[], None]) -> bool:
        """Run the chain around ``final``; True if ``final`` was reached."""
        if not self._entries:
            final()
            return True
        reached: list[bool] = []

        def reach() -> None:
            reached.append(True)
            final()

        instances = [cls(*args, **kwargs) for cls, args, kwargs in self._entries]
        # linked inside out with partials: no closure refers to itself, so a push or a run
        # leaves no reference cycle for the garbage collector to find
        call_next: Callable[[], None] = reach
        for instance in reversed(instances):
            call_next = functools.partial(instance, *call_args, call_next)
        call_next()
        return bool(reached)
