"""``cogworker.contrib.django`` in a real Django project (tests/django_project), always in
subprocesses: the project's own test suite under Django's runner (``manage.py test``), and
real ``manage.py cogworker run|swarm|web`` processes against the session's Redis.

Why subprocesses: Django can be configured once per process, and this session already
configures it for the dashboard-mount tests (tests/test_web_mounts.py) with other settings;
the project's suite also needs Django's runner (TestCase, captureOnCommitCallbacks, its test
databases), which pytest-django would otherwise provide.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from conftest import wait_for
from runtime_support import kill_session, registered_identity

import cogworker
from cogworker import keys
from cogworker.local.server import free_port

pytestmark = pytest.mark.slow  # the full run only: manage.py and workers as processes

PROJECT = Path(__file__).resolve().parent / "django_project"


@dataclass
class Site:
    """The test project with its databases in ``data``, on the session's Redis."""

    data: Path
    redis_url: str

    def env(self, **cogworker_settings: Any) -> dict[str, str]:
        environment = {
            **os.environ,
            "CW_DJANGO_DIR": str(self.data),
            "CW_DJANGO_COGWORKER": json.dumps(cogworker_settings),
            "REDIS_URL": self.redis_url,
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        environment.pop("PYTHONUNBUFFERED", None)  # the worker must flush its own lines
        environment.pop("DJANGO_SETTINGS_MODULE", None)  # test_web_mounts sets its own
        return environment

    def manage(
        self, *args: str, timeout: float = 60, **settings: Any
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-W", "error", "manage.py", *args],
            cwd=PROJECT,
            env=self.env(**settings),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def start(self, *args: str, log: Path, **settings: Any) -> subprocess.Popen[bytes]:
        """``manage.py ARGS`` in its own session, output to ``log``."""
        with open(log, "ab") as out:
            return subprocess.Popen(
                [sys.executable, "manage.py", *args],
                cwd=PROJECT,
                env=self.env(**settings),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )


@pytest.fixture
def site(tmp_path: Path, redis_url: str, r: redis.Redis) -> Site:
    return Site(tmp_path, redis_url)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], Path]]]:
    """The processes a test starts: killed (their whole session) afterwards, logs printed."""
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []
    yield processes
    for process, log in processes:
        kill_session(process)
        print(f"--- {process.args}:\n{log.read_text(errors='replace')}")


def stop(process: subprocess.Popen[bytes], log: Path) -> str:
    """TERM ``process``; its exit must be clean. Returns its output."""
    process.send_signal(signal.SIGTERM)
    assert process.wait(20) == 0, log.read_text()
    return log.read_text()


def test_the_projects_suite_passes_under_djangos_test_runner(site: Site) -> None:
    done = site.manage("test", "shop", "--noinput")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    ran = re.search(r"^Ran (\d+) tests? in", output, re.MULTILINE)
    assert ran is not None and int(ran.group(1)) >= 30, output
    assert re.search(r"^OK$", output, re.MULTILINE), output
    assert "Warning" not in output, output


def test_a_manage_py_worker_runs_the_committed_job_and_never_the_rolled_back_one(
    site: Site, r: redis.Redis, started: list[tuple[subprocess.Popen[bytes], Path]]
) -> None:
    assert site.manage("migrate", "-v", "0").returncode == 0
    placed = site.manage("place_orders", "e2e")
    assert placed.returncode == 0, placed.stderr
    jids = json.loads(placed.stdout)
    queued = [json.loads(raw)["jid"] for raw in r.lrange(keys.queue("shop"), 0, -1)]
    assert queued == [jids["committed"]]  # the rolled-back push never reached Redis
    log = site.data / "worker.out"
    worker = site.start("cogworker", "-c", "3", "run", "--log-level", "info", log=log)
    started.append((worker, log))
    shipped = wait_for(lambda: r.lrange("test:shipped:e2e", 0, -1), timeout=20)
    assert shipped == [jids["committed"]]
    identity = wait_for(lambda: registered_identity(r, worker.pid))
    info = json.loads(r.hget(keys.process(identity), "info"))
    # -c beats the settings' 4; the settings' queues beat the default ["default"]
    assert (info["concurrency"], info["queues"]) == (3, ["shop", "default"])
    # shop.jobs was imported after the worker became one: its configure_server block ran
    assert r.get("test:configure_server") == str(worker.pid)
    with sqlite3.connect(site.data / "db.sqlite3") as database:
        rows = database.execute("select name, shipped from shop_order").fetchall()
    assert rows == [("kept", 1)]  # the job saw the committed row; the other never existed
    output = stop(worker, log)
    assert f"done: Shop::ShipOrder jid={jids['committed']}" in output
    assert jids["rolled_back"] not in output


