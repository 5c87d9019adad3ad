"""A dedicated connection for a fetch's blocking commands (BLMOVE, BRPOP)."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import Any

import redis

from cogworker import connection
from cogworker.config import Config

logger = logging.getLogger("cogworker")

UNBLOCKED = "UNBLOCKED"  # the error a command woken by CLIENT UNBLOCK ... ERROR gets


class BlockingConnection:
    """A connection for blocking commands, which another thread can wake early.

    Waking uses CLIENT UNBLOCK with the connection's id (read again after every reconnect),
    so a worker with a long block time still stops or quiets at once. It asks for an error
    reply, not a timeout: a command that CLIENT PAUSE holds back (a BLMOVE during a
    fail-over's write pause, say) is blocked too, and Redis before 8.2 crashes when such a
    client is unblocked by timeout. With the error, such a server also runs the held-back
    command later, so a woken connection is closed rather than reused: a job that command
    moves is a stray on the in-progress list, which reconcile or the hand-back requeues.

    Valkey does not let CLIENT UNBLOCK end a command held back by CLIENT PAUSE (it answers
    0), so then the waker shuts the connection's socket down instead: the blocked call ends
    at once with the connection closed, which is a wake too (a held-back command of a client
    that has gone is never run).
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
        self._cut = False  # the waker shut the socket down: the call's connection error is a wake
        self._lock = threading.Lock()
        self.woken = False  # whether the last call ended by a wake rather than its reply

    def call(self, *command: Any) -> Any:
        """Run one (blocking) command; returns its reply (None when woken: see ``woken``)."""
        self.woken = False
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
                    self.woken = True
                    return None
                self._blocked = True
            conn.send_command(*command)
            return conn.read_response()
        except BaseException as error:
            self._client_id = None
            conn.disconnect()
            woken = isinstance(error, redis.ResponseError) and str(error).startswith(UNBLOCKED)
            if woken or (self._cut and isinstance(error, redis.ConnectionError)):
                self.woken = True  # see the class docstring
                return None
            raise
        finally:
            with self._lock:
                self._blocked = self._cut = False

    def wake(self, waker: redis.Redis) -> None:
        with self._lock:
            client_id = self._client_id if self._blocked else None
            self._wake_pending = not self._blocked
        if client_id is None:
            return
        try:
            if waker.client_unblock(client_id, error=True):
                return
        except redis.RedisError as error:
            logger.debug("couldn't wake the fetch connection: %s", error)
        self._cut_socket()

    def _cut_socket(self) -> None:
        """End a blocked call that CLIENT UNBLOCK couldn't (see the class docstring)."""
        with self._lock:
            sock = getattr(self._connection, "_sock", None) if self._blocked else None
            if sock is None:
                return
            self._cut = True
            with contextlib.suppress(OSError):  # already closed: the call ends by itself
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.disconnect()
            self._client.connection_pool.release(self._connection)
            self._connection = None
        self._client.close()
