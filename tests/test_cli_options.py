"""Worker flags are honoured wherever they are written, or refused: never dropped.

``run`` may be left out, so users write flags before the command: each flag given before
``run`` / ``swarm`` must take effect there, one given before another command is refused (only
``--redis-url`` is passed on to the admin commands), and a flag given twice with different
values is refused. ``-q`` of both sides combine, in order. The environment a command can't
honour (``COGWORKER_COUNT`` for ``run``, ``COGWORKER_COUNT=0``...) is refused the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import redis
from click.testing import CliRunner
from conftest import wait_for
from runtime_support import StartWorker, Worker, cogworker_env, release, started_workers

import cogworker
from cogworker import cli, keys
from cogworker.local.server import RedisServer
from cogworker.worker import boot
from cogworker.worker.swarm import Swarm

pytestmark = pytest.mark.slow  # the full run only: `cogworker` processes

JOBS_MODULE = textwrap.dedent(
    """
    import json
    import logging
    import os

    import cogworker

    logging.getLogger("cogworker").warning("opt_jobs loaded")
    logging.getLogger("cogworker").info("an INFO line from opt_jobs")


    class ReportConfigJob(cogworker.Job):
        name = "ReportConfigJob"

        def perform(self, key):
            config = cogworker.default_config()
            report = {
                "concurrency": config.concurrency,
                "queues": config.queues,
                "shutdown_timeout": config.shutdown_timeout,
                "environment": config.environment,
                "app_env": os.environ.get("APP_ENV"),
                "log_level": config.log_level,
                "redis_url": config.redis_url,
                "tag": config.tag,
            }
            config.redis().set(key, json.dumps(report))
    """
)

FAST = "heartbeat_interval: 0.2\npoll_interval: 0.2\n"


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "opt_jobs.py").write_text(JOBS_MODULE)
    (tmp_path / "fast.yml").write_text(FAST)
    (tmp_path / "tagged.yml").write_text(FAST + "tag: from-file\n")
    (tmp_path / "max_memory.yml").write_text("max_memory: 512\n")
    (tmp_path / "short_presence.yml").write_text("heartbeat_interval: 2\npresence_ttl: 5\n")
    return tmp_path


def clean_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = cogworker_env(redis_url, **extra)
    for name in ("COGWORKER_COUNT", "PHASED_RESTART", "APP_ENV", "RAILS_ENV", "RACK_ENV"):
        if name not in extra:
            env.pop(name, None)
    return env


@pytest.fixture
def start_worker(app_dir: Path, redis_url: str) -> Iterator[StartWorker]:
    with started_workers(app_dir) as workers:

        def start(*args: str, env: dict[str, str] | None = None) -> Worker:
            return workers.start(list(args), env or clean_env(redis_url))

        yield start


def report(url: str, queue: str, key: str) -> dict[str, Any]:
    """Have the worker reading ``queue`` on the server at ``url`` report its config."""
    settings = cogworker.Config(redis_url=url)
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        cogworker.Client(settings).push(
            {"class": "ReportConfigJob", "args": [key], "queue": queue, "retry": False}
        )
        result = json.loads(wait_for(lambda: client.get(key), timeout=15))
    finally:
        client.close()
        release(settings)
    assert isinstance(result, dict)
    return result


# -- flags before the command take effect -------------------------------------------------------


def test_every_flag_before_run_takes_effect(
    start_worker: StartWorker,
    app_dir: Path,
    r: redis.Redis,
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    """``$REDIS_URL`` points at the shared server: a dropped --redis-url would show there."""
    private = redis_server_factory()
    logfile = app_dir / "before.log"
    worker = start_worker(
        *("--redis-url", private.url, "-c", "3", "-q", "before,2", "-q", "other"),
        *("-t", "7", "-e", "staging", "--log-level", "WARNING", "-L", str(logfile)),
        *("-C", "tagged.yml", "run", "-r", "opt_jobs"),
    )
    client = redis.Redis.from_url(private.url, decode_responses=True)
    try:
        worker.identity(client)
        assert r.scard(keys.PROCESSES) == 0
        assert report(private.url, "before", "test:report") == {
            "concurrency": 3,
            "queues": ["before", "before", "other"],
            "shutdown_timeout": 7.0,
            "environment": "staging",
            "app_env": "staging",
            "log_level": "WARNING",
            "redis_url": private.url,
            "tag": "from-file",
        }
        assert worker.stop() == 0
    finally:
        client.close()
    logged = logfile.read_text()
    assert "WARNING: opt_jobs loaded" in logged  # -L: the log went to the file
    assert "INFO" not in logged  # --log-level WARNING
    assert worker.output() == ""


def test_flags_before_swarm_reach_its_children(
    app_dir: Path, redis_url: str, r: redis.Redis, start_worker: StartWorker
) -> None:
    swarm = start_worker(
        *("-c", "2", "-q", "swarmed,3", "-C", "fast.yml", "swarm", "-r", "opt_jobs"),
        env=clean_env(redis_url, COGWORKER_COUNT="1"),
    )
    child = str(wait_for(lambda: next(iter(r.smembers(keys.PROCESSES)), None), timeout=20))
    info = json.loads(r.hget(keys.process(child), "info") or "{}")
    assert (info["concurrency"], info["queues"]) == (2, ["swarmed"] * 3)
    assert info["pid"] != swarm.pid  # a forked child, not the supervisor
    assert report(redis_url, "swarmed", "test:swarm-report")["concurrency"] == 2
    assert swarm.stop() == 0


def test_same_value_twice_is_fine_and_queues_combine(
    start_worker: StartWorker, r: redis.Redis, redis_url: str
) -> None:
    repeated = start_worker("-c", "3", "-C", "fast.yml", "run", "-c", "3", "-r", "opt_jobs")
    both_sides = start_worker(
        *("-q", "first,2", "-r", "opt_jobs", "-r", "opt_jobs", "run", "-q", "second"),
        *("-C", "fast.yml"),
        env=clean_env(redis_url, COGWORKER_COUNT="1", PHASED_RESTART="false"),
    )
    plain = start_worker("-r", "opt_jobs", "-c", "4", "-c", "4", "-C", "fast.yml")
    assert repeated.info(r)["concurrency"] == 3
    assert both_sides.info(r)["queues"] == ["first", "first", "second"]
    assert plain.info(r)["concurrency"] == 4
    for worker in (repeated, both_sides, plain):
        assert worker.stop() == 0


# -- refused, with one line naming what was wrong ----------------------------------------------

REFUSED = [
    # worker flags before a command that can't honour them
    (["-c", "3", "stats"], {}, ["-c/--concurrency", "stats"]),
    (["-L", "x.log", "stats"], {}, ["-L/--logfile", "stats"]),
    (["-r", "opt_jobs", "queues", "clear", "default"], {}, ["-r/--require", "queues"]),
    (["-q", "a", "dead"], {}, ["-q/--queue", "dead"]),
    (["--log-level", "INFO", "processes"], {}, ["--log-level", "processes"]),
    (["-c", "3", "demo"], {}, ["-c/--concurrency", "demo"]),
    (["--redis-url", "redis://x:1/0", "demo"], {}, ["--redis-url", "demo"]),
    # the same flag with two values, on one side or on both
    (["-c", "3", "-c", "4", "-r", "opt_jobs"], {}, ["-c/--concurrency", "3 and 4"]),
    (["-c", "3", "run", "-c", "4", "-r", "opt_jobs"], {}, ["-c/--concurrency", "3", "4"]),
    (["run", "-r", "opt_jobs", "-r", "other"], {}, ["-r/--require", "'opt_jobs' and 'other'"]),
    (["-t", "5", "swarm", "-t", "6", "-r", "opt_jobs"], {}, ["-t/--timeout", "5.0", "6.0"]),
    (
        ["--redis-url", "redis://a:1/0", "run", "--redis-url", "redis://b:1/0", "-r", "x"],
        {},
        ["--redis-url", "redis://a:1/0", "redis://b:1/0"],
    ),
    # a weight that is not a positive integer
    (["run", "-r", "opt_jobs", "-q", "a,b,c"], {}, ["-q", "'a,b,c'"]),
    (["run", "-r", "opt_jobs", "-q", "default,0"], {}, ["-q", "'default,0'"]),
    (["-q", "critical,2", "-q", "default,-1", "-r", "opt_jobs"], {}, ["-q", "'default,-1'"]),
    (["-q", "a", "run", "-q", "default,2.5", "-r", "opt_jobs"], {}, ["-q", "'default,2.5'"]),
    # empty values that used to mean "not given"
    (["-L", "", "run", "-r", "opt_jobs"], {}, ["-L/--logfile", "''"]),
    (["run", "-C", "", "-r", "opt_jobs"], {}, ["-C/--config", "''"]),
    (["run", "-e", "", "-r", "opt_jobs"], {}, ["environment", "''"]),
    (["run", "--redis-url", "", "-r", "opt_jobs"], {}, ["redis_url", "''"]),
    (["demo", "--jobs", "-1"], {}, ["--jobs", "-1"]),
    # the environment
    (["run", "-r", "opt_jobs"], {"REDIS_URL": "foo://nowhere"}, ["REDIS_URL", "foo://"]),
    (["swarm", "-r", "opt_jobs"], {"COGWORKER_COUNT": "0"}, ["COGWORKER_COUNT", "'0'"]),
    (["swarm", "-r", "opt_jobs"], {"COGWORKER_COUNT": "-2"}, ["COGWORKER_COUNT", "'-2'"]),
    (["swarm", "-r", "opt_jobs"], {"PHASED_RESTART": "yes"}, ["PHASED_RESTART", "'yes'"]),
    (["run", "-r", "opt_jobs"], {"COGWORKER_COUNT": "4"}, ["COGWORKER_COUNT=4", "swarm"]),
    (["-r", "opt_jobs"], {"PHASED_RESTART": "true"}, ["PHASED_RESTART", "swarm"]),
    (["run", "-r", "opt_jobs", "-C", "max_memory.yml"], {}, ["max_memory", "swarm"]),
    # a presence that could expire between two beats of a live process
    (["run", "-r", "opt_jobs", "-C", "short_presence.yml"], {}, ["presence_ttl (5 s)", "6 s"]),
    (["swarm", "-r", "opt_jobs", "-C", "short_presence.yml"], {}, ["presence_ttl (5 s)"]),
    (
        ["run", "-r", "opt_jobs"],
        {"APP_ENV": "production", "RAILS_ENV": "staging"},
        ["APP_ENV='production'", "RAILS_ENV='staging'", "-e"],
    ),
]


@pytest.mark.parametrize(
    ("args", "env", "fragments"), REFUSED, ids=[" ".join(a) or "-" for a, _, _ in REFUSED]
)
def test_refused_with_one_line(
    args: list[str],
    env: dict[str, str],
    fragments: list[str],
    app_dir: Path,
    redis_url: str,
    r: redis.Redis,
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cogworker", *args],
        cwd=app_dir,
        env=clean_env(redis_url, **env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cogworker: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert r.scard(keys.PROCESSES) == 0  # nothing started
    assert r.dbsize() == 0  # nothing written either (queues clear refused, not run)


# -- the contract with the admin commands ---------------------------------------------------------


CLEAR_MAIL = ["queues", "clear", "mail"]


def test_redis_url_before_an_admin_command_picks_its_redis(
    app_dir: Path, redis_url: str, r: redis.Redis, redis_server_factory: Callable[..., RedisServer]
) -> None:
    """``cogworker --redis-url X queues clear q`` clears q on X, not on ``$REDIS_URL``'s."""
    private = redis_server_factory()
    client = redis.Redis.from_url(private.url, decode_responses=True)
    try:
        for server in (r, client):
            server.sadd(keys.QUEUES, "mail")
            server.lpush(keys.queue("mail"), '{"class":"A","args":[],"jid":"j1","queue":"mail"}')
        result = subprocess.run(
            [sys.executable, "-m", "cogworker", "--redis-url", private.url, *CLEAR_MAIL],
            cwd=app_dir,
            env=clean_env(redis_url),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 0, result.stderr
        assert client.llen(keys.queue("mail")) == 0
        assert r.llen(keys.queue("mail")) == 1  # the $REDIS_URL server is untouched
    finally:
        client.close()


@pytest.fixture
def probe() -> Iterator[CliRunner]:
    """A stand-in admin command that shows what the group passed on to it."""

    @click.command("probe")
    @click.pass_context
    def probe_command(ctx: click.Context) -> None:
        click.echo(repr(ctx.meta.get(cli.REDIS_URL_META, "missing")))

    cli.main_group.add_command(probe_command)
    try:
        yield CliRunner()
    finally:
        cli.main_group.commands.pop("probe")


def test_group_redis_url_is_passed_on_to_other_commands(probe: CliRunner) -> None:
    assert cli.REDIS_URL_META == "cogworker.redis_url"
    given = probe.invoke(cli.main_group, ["--redis-url", "redis://given:1/3", "probe"])
    assert (given.exit_code, given.output) == (0, "'redis://given:1/3'\n")
    twice = probe.invoke(
        cli.main_group, ["--redis-url", "redis://a:1/0", "--redis-url", "redis://a:1/0", "probe"]
    )
    assert (twice.exit_code, twice.output) == (0, "'redis://a:1/0'\n")
    absent = probe.invoke(cli.main_group, ["probe"])
    assert (absent.exit_code, absent.output) == (0, "None\n")


def test_other_group_flags_are_refused_before_other_commands(probe: CliRunner) -> None:
    for flags in (["-c", "2"], ["-t", "1"], ["-e", "x"], ["-C", "f.yml"], ["-r", "app"]):
        result = probe.invoke(cli.main_group, [*flags, "--redis-url", "redis://a:1/0", "probe"])
        assert result.exit_code == 2, (flags, result.output)
        assert "does not apply to probe" in result.output
        assert "'redis://a:1/0'" not in result.output  # the command never ran
    conflicting = probe.invoke(
        cli.main_group, ["--redis-url", "redis://a:1/0", "--redis-url", "redis://b:1/0", "probe"]
    )
    assert conflicting.exit_code == 2
    assert "--redis-url given twice with different values" in conflicting.output


# -- the swarm's child count ---------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, -1])
def test_a_swarm_of_no_children_is_refused_not_rounded_up(count: int) -> None:
    with pytest.raises(ValueError, match=f"at least 1 child, got {count}"):
        Swarm(count, lambda slot: None)


@pytest.mark.parametrize(
    ("value", "expected"), [(None, 1), ("", 1), ("1", 1), (" 3 ", 3), ("12", 12)]
)
def test_swarm_count_from_the_environment(
    value: str | None, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv("COGWORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("COGWORKER_COUNT", value)
    assert boot.swarm_count() == expected
    assert os.environ.get("COGWORKER_COUNT") == value
