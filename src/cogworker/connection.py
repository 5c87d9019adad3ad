"""Redis clients with settings chosen for a job queue rather than redis-py's defaults.

redis-py re-sends a command after a connection error or a read timeout. For a job queue that
is wrong: an LPUSH or a script whose reply was lost may already have run, and sending it again
would enqueue or move a job twice. So commands are never retried by the client; only opening a
connection is (nothing has been sent yet). Callers retry idempotent reads themselves.

Replies are decoded losslessly: a byte that isn't valid UTF-8 (any producer may write one)
becomes a lone surrogate (U+DC80..U+DCFF) instead of raising, and is turned back into the
same byte when the string is sent again, so a payload is still matched by its exact stored
bytes (LREM, ZREM, LPOS...). Whether a payload is valid text is decided where it is parsed.

A ``redis+sentinel://`` URL gives the same clients, whose connections ask the sentinels for
the primary each time they connect: after a fail-over they reconnect to the promoted
replica, and asking is part of connecting, so it is retried while a command never is. The
URL's shape::

    redis+sentinel://[[username]:password@]host[:port][,host[:port]...]/service[/db][?options]

- the hosts are the sentinels (port 26379 unless given), asked in the order written;
- ``service`` is the name the sentinels monitor the primary under (``sentinel monitor
  <service> ...``); ``db`` is the database number on it (0 unless given);
- the username and password are those of the primary (and its replicas), as in a
  ``redis://`` URL; sentinels that require their own are given the ``sentinel_username``
  and ``sentinel_password`` options. Percent-encode ``@ , / : ? # %`` in any of them.

No other option is taken: an unknown one, a repeated one or a fragment is refused rather
than silently not applied. TLS (``rediss+sentinel``) is not supported.

An error raised while a connection opens (the socket, the handshake, asking the sentinels) is
marked: ``not_sent(error)`` is then True, and the command that needed the connection certainly
did not run, where any other error leaves that unknown (a reply lost after sending).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.connection import PythonRespSerializer
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection
from redis.utils import SENTINEL

try:  # redis-py 8
    from redis.driver_info import DriverInfo
except ImportError:  # older releases read their version once, at import
    DriverInfo = None  # type: ignore[assignment,misc]

DEFAULT_URL = "redis://localhost:6379/0"
LOSSLESS_DECODING = "surrogateescape"

_DRIVER_INFO = DriverInfo(lib_version=redis.__version__) if DriverInfo is not None else None
_CONNECT_RETRY = Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3)


_NOT_SENT = "_cogworker_not_sent"


def not_sent(error: BaseException) -> bool:
    """True if ``error`` was raised while the connection a command needed was being opened:
    no byte of that command was sent, so it certainly did not run. False says nothing (the
    command may have run and its reply been lost)."""
    return getattr(error, _NOT_SENT, False) is True


def _opening(connect: Callable[[], None]) -> None:
    """Run ``connect``, marking what it raises as ``not_sent`` (a connect callback's error
    too: pub/sub's re-subscription runs there, before the command waiting for the
    connection). The mark is an attribute, not a subclass: the error's class stays the one
    redis-py raised, as logs and a job's ``error_class`` show it."""
    try:
        connect()
    except redis.RedisError as error:
        setattr(error, _NOT_SENT, True)
        raise


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


class _LosslessPackingMixin:
    """Pack every argument losslessly (see ``_LosslessPacker``)."""

    def _construct_command_packer(self, packer: Any) -> Any:
        chosen = super()._construct_command_packer(packer)  # type: ignore[misc]
        if isinstance(chosen, PythonRespSerializer):
            return chosen
        exact = PythonRespSerializer(
            self._buffer_cutoff,  # type: ignore[attr-defined]
            self.encoder.encode,  # type: ignore[attr-defined]
        )
        return _LosslessPacker(chosen, exact)


class _ConnectRetryMixin(_LosslessPackingMixin):
    """Retry establishing a connection, and only that; pack every argument losslessly."""

    def connect(self) -> None:
        _CONNECT_RETRY.call_with_retry(
            lambda: self.connect_check_health(check_health=True, retry_socket_connect=False),
            lambda error: self.disconnect(error),  # type: ignore[attr-defined]
        )

    def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        # redis-py also opens a closed connection through here when a command is sent on it
        opening = super().connect_check_health  # type: ignore[misc]
        _opening(lambda: opening(check_health, retry_socket_connect))


class TCPConnection(_ConnectRetryMixin, redis.Connection):
    pass


class SSLConnection(_ConnectRetryMixin, redis.SSLConnection):
    pass


class UnixConnection(_ConnectRetryMixin, redis.UnixDomainSocketConnection):
    pass


