"""Request safety: the same-origin rule for unsafe methods, and the headers on every response.

The same-origin rule (``same_origin``) decides whether a request may change anything:

* GET, HEAD and OPTIONS never change anything and always pass;
* otherwise, when the browser sent ``Sec-Fetch-Site``, it must be ``same-origin``
  (``same-site``, ``cross-site`` and ``none`` are refused);
* browsers send that header only to HTTPS and localhost origins, so when it is absent the
  ``Origin`` header (else the ``Referer``) must name the request's own scheme, host and port
  (a dashboard served over plain HTTP on an internal host name works);
* with neither header the request is refused.

A refused request is answered ``403 Forbidden`` before any other layer, the host's
middleware included, sees it. Behind a proxy that terminates TLS, run the server with
forwarded-header support (uvicorn ``--proxy-headers``) so the request's scheme is right.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _origin_of(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an absolute URL, or None if it isn't one."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def request_origin(scope: Scope) -> tuple[str, str, int] | None:
    """(scheme, host, port) the request was sent to, from its ``Host`` header."""
    host = Headers(scope=scope).get("host")
    if host is None and scope.get("server"):
        server_host, server_port = scope["server"]
        host = f"{server_host}:{server_port}"
    if not host:
        return None
    return _origin_of(f"{scope.get('scheme', 'http')}://{host}")


def same_origin(scope: Scope) -> bool:
    """The default rule (see the module docstring): may this request change anything?"""
    if scope.get("method", "GET") in SAFE_METHODS:
        return True
    headers = Headers(scope=scope)
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site.strip().lower() == "same-origin"
    claimed = headers.get("origin") or headers.get("referer")
    if not claimed or claimed.strip().lower() == "null":
        return False
    origin = _origin_of(claimed.strip())
    return origin is not None and origin == request_origin(scope)


CSP = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "object-src 'none'",
    )
)


def security_headers(frame_options: str | None) -> list[tuple[bytes, bytes]]:
    """The headers every response carries: a strict Content-Security-Policy (no inline
    script, style or event handler), framing, referrer and MIME-sniffing rules."""
    ancestors = {"DENY": "'none'", "SAMEORIGIN": "'self'"}.get(frame_options or "")
    policy = CSP + (f"; frame-ancestors {ancestors}" if ancestors else "")
    headers = [
        (b"content-security-policy", policy.encode("ascii")),
        (b"referrer-policy", b"same-origin"),
        (b"x-content-type-options", b"nosniff"),
    ]
    if frame_options is not None:
        headers.append((b"x-frame-options", frame_options.encode("ascii")))
    return headers


def with_headers(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    """``send`` that adds ``extra`` to the response's headers (replacing same-named ones)."""
    names = {name for name, _ in extra}

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
            message = {**message, "headers": kept + extra}
        await send(message)

    return sending


async def forbid(send: Send) -> None:
    """Answer 403 with a short plain-text body."""
    body = b"Forbidden"
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
