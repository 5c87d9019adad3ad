"""cogworker.contrib.starlette with FastAPI and plain Starlette: the lifespan owns the client
(the pool really closed at shutdown, the server's CLIENT LIST shows it) and composes with the
app's own, the dependency hands the client to an endpoint, the dashboard is mounted behind a
guard, and a real worker runs a job an endpoint enqueued.

The apps are in ``contrib_fastapi_app``; the worker loads that module for its job.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import wait_for
from contrib_fastapi_app import WelcomeJob, fastapi_app, starlette_app
from contrib_guard_probes import PROBES, check_refused, served_path
from fastapi import FastAPI
from runtime_support import cogworker_env, queue_jobs, started_workers
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.websockets import WebSocketDisconnect

import cogworker
from cogworker.contrib.starlette import cogworker_lifespan, mount_dashboard
from cogworker.local.server import RedisServer
from cogworker.web import WebSettings

with warnings.catch_warnings():
    # Starlette asks for httpx2, which the test extra doesn't install; httpx works the same
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

TESTS_DIR = Path(__file__).resolve().parent
DASHBOARD_SETTINGS = WebSettings(session_secret="s" * 64)


@pytest.fixture
def own(redis_url: str, r: redis.Redis) -> Iterator[cogworker.Config]:
    """A config for the app, not the process default (the lifespan installs it)."""
    made = cogworker.Config(redis_url=redis_url)
    try:
        yield made
    finally:
        made.close()


def jids(r: redis.Redis, queue: str) -> list[str]:
    return [job["jid"] for job in queue_jobs(r, queue)]


# -- the lifespan and the dependency ---------------------------------------------------------


def test_a_fastapi_endpoint_enqueues_through_the_lifespans_client(
    config: cogworker.Config, own: cogworker.Config, r: redis.Redis
) -> None:
    app = fastapi_app(own)
    with TestClient(app) as web:
        assert get_client_of(app).config is own
        assert cogworker.default_config() is own  # Job.perform_async pushes there too
        jid = web.post("/welcome/ada").json()["jid"]
        assert jids(r, "fastapi") == [jid]
        assert queue_jobs(r, "fastapi")[0]["args"] == ["ada"]
    assert cogworker.default_config() is config  # the previous default is back
    assert not hasattr(app.state, "cogworker")


def get_client_of(app: Any) -> cogworker.Client:
    client = app.state.cogworker
    assert isinstance(client, cogworker.Client)
    return client


def test_a_plain_starlette_endpoint_gets_the_client_from_the_request(
    config: cogworker.Config, own: cogworker.Config, r: redis.Redis
) -> None:
    with TestClient(starlette_app(own)) as web:
        jid = web.post("/welcome/grace").json()["jid"]
    assert jids(r, "fastapi") == [jid]


def test_set_default_false_leaves_the_process_default_alone(
    config: cogworker.Config, own: cogworker.Config
) -> None:
    app = FastAPI(lifespan=cogworker_lifespan(own, set_default=False))
    with TestClient(app):
        assert cogworker.default_config() is config
        assert get_client_of(app).config is own


def test_without_the_lifespan_running_the_dependency_says_what_is_missing(
    own: cogworker.Config,
) -> None:
    web = TestClient(fastapi_app(own))  # not entered: no lifespan
    with pytest.raises(RuntimeError, match=r"no cogworker client on this app: create it with"):
        web.post("/welcome/x")


def test_a_bad_lifespan_argument_is_refused() -> None:
    with pytest.raises(TypeError, match=r"needs a cogworker\.Config, got 'redis://localhost'"):
        cogworker_lifespan("redis://localhost")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="inner must be a lifespan"):
        cogworker_lifespan(cogworker.Config(), inner=3)  # type: ignore[arg-type]


def test_the_apps_own_lifespan_runs_inside_with_the_client_open(
    config: cogworker.Config, own: cogworker.Config, r: redis.Redis
) -> None:
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def inner(app: FastAPI) -> AsyncIterator[Mapping[str, Any]]:
        client = get_client_of(app)
        events.append(f"start {client.enqueue(WelcomeJob, 'at-start')}")
        yield {"greeting": "hi"}
        events.append(f"stop {client.enqueue(WelcomeJob, 'at-stop')}")  # still open

    app = fastapi_app(own, inner)
    with TestClient(app) as web:
        assert web.get("/state").json() == {"greeting": "hi"}  # its state is the app's
    started, stopped = jids(r, "fastapi")
    assert events == [f"start {started}", f"stop {stopped}"]
    assert [job["args"] for job in queue_jobs(r, "fastapi")] == [["at-start"], ["at-stop"]]


def connection_ids(admin: redis.Redis) -> set[int]:
    return {int(entry["id"]) for entry in admin.client_list()}


def test_shutdown_closes_the_pool_and_the_mounted_dashboards(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    """On a private server only the test's own connection and the app's exist."""
    server = redis_server_factory()
    settings = cogworker.Config(redis_url=server.url)
    with redis.Redis.from_url(server.url, decode_responses=True) as admin:
        mine = {int(admin.client_id())}
        app = fastapi_app(settings)
        mount_dashboard(app, settings, guard=None, settings=DASHBOARD_SETTINGS)
        with TestClient(app) as web:
            web.post("/welcome/pooled")
            assert web.get("/cogworker/overview").status_code == 200
            assert len(connection_ids(admin) - mine) >= 2  # the client's and the dashboard's
        wait_for(lambda: connection_ids(admin) == mine, timeout=5)
        assert admin.llen("cogworker:queue:fastapi") == 1


# -- the dashboard behind a guard ------------------------------------------------------------


def guarded_site(config: cogworker.Config, asked: list[str]) -> FastAPI:
    """A FastAPI app with its own session: the dashboard wants an admin session (an async
    guard that redirects), the reports mount a header (a sync guard that refuses)."""
    app = fastapi_app(config)
    app.add_middleware(SessionMiddleware, secret_key="host-" + "k" * 40)

    @app.post("/login")
    def login(request: Request) -> dict[str, Any]:
        request.session["admin"] = True
        return {"ok": True}

    async def admins_only(request: Request) -> bool | Response:
        asked.append(f"async {request.url.path} {threading.get_ident()}")  # the loop's thread
        return request.session.get("admin") is True or RedirectResponse("/login", 303)

    def with_header(request: Request) -> bool:
        asked.append(f"sync {request.url.path} {threading.get_ident()}")
        return request.headers.get("x-ops") == "yes"

    mount_dashboard(app, config, guard=admins_only, settings=DASHBOARD_SETTINGS)
    mount_dashboard(
        app, config, guard=with_header, prefix="/ops/cogworker", settings=DASHBOARD_SETTINGS
    )
    return app


def test_the_guard_redirects_refuses_or_lets_through(
    config: cogworker.Config, r: redis.Redis
) -> None:
    asked: list[str] = []
    with TestClient(guarded_site(config, asked), follow_redirects=False) as web:
        away = web.get("/cogworker/overview")
        assert (away.status_code, away.headers["location"]) == (303, "/login")
        assert web.post("/login").status_code == 200
        page = web.get("/cogworker/overview")
        assert page.status_code == 200
        assert '<a href="/cogworker/workers">Workers</a>' in page.text

        refused = web.get("/ops/cogworker/overview")
        assert (refused.status_code, refused.text) == (403, "Forbidden\n")
        allowed = web.get("/ops/cogworker/overview", headers={"x-ops": "yes"})
        assert allowed.status_code == 200
        assert '<a href="/ops/cogworker/workers">Workers</a>' in allowed.text

        assert web.post("/welcome/host").status_code == 200  # not under a prefix: no guard
        # no websocket gets past a guard (the dashboard serves none)
        with pytest.raises(WebSocketDisconnect), web.websocket_connect("/cogworker/anything"):
            pass
    calls = [entry.split() for entry in asked]
    assert [call[:2] for call in calls] == [["async", "/cogworker/overview"]] * 2 + [
        ["sync", "/ops/cogworker/overview"]
    ] * 2
    (loop_thread,) = {call[2] for call in calls[:2]}
    # the sync guard ran in the thread pool, not on the event loop (the TestClient runs the
    # loop in a thread of its own, so "not the main thread" would not tell them apart)
    assert all(call[2] != loop_thread for call in calls[2:]), calls


def test_a_guard_answer_that_is_not_a_decision_is_an_error(config: cogworker.Config) -> None:
    app = fastapi_app(config)
    mount_dashboard(app, config, guard=lambda request: "yes", settings=DASHBOARD_SETTINGS)  # type: ignore[arg-type,return-value]
    with (
        TestClient(app) as web,
        pytest.raises(TypeError, match="must return True, False or a Response, got 'yes'"),
    ):
        web.get("/cogworker/")


def asgi_call(app: Any, method: str, raw: str) -> tuple[int, dict[str, str], bytes]:
    """One request as an ASGI server passes it: ``path`` decoded, ``raw_path`` as sent, dot
    segments kept (the TestClient's httpx would normalise them away)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": served_path(raw),
        "raw_path": raw.encode("ascii"),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 50000),
    }
    messages: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    asyncio.run(app(scope, receive, send))
    start = messages[0]
    headers = {name.decode(): value.decode() for name, value in start.get("headers", [])}
    body = b"".join(message.get("body", b"") for message in messages[1:])
    return start["status"], headers, body


