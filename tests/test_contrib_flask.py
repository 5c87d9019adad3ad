"""cogworker.contrib.flask: the extension (``Cogworker(app)`` and ``init_app``), its config
from ``app.config["COGWORKER"]`` (bad keys refused in one line), jobs in the app context (in a
real worker process, whose flags and -C file win over app.config, and in the testing modes),
and the dashboard mounted behind a guard.

The app is ``contrib_flask_app.create_app`` (a factory around a module-level extension); the
worker loads ``contrib_flask_worker``, which builds it at import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import flask
import pytest
import redis
from conftest import wait_for
from contrib_flask_app import GreetJob, create_app
from contrib_guard_probes import PROBES, check_refused, served_path
from flask import Flask, redirect, session
from runtime_support import cogworker_env, queue_jobs, started_workers
from werkzeug.wrappers import Response

import cogworker
from cogworker import keys
from cogworker.contrib import flask as cw_flask
from cogworker.web import WebSettings
from cogworker.web import settings as web_settings
from cogworker.web.application import Dashboard

TESTS_DIR = Path(__file__).resolve().parent
DASHBOARD_SETTINGS = WebSettings(session_secret="s" * 64)


@pytest.fixture
def app(config: cogworker.Config) -> Iterator[Flask]:
    """The test app on the shared (flushed) server; ``config`` puts the default back after."""
    made = create_app()
    try:
        yield made
    finally:
        cw_flask.config(made).close()


def greeted(r: redis.Redis, marker: str) -> list[str]:
    return r.lrange(f"test:greeted:{marker}", 0, -1)


# -- the extension -----------------------------------------------------------------------------


def test_a_view_enqueues_into_the_apps_config(app: Flask, r: redis.Redis) -> None:
    settings = cw_flask.config(app)
    assert (settings.queues, settings.concurrency, settings.tag) == (["flask"], 3, "from-app")
    assert cogworker.default_config() is settings  # Job.perform_async pushes through it
    web = app.test_client()
    first = web.post("/greet/a").get_json()["jid"]
    second = web.post("/greet-through-client/b").get_json()["jid"]
    waiting = queue_jobs(r, "flask")
    assert [(job["jid"], job["class"], job["args"]) for job in waiting] == [
        (first, "ContribFlask::Greet", ["a"]),
        (second, "ContribFlask::Greet", ["b"]),
    ]
    with app.app_context():
        assert cw_flask.client() is cw_flask.client(app)
        assert cw_flask.client().config is settings


def test_set_default_false_leaves_the_process_default_alone(
    config: cogworker.Config, redis_url: str, r: redis.Redis
) -> None:
    other_db = redis_url.rsplit("/", 1)[0] + "/1"
    site = Flask("second_site")
    site.config["COGWORKER"] = {"redis_url": other_db}
    cw_flask.Cogworker(site, set_default=False)
    settings = cw_flask.config(site)
    try:
        assert cogworker.default_config() is config
        jid = cw_flask.client(site).enqueue(GreetJob, "z")
        with redis.Redis.from_url(other_db, decode_responses=True) as db1:
            assert [job["jid"] for job in queue_jobs(db1, "flask")] == [jid]
        assert r.llen("cogworker:queue:flask") == 0  # not on db 0, the default's
    finally:
        settings.close()


def test_jobs_run_by_the_testing_modes_run_in_the_app_context(app: Flask, r: redis.Redis) -> None:
    assert not flask.has_app_context()
    with cogworker.testing.inline():
        GreetJob.perform_async("inline")
    assert greeted(r, "inline") == ["hello from contrib_flask_app (inline)"]
    with cogworker.testing.fake():
        app.test_client().post("/greet/drained")
        assert greeted(r, "drained") == []
        cogworker.testing.drain(GreetJob)
    assert greeted(r, "drained") == ["hello from contrib_flask_app (drained)"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"COGWORKER": {"concurency": 2}},
            """app.config["COGWORKER"]: unknown option 'concurency' """
            """(did you mean 'concurrency'?)""",
        ),
        (
            {"COGWORKER": {"REDIS_URL": "redis://x"}},
            """app.config["COGWORKER"]: unknown option 'REDIS_URL' (did you mean 'redis_url'?)""",
        ),
        (
            {"COGWORKER": {"concurrency": 0}},
            """app.config["COGWORKER"]: concurrency must be a positive integer, got 0""",
        ),
        (
            {"COGWORKER": {"queues": ["mail,0"]}},
            """app.config["COGWORKER"]: queues 'mail,0': a queue's weight must be a """
            """positive integer, got '0'""",
        ),
        (
            {"COGWORKER": ["queues"]},
            """app.config["COGWORKER"] must be a dict of cogworker options, got ['queues']""",
        ),
        (
            {"COGWORKER_REDIS_URL": "redis://x"},
            """app.config['COGWORKER_REDIS_URL'] is not read: put cogworker options in """
            """app.config["COGWORKER"] = {"option_name": value}""",
        ),
    ],
)
def test_a_bad_setting_is_refused_in_one_line_naming_it(
    config: cogworker.Config, settings: dict[str, object], message: str
) -> None:
    site = Flask("bad_site")
    site.config.update(settings)
    with pytest.raises(cogworker.ConfigError) as refused:
        cw_flask.Cogworker(site)
    assert str(refused.value) == message
    assert "cogworker" not in site.extensions
    assert cogworker.default_config() is config


