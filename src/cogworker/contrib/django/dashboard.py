"""The dashboard inside Django's URL space, for staff by default.

    # urls.py, before the admin's own line
    path("admin/cogworker/", dashboard_urls()),
    path("admin/", admin.site.urls),

A URL pattern names a Django view, not an ASGI app, so one view carries every request under
the prefix to the dashboard (``cogworker.web.app``) as an ASGI call: the request becomes an
HTTP scope (its path whole, the prefix as ``root_path``, so every link stays under it), the
dashboard's reply becomes the view's response. It works the same under WSGI and ASGI Django,
and it sits behind Django's middleware, so ``request.user`` is the admin's user.

``check(request) -> bool`` decides who may see it; the default lets active staff users in.
Who fails it is sent to the admin's login page when not logged in, and refused (403) when
logged in. The view is exempt from Django's CSRF check: the dashboard refuses any unsafe
request that is not same-origin itself (``cogworker.web.security``), and its forms carry no
Django token. The dashboard's session cookie is signed with a key derived from
``SECRET_KEY`` (unless ``$COGWORKER_SESSION_SECRET`` is set), so every web process of the
site shares it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.views import redirect_to_login  # type: ignore[import-untyped]
from django.core.exceptions import (  # type: ignore[import-untyped]
    ImproperlyConfigured,
    PermissionDenied,
)
from django.http import HttpRequest, HttpResponse  # type: ignore[import-untyped]
from django.urls import NoReverseMatch, re_path, reverse  # type: ignore[import-untyped]
from django.utils.crypto import salted_hmac  # type: ignore[import-untyped]
from django.views.decorators.csrf import csrf_exempt  # type: ignore[import-untyped]

from cogworker.contrib.django.apps import config
from cogworker.web import WebSettings
from cogworker.web import app as dashboard_app
from cogworker.web.settings import SECRET_ENV

Check = Callable[[HttpRequest], bool]


def is_staff(request: HttpRequest) -> bool:
    """The default check: an active staff user (the admin's own rule)."""
    user = getattr(request, "user", None)
    if user is None:
        raise ImproperlyConfigured(
            "the cogworker dashboard's staff check needs request.user: add "
            "django.contrib.auth's AuthenticationMiddleware, or pass check="
        )
    return bool(user.is_active and user.is_staff)


def dashboard_urls(
    *,
    check: Check = is_staff,
    settings: WebSettings | None = None,
    namespace: str = "cogworker",
) -> tuple[list[Any], str, str]:
    """What ``path(prefix, ...)`` takes (like ``admin.site.urls``): the dashboard under it.
    (``reverse("cogworker:dashboard", args=[""])`` is its first page; a second mount needs
    its own ``namespace``.)"""
    view = DashboardView(check, settings)
    patterns = [re_path(r"^(?P<rest>.*)\Z", csrf_exempt(view), name="dashboard")]
    return patterns, "cogworker", namespace


class DashboardView:
    """The view carrying requests to the dashboard, built on its first request (after
    Django has started: the config is the settings')."""

    def __init__(self, check: Check, settings: WebSettings | None) -> None:
        if not callable(check):
            raise TypeError(f"check must be a callable (request) -> bool, got {check!r}")
        self.check = check
        self.settings = settings
        self._dashboard: Any = None
        self._lock = threading.Lock()

    def __call__(self, request: HttpRequest, rest: str) -> HttpResponse:
        if not self.check(request):
            user = getattr(request, "user", None)
            if user is None or not user.is_authenticated:
                return redirect_to_login(request.get_full_path(), _login_url())
            raise PermissionDenied("the cogworker dashboard is for staff")
        prefix = request.path[: len(request.path) - len(rest)].rstrip("/")
        return _call(self.dashboard(), scope_of(request, prefix), request.body)

    def dashboard(self) -> Any:
        with self._lock:
            if self._dashboard is None:
                chosen = self.settings if self.settings is not None else _site_settings()
                self._dashboard = dashboard_app(config(), chosen)
            return self._dashboard


def _site_settings() -> WebSettings:
    if os.environ.get(SECRET_ENV):
        return WebSettings()
    key = salted_hmac("cogworker.contrib.django.dashboard", "session", algorithm="sha256")
    return WebSettings(session_secret=key.hexdigest())


def _login_url() -> str | None:
    try:
        return str(reverse("admin:login"))
    except NoReverseMatch:  # no admin: settings.LOGIN_URL
        return None


def scope_of(request: HttpRequest, root_path: str) -> dict[str, Any]:
    """The ASGI HTTP scope of a Django request, mounted at ``root_path``."""
    meta = request.META
    headers = [
        (name.lower().encode("latin-1"), str(value).encode("latin-1"))
        for name, value in request.headers.items()
    ]
    port = int(meta.get("SERVER_PORT") or (443 if request.is_secure() else 80))
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode("utf-8"),
        "root_path": root_path,
        "query_string": meta.get("QUERY_STRING", "").encode("latin-1"),
        "headers": headers,
        "server": (meta.get("SERVER_NAME", "localhost"), port),
        "client": (meta.get("REMOTE_ADDR", ""), 0),
    }


def _call(dashboard: Any, scope: dict[str, Any], body: bytes) -> HttpResponse:
    status, headers, chunks = async_to_sync(_run)(dashboard, scope, body)
    response = HttpResponse(b"".join(chunks), status=status)
    for name, value in headers:
        if name.lower() == "set-cookie":
            response.cookies.load(value)  # several Set-Cookie headers can't share one key
        elif name in response.headers and name.lower() != "content-type":
            response.headers[name] = f"{response.headers[name]}, {value}"
        else:
            response.headers[name] = value
    return response


async def _run(
    dashboard: Any, scope: dict[str, Any], body: bytes
) -> tuple[int, list[tuple[str, str]], list[bytes]]:
    status = 500
    headers: list[tuple[str, str]] = []
    chunks: list[bytes] = []
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            headers.extend(
                (name.decode("latin-1"), value.decode("latin-1"))
                for name, value in message.get("headers", [])
            )
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await dashboard(scope, receive, send)
    return status, headers, chunks
