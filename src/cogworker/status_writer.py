"""The background writer of best-effort status and history writes: one per config.

A job never waits for these writes, nor for a Redis that doesn't answer: each is queued with
the config's ``Writer``, whose thread sends them in order. ``flush(config)`` waits for what
was queued so far; a stopping worker calls ``close(config)``; an exiting process still gives
its writers ``AT_EXIT_WAIT`` seconds, and a forked child starts with none (the writers are a
part of the process state).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from cogworker import redis_errors
from cogworker.process_state import state

if TYPE_CHECKING:
    from redis.client import Pipeline

    from cogworker.config import Config

logger = logging.getLogger("cogworker")

WRITER_CAPACITY = 10_000  # writes waiting before new ones are dropped
BATCH = 100  # writes sent per round trip
IDLE_EXIT = 5.0  # a writer's thread ends after this long with nothing to send
RETRY_DELAYS = (0.1, 0.2, 0.5, 1.0)  # between attempts while Redis is unavailable
AT_EXIT_WAIT = 2.0  # what an exiting process still gives its writers


@dataclass(frozen=True)
class _Write:
    site: str  # "Status" or "History": names the write in error lines
    jid: str
    client: redis.Redis
    commands: Callable[[Pipeline], None]  # queues the write's commands on a pipeline


class Writer:
    """Sends one config's best-effort status and history writes from one thread, in order.

    Whatever has queued up leaves in one pipeline (up to ``BATCH`` writes). While Redis is
    unavailable the writes wait and are tried again (after 0.1 s, growing to 1 s), so
    ``working`` never lands after ``complete``; a write refused for any other reason is
    dropped with one line naming its jid. While ``capacity`` writes wait, new ones are
    dropped: one line when that starts, one when half are sent. The thread ends when idle.
    """

    def __init__(self, capacity: int = WRITER_CAPACITY) -> None:
        self.capacity = capacity
        self._pending: deque[_Write] = deque()  # a write leaves once sent or dropped
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._full = False
        self._dropped = 0

    def submit(
        self, site: str, jid: str, client: redis.Redis, commands: Callable[[Pipeline], None]
    ) -> None:
        """Queue a write (never blocks)."""
        with self._cond:
            accepted = not self._full and len(self._pending) < self.capacity
            if accepted:
                self._pending.append(_Write(site, jid, client, commands))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="status-writer")
                    self._thread.daemon = True
                    self._thread.start()
                self._cond.notify_all()
            else:
                self._full = True
                self._dropped += 1
            first_dropped = not accepted and self._dropped == 1
        if first_dropped:
            logger.error(
                "%s: %d status/history writes are waiting for Redis; new ones are dropped "
                "until half are sent (first dropped: jid=%s)",
                site,
                self.capacity,
                jid,
            )

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every write queued so far is sent or dropped; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Send what is waiting for up to ``timeout`` seconds; drop the rest with one line."""
        if self.flush(timeout):
            return
        with self._cond:
            left, first = len(self._pending), (self._pending[0].jid if self._pending else "")
            self._pending.clear()
            self._cond.notify_all()
        if left:
            logger.error(
                "%d status/history write(s) not sent within %ss are dropped (first: jid=%s)",
                left,
                timeout,
                first,
            )

    def _run(self) -> None:
        try:
            self._send_all()
        except BaseException as error:  # a bug: the next submit starts a fresh thread
            logger.error("status/history writer stopped: %s: %s", type(error).__name__, error)
            with self._cond:
                self._thread = None
            raise

    def _send_all(self) -> None:
        failures = 0
        while True:
            with self._cond:
                if not self._pending:
                    self._cond.wait(IDLE_EXIT)
                if not self._pending:
                    self._thread = None
                    return
                head = self._pending[0]
                batch = [
                    write
                    for write in itertools.islice(self._pending, BATCH)
                    if write.client is head.client  # one pipeline per connection pool
                ]
            done = self._send(batch)
            if done < len(batch):
                time.sleep(RETRY_DELAYS[min(failures, len(RETRY_DELAYS) - 1)])
                failures += 1
            else:
                failures = 0
            with self._cond:
                for write in batch[:done]:
                    if self._pending and self._pending[0] is write:  # close() may drop it
                        self._pending.popleft()
                dropped = self._resumed()
                if dropped:  # logged before a flush() waiting for these writes returns
                    logger.warning("status/history writes accepted again (%d dropped)", dropped)
                self._cond.notify_all()

    def _resumed(self) -> int:
        """Under ``_cond``: end a dropping spell once half the queue has been sent."""
        if not self._full or len(self._pending) > self.capacity // 2:
            return 0
        dropped, self._full, self._dropped = self._dropped, False, 0
        return dropped

    def _send(self, batch: list[_Write]) -> int:
        """Send ``batch`` in one pipeline; how many writes of it are done with (sent or
        dropped). The rest, from the first that met an unavailable Redis, is tried again."""
        pipe = batch[0].client.pipeline(transaction=False)
        spans: list[tuple[int, int] | None] = []  # each write's replies; None: not queued
        for write in batch:
            start = len(pipe)
            try:
                write.commands(pipe)
            except Exception as error:  # a value that can't be sent: drop only this write
                self._drop(write, error)
                del pipe.command_stack[start:]
                spans.append(None)
                continue
            spans.append((start, len(pipe)))
        try:
            replies = pipe.execute(raise_on_error=False) if len(pipe) else []
        except redis.RedisError as error:
            redis_errors.reporter.report(batch[0].site, error)
            if redis_errors.is_unavailable(error):
                return 0
            logger.error("%d status/history write(s) dropped with it", len(batch))
            return len(batch)
        for index, (write, span) in enumerate(zip(batch, spans, strict=True)):
            errors = [r for r in replies[slice(*span)] if isinstance(r, Exception)] if span else []
            if any(redis_errors.is_unavailable(error) for error in errors):
                redis_errors.reporter.report(write.site, errors[0])
                return index
            if errors:
                self._drop(write, errors[0])
            elif span:
                redis_errors.reporter.recovered(write.site)
        return len(batch)

    @staticmethod
    def _drop(write: _Write, error: BaseException) -> None:
        logger.error(
            "%s: %s: %s; the write for jid=%s is dropped",
            write.site,
            type(error).__name__,
            error,
            write.jid,
        )


