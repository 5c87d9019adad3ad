"""``Dashboard``: the ASGI app ``cogworker.web.app(config)`` returns.

Each request passes, in this order:

1. the response headers layer (Content-Security-Policy, framing...: on every response);
2. the same-origin rule, ``dashboard.safe_request(scope)``: a refused request gets 403 before
   anything below runs (replace the attribute to allow a deliberate exception);
3. the built-in signed-cookie session, unless the request already has a session or a
   middleware added with ``use`` is one (or ``builtin_session`` is off);
4. the static assets (no data in them, so no auth layer guards them);
5. every middleware added with ``use``, the first added outermost;
6. the routes of the tabs, ``/metrics`` and ``/save_session``.

Layers 3 to 6 are built on the first request and rebuilt after ``use`` or a new ``settings``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from typing import Any

import redis
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from cogworker import connection, metrics, redis_errors
from cogworker.config import Config
from cogworker.web import security
from cogworker.web.assets import StaticAssets
from cogworker.web.rendering import NO_STORE, Renderer, displayable
from cogworker.web.session import CookieSession, provides_session
from cogworker.web.settings import WebSettings, warn_if_random_secret
from cogworker.web.site import Site, Tab
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

    def __init__(self, config: Config, settings: WebSettings, tabs: Sequence[Tab]) -> None:
        self.config = config
        self.tabs: list[Tab] = list(tabs)
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
        renderer = Renderer(settings, lambda: [(tab.label, tab.path) for tab in self.tabs])
        # the header's cluster bar, read only when a whole page is drawn
        renderer.env.globals["cluster_summary"] = lambda: summary(self.redis())
        site = Site(self.config, settings, renderer, self.redis)
        routes: list[BaseRoute] = []
        for tab in self.tabs:
            routes.extend(tab.routes(site))
        routes += [
            Route("/metrics", self._metrics_endpoint(settings), methods=["GET"]),
            Route("/save_session", _save_session, methods=["POST"]),
        ]
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

    def _metrics_endpoint(self, settings: WebSettings) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if not settings.metrics_enabled:
                return PlainTextResponse("Not Found", status_code=404)
            body = await run_in_threadpool(metrics.render, self.redis())
            return PlainTextResponse(body, media_type=metrics.CONTENT_TYPE, headers=NO_STORE)

        return endpoint


async def _save_session(request: Request) -> Response:
    """A fixed target for an auth layer's callbacks: the session is saved on the way out."""
    return PlainTextResponse("OK")


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
