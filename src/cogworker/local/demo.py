"""``cogworker demo``: a private Redis, a real worker process, the dashboard, and jobs to
watch them run.

It starts the dashboard (when the ``web`` extra is installed) and a worker, enqueues a mix of
jobs (immediate, delayed, async, one that fails once and is retried, one with no retries that
ends in the dead set), waits for the worker to settle them all and prints what happened. The
worker records every run's history (this module, its app, enables it) and, like every worker,
its job class's metrics, so the History and Metrics tabs fill with the first jobs. With
``--keep`` (the default in a terminal) it then keeps everything up, enqueueing a job now and
then so the dashboard has something to show, until Ctrl-C; then it stops the dashboard, the
worker with TERM and the Redis server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import cogworker
from cogworker import history, keys
from cogworker.local.server import RedisServer, RedisServerNotFound, free_port

TRICKLE_INTERVAL = 2.0  # seconds between the jobs enqueued while --keep keeps the demo up


@cogworker.default_config().configure_server
def _record_history(config: cogworker.Config) -> None:
    """In the demo's worker (which imports this module as its app): record every run."""
    history.enable(config)


class GreetingJob(cogworker.Job, queue="default"):
    name = "GreetingJob"

    def perform(self, who: str) -> None:
        print(f"  GreetingJob: hello, {who}!", flush=True)


class FlakyJob(cogworker.Job, retry=3):
    """Fails on its first attempt; retried after 1 second."""

    name = "FlakyJob"

    @classmethod
    def retry_in(cls, count: int, error: BaseException) -> float:
        return 1.0

    def perform(self, marker_key: str) -> None:
        client = cogworker.default_config().redis()
        if client.incr(marker_key) == 1:
            raise RuntimeError("first attempt fails on purpose")
        print("  FlakyJob: second attempt succeeded", flush=True)


class SlowJob(cogworker.Job, queue="default"):
    """Takes a few seconds, so the dashboard's Workers tab has a running job to show."""

    name = "SlowJob"

    def perform(self, seconds: float) -> None:
        time.sleep(seconds)


class DoomedJob(cogworker.Job, retry=False):
    name = "DoomedJob"

    def perform(self) -> None:
        raise ValueError("this job always fails and has no retries: it goes to the dead set")


@cogworker.job(queue="default")
async def fetch_report(report_id: int) -> None:
    await asyncio.sleep(0.05)
    print(f"  fetch_report: report {report_id} ready (async perform)", flush=True)


def _wait(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def main(count: int = 20, *, dashboard: bool | None = None, keep: bool | None = None) -> int:
    """Run the demo with ``count`` greeting jobs (0 or more); the exit status says whether
    every job settled as expected.

    ``dashboard`` None starts it when the web extra is installed (True insists on it);
    ``keep`` None keeps the demo up after the jobs (until Ctrl-C) when stdin is a terminal.
    """
    if count < 0:
        raise ValueError(f"the demo needs 0 or more greeting jobs, got {count}")
    from cogworker.web import missing_extra

    problem = missing_extra()
    if dashboard and problem is not None:
        print(f"cogworker demo: {problem}", file=sys.stderr)
        return 1
    if keep is None:
        keep = sys.stdin.isatty()
    try:
        server = RedisServer()
    except RedisServerNotFound as error:
        print(f"cogworker demo: {error}", file=sys.stderr)
        return 1
    with server:
        version = ".".join(map(str, server.version))
        print(f"demo: private {Path(server.binary).name} {version} at {server.url}")
        env = {**os.environ, "REDIS_URL": server.url, "PYTHONUNBUFFERED": "1"}
        for name in ("COGWORKER_COUNT", "PHASED_RESTART"):  # swarm settings: run refuses them
            env.pop(name, None)
        children: list[tuple[str, subprocess.Popen[bytes]]] = []
        try:
            if dashboard is not False and problem is None:
                children.append(("dashboard", _start_dashboard(env)))
            elif problem is not None:
                print(f"demo: no dashboard: {problem}")
            worker = _start(
                env, "run", "-r", "cogworker.local.demo", "-c", "5", "--log-level", "INFO"
            )
            children.append(("worker", worker))
            return _drive(server, worker, count, keep)
        finally:
            for label, child in reversed(children):
                _stop(label, child)


def _start(env: dict[str, str], *arguments: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "cogworker", *arguments], env=env)


def _start_dashboard(env: dict[str, str]) -> subprocess.Popen[bytes]:
    port = free_port()
    process = _start(env, "web", "--port", str(port), "--host", "127.0.0.1")
    url = f"http://127.0.0.1:{port}/"
    if _wait(lambda: _answers(url) or process.poll() is not None, 15) and process.poll() is None:
        print(f"demo: dashboard at {url}", flush=True)
    else:
        print("demo: the dashboard did not start (see its lines above)", flush=True)
    return process


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _stop(label: str, child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)
    print(f"demo: {label} exited with status {child.returncode}", flush=True)


def _drive(
    server: RedisServer, worker: subprocess.Popen[bytes], count: int, keep: bool
) -> int:
    config = cogworker.Config(redis_url=server.url)
    cogworker.set_default_config(config)
    client = config.redis()
    if not _wait(lambda: client.scard(keys.PROCESSES) > 0, 15):
        print("demo: the worker did not start", file=sys.stderr)
        return 1
    print("demo: worker is up; enqueueing jobs")
    names = ["Ada", "Grace", "Linus", "Guido", "Yukihiro"]
    GreetingJob.perform_bulk([[names[i % len(names)]] for i in range(count)])
    GreetingJob.perform_in(2, "later (perform_in 2 s)")
    fetch_report.perform_async(7)
    FlakyJob.perform_async("demo:flaky-attempts")
    DoomedJob.perform_async()
    expected = count + 3  # the greetings, the delayed one, the report, flaky's success
    settled = _wait(
        lambda: (
            int(client.get(keys.STATS_PROCESSED) or 0) >= expected and client.zcard(keys.DEAD) >= 1
        ),
        30,
    )
    processed = int(client.get(keys.STATS_PROCESSED) or 0)
    failed = int(client.get(keys.STATS_FAILED) or 0)
    print(
        f"demo: processed={processed} failed attempts={failed} "
        f"retry set={client.zcard(keys.RETRY)} dead set={client.zcard(keys.DEAD)}"
    )
    if keep and worker.poll() is None:
        _keep_up(worker)
    print("demo: stopping the worker with TERM (running jobs finish, the rest go back)")
    return 0 if settled else 1


def _keep_up(worker: subprocess.Popen[bytes]) -> None:
    """Enqueue a job now and then until Ctrl-C (or TERM), so Live on the dashboard moves."""
    stop = threading.Event()
    previous = {
        number: signal.signal(number, lambda *_: stop.set())
        for number in (signal.SIGINT, signal.SIGTERM)
    }
    print("demo: still running, a job every 2 s; press Ctrl-C to stop", flush=True)
    try:
        beat = 0
        while not stop.wait(TRICKLE_INTERVAL) and worker.poll() is None:
            beat += 1
            if beat % 5 == 0:
                SlowJob.perform_async(3.0)
            else:
                GreetingJob.perform_async(f"visitor {beat}")
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
