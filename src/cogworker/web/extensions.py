"""Extensions: the one way anything adds pages to the dashboard. The built-in tabs, ``/metrics``
and ``/save_session`` register this way too.

    class Reports:
        def registered(self, routes: Routes) -> None:
            @routes.get("/reports/{name}")
            def report(action: Action) -> str:
                return action.page("Report", "<h1>{{ name }}</h1>", name=action.params["name"])

    dashboard.register(Reports(), name="reports", tab="Reports", index="reports/daily")

``register`` calls ``extension.registered(routes)`` right away (a plain function taking
``routes`` works too). In that call the extension adds routes with ``routes.get(path)`` and
``routes.post(path)``. Given both ``tab`` and ``index``, ``register`` also puts a link in the
header: ``dashboard.tabs[tab] = index`` (label to path under the mount). ``dashboard.tabs``
is an ordinary dict, so you can edit it directly.

A path is relative to the mount. A ``{name}`` or ``:name`` segment matches one path segment,
percent-decoded, and becomes ``action.params["name"]``. Starlette's converters work too
(``{rest:path}``). Routes registered later are tried first, so a later registration of the
same method and path wins. Paths under ``/assets/`` never reach the routes, so they are refused.

A handler takes an ``Action`` and runs in a worker thread. It returns a Starlette
``Response``, which is sent as it is, or a ``str``, which is sent as HTML with status 200.
A POST passes the same-origin check and every middleware added with ``use``, like the
built-in actions.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from cogworker.web import urls
from cogworker.web.actions import MAX_FIELD_BYTES
from cogworker.web.rendering import NO_STORE, displayable, is_hx
from cogworker.web.site import Site

_SINATRA_SEGMENT = re.compile(r"(?<=/):([A-Za-z_][A-Za-z0-9_]*)")


class Action:
    """One request to an extension's route, and what its handler needs to answer it."""

    def __init__(
        self, site: Site, request: Request, params: dict[str, Any], tab: str | None
    ) -> None:
        self.site = site
        self.request = request
        self.params = params  # query and form fields, then the path's segments (these win)
        self._tab = tab

    def param(self, name: str, default: str | None = None) -> str | None:
        value = self.params.get(name, default)
        return value if value is None or isinstance(value, str) else str(value)

    @property
    def hx(self) -> bool:
        """True for the page's own refreshes and in-place actions (``HX-Request: true``):
        answer the fragment, not the whole page."""
        return is_hx(self.request)

    def redis(self) -> redis.Redis:
        return self.site.redis()

    def url(self, relative: str, **params: str) -> str:
        """``<mount>/<relative>?<params>``: every link and form action should be built so."""
        return urls.url(self.request, relative, params.items())

    def render(self, source: str, **context: Any) -> Markup:
        """The Jinja template ``source`` rendered with ``context`` (autoescaped; ``url`` and
        ``request`` are available in it)."""
        template = self.site.renderer.compiled(source)
        return Markup(template.render(url=self._template_url, request=self.request, **context))

    def page(self, title: str, source: str, *, status: int = 200, **context: Any) -> HTMLResponse:
        """``source`` rendered inside the dashboard's page (header, tabs, styles), with this
        extension's tab marked as the current one; only the rendered part for a ``hx``
        request."""
        body = self.render(source, **context)
        if self.hx:
            return HTMLResponse(displayable(str(body)), status_code=status, headers=NO_STORE)
        return self.site.renderer.render(
            self.request,
            "extension.html",
            status=status,
            title=title,
            body=body,
            active=self._tab or "",
            notice=None,
        )

    def redirect(self, relative: str, **params: str) -> RedirectResponse:
        """303 to ``<mount>/<relative>``: always under the mount, never elsewhere."""
        return RedirectResponse(self.url(relative, **params), status_code=303)

    def _template_url(self, relative: str, **params: Any) -> str:
        return self.url(relative, **{k: str(v) for k, v in params.items() if v is not None})


Handler = Callable[[Action], "Response | str"]


