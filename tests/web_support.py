"""Helpers shared by the dashboard tests (tests/test_web_*.py); not a test module.

``dash`` is the app on the test Redis, ``client`` a Starlette TestClient on it. ``post`` sends
what a same-origin browser sends. ``forms`` reads the forms of a page the way a browser does,
and ``submit`` posts one of them with or without JavaScript (the page's script posts the
``hx-post`` URL with every field but the GET-only ones; a plain browser submits the form's
own method and action with its enabled fields), so the tests act through the real markup.

For the browser tests: ``shared_browser`` is one Chromium (Debian's, through Playwright's
executable path: nothing is downloaded) for the whole session; ``serve`` runs a dashboard
under uvicorn on 127.0.0.1; ``open_page`` opens a page that records console errors and
aborts (and records) every request that would leave the served dashboard.
"""

from __future__ import annotations

import contextlib
import html as html_module
import json
import os
import re
import shutil
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import httpx
import pytest
import redis
import uvicorn
from conftest import wait_for

import cogworker
from cogworker import keys, wire
from cogworker.local.server import free_port
from cogworker.web import WebSettings, app
from cogworker.web.application import Dashboard

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright

with warnings.catch_warnings():
    # Starlette asks for httpx2, which the test extra doesn't install; httpx works the same
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

SECRET = "s" * 64
SAME_ORIGIN = {"sec-fetch-site": "same-origin"}
HX = {"hx-request": "true"}
BASE = "http://testserver"


def make_dash(config: cogworker.Config, **settings: Any) -> Dashboard:
    settings.setdefault("session_secret", SECRET)
    return app(config, WebSettings(**settings))


def dashboard(config: cogworker.Config) -> Iterator[Dashboard]:
    """Body of the ``dash`` fixture (``pytest.fixture(name="dash")(dashboard)`` in a module)."""
    dashboard = make_dash(config)
    try:
        yield dashboard
    finally:
        dashboard.close()


def client_for(target: Any, base_url: str = BASE, **kwargs: Any) -> TestClient:
    return TestClient(target, base_url=base_url, follow_redirects=False, **kwargs)


def dashboard_client(dash: Dashboard) -> Iterator[TestClient]:
    """Body of the ``client`` fixture, on the ``dash`` fixture."""
    with client_for(dash) as test_client:
        yield test_client


def sessionless_client(config: cogworker.Config) -> Iterator[TestClient]:
    """Body of a fixture: a client on a dashboard without a session, where notices travel in
    the redirect."""
    dashboard = make_dash(config, builtin_session=False)
    try:
        with client_for(dashboard) as test_client:
            yield test_client
    finally:
        dashboard.close()


def get_once(dashboard: Dashboard, path: str = "/workers", app: Any = None) -> Any:
    """GET ``path`` once through ``app`` (the dashboard itself unless given), then close the
    dashboard."""
    try:
        with client_for(app or dashboard) as test_client:
            return test_client.get(path)
    finally:
        dashboard.close()


def post(
    client: TestClient, path: str, data: Any = None, *, hx: bool = False, **headers: str
) -> httpx.Response:
    """A POST as a same-origin browser sends it (``hx``: as the page's script sends it)."""
    sent = {**SAME_ORIGIN, **(HX if hx else {}), **headers}
    pairs = list(data.items()) if isinstance(data, dict) else list(data or [])
    sent["content-type"] = "application/x-www-form-urlencoded"
    return client.post(path, content=urlencode(pairs).encode("ascii"), headers=sent)


# -- seeding Redis ---------------------------------------------------------------------------


def job(**fields: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "class": "Demo::Job",
        "args": [],
        "jid": wire.new_jid(),
        "queue": "default",
        "retry": True,
        "created_at": time.time(),
        **fields,
    }
    return payload


def push(r: redis.Redis, queue: str = "default", **fields: Any) -> str:
    """Enqueue a job as a producer does; returns the raw entry."""
    raw = wire.dumps(job(**{"queue": queue, "enqueued_at": time.time(), **fields}))
    r.sadd(keys.QUEUES, queue)
    r.lpush(keys.queue(queue), raw)
    return raw


def add_to_set(r: redis.Redis, key: str, score: float | None = None, **fields: Any) -> str:
    raw = wire.dumps(job(**fields))
    r.zadd(key, {raw: time.time() if score is None else score})
    return raw