class SentinelConnection(_LosslessPackingMixin, SentinelManagedConnection):
    """A connection to the server the sentinels name as the primary when it connects."""

    def connect(self) -> None:
        self.connect_check_health(check_health=True, retry_socket_connect=False)

    def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        # redis-py connects a closed connection through here when a command is sent on it,
        # not through connect(), so asking the sentinels must happen here; it is retried
        # with the connecting: a primary just failed is named until a replica is promoted
        if self._sock:
            return
        _opening(
            lambda: _CONNECT_RETRY.call_with_retry(
                lambda: self._connect_to_primary(check_health),
                lambda error: self.disconnect(error),  # type: ignore[no-untyped-call]
            )
        )

    def read_response(
        self,
        disable_decoding: bool = False,
        *,
        timeout: float | object = SENTINEL,
        disconnect_on_error: bool | None = True,
        push_request: bool | None = False,
    ) -> Any:
        # redis-py's sentinel connection keeps a connection whose read failed (its default
        # differs from every other connection's): a reply still on its way would then be
        # read as the next command's
        return super().read_response(
            disable_decoding,
            timeout=timeout,
            disconnect_on_error=disconnect_on_error,
            push_request=push_request,
        )

    def _connect_to_primary(self, check_health: bool) -> None:
        self.host, self.port = self.connection_pool.get_master_address()
        super().connect_check_health(check_health=check_health, retry_socket_connect=False)


class SentinelBlockingPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """A blocking pool (as for a ``redis://`` URL) of connections to the current primary."""

    def owns_connection(self, connection: Any) -> bool:
        # redis-py's sentinel pool disowns a connection not on the current primary, so the
        # pool makes a new object every time, and keeps the old one listed: one more per failed
        # connect during an outage. Kept instead, and closed by ``release``.
        return bool(redis.BlockingConnectionPool.owns_connection(self, connection))

    def release(self, connection: Any) -> None:
        if (connection.host, connection.port) != self.master_address:
            connection.disconnect()  # on a former primary: its next use asks the sentinels
        super().release(connection)  # type: ignore[no-untyped-call]

    def disconnect(self, inuse_connections: bool = True) -> None:
        super().disconnect(inuse_connections)
        if inuse_connections:  # closing everything (``Redis.close``): the sentinel links too
            self.sentinel_manager.close()


def resolve_url(url: str | None) -> str:
    """The Redis URL to use: the argument, else ``$REDIS_URL``, else the local default."""
    return url or os.environ.get("REDIS_URL") or DEFAULT_URL


def redacted_url(url: str | None) -> str:
    """The Redis URL that ``url`` resolves to, without credentials: for logs and messages."""
    url = resolve_url(url)
    if is_sentinel_url(url):
        try:
            return parse_sentinel_url(url).redacted()
        except SentinelUrlError:
            return f"{SENTINEL_SCHEME}://(an invalid URL)"
    parts = urlsplit(url)
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
    settings: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": min(socket_timeout, 5.0),
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 30,
        "decode_responses": True,
        "encoding_errors": LOSSLESS_DECODING,
        **extra,
    }
    if _DRIVER_INFO is not None and "driver_info" not in extra:
        # without one, redis-py 8 builds a DriverInfo for every connection, which reads the
        # package's metadata from disk: about 1 ms of CPU per connection opened
        settings["driver_info"] = _DRIVER_INFO
    pool: redis.ConnectionPool
    if is_sentinel_url(url):
        pool = _sentinel_pool(parse_sentinel_url(url), max_connections, pool_timeout, settings)
    else:
        pool = redis.BlockingConnectionPool.from_url(
            url,
            connection_class=_connection_class(urlsplit(url).scheme),
            max_connections=max_connections,
            timeout=pool_timeout,
            **settings,
        )
    return redis.Redis.from_pool(pool)  # closing the client closes its pool too


def _connection_class(scheme: str) -> type[redis.Connection | redis.UnixDomainSocketConnection]:
    if scheme == "unix":
        return UnixConnection
    if scheme == "rediss":
        return SSLConnection
    return TCPConnection


def _sentinel_pool(
    target: SentinelUrl,
    max_connections: int,
    pool_timeout: float,
    settings: dict[str, Any],
) -> SentinelBlockingPool:
    timeout = settings["socket_connect_timeout"]
    # typed only from redis-py 8.2 on; the ignore stays for the older releases allowed
    sentinels = Sentinel(  # type: ignore[no-untyped-call,unused-ignore]
        target.sentinels,
        sentinel_kwargs={
            "socket_timeout": timeout,  # short: an unanswering sentinel is skipped for the next
            "socket_connect_timeout": timeout,
            "username": target.sentinel_username,
            "password": target.sentinel_password,
            "retry": Retry(NoBackoff(), 0),  # the connection's own connect retry covers it
            **({"driver_info": settings["driver_info"]} if "driver_info" in settings else {}),
        },
    )
    return SentinelBlockingPool(  # type: ignore[no-untyped-call]
        target.service,
        sentinels,
        connection_class=SentinelConnection,
        max_connections=max_connections,
        timeout=pool_timeout,
        db=target.db,
        username=target.username,
        password=target.password,
        **settings,
    )


