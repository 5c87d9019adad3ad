"""The ``cogworker`` command, run as a real subprocess.

Every mistake in a flag, the config file or the app module must end the process with a
non-zero status and exactly one ``cogworker: ...`` line on stderr, never a traceback; a value
is never bent into another (a bad queue weight or an unknown config key is such a mistake).
Where flags may be placed is tested in test_cli_options.py. Flags
win over the config file; ``-L`` and ``--log-level`` shape the log; ``-r file.py`` registers
jobs under both module spellings.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from runtime_support import StartWorker, Worker, closing_producer, started_workers

import cogworker
from cogworker import keys

pytestmark = pytest.mark.slow  # the full run only: `cogworker` processes

JOBS_MODULE = textwrap.dedent(
    """
    import cogworker


    class RecordJob(cogworker.Job):
        name = "RecordJob"

        def perform(self, marker):
            cogworker.default_config().redis().incr(f"test:runs:{marker}")


    class FailJob(cogworker.Job, retry=False):
        name = "FailJob"

        def perform(self, marker):
            cogworker.default_config().redis().incr(f"test:runs:{marker}")
            raise RuntimeError(f"failing on purpose: {marker}")
    """
)

ALIAS_MODULE = textwrap.dedent(
    """
    import cogworker


    class AliasJob(cogworker.Job):  # no explicit name: known by its dotted path
        def perform(self, marker):
            cogworker.default_config().redis().incr(f"test:runs:{marker}")
    """
)

LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ pid=\d+ tid=\S+ (DEBUG|INFO|WARNING|ERROR): "
)

FILES = {
    "cli_jobs.py": JOBS_MODULE,
    "boom.py": 'raise RuntimeError("exploded at import\\nwith a second line")\n',
    "broken_syntax.py": "def broken(:\n    pass\n",
    "bad_value.yml": ":concurrency: 0\n",
    "bad_type.yml": "heartbeat_interval: soon\n",
    "bad_yaml.yml": "concurrency: [1\nqueues: {\n",
    "unset_var.yml": "concurrency: ${COGTEST_UNSET_VARIABLE}\n",
    "not_a_mapping.yml": "- default\n- low\n",
    "typo.yml": "concurrency: 5\nconcurency: 50\n",
    "bad_weight.yml": "queues:\n  - critical,2\n  - default,0\n",
}


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def cli_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, "REDIS_URL": redis_url, **extra}
    env.pop("PYTHONUNBUFFERED", None)
    env.pop("COGTEST_UNSET_VARIABLE", None)
    env.pop("COGTEST_CONCURRENCY", None)
    return env


def run_cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cogworker", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture
def start_worker(app_dir: Path, redis_url: str) -> Iterator[StartWorker]:
    with started_workers(app_dir) as workers:

        def start(*args: str, env: dict[str, str] | None = None) -> Worker:
            return workers.start(list(args), env or cli_env(redis_url))

        yield start


@pytest.fixture
def producer(r: redis.Redis, redis_url: str) -> Iterator[cogworker.Client]:
    """Enqueues on the shared (flushed) server."""
    yield from closing_producer(redis_url)


def push(producer: cogworker.Client, job_class: str, *args: object) -> str:
    jid = producer.push(
        {"class": job_class, "args": list(args), "queue": "default", "retry": False}
    )
    assert jid is not None
    return jid


def runs(client: redis.Redis, marker: str) -> int:
    return int(client.get(f"test:runs:{marker}") or 0)


# -- one-line errors -----------------------------------------------------------------------

ERRORS = [
    pytest.param(["--bogus"], "--bogus", id="bogus-flag"),
    pytest.param(["run", "-r", "cli_jobs", "--bogus"], "--bogus", id="run-bogus-flag"),
    pytest.param(["run", "-r", "cli_jobs", "-c", "0"], "concurrency", id="concurrency-0"),
    pytest.param(["run", "-r", "cli_jobs", "-c", "abc"], "concurrency", id="concurrency-abc"),
    pytest.param(["run", "-r", "cli_jobs", "-t", "-1"], "timeout", id="timeout-negative"),
    pytest.param(["run", "-r", "cli_jobs", "--log-level", "LOUD"], "log-level", id="log-level"),
    pytest.param(["run", "-r", "cli_jobs", "-q", ","], "queue name", id="empty-queue"),
    pytest.param(["run", "-r", "cli_jobs", "-q", "default,0"], "'default,0'", id="weight-0"),
    pytest.param(["-r", "cli_jobs", "-q", "a,b,c"], "'a,b,c'", id="weight-not-a-number"),
    pytest.param(["-c", "3", "stats"], "-c/--concurrency does not apply to stats", id="c-stats"),
    pytest.param(["run"], "-r", id="run-missing-r"),
    pytest.param([], "-r", id="plain-missing-r"),
    pytest.param(["run", "-r", "no_such_app_module"], "no_such_app_module", id="missing-module"),
    pytest.param(["run", "-r", "missing_app.py"], "missing_app.py", id="missing-file"),
    pytest.param(["run", "-r", "boom"], "RuntimeError: exploded at import", id="module-raises"),
    pytest.param(["-r", "boom.py"], "RuntimeError: exploded at import", id="file-raises"),
    pytest.param(["run", "-r", "broken_syntax.py"], "SyntaxError", id="syntax-error"),
    pytest.param(["run", "-r", "cli_jobs", "-C", "bad_value.yml"], "concurrency", id="file-0"),
    pytest.param(
        ["run", "-r", "cli_jobs", "-C", "bad_type.yml"], "heartbeat_interval", id="file-type"
    ),
    pytest.param(["run", "-r", "cli_jobs", "-C", "bad_yaml.yml"], "not valid YAML", id="yaml"),
    pytest.param(
        ["run", "-r", "cli_jobs", "-C", "unset_var.yml"], "COGTEST_UNSET_VARIABLE", id="unset-var"
    ),
    pytest.param(
        ["run", "-r", "cli_jobs", "-C", "not_a_mapping.yml"], "mapping", id="file-not-mapping"
    ),
    pytest.param(["run", "-r", "cli_jobs", "-C", "no_such.yml"], "no_such.yml", id="no-file"),
    pytest.param(
        ["run", "-r", "cli_jobs", "-C", "typo.yml"],
        "unknown key 'concurency' (did you mean 'concurrency'?)",
        id="file-unknown-key",
    ),
    pytest.param(
        ["run", "-r", "cli_jobs", "-C", "bad_weight.yml"], "'default,0'", id="file-weight-0"
    ),
    pytest.param(
        ["run", "-r", "cli_jobs", "-L", "no_such_dir/worker.log"], "worker.log", id="bad-logfile"
    ),
    pytest.param(
        ["run", "-r", "cli_jobs", "--redis-url", "foo://nowhere"], "foo://", id="bad-redis-url"
    ),
]


@pytest.mark.parametrize(("args", "fragment"), ERRORS)
def test_mistakes_exit_non_zero_with_one_line(
    args: list[str], fragment: str, app_dir: Path, redis_url: str, r: redis.Redis
) -> None:
    result = run_cli(args, app_dir, cli_env(redis_url))
    everything = result.stdout + result.stderr
    assert result.returncode != 0, everything
    assert "Traceback" not in everything, everything
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cogworker: "), lines[0]
    assert fragment in lines[0], lines[0]
    assert r.scard(keys.PROCESSES) == 0  # nothing started


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str, app_dir: Path, redis_url: str) -> None:
    result = run_cli([flag], app_dir, cli_env(redis_url))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"cogworker, version {cogworker.__version__}"
    assert result.stderr == ""


# -- flags, config file and logging in a running worker -------------------------------------


def test_flags_win_over_the_config_file(
    start_worker: StartWorker, app_dir: Path, r: redis.Redis
) -> None:
    (app_dir / "settings.yml").write_text(
        ":concurrency: ${COGTEST_CONCURRENCY:-7}\n:queues:\n  - fromfile\nheartbeat_interval: 0.2\n"
    )
    flagged = start_worker(
        "run", "-r", "cli_jobs", "-C", "settings.yml", "-c", "3", "-q", "critical,2", "-q", "low"
    )
    from_file = start_worker("-r", "cli_jobs", "-C", "settings.yml")  # plain form, no "run"

    flagged_info = flagged.info(r)
    assert flagged_info["concurrency"] == 3
    assert flagged_info["queues"] == ["critical", "critical", "low"]
    file_info = from_file.info(r)
    assert file_info["concurrency"] == 7
    assert file_info["queues"] == ["fromfile"]
    wait_for(lambda: r.smembers(keys.QUEUES) == {"critical", "low", "fromfile"})
    assert flagged.stop() == 0
    assert from_file.stop() == 0


def test_logfile_receives_the_log_lines(
    start_worker: StartWorker, app_dir: Path, producer: cogworker.Client, r: redis.Redis
) -> None:
    logfile = app_dir / "logs" / "worker.log"
    logfile.parent.mkdir()
    logfile.write_text("a line written before\n")
    worker = start_worker("run", "-r", "cli_jobs", "-L", str(logfile))
    identity = worker.identity(r)
    jid = push(producer, "RecordJob", "logged")
    wait_for(lambda: f"done: RecordJob jid={jid}" in logfile.read_text())
    assert worker.stop() == 0

    lines = logfile.read_text().splitlines()
    assert lines[0] == "a line written before"  # appended, not truncated
    assert all(LOG_LINE.match(line) for line in lines[1:]), lines
    assert any(f"started, identity={identity}" in line for line in lines)
    assert any(f"INFO: start: RecordJob jid={jid}" in line for line in lines)
    assert f"cogworker stopped, identity={identity}" in lines[-1]
    assert worker.output() == ""  # nothing on stdout / stderr


def test_log_level_warning_hides_per_job_lines(
    start_worker: StartWorker, producer: cogworker.Client, r: redis.Redis
) -> None:
    worker = start_worker("run", "-r", "cli_jobs", "--log-level", "WARNING")
    worker.identity(r)
    push(producer, "RecordJob", "ok")
    failed = push(producer, "FailJob", "bad")
    wait_for(lambda: f"fail: FailJob jid={failed}" in worker.output())
    wait_for(lambda: runs(r, "ok") == 1)
    assert worker.stop() == 0

    output = worker.output()
    assert "start:" not in output
    assert "done:" not in output
    assert "INFO:" not in output
    assert re.search(rf"WARNING: fail: FailJob jid={failed}: RuntimeError", output)


def test_require_file_registers_jobs_under_both_module_names(
    start_worker: StartWorker, app_dir: Path, producer: cogworker.Client, r: redis.Redis
) -> None:
    (app_dir / "app").mkdir()
    (app_dir / "app" / "jobs.py").write_text(ALIAS_MODULE)
    worker = start_worker("run", "-r", "app/jobs.py")
    worker.identity(r)
    push(producer, "app.jobs.AliasJob", "dotted")
    push(producer, "jobs.AliasJob", "stem")
    wait_for(lambda: runs(r, "dotted") == 1 and runs(r, "stem") == 1)
    assert worker.stop() == 0
    assert r.zcard(keys.DEAD) == 0
    assert r.zcard(keys.RETRY) == 0
