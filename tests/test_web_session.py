"""Sessions: the built-in signed cookie only when the host has none, its secret, and the
one-shot notices that travel in it (or in the URL when there is no session)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import pytest
import redis
from runtime_support import cogworker_log_records
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from web_support import client_for, get_once, make_dash, post, push

import cogworker
from cogworker import keys
from cogworker.config import ConfigError
from cogworker.web import WebSettings
from cogworker.web import settings as web_settings
from cogworker.web.session import COOKIE_NAME, CookieSession, sign, unsign

Scope = MutableMapping[str, Any]
ASGIApp = Callable[..., Awaitable[None]]

HOST_SECRET = "h" * 64


class SessionWriter:
    """A stand-in auth layer: writes ``user=alice`` into whatever session it is given."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and "session" in scope:
            scope["session"]["user"] = "alice"
        await self.app(scope, receive, send)


def cookie_names(answer: Any) -> list[str]:
    return [value.split("=", 1)[0] for value in answer.headers.get_list("set-cookie")]


def test_without_a_host_session_the_builtin_cookie_is_the_only_one(
    config: cogworker.Config,
) -> None:
    dashboard = make_dash(config)
    dashboard.use(SessionWriter)
    answer = get_once(dashboard)
    assert answer.status_code == 200
    assert cookie_names(answer) == [COOKIE_NAME]
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/" in cookie


def test_a_host_session_in_front_wins(config: cogworker.Config) -> None:
    dashboard = make_dash(config)
    dashboard.use(SessionWriter)
    host = Starlette(
        routes=[Mount("/cogworker", dashboard)],
        middleware=[Middleware(CookieSession, secret=HOST_SECRET, cookie_name="host.session")],
    )
    answer = get_once(dashboard, "/cogworker/workers", app=host)
    assert answer.status_code == 200
    assert cookie_names(answer) == ["host.session"]
    value = answer.headers["set-cookie"].split(";")[0].split("=", 1)[1]
    assert unsign(value, HOST_SECRET) == {"user": "alice"}


def test_a_session_middleware_added_with_use_replaces_the_builtin_one(
    config: cogworker.Config,
) -> None:
    dashboard = make_dash(config)
    dashboard.use(CookieSession, secret=HOST_SECRET, cookie_name="app.session")
    dashboard.use(SessionWriter)
    answer = get_once(dashboard)
    assert cookie_names(answer) == ["app.session"]


def test_builtin_session_off_sets_no_cookie(config: cogworker.Config) -> None:
    dashboard = make_dash(config, builtin_session=False)
    dashboard.use(SessionWriter)
    answer = get_once(dashboard)
    assert answer.status_code == 200
    assert cookie_names(answer) == []


def test_the_secret_comes_from_the_environment(
    config: cogworker.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COGWORKER_SESSION_SECRET", "x" * 64)
    dashboard = cogworker.web.app(config)
    dashboard.use(SessionWriter)
    answer = get_once(dashboard)
    value = answer.headers["set-cookie"].split(";")[0].split("=", 1)[1]
    assert unsign(value, "x" * 64) == {"user": "alice"}
    assert unsign(value, "y" * 64) is None


def test_a_new_secret_takes_effect_at_once(config: cogworker.Config) -> None:
    dashboard = make_dash(config)
    dashboard.use(SessionWriter)
    try:
        with client_for(dashboard) as test_client:
            first = test_client.get("/workers").headers["set-cookie"]
            dashboard.settings = WebSettings(session_secret="n" * 64)
            test_client.cookies.clear()
            second = test_client.get("/workers").headers["set-cookie"]
    finally:
        dashboard.close()
    assert unsign(first.split(";")[0].split("=", 1)[1], "s" * 64) is not None
    assert unsign(second.split(";")[0].split("=", 1)[1], "n" * 64) == {"user": "alice"}


@pytest.mark.parametrize("origin", ["setting", "environment"])
def test_a_short_secret_is_refused_naming_where_it_came_from(
    config: cogworker.Config, monkeypatch: pytest.MonkeyPatch, origin: str
) -> None:
    if origin == "setting":
        with pytest.raises(ConfigError, match="session_secret must be at least 64 characters"):
            WebSettings(session_secret="short")
    else:
        monkeypatch.setenv("COGWORKER_SESSION_SECRET", "short")
        with pytest.raises(ConfigError, match=r"\$COGWORKER_SESSION_SECRET must be at least 64"):
            cogworker.web.app(config)


def test_without_a_secret_one_random_secret_serves_the_process_and_says_so(
    config: cogworker.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COGWORKER_SESSION_SECRET", raising=False)
    with cogworker_log_records() as records:
        first = cogworker.web.app(config)
        second = cogworker.web.app(config)
    assert first.settings.resolved_secret() == second.settings.resolved_secret()
    assert len(first.settings.resolved_secret()) == 64
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert any("random one for this process" in line for line in warnings)


def test_a_forged_or_expired_cookie_is_an_empty_session() -> None:
    good = sign({"user": "alice"}, HOST_SECRET)
    assert unsign(good, HOST_SECRET) == {"user": "alice"}
    body, stamp, signature = good.split(".")
    assert unsign(f"{body}x.{stamp}.{signature}", HOST_SECRET) is None
    assert unsign("garbage", HOST_SECRET) is None
    old = sign({"user": "alice"}, HOST_SECRET, now=0)
    assert unsign(old, HOST_SECRET) is None


# -- notices ---------------------------------------------------------------------------------


def test_a_notice_travels_in_the_session_and_shows_once(
    config: cogworker.Config, r: redis.Redis
) -> None:
    push(r, "default")
    push(r, "default")
    dashboard = make_dash(config)
    try:
        with client_for(dashboard) as test_client:
            answer = post(test_client, "/overview/default/delete_all", {"layout": "b"})
            assert answer.status_code == 303
            assert "notice" not in answer.headers["location"]
            first = test_client.get(answer.headers["location"]).text
            again = test_client.get(answer.headers["location"]).text
    finally:
        dashboard.close()
    assert "Deleted 2 jobs of the queue." in first
    assert "Deleted" not in again
    assert r.llen(keys.queue("default")) == 0


def test_without_a_session_the_notice_key_travels_in_the_url(
    config: cogworker.Config, r: redis.Redis
) -> None:
    push(r, "default")
    dashboard = make_dash(config, builtin_session=False)
    try:
        with client_for(dashboard) as test_client:
            answer = post(test_client, "/overview/default/pause", {"layout": "a"})
            location = answer.headers["location"]
            shown = test_client.get(location).text
            forged = test_client.get("/overview?layout=a&notice=<b>you+are+hacked</b>").text
    finally:
        dashboard.close()
    assert location == "/overview?layout=a&notice=queue_paused"
    assert "Queue paused" in shown
    assert 'hx-get="/overview?layout=a"' in shown  # the refresh doesn't carry it
    assert "hacked" not in forged and 'class="notice' not in forged


def test_the_random_secret_is_made_once_per_process() -> None:
    assert web_settings.process_secret() == web_settings.process_secret()