def test_a_bad_redis_url_is_refused_naming_the_app_config(config: cogworker.Config) -> None:
    site = Flask("bad_url")
    site.config["COGWORKER"] = {"redis_url": "http://x", "concurrency": 2}
    with pytest.raises(cogworker.ConfigError) as refused:
        cw_flask.Cogworker(site)
    message = str(refused.value)
    assert message.startswith("""app.config["COGWORKER"]: redis_url must start with redis://""")
    assert message.endswith("got 'http://x'") and "\n" not in message


def test_setting_up_twice_or_not_at_all_is_an_error(app: Flask) -> None:
    with pytest.raises(RuntimeError, match="already set up on Flask app 'contrib_flask_app'"):
        cw_flask.Cogworker(app)
    with pytest.raises(RuntimeError, match=r"not set up on Flask app 'bare'.*init_app"):
        cw_flask.client(Flask("bare"))
    with pytest.raises(RuntimeError, match="application context"):
        cw_flask.client()


def test_in_a_worker_process_app_config_goes_into_the_workers_config(
    config: cogworker.Config,
) -> None:
    """What the worker subprocess test shows end to end, here without a command line (so no
    option is kept): the worker's own config object takes the options and the middleware, and
    one worker serves one Flask app."""
    config.server = True
    first = create_app()
    assert cw_flask.config(first) is config
    assert (config.queues, config.concurrency, config.tag) == (["flask"], 3, "from-app")
    assert next(iter(config.server_middleware)) is cw_flask.FlaskAppContext
    with pytest.raises(
        RuntimeError, match="already runs its jobs in Flask app 'contrib_flask_app'"
    ):
        cw_flask.Cogworker(Flask("another"))


def test_set_default_false_is_refused_in_a_worker(config: cogworker.Config) -> None:
    config.server = True
    site = Flask("worker_site")
    with pytest.raises(cogworker.ConfigError) as refused:
        cw_flask.Cogworker(site, set_default=False)
    assert str(refused.value) == (
        "Cogworker(app, set_default=False) can't be honoured in a worker (Flask app "
        "'worker_site'): the worker's jobs run under its own config, which the extension sets "
        "from app.config"
    )
    assert "cogworker" not in site.extensions
    assert config.server_middleware.arguments(cw_flask.FlaskAppContext) is None


# -- the dashboard behind a guard ------------------------------------------------------------


@pytest.fixture
def guarded(app: Flask) -> Iterator[tuple[Flask, list[str]]]:
    """The app with a login view and the dashboard behind a guard that wants an admin
    session; the paths the guard was asked about are listed."""
    asked: list[str] = []
    app.secret_key = "flask-secret-" + "k" * 32

    @app.post("/login")
    def login() -> str:
        session["admin"] = True
        return str(session.get("wanted"))

    def admins_only(request: flask.Request) -> bool | Response:
        asked.append(request.path)
        if request.headers.get("x-refuse"):
            return False
        if session.get("admin") is True:
            return True
        session["wanted"] = request.path  # saved with the redirect, as after a view
        return redirect("/login")

    dashboard = cw_flask.mount_dashboard(app, guard=admins_only, settings=DASHBOARD_SETTINGS)
    try:
        yield app, asked
    finally:
        dashboard.close()


