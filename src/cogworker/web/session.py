"""The built-in session: a dict in ``scope["session"]`` kept in one signed cookie.

It exists for the host's middleware (an auth layer added with ``use``) and for one-shot
notices. It steps aside when the request already carries a session (the host put its own
session middleware in front), and it is not installed at all when a middleware added with
``use`` is itself a session middleware (see ``provides_session``). The cookie is
``cogworker.session``: JSON, a timestamp and an HMAC-SHA256 signature, HttpOnly,
SameSite=Lax, Secure over HTTPS, scoped to the dashboard's mount path; a cookie that is
tampered with, signed with another secret or older than ``max_age`` is ignored (an empty
session).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE_NAME = "cogworker.session"
MAX_AGE = 14 * 24 * 3600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(data: dict[str, Any], secret: str, now: float | None = None) -> str:
    body = _b64(json.dumps(data, separators=(",", ":")).encode("utf-8"))
    stamp = str(int(time.time() if now is None else now))
    mac = hmac.new(secret.encode("utf-8"), f"{body}.{stamp}".encode("ascii"), hashlib.sha256)
    return f"{body}.{stamp}.{_b64(mac.digest())}"


def unsign(value: str, secret: str, max_age: int = MAX_AGE) -> dict[str, Any] | None:
    """The session dict a cookie value holds, or None if it is forged, foreign or expired."""
    try:
        body, stamp, signature = value.split(".")
        expected = hmac.new(
            secret.encode("utf-8"), f"{body}.{stamp}".encode("ascii"), hashlib.sha256
        ).digest()
        if not hmac.compare_digest(expected, _unb64(signature)):
            return None
        if time.time() - int(stamp) > max_age:
            return None
        data = json.loads(_unb64(body))
    except (ValueError, UnicodeError, binascii.Error):
        return None
    return data if isinstance(data, dict) else None


class CookieSession:
    """ASGI middleware: a signed-cookie session (usable by a host too, with its own name)."""

    provides_session = True

    def __init__(
        self,
        app: ASGIApp,
        secret: str,
        cookie_name: str = COOKIE_NAME,
        max_age: int = MAX_AGE,
    ) -> None:
        self.app = app
        self.secret = secret
        self.cookie_name = cookie_name
        self.max_age = max_age

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or "session" in scope:  # the host's session wins
            await self.app(scope, receive, send)
            return
        loaded = self._load(scope)
        scope["session"] = dict(loaded)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                cookie = self._cookie_header(scope, loaded, scope["session"])
                if cookie is not None:
                    message = {**message, "headers": [*message.get("headers", []), cookie]}
            await send(message)

        await self.app(scope, receive, sending)

    def _load(self, scope: Scope) -> dict[str, Any]:
        for name, value in scope.get("headers", []):
            if name != b"cookie":
                continue
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # a malformed Cookie header: treat as no cookie
                continue
            if self.cookie_name in jar:
                return unsign(jar[self.cookie_name].value, self.secret, self.max_age) or {}
        return {}

    def _cookie_header(
        self, scope: Scope, before: dict[str, Any], after: dict[str, Any]
    ) -> tuple[bytes, bytes] | None:
        if after == before:
            return None
        path = scope.get("root_path") or "/"
        attributes = f"Path={path}; HttpOnly; SameSite=Lax"
        if scope.get("scheme") == "https":
            attributes += "; Secure"
        if after:
            value = sign(dict(after), self.secret)
            text = f"{self.cookie_name}={value}; Max-Age={self.max_age}; {attributes}"
        else:
            text = f"{self.cookie_name}=; Max-Age=0; {attributes}"
        return b"set-cookie", text.encode("latin-1")


def provides_session(middleware: object) -> bool:
    """Is this middleware class itself a session (then the built-in one is not installed)?
    True for ``CookieSession`` and subclasses, anything with ``provides_session = True``,
    and Starlette's ``SessionMiddleware``."""
    if getattr(middleware, "provides_session", False) is True:
        return True
    sessions = sys.modules.get("starlette.middleware.sessions")  # loaded if the host uses it
    starlette_session = getattr(sessions, "SessionMiddleware", None)
    return (
        isinstance(middleware, type)
        and starlette_session is not None
        and issubclass(middleware, starlette_session)
    )
