"""Redis clients with settings chosen for a job queue rather than redis-py's defaults.

redis-py re-sends a command after a connection error or a read timeout. For a job queue that
is wrong: an LPUSH or a script whose reply was lost may already have run, and sending it again
would enqueue or move a job twice. So commands are never retried by the client; only opening a
connection is (nothing has been sent yet). Callers retry idempotent reads themselves.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.retry import Retry

DEFAULT_URL = "redis://localhost:6379/0"

_CONNECT_RETRY = Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3)


class _ConnectRetryMixin:
    """Retry establishing a connection, and only that."""

    def connect(self) -> None:
        _CONNECT_RETRY.call_with_retry(
            lambda: self.connect_check_health(  # type: ignore[attr-defined]
                check_health=True, retry_socket_connect=False
            ),
            lambda error: self.disconnect(error),  # type: ignore[attr-defined]
        )


class TCPConnection(_ConnectRetryMixin, redis.Connection):
    pass


class SSLConnection(_ConnectRetryMixin, redis.SSLConnection):
    pass


class UnixConnection(_ConnectRetryMixin, redis.UnixDomainSocketConnection):
    pass


def resolve_url(url: str | None) -> str:
    """The Redis URL to use: the argument, else ``$REDIS_URL``, else the local default."""
    return url or os.environ.get("REDIS_URL") or DEFAULT_URL


def redacted_url(url: str | None) -> str:
    """The Redis URL that ``url`` resolves to, without credentials: for logs and messages."""
    parts = urlsplit(resolve_url(url))
    if parts.scheme == "unix":
        return f"unix://{parts.path}"
    host = parts.hostname or "localhost"
    port = parts.port or 6379
    database = parts.path.lstrip("/") or "0"
    return f"{parts.scheme}://{host}:{port}/{database}"


def connect(
    url: str | None = None,
    *,
    max_connections: int = 50,
    socket_timeout: float = 5.0,
    pool_timeout: float = 5.0,
    **extra: Any,
) -> redis.Redis:
    """A thread-safe client backed by a blocking pool of at most ``max_connections``.

    ``socket_timeout`` must exceed the timeout of any blocking command sent through it.
    Threads wait up to ``pool_timeout`` for a free connection instead of opening more.
    """
    url = resolve_url(url)
    scheme = urlsplit(url).scheme
    connection_class: type[redis.Connection] | type[redis.UnixDomainSocketConnection]
    if scheme == "unix":
        connection_class = UnixConnection
    elif scheme == "rediss":
        connection_class = SSLConnection
    else:
        connection_class = TCPConnection
    pool = redis.BlockingConnectionPool.from_url(
        url,
        connection_class=connection_class,
        max_connections=max_connections,
        timeout=pool_timeout,
        socket_timeout=socket_timeout,
        socket_connect_timeout=min(socket_timeout, 5.0),
        retry=Retry(NoBackoff(), 0),
        health_check_interval=30,
        decode_responses=True,
        **extra,
    )
    return redis.Redis.from_pool(pool)  # closing the client closes its pool too