def test_the_guard_redirects_then_lets_an_admin_in(
    guarded: tuple[Flask, list[str]], r: redis.Redis
) -> None:
    app, asked = guarded
    web = app.test_client()
    away = web.get("/cogworker/overview")
    assert (away.status_code, away.headers["location"]) == (302, "/login")
    assert web.post("/login").text == "/cogworker/overview"  # the guard's session was saved
    page = web.get("/cogworker/overview")
    assert page.status_code == 200
    assert '<a href="/cogworker/workers">Workers</a>' in page.text
    assert web.get("/cogworker").status_code == 200  # the mount itself, without a slash
    refused = web.get("/cogworker/overview", headers={"x-refuse": "1"})
    assert (refused.status_code, refused.text) == (403, "Forbidden\n")
    assert asked == ["/cogworker/overview"] * 2 + ["/cogworker", "/cogworker/overview"]
    # the host's own routes are not the guard's business
    assert web.post("/greet/host").status_code == 200
    assert web.get("/cogworkers").status_code == 404
    assert len(asked) == 4


def test_a_guard_answer_that_is_not_a_decision_is_an_error(app: Flask) -> None:
    dashboard = cw_flask.mount_dashboard(
        app, guard=lambda request: None, settings=DASHBOARD_SETTINGS
    )  # type: ignore[arg-type,return-value]
    try:
        with pytest.raises(TypeError, match="must return True, False or a Response, got None"):
            app.test_client().get("/cogworker/")
    finally:
        dashboard.close()


@pytest.fixture
def refusing(app: Flask) -> Iterator[tuple[Flask, list[str]]]:
    """The dashboard behind a guard that refuses everyone; the paths it was asked about."""
    asked: list[str] = []

    def nobody(request: flask.Request) -> bool:
        asked.append(request.path)
        return False

    dashboard = cw_flask.mount_dashboard(app, guard=nobody, settings=DASHBOARD_SETTINGS)
    try:
        yield app, asked
    finally:
        dashboard.close()


def test_no_path_trick_gets_past_the_guard(refusing: tuple[Flask, list[str]]) -> None:
    app, asked = refusing
    web = app.test_client()
    for method, raw in PROBES:
        before = len(asked)
        # the environ a WSGI server builds: PATH_INFO decoded, dot segments as sent
        answer = web.open(
            "/", method=method, environ_overrides={"PATH_INFO": served_path(raw), "RAW_URI": raw}
        )
        check_refused((method, raw), answer.status_code, answer.data, len(asked) > before)
    assert asked  # the table did reach the guard


