"""Starlette and FastAPI: a lifespan that owns the client, a dependency that hands it out, and
the dashboard mounted behind a guard::

    config = cogworker.Config(redis_url="redis://localhost:6379/0")
    app = FastAPI(lifespan=cogworker_lifespan(config, my_lifespan))  # or Starlette(...)
    mount_dashboard(app, config, guard=admins_only)                  # at /cogworker

    @app.post("/signup")
    def signup(client: Annotated[cogworker.Client, Depends(get_client)]) -> dict[str, Any]:
        return {"jid": client.enqueue(WelcomeJob, "ada")}

``cogworker_lifespan(config)`` makes a ``Client(config)`` at startup, keeps it on
``app.state.cogworker`` and, unless ``set_default=False``, installs ``config`` as the process
default (``Job.perform_async`` pushes to it). At shutdown it closes the client's pool and the
dashboards mounted with ``mount_dashboard`` (a mounted app gets no lifespan of its own), and
puts the previous default back. A lifespan of the app's own runs inside it: the client is
ready when it starts and still open when it ends; what it yields is the app's state.

``get_client(request)`` is the dependency (FastAPI ``Depends(get_client)``; in plain
Starlette call it with the request). Enqueueing is one blocking Redis round trip: from an
``async def`` endpoint it briefly holds the event loop.

``guard(request)`` decides on every request under the dashboard's prefix, assets included:
True lets it through, False answers 403, a Response (``RedirectResponse("/login")``) is sent
instead. It may be ``async def``; a plain function runs in the thread pool, as Starlette
runs a sync endpoint. It sees the host's session (``request.session``) when the host has
SessionMiddleware; it must not read the body.

The dashboard's own session (its notices) is signed with ``settings.session_secret``. Starlette
has no app-wide secret to derive it from, so without one (or ``$COGWORKER_SESSION_SECRET``)
each process makes a random one and sessions are not shared: with several web processes pass
``settings=WebSettings(session_secret=...)`` (64 characters or more) or set the variable.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from cogworker.client import Client
from cogworker.config import Config, default_config, set_default_config

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.types import ASGIApp, Receive, Scope, Send

    from cogworker.web import WebSettings
    from cogworker.web.application import Dashboard

__all__ = [
    "STATE_KEY",
    "Guard",
    "GuardedApp",
    "Lifespan",
    "cogworker_lifespan",
    "get_client",
    "mount_dashboard",
]

STATE_KEY = "cogworker"
"""``app.state.cogworker``: the lifespan's Client."""
_DASHBOARDS_KEY = "cogworker_dashboards"

Lifespan = Callable[[Any], AbstractAsyncContextManager[Mapping[str, Any] | None]]
Decision = bool | Response
Guard = Callable[[Request], Decision | Awaitable[Decision]]
"""Decides on a dashboard request: True lets it through, False answers 403, a Response is sent
instead; it may be a coroutine function."""


def cogworker_lifespan(
    config: Config, inner: Lifespan | None = None, *, set_default: bool = True
) -> Lifespan:
    """The app's lifespan: a client on ``config`` from startup to shutdown, ``inner`` (the
    app's own lifespan, if any) running inside it. See the module docstring."""
    if not isinstance(config, Config):
        raise TypeError(f"cogworker_lifespan needs a cogworker.Config, got {config!r}")
    if inner is not None and not callable(inner):
        raise TypeError(f"inner must be a lifespan (app) -> async context manager, got {inner!r}")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[Mapping[str, Any] | None]:
        previous = default_config() if set_default else None
        client = Client(config)
        setattr(app.state, STATE_KEY, client)
        if set_default:
            set_default_config(config)
        try:
            if inner is None:
                yield None
            else:
                async with inner(app) as inner_state:
                    yield inner_state
        finally:
            _shut_down(app, client, previous)

    return lifespan


def _shut_down(app: Starlette, client: Client, previous: Config | None) -> None:
    delattr(app.state, STATE_KEY)
    if previous is not None and default_config() is client.config:
        set_default_config(previous)
    client.close()
    for dashboard in getattr(app.state, _DASHBOARDS_KEY, []):
        dashboard.close()


def get_client(request: Request) -> Client:
    """The client of the app's ``cogworker_lifespan``: a FastAPI dependency, or a call."""
    found = getattr(request.app.state, STATE_KEY, None)
    if not isinstance(found, Client):
        raise RuntimeError(
            "no cogworker client on this app: create it with lifespan=cogworker_lifespan(config) "
            "and let the lifespan run (a TestClient runs it inside `with TestClient(app):`)"
        )
    return found


# -- the dashboard ---------------------------------------------------------------------------


def mount_dashboard(
    app: Starlette,
    config: Config,
    *,
    guard: Guard | None,
    prefix: str = "/cogworker",
    settings: WebSettings | None = None,
) -> Dashboard:
    """Mount the dashboard for ``config`` at ``prefix``, each request decided by ``guard``
    (None: no guard, for a dashboard the host protects itself, e.g. with its own middleware).
    ``cogworker_lifespan`` closes its connections at shutdown. With several web processes give
    ``settings=WebSettings(session_secret=...)`` or set ``$COGWORKER_SESSION_SECRET`` (see the
    module docstring)."""
    from cogworker import web

    if not prefix.startswith("/") or prefix.endswith("/"):
        raise ValueError(f"prefix must start with '/' and not end with one, got {prefix!r}")
    if guard is not None and not callable(guard):
        raise TypeError(f"guard must be a callable (request) -> bool | Response, got {guard!r}")
    dashboard = web.app(config, settings)
    app.mount(prefix, dashboard if guard is None else GuardedApp(dashboard, guard))
    if not hasattr(app.state, _DASHBOARDS_KEY):
        setattr(app.state, _DASHBOARDS_KEY, [])
    getattr(app.state, _DASHBOARDS_KEY).append(dashboard)
    return dashboard


class GuardedApp:
    """ASGI: ``app`` behind ``guard`` (see the module docstring). It serves no websocket:
    one is closed unanswered."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app, self.guard = app, guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        decision = await self._decide(Request(scope))
        if decision is True:
            await self.app(scope, receive, send)
        elif decision is False:
            await PlainTextResponse("Forbidden\n", 403)(scope, receive, send)
        elif isinstance(decision, Response):
            await decision(scope, receive, send)
        else:
            raise TypeError(
                f"the dashboard guard {self.guard!r} must return True, False or a Response, "
                f"got {decision!r}"
            )

    async def _decide(self, request: Request) -> object:
        if inspect.iscoroutinefunction(self.guard) or inspect.iscoroutinefunction(
            getattr(self.guard, "__call__", None)  # noqa: B004
        ):
            decided: object = await self.guard(request)  # type: ignore[misc]
            return decided
        answer = await run_in_threadpool(self.guard, request)
        return await answer if inspect.isawaitable(answer) else answer
