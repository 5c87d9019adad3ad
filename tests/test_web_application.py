"""The page shell and the app around the tabs: header, refresh containers, mounting under a
prefix (FastAPI, Starlette, nested), assets and their caching, settings, /metrics, Redis
outages, and ``cogworker web`` serving over real HTTP."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import click
import pytest
import redis
import web_support
from click.testing import CliRunner
from conftest import wait_for
from fastapi import FastAPI
from runtime_support import cogworker_log_records
from starlette.applications import Starlette
from starlette.routing import Mount
from web_support import HX, client_for, form_with, get_once, make_dash, post, push

import cogworker
from cogworker import keys
from cogworker.cli_context import REDIS_URL_META
from cogworker.config import ConfigError
from cogworker.local.server import RedisServer, free_port
from cogworker.web import WebSettings
from cogworker.web.application import Dashboard
from cogworker.web.cli import web_command

_dash = pytest.fixture(name="dash")(web_support.dashboard)
_client = pytest.fixture(name="client")(web_support.dashboard_client)

CONTAINERS = {
    "/overview": 'id="overview-content" hx-get="/overview?layout=a"',
    "/workers": 'id="workers-content" hx-get="/workers"',
    "/jobs": 'id="jobs-content" hx-get="/jobs"',
}


# -- the header ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/overview", "/jobs", "/workers"])
def test_every_page_has_the_header_with_its_tab_marked(client: Any, path: str) -> None:
    html = client.get(path).text
    nav = html.split('<nav class="cw-tabs" aria-label="Tabs">')[1].split("</nav>")[0]
    labels = re.findall(r'<a href="/(\w+)"[^>]*>(\w+)</a>', nav)
    assert labels == [
        ("overview", "Overview"),
        ("jobs", "Jobs"),
        ("schedules", "Schedules"),
        ("workers", "Workers"),
        ("history", "History"),
        ("class_metrics", "Metrics"),
    ]
    assert f'href="{path}" aria-current="page"' in nav
    assert nav.count("aria-current") == 1
    assert '<button type="button" class="btn btn-toggle btn-sm" data-cw-live-toggle' in html
    assert "data-cw-wide-toggle" in html
    assert re.search(r"data-cw-live-toggle[^>]*hidden>", html)  # shown by the script only
    assert '<main id="cw-main" class="cw-main">' in html
    assert 'id="cluster-bar" hx-get="/workers/summary"' in html
    assert CONTAINERS[path] in html
    assert '<dialog id="cw-confirm"' in html


def test_refreshes_follow_the_configured_interval(config: cogworker.Config) -> None:
    dashboard = make_dash(config, live_update_interval=15)
    try:
        with client_for(dashboard) as test_client:
            pages = [test_client.get(path).text for path in CONTAINERS]
    finally:
        dashboard.close()
    for html in pages:
        assert html.count('hx-trigger="every 15s [window.cogworkerLiveUpdate]"') >= 2
        assert "every 3s" not in html


def test_a_refresh_answers_the_content_only(client: Any) -> None:
    for path in CONTAINERS:
        fragment = client.get(path, headers=HX).text
        assert "<html" not in fragment and '<nav class="cw-tabs"' not in fragment, path
        assert 'class="page-head"' in fragment, path


# -- mounting --------------------------------------------------------------------------------


def check_mounted(test_client: Any, r: redis.Redis, prefix: str) -> None:
    """A page renders under ``prefix``, its links and a form post stay under it."""
    push(r, "default")
    for bare in (prefix, prefix + "/"):
        assert test_client.get(bare, follow_redirects=True).status_code == 200, bare
    html = test_client.get(prefix + "/").text
    assert f'href="{prefix}/workers"' in html
    assert f'href="{prefix}/overview?layout=b&amp;queue=default"' in html
    assert 'href="/workers"' not in html and 'action="/overview' not in html
    assert re.search(rf'href="{prefix}/assets/app\.css\?v=\w+"', html)
    workers = re.search(r'href="([^"]*/workers)"', html)
    assert workers is not None and test_client.get(workers.group(1)).status_code == 200
    pause = form_with(html, "pause")
    assert pause.action == f"{prefix}/overview/default/pause"
    answer = post(test_client, pause.action, pause.values())
    assert answer.status_code == 303
    assert answer.headers["location"] == f"{prefix}/overview?layout=a"
    assert r.sismember(keys.PAUSED_QUEUES, "default")
    assert "Queue paused" in test_client.get(answer.headers["location"]).text


def test_mounted_in_fastapi(dash: Dashboard, r: redis.Redis) -> None:
    host = FastAPI()
    host.mount("/cogworker", dash)
    with client_for(host) as test_client:
        check_mounted(test_client, r, "/cogworker")


def test_mounted_in_starlette(dash: Dashboard, r: redis.Redis) -> None:
    host = Starlette(routes=[Mount("/cogworker", dash)])
    with client_for(host) as test_client:
        check_mounted(test_client, r, "/cogworker")


def test_mounted_under_a_nested_root_path(dash: Dashboard, r: redis.Redis) -> None:
    host = Starlette(routes=[Mount("/ops", routes=[Mount("/cogworker", dash)])])
    with client_for(host, root_path="/proxy") as test_client:  # behind a proxy, too
        check_mounted(test_client, r, "/proxy/ops/cogworker")


def test_served_at_a_root_path_the_prefix_itself_is_the_overview(
    dash: Dashboard, r: redis.Redis
) -> None:
    with client_for(dash, root_path="/jobs") as test_client:
        answer = test_client.get("/jobs")
        assert answer.status_code == 200 and 'href="/jobs/workers"' in answer.text
        check_mounted(test_client, r, "/jobs")


# -- assets ----------------------------------------------------------------------------------


def asset_urls(html: str) -> dict[str, str]:
    return dict(
        re.findall(r'(?:href|src)="(/assets/([\w.]+)\?v=\w+)"', html)[i][::-1] for i in range(3)
    )


def test_assets_are_served_with_their_types_and_cache_rules(client: Any) -> None:
    html = client.get("/workers").text
    found = re.findall(r'(?:href|src)="(/assets/([\w.]+)\?v=(\w+))"', html)
    assert {name for _, name, _ in found} == {"app.css", "app.js", "favicon.svg"}
    types = {"app.css": "text/css", "app.js": "text/javascript", "favicon.svg": "image/svg+xml"}
    for url, name, _ in found:
        versioned = client.get(url)
        assert versioned.status_code == 200
        assert versioned.headers["content-type"].startswith(types[name])
        assert versioned.headers["cache-control"] == "public, max-age=31536000, immutable"
        plain = client.get(url.split("?")[0])
        assert plain.content == versioned.content
        assert plain.headers["cache-control"] == "no-cache"  # not immutable: unversioned URL
        assert plain.headers["last-modified"] and plain.headers["etag"]
        again = client.get(url.split("?")[0], headers={"if-none-match": plain.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        since = client.get(
            url.split("?")[0], headers={"if-modified-since": plain.headers["last-modified"]}
        )
        assert since.status_code == 304
        assert client.head(url).content == b""
        assert b"http://" not in versioned.content or name == "favicon.svg"
    assert client.get("/assets/nothing.js").status_code == 404


# -- settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("live_update_interval", 0),
        ("live_update_interval", "3"),
        ("live_update_interval", True),
        ("live_update_interval", 7200),
        ("time_format", ""),
        ("time_format", "%j"),
        ("time_format", "%Y %"),
        ("metrics_enabled", "yes"),
        ("builtin_session", 1),
        ("frame_options", "ALLOW-FROM x"),
        ("queue_page_size", 0),
        ("queue_page_size", 2.5),
        ("queue_scan_limit", 10),
        ("session_secret", 123),
    ],
)
def test_a_bad_setting_is_refused_naming_it(name: str, value: Any) -> None:
    with pytest.raises(ConfigError) as refused:
        WebSettings(**{name: value})
    message = str(refused.value)
    assert message.startswith(name) and "\n" not in message


def test_app_refuses_what_is_not_a_config() -> None:
    with pytest.raises(TypeError, match=r"needs a cogworker\.Config"):
        cogworker.web.app("redis://localhost")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"settings must be a WebSettings"):
        Dashboard(cogworker.Config(), WebSettings(), []).settings = {}  # type: ignore[assignment]


# -- /metrics --------------------------------------------------------------------------------


def test_metrics_are_served_and_can_be_turned_off(
    config: cogworker.Config, client: Any, r: redis.Redis
) -> None:
    r.incr(keys.STATS_PROCESSED)
    answer = client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "cogworker_processed_total 1\n" in answer.text
    assert "# TYPE cogworker_queue_size gauge" in answer.text
    assert "cogworker_busy_workers 0" in answer.text and answer.text.endswith("\n")
    dashboard = make_dash(config, metrics_enabled=False)
    off = get_once(dashboard, "/metrics")
    assert off.status_code == 404 and off.text == "Not Found"


# -- Redis outage ----------------------------------------------------------------------------


def test_an_unavailable_redis_is_a_503_naming_it_and_one_log_line(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    dashboard = make_dash(cogworker.Config(redis_url=server.url))
    try:
        with client_for(dashboard) as test_client:
            assert test_client.get("/workers").status_code == 200
            server.stop()
            with cogworker_log_records() as records:
                answer = test_client.get("/workers")
    finally:
        dashboard.close()
    assert answer.status_code == 503
    assert answer.text.startswith("Redis is unavailable (ConnectionError")
    assert "\n" not in answer.text
    lines = [r.getMessage() for r in records if "Web:" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("Web: Redis unavailable during GET /workers")


# -- the command -----------------------------------------------------------------------------


def test_the_command_says_in_one_line_when_the_extra_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    result = CliRunner().invoke(web_command, ["--port", "0"])
    assert result.exit_code == 1
    assert result.output == (
        "Error: the dashboard needs the web extra (module 'uvicorn' is missing): "
        "pip install 'cogworker[web]'\n"
    )


def test_the_command_refuses_conflicting_options() -> None:
    @click.group()
    @click.pass_context
    def top(ctx: click.Context) -> None:
        ctx.meta[REDIS_URL_META] = "redis://one:6379/0"

    top.add_command(web_command)
    conflict = CliRunner().invoke(top, ["web", "--redis-url", "redis://two:6379/0"])
    assert conflict.exit_code == 2 and "--redis-url given twice" in conflict.output
    bad_root = CliRunner().invoke(web_command, ["--root-path", "jobs/"])
    assert bad_root.exit_code == 2 and "--root-path" in bad_root.output


def fetch(url: str, data: bytes | None = None, **headers: str) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, data=data, headers=headers)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def test_cogworker_web_serves_over_http(redis_url: str, r: redis.Redis) -> None:
    push(r, "default")
    port = free_port()
    command = (
        "import sys; from cogworker.web.cli import web_command; "
        "web_command(sys.argv[1:], prog_name='cogworker web')"
    )
    env = {**os.environ, "REDIS_URL": redis_url, "COGWORKER_SESSION_SECRET": "e" * 64}
    server = subprocess.Popen(
        [sys.executable, "-c", command, "--port", str(port), "--root-path", "/jobs"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert server.poll() is None, server.communicate()[0]
        try:
            return fetch(base + "/workers")[0] == 200
        except OSError:
            return False

    try:
        wait_for(up, timeout=20, interval=0.1)
        status, headers, body = fetch(base + "/overview")  # the proxy strips /jobs
        assert status == 200 and 'href="/jobs/workers"' in body
        assert headers["content-security-policy"].startswith("default-src 'self'")
        form = b"layout=a"
        status, _, _ = fetch(base + "/overview/default/pause", form)
        assert status == 403  # no Origin, no Sec-Fetch-Site
        status, headers, _ = fetch(
            base + "/overview/default/pause", form, Origin=f"http://127.0.0.1:{port}"
        )
        assert status == 303 and headers["location"] == "/jobs/overview?layout=a"
        assert r.sismember(keys.PAUSED_QUEUES, "default")
    finally:
        server.send_signal(signal.SIGTERM)
        output = server.communicate(timeout=15)[0]
    assert server.returncode == 0, output
    assert (
        f"cogworker web: serving http://127.0.0.1:{port}/ (reached through a proxy at /jobs/)"
        in output
    )