def test_the_session_secret_comes_from_the_apps_secret_key(
    config: cogworker.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notice (a session cookie) set by one web process shows in another: here two apps,
    with the process's random secret replaced between them as a second process has its own."""
    monkeypatch.delenv(web_settings.SECRET_ENV, raising=False)
    r.sadd(keys.QUEUES, "default")
    mounted: list[Dashboard] = []

    def site(secret_key: str | None) -> tuple[Flask, Dashboard]:
        made = Flask("shared_secret")
        made.secret_key = secret_key
        cw_flask.Cogworker(made, set_default=False)
        mounted.append(cw_flask.mount_dashboard(made, guard=None))
        return made, mounted[-1]

    first, _ = site("flask-secret-" + "k" * 32)
    paused = first.test_client().post(
        "/cogworker/overview/default/pause",
        data={"queue": "default", "layout": "a"},
        headers={"sec-fetch-site": "same-origin"},
    )
    assert paused.status_code == 303, paused.text
    cookie_name, cookie_value = paused.headers["set-cookie"].split(";")[0].split("=", 1)
    web_settings._process_secret.reset()  # as another process has its own
    second, second_dashboard = site("flask-secret-" + "k" * 32)
    other, _ = site("another-secret-" + "k" * 32)
    try:
        assert not second_dashboard.settings.secret_is_random()
        for host, shown in ((second, True), (other, False)):
            web = host.test_client()
            web.set_cookie(cookie_name, cookie_value)
            page = web.get(paused.headers["location"])
            assert page.status_code == 200
            assert ("Queue paused" in page.text) is shown, host
        monkeypatch.setenv(web_settings.SECRET_ENV, "e" * 64)  # the variable wins, as in Django
        assert site("flask-secret-" + "k" * 32)[1].settings.resolved_secret() == "e" * 64
        monkeypatch.delenv(web_settings.SECRET_ENV)
        assert site(None)[1].settings.secret_is_random()  # no secret_key: one per process
    finally:
        for dashboard in mounted:
            dashboard.close()
            dashboard.config.close()


@pytest.mark.parametrize("prefix", ["cogworker", "/cogworker/", ""])
def test_a_bad_prefix_is_refused(app: Flask, prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix must start with '/' and not end with one"):
        cw_flask.mount_dashboard(app, guard=None, prefix=prefix)


# -- a real worker ---------------------------------------------------------------------------


def worker_env(redis_url: str, **extra: str) -> dict[str, str]:
    """The worker finds contrib_flask_worker (and the app module) in this directory."""
    paths = [str(TESTS_DIR), *filter(None, [os.environ.get("PYTHONPATH")])]
    return cogworker_env(redis_url, PYTHONPATH=os.pathsep.join(paths), **extra)


def test_a_worker_runs_a_job_enqueued_by_a_view_in_the_app_context(
    app: Flask, r: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    (tmp_path / "worker.yml").write_text("tag: from-file\n")
    args = ["run", "-r", "contrib_flask_worker", "-c", "2", "-C", "worker.yml"]
    with started_workers(tmp_path) as workers:
        worker = workers.start(args, worker_env(redis_url))
        jid = app.test_client().post("/greet/w1").get_json()["jid"]
        wait_for(lambda: greeted(r, "w1"), timeout=20)
        assert greeted(r, "w1") == ["hello from contrib_flask_app (w1)"]
        worker.wait_output(jid)  # its lines carry the jid
        info = worker.info(r)
        # -c and the -C file win over app.config, which wins over the defaults
        assert (info["concurrency"], info["tag"], info["queues"]) == (2, "from-file", ["flask"])
        assert (
            """flask app 'contrib_flask_app': jobs run in its app context; """
            """app.config["COGWORKER"] set queues; the command line's value kept for """
            "concurrency, tag"
        ) in worker.output()


def process_info(r: redis.Redis) -> dict[str, object] | None:
    """The info of the one worker process registered, once it has written it."""
    for identity in r.smembers(keys.PROCESSES):
        raw = r.hget(keys.process(identity), "info")
        if raw:
            found: dict[str, object] = json.loads(raw)
            return found
    return None


def test_a_swarm_child_keeps_a_flag_given_before_the_command(
    r: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """The flags are read from the running command in the forked child; -c before ``swarm``
    counts as given."""
    args = ["-c", "2", "swarm", "-r", "contrib_flask_worker"]
    with started_workers(tmp_path) as workers:
        swarm = workers.start(args, worker_env(redis_url, COGWORKER_COUNT="1"))
        info = wait_for(lambda: process_info(r), timeout=20)
        assert (info["concurrency"], info["tag"], info["queues"]) == (2, "from-app", ["flask"])
        swarm.wait_output("the command line's value kept for concurrency")


def test_a_worker_refuses_a_bad_app_config_in_one_line(redis_url: str) -> None:
    bad = json.dumps({"COGWORKER": {"concurency": 2}})
    done = subprocess.run(
        [sys.executable, "-m", "cogworker", "run", "-r", "contrib_flask_worker"],
        env=worker_env(redis_url, CONTRIB_FLASK_SETTINGS=bad),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr == (
        "cogworker: loading 'contrib_flask_worker' failed: ConfigError: "
        """app.config["COGWORKER"]: unknown option 'concurency' (did you mean 'concurrency'?)\n"""
    )
