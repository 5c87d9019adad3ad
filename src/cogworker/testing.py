"""Testing modes for applications that enqueue jobs.

``fake()`` records pushed jobs in memory instead of writing them to Redis; ``inline()`` runs
each job at once in the caller's thread through the server middleware (exceptions reach the
caller, delays are ignored, nothing is counted or retried). Both are context managers that
restore the previous mode on exit, so they nest::

    with cogworker.testing.fake():
        GreetingJob.perform_async("Ada")
        assert [job["args"] for job in testing.jobs(GreetingJob)] == [["Ada"]]
        testing.drain(GreetingJob)          # runs it, through the server middleware

The client middleware always runs; only the final dispatch differs. The mode is global to the
process, not per thread.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cogworker.config import Config
    from cogworker.wire import Payload


class Mode(enum.Enum):
    DISABLED = "disabled"
    FAKE = "fake"
    INLINE = "inline"


class EmptyQueueError(LookupError):
    """``perform_one`` was asked for a job class with no recorded jobs."""


_mode = Mode.DISABLED
_lock = threading.RLock()
# class name -> recorded (config, job) pairs, oldest first
_recorded: dict[str, list[tuple[Config, Payload]]] = {}


def current_mode() -> Mode:
    return _mode


@contextmanager
def _switch(mode: Mode) -> Iterator[None]:
    global _mode
    previous = _mode
    _mode = mode
    try:
        yield
    finally:
        _mode = previous


def fake() -> Any:
    """Record pushes in memory (context manager)."""
    return _switch(Mode.FAKE)


def inline() -> Any:
    """Run pushed jobs immediately in the caller's thread (context manager)."""
    return _switch(Mode.INLINE)


def disabled() -> Any:
    """Write pushes to Redis as in production (context manager)."""
    return _switch(Mode.DISABLED)


def dispatch(config: Config, job: Payload) -> None:
    """Where a push ends in fake or inline mode (called by the client)."""
    if _mode is Mode.FAKE:
        with _lock:
            _recorded.setdefault(str(job["class"]), []).append((config, job))
    elif _mode is Mode.INLINE:
        _run(config, job)
    else:
        raise RuntimeError("testing.dispatch called while testing mode is disabled")


def _run(config: Config, job: Payload) -> None:
    from cogworker.execute import execute

    execute(config.server_middleware, job, str(job.get("queue", "default")))


def _name(job: Any) -> str:
    if isinstance(job, str):
        return job
    name = getattr(job, "name", None)
    if not isinstance(name, str):
        raise TypeError(f"expected a job class, a @job function or a wire name, got {job!r}")
    return name


def jobs(job: Any) -> list[Payload]:
    """The jobs recorded for ``job`` (class, @job function or wire name), oldest first."""
    with _lock:
        return [payload for _, payload in _recorded.get(_name(job), [])]


def all_jobs() -> list[Payload]:
    with _lock:
        return [payload for entries in _recorded.values() for _, payload in entries]


def clear(job: Any) -> None:
    with _lock:
        _recorded.pop(_name(job), None)


def clear_all() -> None:
    with _lock:
        _recorded.clear()


def perform_one(job: Any) -> Payload:
    """Remove the oldest recorded job of ``job`` and run it through the server middleware."""
    name = _name(job)
    with _lock:
        entries = _recorded.get(name)
        if not entries:
            raise EmptyQueueError(f"no {name} jobs recorded")
        config, payload = entries.pop(0)
    _run(config, payload)
    return payload


def drain(job: Any) -> int:
    """Run recorded jobs of ``job`` until none is left (including ones pushed meanwhile)."""
    count = 0
    while jobs(job):
        perform_one(job)
        count += 1
    return count


def drain_all() -> int:
    """Run recorded jobs of every class until every list is empty."""
    count = 0
    while True:
        with _lock:
            name = next((name for name, entries in _recorded.items() if entries), None)
        if name is None:
            return count
        perform_one(name)
        count += 1
