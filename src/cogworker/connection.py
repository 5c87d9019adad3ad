"""Redis clients with settings chosen for a job queue rather than redis-py's defaults.

redis-py re-sends a command after a connection error or a read timeout. For a job queue that
is wrong: an LPUSH or a script whose reply was lost may already have run, and sending it again
would enqueue or move a job twice. So commands are never retried by the client; only opening a
connection is (nothing has been sent yet). Callers retry idempotent reads themselves.

Replies are decoded losslessly: a byte that isn't valid UTF-8 (any producer may write one)
becomes a lone surrogate (U+DC80..U+DCFF) instead of raising, and is turned back into the
same byte when the string is sent again, so a payload is still matched by its exact stored
bytes (LREM, ZREM, LPOS...). Whether a payload is valid text is decided where it is parsed.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.connection import PythonRespSerializer
from redis.retry import Retry

try:  # redis-py 8
    from redis.driver_info import DriverInfo
except ImportError:  # older releases read their version once, at import
    DriverInfo = None  # type: ignore[assignment,misc]

DEFAULT_URL = "redis://localhost:6379/0"
LOSSLESS_DECODING = "surrogateescape"

_DRIVER_INFO = DriverInfo(lib_version=redis.__version__) if DriverInfo is not None else None
_CONNECT_RETRY = Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3)


class _LosslessPacker:
    """hiredis encodes command arguments as strict UTF-8, so it refuses a string that holds
    bytes decoded losslessly; such a (rare) command is packed by redis-py's own packer, which
    honours the connection's ``encoding_errors``."""

    def __init__(self, fast: Any, exact: PythonRespSerializer) -> None:
        self._fast = fast
        self._exact = exact

    def pack(self, *args: Any) -> Any:
        try:
            return self._fast.pack(*args)
        except UnicodeEncodeError:
            return self._exact.pack(*args)  # type: ignore[no-untyped-call]


class _ConnectRetryMixin:
    """Retry establishing a connection, and only that; pack every argument losslessly."""

    def _construct_command_packer(self, packer: Any) -> Any:
        chosen = super()._construct_command_packer(packer)  # type: ignore[misc]
        if isinstance(chosen, PythonRespSerializer):
            return chosen
        exact = PythonRespSerializer(
            self._buffer_cutoff,  # type: ignore[attr-defined]
            self.encoder.encode,  # type: ignore[attr-defined]
        )
        return _LosslessPacker(chosen, exact)

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
    if _DRIVER_INFO is not None and "driver_info" not in extra:
        # without one, redis-py 8 builds a DriverInfo for every connection, which reads the
        # package's metadata from disk: about 1 ms of CPU per connection opened
        extra["driver_info"] = _DRIVER_INFO
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
        encoding_errors=LOSSLESS_DECODING,
        **extra,
    )
    return redis.Redis.from_pool(pool)  # closing the client closes its pool too


def dedicated(client: redis.Redis) -> redis.connection.AbstractConnection:
    """A connection with ``client``'s settings that no pool hands out: for one thread that
    sends a command per job, so each call skips the pool's locking and the client's per-command
    wrappers (see bench/redis_overhead.py). Opened on first use; close it with
    ``disconnect``."""
    pool = client.connection_pool
    held: redis.connection.AbstractConnection = pool.connection_class(**pool.connection_kwargs)
    return held
