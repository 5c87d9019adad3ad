"""The dashboard mounted in Django (ASGI, beside Django's own app in a Starlette router; WSGI,
through a2wsgi beside Django's WSGI app) and in Flask (WSGI, through a2wsgi and werkzeug's
DispatcherMiddleware): a page renders, a link and a form post work under the prefix, the host's
own pages still answer, and Live refresh by polling works under WSGI, in a real browser too.

Django runs with a real settings module written for the session (SQLite in a temporary
directory); it is configured once per test session, as Django allows.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import httpx
import pytest
import redis
from a2wsgi import ASGIMiddleware
from conftest import wait_for
from starlette.routing import Mount, Router
from web_support import SAME_ORIGIN, form_with, make_dash, push, shared_browser

import cogworker
from cogworker import keys
from cogworker.local.server import free_port
from cogworker.web.application import Dashboard

PREFIX = "/cogworker"
WSGIApp = Callable[..., Any]

SETTINGS = """
    from pathlib import Path

    BASE_DIR = Path(__file__).resolve().parent
    SECRET_KEY = "django-test-" + "k" * 50
    DEBUG = False
    ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
    ROOT_URLCONF = "cw_django_site.urls"
    INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth"]
    MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
    DATABASES = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}
    }
    USE_TZ = True
"""

URLS = """
    from django.db import connection
    from django.http import HttpResponse
    from django.urls import path


    def home(request):
        with connection.cursor() as cursor:  # the site's own database answers too
            cursor.execute("select 41 + 1")
            (answer,) = cursor.fetchone()
        return HttpResponse(f"the django site ({answer})")


    urlpatterns = [path("", home)]
"""


@pytest.fixture(scope="session")
def django_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Django project with a real settings module, set up once for the session."""
    import django
    from django.conf import settings

    root = tmp_path_factory.mktemp("django")
    package = root / "cw_django_site"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text(textwrap.dedent(SETTINGS))
    (package / "urls.py").write_text(textwrap.dedent(URLS))
    if not settings.configured:
        sys.path.insert(0, str(root))
        os.environ["DJANGO_SETTINGS_MODULE"] = "cw_django_site.settings"
        zone = os.environ.get("TZ")
        django.setup()
        # Django sets the process's TZ to its TIME_ZONE: put it back, or every later test (and
        # the worker processes they start) would run in Chicago time
        if zone is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = zone
        time.tzset()
    assert settings.ROOT_URLCONF == "cw_django_site.urls"
    return root


@pytest.fixture
def dash(config: cogworker.Config) -> Iterator[Dashboard]:
    dashboard = make_dash(config, live_update_interval=1)
    try:
        yield dashboard
    finally:
        dashboard.close()


def django_asgi(dashboard: Dashboard) -> Router:
    from django.core.asgi import get_asgi_application

    return Router(routes=[Mount(PREFIX, dashboard), Mount("/", get_asgi_application())])