def dedicated(client: redis.Redis) -> redis.connection.AbstractConnection:
    """A connection with ``client``'s settings that no pool hands out: for one thread that
    sends a command per job, so each call skips the pool's locking and the client's per-command
    wrappers (see bench/redis_overhead.py). Opened on first use; close it with
    ``disconnect``."""
    pool = client.connection_pool
    held: redis.connection.AbstractConnection = pool.connection_class(**pool.connection_kwargs)
    return held


# -- redis+sentinel:// URLs ------------------------------------------------------------------

SENTINEL_SCHEME = "redis+sentinel"
DEFAULT_SENTINEL_PORT = 26379
SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")
_IN = f"{SENTINEL_SCHEME} URL:"  # how every error about one starts


class SentinelUrlError(ValueError):
    """A ``redis+sentinel://`` URL that can't be used; the message says what is wrong."""


@dataclass(frozen=True)
class SentinelUrl:
    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None

    def redacted(self) -> str:
        """The URL without any credential: for logs and messages."""
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.sentinels)
        return f"{SENTINEL_SCHEME}://{hosts}/{self.service}/{self.db}"


def is_sentinel_url(url: str) -> bool:
    return url.startswith(f"{SENTINEL_SCHEME}://")


def parse_sentinel_url(url: str) -> SentinelUrl:
    """Parse a ``redis+sentinel://`` URL; a ``SentinelUrlError`` names what is wrong (and
    never repeats a password)."""
    if not is_sentinel_url(url):
        raise SentinelUrlError(f"a sentinel URL must start with {SENTINEL_SCHEME}://")
    parts = urlsplit(url)
    if parts.fragment:
        raise SentinelUrlError(f"{_IN} a fragment (#...) is not allowed")
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    username, password = _sentinel_credentials(userinfo)
    service, db = _service_and_db(parts.path)
    options = _sentinel_options(parts.query)
    return SentinelUrl(
        sentinels=tuple(_sentinel_address(entry) for entry in hostlist.split(",")),
        service=service,
        db=db,
        username=username,
        password=password,
        **options,
    )


def _sentinel_credentials(userinfo: str) -> tuple[str | None, str | None]:
    if not userinfo:
        return None, None
    username, colon, password = userinfo.partition(":")
    if not colon:  # like redis-py: a lone userinfo is the password (of the default user)
        return None, unquote(username)
    return (unquote(username) or None), unquote(password)


def _sentinel_address(entry: str) -> tuple[str, int]:
    if entry.startswith("["):  # an IPv6 address: [::1]:26379
        host, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise SentinelUrlError(f"{_IN} bad sentinel address {entry!r}")
        port_text = rest[1:] if rest else ""
    else:
        host, _, port_text = entry.partition(":")
    if not host:
        raise SentinelUrlError(f"{_IN} an empty sentinel host in {entry!r} (write host:port,...)")
    if not port_text:
        return host, DEFAULT_SENTINEL_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise SentinelUrlError(f"{_IN} bad port {port_text!r} for sentinel {host}")
    return host, int(port_text)


def _service_and_db(path: str) -> tuple[str, int]:
    segments = path.lstrip("/").split("/") if path.strip("/") else []
    if not segments or not segments[0]:
        raise SentinelUrlError(
            f"{_IN} the service name is missing (write {SENTINEL_SCHEME}://host:port/service/db)"
        )
    if len(segments) > 2:
        raise SentinelUrlError(f"{_IN} the path must be /service[/db], got {path!r}")
    service = unquote(segments[0])
    db_text = segments[1] if len(segments) == 2 else "0"
    if not db_text.isdigit():
        raise SentinelUrlError(f"{_IN} the database must be a number, got {db_text!r}")
    return service, int(db_text)


def _sentinel_options(query: str) -> dict[str, str]:
    def refusal(name: str) -> str | None:
        if name in SENTINEL_OPTIONS:
            return None
        return f"{_IN} unknown option {name!r} (allowed: {', '.join(SENTINEL_OPTIONS)})"

    return query_options(query, refusal, f"{_IN} option", SentinelUrlError)


def query_options(
    query: str,
    refusal: Callable[[str], str | None],
    label: str,
    error: type[ValueError] = ValueError,
) -> dict[str, str]:
    """A URL query's options, each taken (``refusal(name)`` is None, else the message to raise),
    given once and not empty: redis-py takes the first of repeated values and drops an empty
    one without a word. ``label`` starts the message about a repeated or empty one."""
    options: dict[str, str] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        refused = refusal(name)
        if refused is not None:
            raise error(refused)
        if name in options:
            raise error(f"{label} {name!r} is given twice")
        if not value:
            raise error(f"{label} {name!r} is empty")
        options[name] = value
    return options