def plant_process(
    r: redis.Redis,
    identity: str,
    *,
    concurrency: int = 5,
    queues: list[str] | None = None,
    busy: int = 0,
    quiet: bool = False,
    rss_kb: int | None = 20480,
    started_at: float | None = None,
    beat_age: int | None = 1,
    tag: str | None = None,
) -> None:
    """A live process's presence as a heartbeat writes it (no subscriber behind it)."""
    info: dict[str, Any] = {
        "hostname": identity.split(":")[0],
        "pid": 4242,
        "concurrency": concurrency,
        "queues": queues or ["default"],
        "started_at": started_at or time.time() - 3600,
        "tag": tag,
        "identity": identity,
    }
    if rss_kb is not None:
        info["rss_kb"] = rss_kb
    fields = {"info": wire.dumps(info), "busy": str(busy), "quiet": "true" if quiet else "false"}
    seconds, _ = r.time()
    if beat_age is not None:
        r.hset(keys.LAST_BEAT, identity, str(int(seconds) - beat_age))
    r.hset(keys.process(identity), mapping=fields)
    r.expire(keys.process(identity), 60)
    r.sadd(keys.PROCESSES, identity)


def plant_work(
    r: redis.Redis, identity: str, thread: str, payload: dict[str, Any], run_at: int
) -> None:
    entry = {"queue": payload["queue"], "payload": payload, "run_at": run_at}
    r.hset(keys.workers(identity), thread, json.dumps(entry))


# -- reading pages ---------------------------------------------------------------------------


def jids(html: str) -> list[str]:
    """The jids of the table's rows, top to bottom."""
    content = inner_html(html, "jobs-content") if 'id="jobs-content"' in html else html
    table = content.split('class="panel job-detail"')[0]
    return [html_module.unescape(j) for j in re.findall(r'class="mono jid">([^<]*)<', table)]


def selection_link(html: str, jid: str) -> str:
    """The link that opens the panel of the row with ``jid``."""
    for href, cell in re.findall(r'<td class="job-cell"><a href="([^"]+)"[^>]*>(.*?)</a>', html):
        shown = re.search(r'class="mono jid">([^<]*)<', cell)
        if shown is not None and html_module.unescape(shown.group(1)) == jid:
            return html_module.unescape(href)
    raise AssertionError(f"no row {jid}")


def panel_of(html: str) -> str:
    return html.split('class="panel job-detail"')[1]


# -- the sources and their order -------------------------------------------------------------


def inner_html(html: str, element_id: str) -> str:
    """The content of the element with ``id`` (counting nested tags of its name)."""
    opening = re.search(rf'<(\w+)[^>]*\bid="{re.escape(element_id)}"[^>]*>', html)
    assert opening is not None, f"no element #{element_id}"
    tag = opening.group(1)
    depth, position = 1, opening.end()
    pattern = re.compile(rf"<(/?){tag}\b[^>]*>")
    while depth:
        found = pattern.search(html, position)
        assert found is not None, f"#{element_id} is not closed"
        depth += -1 if found.group(1) else 1
        position = found.end()
    return html[opening.end() : found.start()]


@dataclass
class Field:
    name: str
    value: str
    disabled: bool = False
    get_only: bool = False
    post_only: bool = False


@dataclass
class Form:
    method: str
    action: str
    hx_post: str | None
    confirm: str | None
    button: str
    fields: list[Field] = field(default_factory=list)

    def values(self) -> dict[str, str]:
        return {f.name: f.value for f in self.fields}


class _FormReader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[Form] = []
        self._open: Form | None = None
        self._in_button = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "form":
            self._open = Form(
                method=(found.get("method") or "get").lower(),
                action=found.get("action") or "",
                hx_post=found.get("hx-post"),
                confirm=found.get("data-cw-confirm"),
                button="",
            )
        elif tag == "input" and self._open is not None and found.get("name"):
            self._open.fields.append(
                Field(
                    str(found["name"]),
                    found.get("value") or "",
                    disabled="disabled" in found,
                    get_only="data-cw-get-only" in found,
                    post_only="data-cw-post-only" in found,
                )
            )
        elif tag == "button" and self._open is not None:
            self._in_button = True

    def handle_data(self, data: str) -> None:
        if self._in_button and self._open is not None:
            self._open.button += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "button":
            self._in_button = False
        elif tag == "form" and self._open is not None:
            self.forms.append(self._open)
            self._open = None


def forms(html: str) -> list[Form]:
    reader = _FormReader()
    reader.feed(html)
    return reader.forms


def form_with(html: str, button: str, action_part: str = "") -> Form:
    """The one form whose button reads ``button`` and whose action contains ``action_part``."""
    found = [
        f
        for f in forms(html)
        if f.button.strip() == button and action_part in (f.hx_post or f.action)
    ]
    assert len(found) == 1, f"{len(found)} forms with button {button!r} and {action_part!r}"
    return found[0]


def submit(client: TestClient, form: Form, *, js: bool) -> httpx.Response:
    """Send ``form`` as the page's script does (``js``) or as a browser without it does."""
    if js:
        assert form.hx_post is not None
        data = [(f.name, f.value) for f in form.fields if not f.get_only]
        return post(client, form.hx_post, data, hx=True)
    data = [(f.name, f.value) for f in form.fields if not f.disabled]
    if form.method == "get":
        return client.get(form.action, params=data)
    return post(client, form.action, data)


