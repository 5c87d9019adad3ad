"""The dashboard's own stylesheet, script and icon, served from package data under ``assets/``.

Pages link each file with its content hash (``assets/app.js?v=<hash>``): a request carrying
the current hash may be cached for a year, any other gets ``no-cache`` and revalidates
cheaply (``ETag`` and ``Last-Modified``, answered 304). The files hold no data, so they are
served before the host's middleware, like the Ruby original (an auth layer doesn't guard them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.datastructures import Headers

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

STATIC_DIR = Path(__file__).parent / "static"
PREFIX = "/assets/"
TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
YEAR = 365 * 24 * 3600


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    version: str
    modified: float

    @property
    def etag(self) -> str:
        return f'"{self.version}"'


def load_assets(directory: Path = STATIC_DIR) -> dict[str, Asset]:
    found = {}
    for path in sorted(directory.iterdir()):
        if path.suffix in TYPES and path.is_file():
            body = path.read_bytes()
            found[path.name] = Asset(
                body,
                TYPES[path.suffix],
                hashlib.sha256(body).hexdigest()[:12],
                path.stat().st_mtime,
            )
    return found


ASSETS = load_assets()


def asset_url_path(name: str) -> str:
    """``assets/<name>?v=<hash>`` (relative to the mount)."""
    return f"assets/{name}?v={ASSETS[name].version}"


def _not_modified(headers: Headers, asset: Asset) -> bool:
    tags = headers.get("if-none-match")
    if tags is not None:
        return asset.etag in [tag.strip() for tag in tags.split(",")] or tags.strip() == "*"
    since = headers.get("if-modified-since")
    if since:
        try:
            return parsedate_to_datetime(since).timestamp() >= int(asset.modified)
        except (TypeError, ValueError):
            return False
    return False


class StaticAssets:
    """ASGI layer answering ``GET``/``HEAD`` ``<mount>/assets/<name>``; passes the rest on."""

    def __init__(self, app: ASGIApp, assets: dict[str, Asset] | None = None) -> None:
        self.app = app
        self.assets = ASSETS if assets is None else assets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = self._path(scope)
        if scope["type"] != "http" or path is None or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        asset = self.assets.get(path[len(PREFIX) :])
        if asset is None:
            await self._send(
                send, 404, [(b"content-type", b"text/plain; charset=utf-8")], b"Not Found"
            )
            return
        version = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("v", [""])[0]
        cache = f"public, max-age={YEAR}, immutable" if version == asset.version else "no-cache"
        headers = [
            (b"content-type", asset.content_type.encode("ascii")),
            (b"cache-control", cache.encode("ascii")),
            (b"etag", asset.etag.encode("ascii")),
            (b"last-modified", formatdate(asset.modified, usegmt=True).encode("ascii")),
        ]
        if _not_modified(Headers(scope=scope), asset):
            await self._send(send, 304, headers, b"")
            return
        body = b"" if scope["method"] == "HEAD" else asset.body
        headers.append((b"content-length", str(len(asset.body)).encode("ascii")))
        await self._send(send, 200, headers, body)

    @staticmethod
    def _path(scope: Scope) -> str | None:
        path = str(scope.get("path", ""))
        root = str(scope.get("root_path", ""))
        if root and path.startswith(root):
            path = path[len(root) :]
        return path if path.startswith(PREFIX) else None

    @staticmethod
    async def _send(
        send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
