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

While either mode is on nothing talks to Redis, so a test passes with no server at all: the
shipped middleware keeps its state in ``memory`` instead and behaves as it does on Redis. A
duplicate unique push returns None until the first job is drained (a success or a failure that
ends it) or dropped by ``clear`` / ``clear_all``; ``status.get``, ``status.status``,
``history.query`` and ``history.daily_counts`` answer from memory. That memory is one per
process (whatever config or client is passed), shared by both modes and nested blocks, and
outlives a block like the recorded jobs do: ``clear_all()`` forgets both. Outside the modes the
same functions read Redis again. The mode, the recorded jobs and the memory are parts of the
process state (a forked worker starts with none of them).
"""

from __future__ import annotations

import bisect
import enum
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from cogworker import keys, locks
from cogworker.execute import execute
from cogworker.process_state import state

if TYPE_CHECKING:
    from cogworker.middleware import Chain
    from cogworker.wire import Payload


class Mode(enum.Enum):
    DISABLED = "disabled"
    FAKE = "fake"
    INLINE = "inline"


class EmptyQueueError(LookupError):
    """``perform_one`` was asked for a job class with no recorded jobs."""


class Pusher(Protocol):
    """What a recorded push keeps of the config it was made with (a ``cogworker.Config``):
    the server middleware its job runs through when drained."""

    @property
    def server_middleware(self) -> Chain: ...


class Memory:
    """What the shipped middleware keeps here instead of Redis while a mode is on, with the
    semantics of the Redis structures it stands for. Expiry times are epoch seconds, checked
    on reading (Redis would have dropped the entry by then)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.unique_locks: dict[str, tuple[str, float]] = {}  # key -> (owner jid, expires)
        self.statuses: dict[str, tuple[dict[str, str], float]] = {}  # jid -> (fields, expires)
        self.history: dict[str, list[tuple[float, str]]] = {}  # set -> (score, member), sorted
        self.daily: dict[str, dict[str, int]] = {}  # UTC day -> outcome -> count

    def take_lock(self, key: str, owner: str, ttl: float) -> bool:
        """SET NX EX: take ``key`` for ``owner`` unless an unexpired owner holds it."""
        now = time.time()
        with self.lock:
            held = self.unique_locks.get(key)
            if held is not None and held[1] > now:
                return False
            self.unique_locks[key] = (owner, now + ttl)
            return True

    def release_lock(self, key: str, owner: str) -> None:
        """Owner-checked, as on Redis: a lock taken again by another job stays."""
        with self.lock:
            held = self.unique_locks.get(key)
            if held is not None and held[0] == owner:
                del self.unique_locks[key]

    def status(self, jid: str) -> dict[str, str] | None:
        with self.lock:
            found = self.statuses.get(jid)
            return dict(found[0]) if found is not None and found[1] > time.time() else None

    def save_status(
        self, jid: str, values: dict[str, str], ttl: float, clear: tuple[str, ...] = ()
    ) -> None:
        """HDEL ``clear``, HSET ``values``, EXPIRE ``ttl``."""
        with self.lock:
            fields = self.status(jid) or {}
            for name in clear:
                fields.pop(name, None)
            self.statuses[jid] = ({**fields, **values}, time.time() + ttl)

    def add_scored(self, key: str, score: float, member: str, after: float, last: int) -> None:
        """ZADD, then keep only the members scored above ``after``, then the ``last`` ones."""
        with self.lock:
            entries = self.history.setdefault(key, [])
            bisect.insort(entries, (score, member))  # Redis's order: score, then member
            entries[:] = [item for item in entries if item[0] > after][-last:]

    def scored(self, key: str) -> list[str]:
        """ZRANGE 0 -1: the members, lowest score first."""
        with self.lock:
            return [member for _, member in self.history.get(key, [])]

    def forget(self) -> None:
        with self.lock:
            self.unique_locks.clear()
            self.statuses.clear()
            self.history.clear()
            self.daily.clear()

    reset = forget


class Recorder:
    """The mode in force and the jobs pushed in fake mode, by class name, oldest first."""

    def __init__(self) -> None:
        self.mode = Mode.DISABLED
        self.lock = threading.RLock()
        self.jobs: dict[str, list[tuple[Pusher, Payload]]] = {}

    def reset(self) -> None:
        with self.lock:
            self.mode = Mode.DISABLED
            self.jobs.clear()


memory = state.hold("testing memory", Memory())
"""The process's memory for the testing modes."""

_recorder = state.hold("testing mode", Recorder())
_lock = _recorder.lock
_recorded = _recorder.jobs


def current_mode() -> Mode:
    return _recorder.mode


def active() -> bool:
    """True in fake or inline mode: middleware state goes to ``memory``, not Redis."""
    return _recorder.mode is not Mode.DISABLED


@contextmanager
def _switch(mode: Mode) -> Iterator[None]:
    previous = _recorder.mode
    _recorder.mode = mode
    try:
        yield
    finally:
        _recorder.mode = previous


def fake() -> Any:
    """Record pushes in memory (context manager)."""
    return _switch(Mode.FAKE)


def inline() -> Any:
    """Run pushed jobs immediately in the caller's thread (context manager)."""
    return _switch(Mode.INLINE)


def disabled() -> Any:
    """Write pushes to Redis as in production (context manager)."""
    return _switch(Mode.DISABLED)


def dispatch(config: Pusher, job: Payload) -> None:
    """Where a push ends in fake or inline mode (called by the client)."""
    mode = _recorder.mode
    if mode is Mode.FAKE:
        with _lock:
            _recorded.setdefault(str(job["class"]), []).append((config, job))
    elif mode is Mode.INLINE:
        _run(config, job)
    else:
        raise RuntimeError("testing.dispatch called while testing mode is disabled")


def _run(config: Pusher, job: Payload) -> None:
    execute(config.server_middleware, job, str(job.get("queue", "default")))


def _name(job: Any) -> str:
    if isinstance(job, str):
        return job
    name = getattr(job, "name", None)
    if not isinstance(name, str):
        raise TypeError(f"expected a job class, a @job function or a wire name, got {job!r}")
    return name


def _release_unique(dropped: list[tuple[Pusher, Payload]]) -> None:
    """Free the unique locks of recorded jobs that are thrown away instead of run."""
    for _, job in dropped:
        jid = job.get("jid")
        if locks.is_until_executed(job) and isinstance(jid, str):
            memory.release_lock(keys.unique(locks.unique_digest(job)), jid)


def jobs(job: Any) -> list[Payload]:
    """The jobs recorded for ``job`` (class, @job function or wire name), oldest first."""
    with _lock:
        return [payload for _, payload in _recorded.get(_name(job), [])]


def all_jobs() -> list[Payload]:
    with _lock:
        return [payload for entries in _recorded.values() for _, payload in entries]


def clear(job: Any) -> None:
    """Drop the recorded jobs of ``job``, and the unique locks they hold."""
    with _lock:
        _release_unique(_recorded.pop(_name(job), []))


def clear_all() -> None:
    """Drop every recorded job and forget ``memory`` (locks, statuses, history)."""
    with _lock:
        _recorded.clear()
        memory.forget()


def perform_one(job: Any) -> Payload:
    """Remove the oldest recorded job of ``job`` and run it through the server middleware
    (in fake mode if no mode is on)."""
    name = _name(job)
    with _lock:
        entries = _recorded.get(name)
        if not entries:
            raise EmptyQueueError(f"no {name} jobs recorded")
        config, payload = entries.pop(0)
    if not active():  # run after the block: what it pushes or writes stays here too
        with fake():
            _run(config, payload)
    else:
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
