"""Helpers shared by the admin command tests (tests/test_admin_*.py); not a test module."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from runtime_support import Worker, cogworker_env, run_cogworker

GATE_JOBS_MODULE = """
import time

import cogworker


class GateJob(cogworker.Job):
    name = {name!r}

    def perform(self, marker):
        client = cogworker.default_config().redis()
        client.incr(f"test:runs:{{marker}}")
        deadline = time.monotonic() + 30
        while not client.exists(f"test:gate:{{marker}}") and time.monotonic() < deadline:
            time.sleep(0.02)
"""
"""A job that counts its run in ``test:runs:<marker>`` and holds its thread until the test
sets ``test:gate:<marker>`` (at most 30 s); ``name`` is its wire name."""

FAST_WORKER_CONFIG = "heartbeat_interval: 0.2\npoll_interval: 0.2\n"


def cli(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cogworker(*args, redis_url=redis_url)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """The output of a command that succeeded and wrote nothing on stderr."""
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The one ``cogworker: ...`` line of a command that failed (nothing on stdout), which
    holds every one of ``fragments``."""
    assert result.returncode != 0
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith("cogworker: ")
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def rows(text: str) -> list[list[str]]:
    """A printed table's cells (columns are two or more spaces apart)."""
    return [
        [cell.strip() for cell in line.split("  ") if cell.strip()] for line in text.splitlines()
    ]


@contextlib.contextmanager
def gate_worker(tmp_path: Path, redis_url: str, job_name: str) -> Iterator[Worker]:
    """A real worker on ``redis_url`` whose app defines the gate job as ``job_name``; killed
    (its whole group) afterwards, its output printed for a failing test."""
    (tmp_path / "gate_jobs.py").write_text(GATE_JOBS_MODULE.format(name=job_name))
    (tmp_path / "worker.yml").write_text(FAST_WORKER_CONFIG)
    process = Worker(
        ["run", "-r", "gate_jobs", "-C", "worker.yml"],
        tmp_path,
        cogworker_env(redis_url),
        tmp_path / "worker.out",
    )
    try:
        yield process
    finally:
        process.kill()
        print(f"--- worker {process.pid}:\n{process.output()}")


METRICS_BANNER = "serving metrics on http://127.0.0.1:"


@contextlib.contextmanager
def serving_metrics(*args: str, env: dict[str, str]) -> Iterator[str]:
    """Run ``python -m cogworker ARGS`` (a ``metrics`` command) and yield the URL of the
    endpoint its first line announces. After the block TERM must end it with status 0; it is
    killed if the block failed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cogworker", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline().strip()
        assert banner.startswith(METRICS_BANNER) and banner.endswith("/metrics"), banner
        assert int(banner.removeprefix(METRICS_BANNER).split("/")[0]) > 0
        yield banner.removeprefix("serving metrics on ")
        process.send_signal(signal.SIGTERM)
        assert process.wait(10) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)
