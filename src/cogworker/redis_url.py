"""What a Redis URL may say, checked before any connection is made: its scheme, and only
query options that cogworker's clients apply as written.

redis-py passes an option it doesn't parse itself to the connection class, so a misspelt
one (``ssl_ca_cert``) fails only at the first connection; some it does parse would override
a setting cogworker makes on purpose (``socket_timeout``, the pool's size) or do nothing
under it (``retry_on_timeout``). Those are refused here, in one line naming the option.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit, urlunsplit

from redis.connection import parse_url

from cogworker import connection

SCHEMES = ("redis://", "rediss://", "unix://", f"{connection.SENTINEL_SCHEME}://")

# the query options of a redis://, rediss:// or unix:// URL that cogworker's clients honour
URL_OPTIONS = frozenset(
    {"db", "client_name", "socket_connect_timeout", "socket_keepalive", "health_check_interval"}
)
TLS_URL_OPTIONS = frozenset(
    {
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_cert_reqs",
        "ssl_check_hostname",
        "ssl_ciphers",
        "ssl_min_version",
    }
)
# options redis-py reads that cogworker sets itself: refused rather than half applied
_REFUSED_URL_OPTIONS = {
    "socket_timeout": "set the redis_socket_timeout option instead",
    "max_connections": "the pool size follows the concurrency",
    "timeout": "cogworker sets the pool's wait",
    "retry_on_timeout": "cogworker never re-sends a command",
    "retry_on_error": "cogworker never re-sends a command",
}


def check_url(url: str) -> None:
    """Raise ``ValueError`` (one line, no password) if ``url`` can't be used as written: an
    unknown scheme, a malformed ``redis+sentinel://`` URL, or a query option that would not
    be applied (``ssl_*`` options outside a ``rediss://`` URL among them)."""
    if not url.startswith(SCHEMES):
        raise ValueError(f"the URL must start with {', '.join(SCHEMES)}")
    if connection.is_sentinel_url(url):
        connection.parse_sentinel_url(url)
        return
    allowed = URL_OPTIONS | TLS_URL_OPTIONS if url.startswith("rediss://") else URL_OPTIONS
    for name in parse_qs(urlsplit(url).query, keep_blank_values=True):
        if name in allowed:
            continue
        if name in _REFUSED_URL_OPTIONS:
            raise ValueError(f"URL option {name!r} is not taken: {_REFUSED_URL_OPTIONS[name]}")
        if name in TLS_URL_OPTIONS:
            raise ValueError(f"URL option {name!r} needs a rediss:// URL")
        raise ValueError(f"unknown URL option {name!r} (allowed: {', '.join(sorted(allowed))})")
    # the values: "Invalid value for 'db' in connection URL." and the like
    parse_url(url)  # type: ignore[no-untyped-call]
    cert_reqs = parse_qs(urlsplit(url).query).get("ssl_cert_reqs", ["required"])[-1]
    if cert_reqs not in ("none", "optional", "required"):
        raise ValueError(f"URL option ssl_cert_reqs={cert_reqs!r}: use none, optional or required")


def without_credentials(url: str) -> str:
    """``url`` as written, less its user, password and query (``sentinel_password``...)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
