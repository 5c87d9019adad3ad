"""How an action answers, with and without JavaScript, and the confirmation page.

An action is a POST that acts at once. Sent by the page's script (``HX-Request: true``) it
answers 200 with the refreshed fragment of the container it targets, notice included.
Sent by a plain form it answers ``303 See Other`` to the tab's page, built from the mount
and a fixed relative path (never from a request parameter, so it can't point elsewhere), and
the notice follows the redirect (see ``notices``).

A destructive action's button, without JavaScript, leads with a GET to the same route, which
shows a small confirmation page whose form posts there; with JavaScript a dialog asks instead.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from cogworker.web import notices, urls
from cogworker.web.notices import Notice
from cogworker.web.rendering import is_hx
from cogworker.web.site import Site

logger = logging.getLogger("cogworker")

MAX_FIELD_BYTES = 32 * 1024 * 1024
"""The largest form field accepted: a job's raw entry is sent whole to delete it."""

Handler = Callable[[Request, dict[str, Any]], Response]


def action(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint that reads the form, then runs ``handler(request, params)`` (path
    parameters win over form fields) in a worker thread: Redis calls never block the loop."""

    async def endpoint(request: Request) -> Response:
        form: FormData = await request.form(max_part_size=MAX_FIELD_BYTES, max_fields=50)
        params: dict[str, Any] = {**dict(form.items()), **request.path_params}
        return await run_in_threadpool(checked, handler, request, params)

    return endpoint


def page(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A GET endpoint: ``handler(request, params)`` in a worker thread (path parameters win
    over query parameters)."""

    async def endpoint(request: Request) -> Response:
        params: dict[str, Any] = {**dict(request.query_params.items()), **request.path_params}
        return await run_in_threadpool(checked, handler, request, params)

    return endpoint


def checked(handler: Handler, request: Request, params: dict[str, Any]) -> Response:
    try:
        return handler(request, params)
    except urls.BadParameter as error:
        return PlainTextResponse(f"Bad request: {error}", status_code=400)


def audit(request: Request, done: str) -> None:
    """One log line per action an operator took: what happened and what follows from it.
    Stored names in ``done`` are written with ``repr`` (no raw newline or undecodable byte)."""
    client = request.client.host if request.client else "unknown client"
    logger.info("Web: %s (from %s)", done, client)


def text_param(params: dict[str, Any], name: str, *, required: bool = True) -> str:
    """A stored string sent as ``name`` or ``name_b64``; a missing one is a 400."""
    value = urls.read_carried(params, name)
    if value is None or (required and value == ""):
        if required:
            raise urls.BadParameter(f"missing {name}")
        return ""
    return value


def after_action(
    request: Request,
    shown: Notice | None,
    fragment: Callable[[Notice | None], Response],
    relative: str,
    params: Iterable[tuple[str, str]] = (),
) -> Response:
    """The fragment (script) or a 303 to ``relative`` with ``params`` (plain form)."""
    if is_hx(request):
        return fragment(shown)
    query = list(params)
    if shown is not None and (key := notices.remember(request, shown)) is not None:
        query.append(("notice", key))
    return RedirectResponse(urls.url(request, relative, query), status_code=303)


@dataclass(frozen=True)
class Confirmation:
    """What the confirmation page asks and where its form posts."""

    title: str
    question: str
    detail: str
    button: str
    action: str  # relative route of the POST
    fields: list[tuple[str, str]]
    cancel: str  # full URL back to the view
    variant: str = "danger"


def confirm_page(site: Site, request: Request, confirmation: Confirmation, tab: str) -> Response:
    return site.renderer.render(request, "confirm.html", c=confirmation, active=tab, notice=None)


def missing_page(
    site: Site, request: Request, title: str, text: str, back: str, tab: str
) -> Response:
    """The confirmation page's answer when what it would act on is gone."""
    return site.renderer.render(
        request, "gone.html", status=404, title=title, text=text, back=back, active=tab, notice=None
    )
