"""``Dashboard``: the ASGI app ``cogworker.web.app(config)`` returns.

Each request passes, in this order:

1. the response headers layer (Content-Security-Policy, framing...: on every response);
2. the same-origin rule, ``dashboard.safe_request(scope)``: a refused request gets 403 before
   anything below runs (replace the attribute to allow a deliberate exception);
3. the built-in signed-cookie session, unless the request already has a session or a
   middleware added with ``use`` is one (or ``builtin_session`` is off);
4. the static assets (no data in them, so no auth layer guards them);
5. every middleware added with ``use``, the first added outermost;
6. the routes of every registered extension: the built-in tabs, ``/metrics`` (registered
   as ``prometheus_exporter``), ``/save_session`` and the host's own (``register``, see
   ``cogworker.web.extensions``).

Layers 3 to 6 are built on the first request and rebuilt after ``use``, ``register`` or a new
``settings``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from typing import Any

import redis
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from cogworker import connection, redis_errors
from cogworker.config import Config
from cogworker.web import exporter, security
from cogworker.web.assets import StaticAssets
from cogworker.web.extensions import Extension, Registry, Routes, SiteRoutes
from cogworker.web.rendering import NO_STORE, Renderer, displayable
from cogworker.web.session import CookieSession, provides_session
from cogworker.web.settings import WebSettings, warn_if_random_secret
from cogworker.web.site import Site, Tab
from cogworker.web.tabs import BUILTIN_TABS
from cogworker.web.tabs.workers_data import summary

logger = logging.getLogger("cogworker")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

POOL_SIZE = 40
"""Redis connections: one per thread of the default thread pool requests run in."""


class Dashboard:
    """The dashboard as one ASGI app; mount it under any prefix."""

    def __init__(
        self, config: Config, settings: WebSettings, builtin: Sequence[Tab] = BUILTIN_TABS
    ) -> None:
        self.config = config
        self._registry = Registry()
        for tab in builtin:
            self._registry.register(SiteRoutes(tab.routes), tab.path, tab.label, tab.path)
        self._registry.register(exporter.EXPORTER, exporter.NAME)
        self._registry.register(SiteRoutes(_session_routes), "save_session")
        self.safe_request: Callable[[Scope], bool] = security.same_origin
        self._middleware: list[Middleware] = []
        self._settings = settings
        self._inner: ASGIApp | None = None
        self._client: redis.Redis | None = None
        self._lock = threading.Lock()
        self._apply(settings)

    # -- configuration ------------------------------------------------------------------------

    @property
    def settings(self) -> WebSettings:
        return self._settings

    @settings.setter
    def settings(self, settings: WebSettings) -> None:
        if not isinstance(settings, WebSettings):
            raise TypeError(f"settings must be a WebSettings (got {type(settings).__name__})")
        self._apply(settings)

    def _apply(self, settings: WebSettings) -> None:
        if settings.builtin_session:
            settings.resolved_secret()  # a bad $COGWORKER_SESSION_SECRET fails here, not later
        warn_if_random_secret(settings)
        self._settings = settings
        self._headers = security.security_headers(settings.frame_options)
        self._inner = None

    def use(self, middleware: Any, *args: Any, **kwargs: Any) -> None:
        """Run ``middleware(app, *args, **kwargs)`` inside the dashboard, after the same-origin
        check, around every route (an auth layer, say). The first added is the outermost."""
        if not callable(middleware):
            raise TypeError(f"use() needs an ASGI middleware class or factory, got {middleware!r}")
        self._middleware.append(Middleware(middleware, *args, **kwargs))
        self._inner = None

    @property
    def tabs(self) -> dict[str, str]:
        """The header's tabs, label to path under the mount, in order; change it freely."""
        return self._registry.tabs

    @property
    def extensions(self) -> tuple[str, ...]:
        """The names of the registered extensions, built-in ones first, in order."""
        return tuple(found.name for found in self._registry.registrations)

    def register(
        self,
        extension: Extension | Callable[[Routes], None],
        *,
        name: str,
        tab: str | None = None,
        index: str | None = None,
    ) -> str:
        """Add an extension's routes (and, with ``tab`` and ``index``, its tab); returns
        ``name``. See ``cogworker.web.extensions``."""
        registered = self._registry.register(extension, name, tab, index)
        self._inner = None
        return registered

    # -- Redis ---------------------------------------------------------------------------------

    def redis(self) -> redis.Redis:
        """The dashboard's own client on the config's Redis (a pool sized for its threads)."""
        with self._lock:
            if self._client is None:
                self._client = connection.connect(
                    self.config.redis_url,
                    max_connections=POOL_SIZE,
                    socket_timeout=self.config.redis_socket_timeout,
                )
            return self._client

    def close(self) -> None:
        """Close the Redis connections (the next request opens new ones)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.connection_pool.disconnect()
            client.close()

    # -- the ASGI app --------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            send = security.with_headers(send, self._headers)
            if not self.safe_request(scope):
                await security.forbid(send)
                return
            root = scope.get("root_path", "")
            if root and scope.get("path") in (root, ""):  # the mount itself, without a slash
                scope = {**scope, "path": root + "/"}
        await self._app()(scope, receive, send)

    def _app(self) -> ASGIApp:
        inner = self._inner
        if inner is None:
            with self._lock:
                inner = self._inner = self._inner or self._build()
        return inner

    def _build(self) -> ASGIApp:
        settings = self._settings
        renderer = Renderer(settings, lambda: list(self.tabs.items()))
        # the header's cluster bar, read only when a whole page is drawn
        renderer.env.globals["cluster_summary"] = lambda: summary(self.redis())
        site = Site(self.config, settings, renderer, self.redis)
        routes = self._registry.build(site)
        layers: list[Middleware] = []
        if settings.builtin_session and not any(provides_session(m.cls) for m in self._middleware):
            layers.append(Middleware(CookieSession, secret=settings.resolved_secret()))
        layers.append(Middleware(StaticAssets))
        layers += self._middleware

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            yield
            self.close()

        return Starlette(
            routes=routes,
            middleware=layers,
            exception_handlers={redis.RedisError: _redis_failed},
            lifespan=lifespan,
        )


async def _save_session(request: Request) -> Response:
    """A fixed target for an auth layer's callbacks: the session is saved on the way out."""
    return PlainTextResponse("OK")


def _session_routes(site: Site) -> list[BaseRoute]:
    return [Route("/save_session", _save_session, methods=["POST"])]


def _redis_failed(request: Request, error: Exception) -> Response:
    unavailable = redis_errors.is_unavailable(error)
    status = 503 if unavailable else 500
    logger.error(
        "Web: Redis %s during %s %s: %s: %s; answered %d",
        "unavailable" if unavailable else "error",
        request.method,
        request.url.path,
        type(error).__name__,
        displayable(str(error)),
        status,
    )
    what = "Redis is unavailable" if unavailable else "Redis refused the request"
    text = f"{what} ({type(error).__name__}: {error}); the page works again once it answers."
    return PlainTextResponse(displayable(text), status_code=status, headers=NO_STORE)
