"""``cogworker demo``: a private Redis, a real worker process, and jobs to watch it run.

It enqueues a mix of jobs (immediate, delayed, async, one that fails once and is retried,
one with no retries that ends in the dead set), waits for the worker to settle them all,
prints what happened, then stops the worker with TERM and the Redis server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import cogworker
from cogworker import keys
from cogworker.redis_server import RedisServer, RedisServerNotFound


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


def main(count: int = 20) -> int:
    """Run the demo with ``count`` greeting jobs (0 or more); the exit status says whether
    every job settled as expected."""
    if count < 0:
        raise ValueError(f"the demo needs 0 or more greeting jobs, got {count}")
    try:
        server = RedisServer()
    except RedisServerNotFound as error:
        print(f"cogworker demo: {error}", file=sys.stderr)
        return 1
    with server:
        print(f"demo: private redis-server {'.'.join(map(str, server.version))} at {server.url}")
        env = {**os.environ, "REDIS_URL": server.url, "PYTHONUNBUFFERED": "1"}
        for name in ("COGWORKER_COUNT", "PHASED_RESTART"):  # swarm settings: run refuses them
            env.pop(name, None)
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cogworker",
                "run",
                "-r",
                "cogworker.demo",
                "-c",
                "5",
                "--log-level",
                "INFO",
            ],
            env=env,
        )
        try:
            return _drive(server, worker, count)
        finally:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(30)
            print(f"demo: worker exited with status {worker.returncode}")


def _drive(server: RedisServer, worker: subprocess.Popen[bytes], count: int) -> int:
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
    print("demo: stopping the worker with TERM (running jobs finish, the rest go back)")
    return 0 if settled else 1