# -- the browser tests -----------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
_shared: dict[str, Any] = {}


def shared_browser(pytest_config: pytest.Config) -> Browser:
    """One headless Chromium for the whole test session, closed when the session ends."""
    if "browser" not in _shared:
        from playwright.sync_api import sync_playwright

        playwright: Playwright = sync_playwright().start()
        _shared["playwright"] = playwright
        _shared["browser"] = playwright.chromium.launch(executable_path=CHROMIUM)
        pytest_config.add_cleanup(_close_shared_browser)
    browser: Browser = _shared["browser"]
    return browser


def _close_shared_browser() -> None:
    browser, playwright = _shared.pop("browser", None), _shared.pop("playwright", None)
    if browser is not None:
        browser.close()
    if playwright is not None:
        playwright.stop()


def screenshot_dir(factory: pytest.TempPathFactory) -> Path:
    """``$COGWORKER_SCREENSHOTS``, else a temporary directory; printed either way."""
    chosen = os.environ.get("COGWORKER_SCREENSHOTS")
    directory = Path(chosen) if chosen else factory.getbasetemp() / "screenshots"
    directory.mkdir(parents=True, exist_ok=True)
    print(f"screenshots in {directory}")
    return directory


@dataclass
class Served:
    base: str
    port: int
    dashboard: Dashboard


@contextlib.contextmanager
def serve(config: cogworker.Config, **settings: Any) -> Iterator[Served]:
    """The dashboard under uvicorn in a thread on 127.0.0.1."""
    dashboard = make_dash(config, **settings)
    with serve_app(dashboard, dashboard) as served:
        yield served


@contextlib.contextmanager
def serve_app(app: Any, dashboard: Dashboard) -> Iterator[Served]:
    """``app`` (the dashboard, or a site that mounts it) under uvicorn in a thread on
    127.0.0.1; the dashboard is closed once the server has stopped."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=15)
    try:
        yield Served(f"http://127.0.0.1:{port}", port, dashboard)
    finally:
        server.should_exit = True
        thread.join(10)
        dashboard.close()


@dataclass
class Watched:
    """A page whose console errors and requests are recorded; a request that would leave the
    served dashboard is aborted and recorded in ``foreign``."""

    page: Page
    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def assert_clean(self) -> None:
        assert self.errors == [], self.errors
        assert self.foreign == [], self.foreign

    def close(self) -> None:
        self.page.context.close()


def open_page(
    browser: Browser,
    served: Served,
    *,
    js: bool,
    scheme: str = "light",
    width: int = 1280,
    height: int = 800,
) -> Watched:
    context = browser.new_context(
        java_script_enabled=js,
        color_scheme=scheme,  # type: ignore[arg-type]
        timezone_id="Etc/GMT+5",
        viewport={"width": width, "height": height},
    )
    page = context.new_page()
    watched = Watched(page)
    page.on("console", lambda m: watched.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: watched.errors.append(str(error)))

    def route(request_route: Any) -> None:
        url = request_route.request.url
        watched.requests.append(url)
        if url.startswith(served.base + "/"):
            request_route.continue_()
        else:
            watched.foreign.append(url)
            request_route.abort()

    page.route("**/*", route)
    return watched


def visiting(browser: Browser, served: Served, *, local_only: bool = False) -> Iterator[Any]:
    """Body of a ``visit`` fixture: ``visit(path, js=...)`` opens a watched page at ``path``;
    when the test ends every page opened is checked for console errors (and, with
    ``local_only``, that each request it made went to the served dashboard), then closed."""
    opened: list[Watched] = []

    def open_at(path: str, *, js: bool) -> Page:
        watched = open_page(browser, served, js=js)
        opened.append(watched)
        watched.page.goto(served.base + path)
        return watched.page

    yield open_at
    for watched in opened:
        try:
            watched.assert_clean()
            if local_only:
                assert all(url.startswith(served.base + "/") for url in watched.requests)
        finally:
            watched.close()


# the values a chart's polylines draw, read back through their points and the plot's scale
READ_LINE = """(name) => {
  const svg = document.querySelector(`svg#${name}-chart`);
  const yMax = Number(svg.dataset.yMax), top = Number(svg.dataset.plotTop);
  const bottom = Number(svg.dataset.plotBottom);
  const values = {};
  for (const line of svg.querySelectorAll("polyline[data-series]")) {
    values[line.dataset.series] = Array.from(line.points, (p) =>
      Math.round((bottom - p.y) / (bottom - top) * yMax));
  }
  return values;
}"""