def django_wsgi(dashboard: Dashboard) -> WSGIApp:
    """The README's Django WSGI wiring: requests under the prefix go to the dashboard."""
    from django.core.wsgi import get_wsgi_application

    site, panel = get_wsgi_application(), ASGIMiddleware(dashboard)

    def application(environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path == PREFIX or path.startswith(PREFIX + "/"):
            environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + PREFIX
            environ["PATH_INFO"] = path[len(PREFIX) :]
            return panel(environ, start_response)
        return site(environ, start_response)

    return application


def flask_wsgi(dashboard: Dashboard) -> WSGIApp:
    from flask import Flask
    from werkzeug.middleware.dispatcher import DispatcherMiddleware

    site = Flask("cw_flask_site")

    @site.get("/")
    def home() -> str:
        return "the flask site"

    site.wsgi_app = DispatcherMiddleware(site.wsgi_app, {PREFIX: ASGIMiddleware(dashboard)})  # type: ignore[method-assign]
    return site


def in_a_thread(wsgi: WSGIApp) -> WSGIApp:
    """``wsgi`` called in a worker thread, as a WSGI server calls it (a browser test earlier in
    the session leaves Playwright's event loop on this thread, where Django refuses to touch
    its database)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wsgi")

    def call(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        def run() -> list[bytes]:
            answer = wsgi(environ, start_response)
            try:
                return list(answer)
            finally:
                close = getattr(answer, "close", None)
                if close is not None:
                    close()

        return pool.submit(run).result()

    return call


@dataclass
class Host:
    kind: str
    own: str  # what the host's own page at / says
    client: httpx.Client  # a client on the host, the dashboard mounted under PREFIX


@pytest.fixture(params=["django-asgi", "django-wsgi", "flask-wsgi"])
def host(request: pytest.FixtureRequest, dash: Dashboard) -> Iterator[Host]:
    kind = str(request.param)
    if kind.startswith("django"):
        request.getfixturevalue("django_site")
    if kind == "django-asgi":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Starlette asks for httpx2; httpx works the same
            from starlette.testclient import TestClient
        with TestClient(
            django_asgi(dash), base_url="http://testserver", follow_redirects=False
        ) as client:
            yield Host(kind, "the django site (42)", client)
        return
    app = django_wsgi(dash) if kind == "django-wsgi" else flask_wsgi(dash)
    transport = httpx.WSGITransport(app=in_a_thread(app))
    with httpx.Client(transport=transport, base_url="http://testserver") as client:
        yield Host(
            kind, "the django site (42)" if kind == "django-wsgi" else "the flask site", client
        )


def test_a_page_renders_under_the_prefix_beside_the_hosts_own(host: Host, r: redis.Redis) -> None:
    client = host.client
    push(r, "default")
    page = client.get(f"{PREFIX}/")
    assert page.status_code == 200
    assert '<a href="/cogworker/workers">Workers</a>' in page.text
    assert 'href="/cogworker/overview?layout=b&amp;queue=default"' in page.text
    assert not re.search(r'(href|action|src)="/(?!cogworker)', page.text)  # nothing root-absolute
    asset = re.search(r'<link rel="stylesheet" href="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    assert client.get(asset).status_code == 200
    if host.kind.endswith("wsgi"):
        # the dispatchers hand the mount itself, without a slash, to the dashboard (in the
        # ASGI router it belongs to the host's catch-all mount)
        assert client.get(PREFIX).status_code == 200
    assert client.get("/").text == host.own  # the host's own page


def test_a_link_and_a_form_post_work_under_the_prefix(host: Host, r: redis.Redis) -> None:
    client = host.client
    push(r, "default")
    page = client.get(f"{PREFIX}/overview").text
    link = re.search(r'href="(/cogworker/schedules)"', page).group(1)  # type: ignore[union-attr]
    assert "Nothing registered yet" in client.get(link).text
    form = form_with(page, "pause", "/overview/default/pause")
    assert form.action == "/cogworker/overview/default/pause"
    answer = client.post(form.action, data=form.values(), headers=SAME_ORIGIN)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/cogworker/overview?layout=a"
    assert r.sismember(keys.PAUSED_QUEUES, "default")
    shown = client.get(answer.headers["location"]).text  # the notice, carried by the session
    assert "Queue paused: workers take no jobs from it until it is resumed" in shown
    refused = client.post(form.action, data=form.values(), headers={"sec-fetch-site": "cross-site"})
    assert refused.status_code == 403


def test_live_refresh_by_polling_works(host: Host, r: redis.Redis) -> None:
    client = host.client
    page = client.get(f"{PREFIX}/overview").text
    poll = re.search(r'id="overview-content" hx-get="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    assert poll == "/cogworker/overview?layout=a"
    before = client.get(poll, headers={"hx-request": "true"}).text
    assert "arrived-later" not in before and "<html" not in before
    push(r, "arrived-later")
    after = client.get(poll, headers={"hx-request": "true"}).text
    assert ">arrived-later</a>" in after


# -- a real WSGI server and browser ----------------------------------------------------------


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def wsgi_served(dash: Dashboard) -> Iterator[str]:
    """Flask with the dashboard mounted, served by wsgiref (threads) on 127.0.0.1."""
    port = free_port()
    server = make_server("127.0.0.1", port, flask_wsgi(dash), _ThreadingWSGIServer, _Quiet)
    thread = threading.Thread(target=server.serve_forever, name="wsgiref", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.browser
def test_live_refresh_in_a_browser_under_wsgi(
    pytestconfig: pytest.Config, wsgi_served: str, r: redis.Redis
) -> None:
    browser = shared_browser(pytestconfig)
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(f"{wsgi_served}{PREFIX}/overview")
        assert page.locator("[data-cw-live-toggle]").get_attribute("aria-pressed") == "true"
        push(r, "arrived-later")
        page.wait_for_selector("a:text-is('arrived-later')", timeout=10_000)
        r.hset(keys.throughput(int(r.time()[0]) // 3600), "processed", 7)
        wait_for(lambda: "processed 7" in page.inner_html("#overview-throughput"), timeout=10)
        assert page.url == f"{wsgi_served}{PREFIX}/overview"  # refreshed in place
        assert errors == []
    finally:
        context.close()