@pytest.mark.parametrize(
    ("args", "settings", "message"),
    [
        (["cogworker", "-c", "0", "run"], {}, "manage.py cogworker: Invalid value for '-c'"),
        (
            ["cogworker", "run", "-r", "no_such_module"],
            {},
            "manage.py cogworker: can't load app 'no_such_module': no module named "
            "'no_such_module'",
        ),
        (["cogworker", "demo"], {}, "manage.py cogworker: No such command 'demo'."),
        (
            ["cogworker", "-c", "2", "web"],
            {},
            "manage.py cogworker: -c/--concurrency does not apply to web",
        ),
        (
            ["cogworker", "run"],
            {"max_memory": 100},
            "manage.py cogworker: max_memory (100 MB) is enforced by cogworker swarm only",
        ),
    ],
)
def test_a_mistake_exits_non_zero_with_one_line(
    site: Site, args: list[str], settings: dict[str, Any], message: str
) -> None:
    done = site.manage(*args, **settings)
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(message), done.stderr


def test_a_bad_setting_stops_django_naming_the_key(site: Site) -> None:
    done = site.manage("cogworker", "run", concurency=3)
    assert done.returncode != 0
    assert done.stderr.splitlines()[-1] == (
        "django.core.exceptions.ImproperlyConfigured: settings.COGWORKER: unknown option "
        "'concurency' (did you mean 'concurrency'?)"
    )


def test_a_swarm_child_runs_the_installed_apps_jobs_and_those_of_r(
    site: Site, config: cogworker.Config, started: list[tuple[subprocess.Popen[bytes], Path]]
) -> None:
    log = site.data / "swarm.out"
    swarm = site.start(
        "cogworker", "swarm", "--settings=cw_site.settings", "-r", "extra_jobs", "-c", "2", log=log
    )
    started.append((swarm, log))
    client = cogworker.Client(config)
    audit = client.push({"class": "Shop::Audit", "queue": "shop", "args": ["sw"]})
    extra = client.push({"class": "Extra::Job", "queue": "shop", "args": ["sw"]})
    redis_client = config.redis()
    assert wait_for(lambda: redis_client.lrange("test:audit:sw", 0, -1), timeout=20) == [audit]
    assert wait_for(lambda: redis_client.lrange("test:extra:sw", 0, -1)) == [extra]
    assert "swarm" in stop(swarm, log)


def test_web_serves_the_dashboard_on_the_settings_redis_unless_the_flag_says_otherwise(
    site: Site, redis_url: str, started: list[tuple[subprocess.Popen[bytes], Path]]
) -> None:
    database_five = redis_url.rsplit("/", 1)[0] + "/5"
    other = redis.Redis.from_url(database_five, decode_responses=True)
    try:
        other.sadd(keys.QUEUES, "only-in-five")
    finally:
        other.close()
    for flags, shown in (([], True), (["--redis-url", redis_url], False)):
        port = free_port()
        log = site.data / f"web-{port}.out"
        web = site.start(
            "cogworker", "web", "--port", str(port), *flags, log=log, redis_url=database_five
        )
        started.append((web, log))
        page = wait_for(lambda port=port: _get(f"http://127.0.0.1:{port}/overview"), timeout=20)
        assert page.status_code == 200
        assert ("only-in-five" in page.text) is shown, (flags, page.text)
        assert "cogworker web: stopped" in stop(web, log)


def _get(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=5)
    except httpx.TransportError:
        return None