class Writers:
    """One ``Writer`` per config (a process-state part): a writer's thread belongs to the
    process that started it, so a forked child forgets its parent's writers and their pending
    writes (after any fork, not only a swarm's: the parent sends them)."""

    def __init__(self) -> None:
        self._writers: weakref.WeakKeyDictionary[Config, Writer] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self, config: Config) -> Writer:
        with self._lock:
            found = self._writers.get(config)
            if found is None:
                found = self._writers[config] = Writer()
            return found

    def find(self, config: Config) -> Writer | None:
        with self._lock:
            return self._writers.get(config)

    def pop(self, config: Config) -> Writer | None:
        with self._lock:
            return self._writers.pop(config, None)

    def pop_all(self) -> list[Writer]:
        with self._lock:
            found = list(self._writers.values())
            self._writers.clear()
            return found

    def reset(self) -> None:
        # a fresh lock too: a fork may have happened while another thread held this one
        self._writers, self._lock = weakref.WeakKeyDictionary(), threading.Lock()


_writers = state.hold("status writers", Writers())


def writer(config: Config) -> Writer:
    """The background writer of ``config`` (made on first use)."""
    return _writers.get(config)


def flush(config: Config, timeout: float = 5.0) -> bool:
    """Wait until the status and history writes made so far with ``config`` are sent (or
    dropped); False if some still wait after ``timeout`` seconds."""
    found = _writers.find(config)
    return found is None or found.flush(timeout)


def close(config: Config, timeout: float = 5.0) -> None:
    """For a stopping worker: send the writes still waiting for up to ``timeout`` seconds,
    then drop the rest with one reported line."""
    found = _writers.pop(config)
    if found is not None:
        found.close(timeout)


def _close_all() -> None:
    """At interpreter exit, for a process that didn't call ``close``: send what waits."""
    deadline = time.monotonic() + AT_EXIT_WAIT
    for each in _writers.pop_all():
        each.close(max(deadline - time.monotonic(), 0.0))


atexit.register(_close_all)
os.register_at_fork(after_in_child=_writers.reset)
