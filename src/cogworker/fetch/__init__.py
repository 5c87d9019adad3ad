"""Taking jobs off queues, and the Redis side of settling them.

Two strategies share one interface:

* ``ReliableFetch`` (default): each job is moved atomically from its queue onto this process's
  ``cogworker:inprogress:<identity>`` list and stays there until it is settled, so a job is
  always in Redis; a crashed process's list is requeued by orphan recovery.
* ``BasicFetch``: BRPOP; a job popped by a process that then dies is lost. For Redis < 6.2.

Both honour paused queues and the queue weights (a queue listed n times is tried first n times
as often).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from cogworker import connection, keys
from cogworker.config import Config

logger = logging.getLogger("cogworker")

PAUSED_CACHE_SECONDS = 5.0
NO_QUEUE_SLEEP = 2.0


class UnsupportedError(RuntimeError):
    """This Redis lacks a command reliable fetch needs (LMOVE / BLMOVE: Redis < 6.2)."""


@dataclass(frozen=True, slots=True)
class Work:
    """A job taken off a queue: the queue name and the payload exactly as stored; ``jid``
    once the payload was parsed, so settling it doesn't parse it again to name its orphan
    counter (``reliable.orphan_counter``)."""

    queue: str
    raw: str
    jid: str | None = field(default=None, compare=False)


class Fetch(Protocol):
    mode: str

    def retrieve(self, wanted: int) -> list[Work]:
        """Up to ``wanted`` jobs; may block a while (``wake`` ends the wait) and return none."""

    def wake(self) -> None:
        """End a blocking ``retrieve`` early (called from another thread at quiet / stop)."""

    def give_back(self, work: Work) -> None:
        """Put a job that did not run back at the tail of its queue (it runs next)."""

    def acknowledge(self, works: Sequence[Work]) -> list[bool]:
        """Forget finished jobs; True for each that was still held."""

    def interrupt(self, work: Work, target: str, score: float, payload: str) -> bool:
        """File ``payload`` into ``target`` in place of ``work`` (recording its failure failed)."""

    def requeue_in_progress(
        self, identity: str, *, finished: Sequence[str] = (), keep: Sequence[str] = ()
    ) -> int:
        """At shutdown: put this process's unfinished jobs back on their queues."""

    def close(self) -> None: ...


class PausedQueues:
    """The names in ``cogworker:paused_queues``, re-read at most every 5 s (idle load)."""

    def __init__(self, client: redis.Redis, ttl: float = PAUSED_CACHE_SECONDS) -> None:
        self._client = client
        self._ttl = ttl
        self._names: set[str] = set()
        self._read_at = -ttl

    def get(self) -> set[str]:
        now = time.monotonic()
        if now - self._read_at >= self._ttl:
            self._names = {str(name) for name in self._client.smembers(keys.PAUSED_QUEUES)}
            self._read_at = now
        return self._names


def weighted_order(queues: Sequence[str], paused: set[str]) -> list[str]:
    """Active queue names, shuffled by weight then de-duplicated (first occurrence kept)."""
    active = [name for name in queues if name not in paused]
    random.shuffle(active)
    return list(dict.fromkeys(active))


class BlockingConnection:
    """A dedicated connection for blocking commands, which another thread can wake early.

    Waking uses CLIENT UNBLOCK with the connection's id (read again after every reconnect),
    so a worker with a long block time still stops or quiets at once.
    """

    def __init__(self, config: Config, block_seconds: float) -> None:
        self._client = connection.connect(
            config.redis_url,
            max_connections=1,
            socket_timeout=block_seconds + max(config.redis_socket_timeout, 5.0),
        )
        self._connection: Any = None
        self._client_id: int | None = None
        self._blocked = False
        self._wake_pending = False
        self._lock = threading.Lock()

    def call(self, *command: Any) -> Any:
        """Run one (blocking) command; returns its reply."""
        conn = self._connection
        if conn is None:
            conn = self._connection = self._client.connection_pool.get_connection()
        try:
            if self._client_id is None or conn._sock is None:
                conn.send_command("CLIENT", "ID")
                self._client_id = int(conn.read_response())
            with self._lock:
                if self._wake_pending:  # woken just before blocking: don't block at all
                    self._wake_pending = False
                    return None
                self._blocked = True
            conn.send_command(*command)
            return conn.read_response()
        except BaseException:
            self._client_id = None
            conn.disconnect()
            raise
        finally:
            with self._lock:
                self._blocked = False

    def wake(self, waker: redis.Redis) -> None:
        with self._lock:
            client_id = self._client_id if self._blocked else None
            self._wake_pending = not self._blocked
        if client_id is not None:
            try:
                waker.client_unblock(client_id)
            except redis.RedisError as error:
                logger.debug("couldn't wake the fetch connection: %s", error)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.disconnect()
            self._client.connection_pool.release(self._connection)
            self._connection = None
        self._client.close()


def queued_ttl(config: Config) -> int:
    """TTL of a cron run's running lock while it waits on a queue."""
    import math

    return math.ceil(config.unique_lock_ttl)


def requeue_args(config: Config) -> list[Any]:
    """ARGV of the requeue helper: queue prefix, default queue, lock prefix, lock TTL."""
    return [keys.QUEUE_PREFIX, "default", keys.PERIODIC_RUNNING_PREFIX, queued_ttl(config)]