def test_no_path_trick_gets_past_the_guard(config: cogworker.Config) -> None:
    asked: list[str] = []

    def nobody(request: Request) -> bool:
        asked.append(request.url.path)
        return False

    app = fastapi_app(config)
    mount_dashboard(app, config, guard=nobody, settings=DASHBOARD_SETTINGS)
    for method, raw in PROBES:
        before = len(asked)
        status, headers, body = asgi_call(app, method, raw)
        if status == 307:  # Starlette's slash redirect: to the mount, where the guard waits
            assert headers["location"] == f"http://testserver{raw}/" and before == len(asked)
            continue
        check_refused((method, raw), status, body, len(asked) > before)
    assert asked  # the table did reach the guard


@pytest.mark.parametrize("prefix", ["cogworker", "/cogworker/", ""])
def test_a_bad_prefix_is_refused(config: cogworker.Config, prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix must start with '/' and not end with one"):
        mount_dashboard(FastAPI(), config, guard=None, prefix=prefix)


# -- a real worker ---------------------------------------------------------------------------


def test_a_worker_runs_a_job_an_endpoint_enqueued(
    config: cogworker.Config, r: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    paths = [str(TESTS_DIR), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = cogworker_env(redis_url, PYTHONPATH=os.pathsep.join(paths))
    with started_workers(tmp_path) as workers:
        worker = workers.start(["run", "-r", "contrib_fastapi_app", "-q", "fastapi"], env)
        with TestClient(fastapi_app(config)) as web:
            jid = web.post("/welcome/worker").json()["jid"]
        wait_for(lambda: r.lrange("test:welcomed:worker", 0, -1), timeout=20)
        assert r.lrange("test:welcomed:worker", 0, -1) == ["welcome worker"]
        worker.wait_output(jid)
