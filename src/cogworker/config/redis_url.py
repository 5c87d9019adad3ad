"""What a Redis URL may say, checked before any connection is made: its scheme, and only
query options that cogworker's clients apply as written.

redis-py passes an option it doesn't parse itself to the connection class, so a misspelt
one (``ssl_ca_cert``) fails only at the first connection; some it does parse would override
a setting cogworker makes on purpose (``socket_timeout``, the pool's size) or do nothing
under it (``retry_on_timeout``). Those are refused here, in one line naming the option, and
so is what redis-py would read otherwise than written: an option given twice (it takes the
first), an empty one (dropped), a database both in the path and in ``?db=`` (the query wins).
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

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
    unknown scheme, a malformed ``redis+sentinel://`` URL, a query option that would not be
    applied (``ssl_*`` options outside a ``rediss://`` URL among them), or one redis-py would
    read otherwise than written (given twice, empty, a database in the path and the query)."""
    if not url.startswith(SCHEMES):
        raise ValueError(f"the URL must start with {', '.join(SCHEMES)}")
    if connection.is_sentinel_url(url):
        connection.parse_sentinel_url(url)
        return
    parts = urlsplit(url)
    options = _query_options(parts.query, rediss=parts.scheme == "rediss")
    if parts.scheme != "unix":  # a unix:// path is the socket's, never a database
        _check_path_database(parts.path, "db" in options)
    # the values: "Invalid value for 'db' in connection URL." and the like
    parse_url(url)  # type: ignore[no-untyped-call]
    for name in _BOOLEAN_URL_OPTIONS & options.keys():
        if options[name].upper() not in _BOOLEAN_WORDS:
            raise ValueError(f"URL option {name}={options[name]!r}: use true or false")
    cert_reqs = options.get("ssl_cert_reqs", "required")
    if cert_reqs not in ("none", "optional", "required"):
        raise ValueError(f"URL option ssl_cert_reqs={cert_reqs!r}: use none, optional or required")


# redis-py's to_bool takes any word but these (and "") as true, a misspelt "flase" too
_BOOLEAN_URL_OPTIONS = frozenset({"socket_keepalive", "ssl_check_hostname"})
_BOOLEAN_WORDS = frozenset({"0", "F", "FALSE", "N", "NO", "1", "T", "TRUE", "Y", "YES"})


def _query_options(query: str, *, rediss: bool) -> dict[str, str]:
    """The query's options, each known, applied, given once and not empty."""
    allowed = URL_OPTIONS | TLS_URL_OPTIONS if rediss else URL_OPTIONS

    def refusal(name: str) -> str | None:
        if name in _REFUSED_URL_OPTIONS:
            return f"URL option {name!r} is not taken: {_REFUSED_URL_OPTIONS[name]}"
        if name in TLS_URL_OPTIONS and not rediss:
            return f"URL option {name!r} needs a rediss:// URL"
        if name not in allowed:
            return f"unknown URL option {name!r} (allowed: {', '.join(sorted(allowed))})"
        return None

    return connection.query_options(query, refusal, "URL option")


def _check_path_database(path: str, db_in_query: bool) -> None:
    """The path is empty, ``/`` or ``/<number>``: redis-py reads ``/1/2`` as database 12,
    ignores ``/x``, and lets ``?db=`` win over the path."""
    number = unquote(path).removeprefix("/")
    if number and not re.fullmatch(r"[0-9]+", number):
        raise ValueError(f"the path must be /<database number>, got {path!r}")
    if number and db_in_query:
        raise ValueError(f"the database is given both in the path ({path!r}) and as ?db=")


def without_credentials(url: str) -> str:
    """``url`` as written, less its user, password and query (``sentinel_password``...)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