class Routes:
    """The route table one registration fills (see the module docstring)."""

    def __init__(self, name: str, tab: str | None) -> None:
        self.name = name
        self.tab = tab  # the index of the registration's tab, for ``Action.page``
        self._built: list[Callable[[Site], Sequence[BaseRoute]]] = []

    def get(self, path: str) -> Callable[[Handler], Handler]:
        return self._adder("GET", path)

    def post(self, path: str) -> Callable[[Handler], Handler]:
        return self._adder("POST", path)

    def add(self, method: str, path: str, handler: Handler) -> None:
        """The same as the decorators, for a handler defined elsewhere."""
        if method not in ("GET", "POST"):
            raise ValueError(f"extension {self.name}: method must be GET or POST, got {method!r}")
        if inspect.iscoroutinefunction(handler) or not callable(handler):
            raise TypeError(
                f"extension {self.name}: the handler of {method} {path} must be a plain "
                f"function taking an Action (it runs in a worker thread), got {handler!r}"
            )
        pattern = route_pattern(self.name, path)
        tab = self.tab
        self._built.append(
            lambda site: [Route(pattern, _endpoint(site, handler, tab), methods=[method])]
        )

    def starlette(self, build: Callable[[Site], Sequence[BaseRoute]]) -> None:
        """Starlette routes built with the dashboard's ``Site`` each time the dashboard builds
        its app (the built-in tabs are added this way)."""
        self._built.append(build)

    def build(self, site: Site) -> list[BaseRoute]:
        return [route for build in self._built for route in build(site)]

    def _adder(self, method: str, path: str) -> Callable[[Handler], Handler]:
        def decorate(handler: Handler) -> Handler:
            self.add(method, path, handler)
            return handler

        return decorate


def route_pattern(name: str, path: str) -> str:
    """``path`` as a Starlette pattern (``:name`` segments become ``{name}``); a path that
    isn't under the mount or that the static assets would answer is refused."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"extension {name}: a route's path must start with / (got {path!r})")
    if path == "/assets" or path.startswith("/assets/"):
        raise ValueError(
            f"extension {name}: {path} is under /assets/, which the static files answer first"
        )
    return _SINATRA_SEGMENT.sub(r"{\1}", path)


def _endpoint(
    site: Site, handler: Handler, tab: str | None
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        params: dict[str, Any] = dict(request.query_params.items())
        if request.method == "POST":
            form = await request.form(max_part_size=MAX_FIELD_BYTES, max_fields=100)
            params.update((key, value) for key, value in form.items() if isinstance(value, str))
        params.update(request.path_params)
        return await run_in_threadpool(_answer, site, handler, Action(site, request, params, tab))

    return endpoint


def _answer(site: Site, handler: Handler, action: Action) -> Response:
    try:
        answer = handler(action)
    except urls.BadParameter as error:
        return HTMLResponse(f"Bad request: {error}", status_code=400)
    if isinstance(answer, Response):
        return answer
    if isinstance(answer, str):
        return HTMLResponse(displayable(answer), headers=NO_STORE)
    raise TypeError(
        f"an extension handler must return a str or a Response, got {type(answer).__name__}"
    )


class Extension(Protocol):
    def registered(self, routes: Routes) -> None: ...


@dataclass
class Registration:
    name: str
    routes: Routes
    tab: str | None = None
    index: str | None = None


@dataclass(frozen=True)
class SiteRoutes:
    """An extension made of Starlette routes built with the ``Site``: the built-in tabs."""

    build: Callable[[Site], Sequence[BaseRoute]]

    def registered(self, routes: Routes) -> None:
        routes.starlette(self.build)


@dataclass
class Registry:
    """Every registration of one dashboard, and its header's tabs (label to path)."""

    tabs: dict[str, str] = field(default_factory=dict)
    registrations: list[Registration] = field(default_factory=list)

    def register(
        self,
        extension: Extension | Callable[[Routes], None],
        name: str,
        tab: str | None = None,
        index: str | None = None,
    ) -> str:
        if not isinstance(name, str) or not name:
            raise ValueError(f"register() needs a non-empty name, got {name!r}")
        if (tab is None) != (index is None):
            raise ValueError(
                f"extension {name}: tab and index go together (the tab's label and the path "
                f"of its page), got tab={tab!r}, index={index!r}"
            )
        if index is not None and (not isinstance(index, str) or index.startswith("/")):
            raise ValueError(
                f"extension {name}: index is a path under the mount without the leading / "
                f"(e.g. 'reports'), got {index!r}"
            )
        routes = Routes(name, index)
        hook = getattr(extension, "registered", None)
        if callable(hook):
            hook(routes)
        elif callable(extension):
            extension(routes)
        else:
            raise TypeError(
                f"extension {name}: expected an object with registered(routes) or a function "
                f"taking the routes, got {extension!r}"
            )
        self.registrations.append(Registration(name, routes, tab, index))
        if tab is not None and index is not None:
            self.tabs[tab] = index
        return name

    def build(self, site: Site) -> list[BaseRoute]:
        """Every route, the latest registration's first (so it wins a tie)."""
        return [
            route for found in reversed(self.registrations) for route in found.routes.build(site)
        ]
