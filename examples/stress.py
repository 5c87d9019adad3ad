"""A load and race tool: how fast real workers drain a queue, how the dashboard holds up under
concurrent requests, and whether racing tickers fire every cron slot exactly once.

    python -m examples.stress [throughput|web|periodic|all] [options]     # -h lists them

It uses a Redis database of its own, ``--redis-url`` (default ``$COGWORKER_STRESS_REDIS_URL``,
else ``redis://localhost:6379/14``), and FLUSHES IT before every scenario. Workers are real
``cogworker run`` processes (app module ``examples.stress_jobs``); progress is printed as it
goes, then one summary line per scenario. The exit status is 0 when every scenario passed.

* throughput: ``--producers`` threads push ``--jobs`` jobs (``push_bulk``, round-robin over
  ``--queues``); one worker with ``--concurrency`` threads runs them (each sleeps
  ``--work-ms`` and fails with probability ``--failure-rate``) until processed + failed
  reaches the count; prints the push and the processing rate.
* web: seeds the demo data (``examples.seed``), then ``--web-threads`` concurrent clients
  request the dashboard's pages and fragments (each at random with or without
  ``HX-Request``) for ``--web-duration`` seconds, in-process through ASGI; prints
  ``STRESS_WEB_RESULT {json}`` with the totals, statuses, errors and latency percentiles.
  Any answer but 200 fails it.
* periodic: ``--tickers`` worker processes tick the same ``--entries`` per-second cron entries
  for ``--seconds`` seconds, their queue paused so every run stays countable. Each slot of an
  entry must be queued exactly once; an ``until_executed`` entry (every other one) exactly
  once in all, as its first run never ends.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import redis

import cogworker
from cogworker import connection, keys
from examples import seed, stress_jobs, stress_web

COMMANDS = ("throughput", "web", "periodic", "all")
URL_ENV = "COGWORKER_STRESS_REDIS_URL"
DEFAULT_URL = "redis://localhost:6379/14"
ROOT = Path(__file__).resolve().parent.parent  # the workers run here, so examples imports


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m examples.stress", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("command", nargs="?", default="all", choices=COMMANDS)
    parser.add_argument(
        "--redis-url",
        default=os.environ.get(URL_ENV) or DEFAULT_URL,
        help=f"a database this tool may flush (default ${URL_ENV} or {DEFAULT_URL})",
    )
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=25)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument(
        "--queues", action="append", help="repeatable, name or name,weight (default: default)"
    )
    parser.add_argument("--work-ms", type=float, default=0.0)
    parser.add_argument("--failure-rate", type=float, default=0.0)
    parser.add_argument("--web-threads", type=int, default=32, help="concurrent clients")
    parser.add_argument("--web-duration", type=float, default=15.0, help="seconds")
    parser.add_argument("--tickers", type=int, default=4, help="worker processes racing")
    parser.add_argument("--entries", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    options = parser.parse_args(argv)
    options.queues = options.queues or ["default"]
    for name in ("jobs", "concurrency", "producers", "web_threads", "tickers", "entries"):
        if getattr(options, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be 1 or more")
    if not 0 <= options.failure_rate <= 1:
        parser.error("--failure-rate must be from 0 to 1")
    return options


class Progress:
    """One line that updates in place on a terminal (a new line every 2 s elsewhere)."""

    def __init__(self) -> None:
        self.live = sys.stdout.isatty()
        self.last = 0.0

    def show(self, text: str, *, final: bool = False) -> None:
        now = time.monotonic()
        if self.live:
            print(f"\r  {text:<72}", end="\n" if final else "", flush=True)
        elif final or now - self.last >= 2:
            print(f"  {text}", flush=True)
        self.last = now


def fresh(url: str) -> redis.Redis:
    client = connection.connect(url)
    client.flushdb()
    print(f"flushed {connection.redacted_url(url)}", flush=True)
    return client


class Workers:
    """``count`` real worker processes (``cogworker run -r examples.stress_jobs``)."""

    def __init__(self, url: str, count: int, args: list[str], env: dict[str, str] | None = None):
        self.log = tempfile.NamedTemporaryFile("w+b", prefix="stress-workers-", suffix=".log")  # noqa: SIM115
        command = [
            sys.executable,
            "-m",
            "cogworker",
            "run",
            "-r",
            "examples.stress_jobs",
            "--redis-url",
            url,
            "--log-level",
            "WARNING",
            *args,
        ]
        environment = {**os.environ, **(env or {})}
        self.processes = [
            subprocess.Popen(
                command,
                cwd=ROOT,
                env=environment,
                stdout=self.log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            for _ in range(count)
        ]

    def wait_registered(self, client: redis.Redis, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while client.scard(keys.PROCESSES) < len(self.processes):
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers not up within {timeout:.0f}s:\n{self.output()}")
            time.sleep(0.1)

    def check_alive(self) -> None:
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(f"a worker exited ({process.returncode}):\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-4000:]

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(40)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.log.close()


# -- throughput ------------------------------------------------------------------------------


def push_all(config: cogworker.Config, options: argparse.Namespace, queues: list[str]) -> float:
    """Push the jobs from the producer threads; the seconds it took."""
    shares = [
        options.jobs // options.producers + (n < options.jobs % options.producers)
        for n in range(options.producers)
    ]
    starts = [sum(shares[:n]) for n in range(options.producers)]

    def produce(start: int, count: int) -> None:
        pusher = cogworker.Client(config)
        items = [
            {
                "class": "StressJob",
                "args": [i, options.work_ms, options.failure_rate],
                "queue": queues[i % len(queues)],
                "retry": 1,
            }
            for i in range(start, start + count)
        ]
        for chunk in range(0, len(items), 1000):
            pusher.push_bulk(items[chunk : chunk + 1000])

    started = time.perf_counter()
    threads = [
        threading.Thread(target=produce, args=(s, c)) for s, c in zip(starts, shares, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def settled(client: redis.Redis) -> int:
    processed, failed = client.mget(keys.STATS_PROCESSED, keys.STATS_FAILED)
    return int(processed or 0) + int(failed or 0)


def throughput(options: argparse.Namespace) -> bool:
    print(
        f"== throughput: {options.jobs:,} jobs, {options.producers} producers, "
        f"concurrency {options.concurrency}, queues {' '.join(options.queues)}",
        flush=True,
    )
    client = fresh(options.redis_url)
    config = cogworker.Config(redis_url=options.redis_url, concurrency=options.producers)
    names = list(dict.fromkeys(queue.split(",")[0] for queue in options.queues))
    pushing = push_all(config, options, names)
    print(f"  pushed in {pushing:.2f}s: {options.jobs / pushing:,.0f} jobs/s", flush=True)
    queue_flags = [flag for queue in options.queues for flag in ("-q", queue)]
    workers = Workers(options.redis_url, 1, ["-c", str(options.concurrency), *queue_flags])
    try:
        workers.wait_registered(client)
        started, progress = time.perf_counter(), Progress()
        timeout = max(options.jobs / 20, 30)
        while (done := settled(client)) < options.jobs:
            elapsed = time.perf_counter() - started
            if elapsed > timeout:
                progress.show(
                    f"FAILED: {done:,} of {options.jobs:,} settled in {timeout:.0f}s", final=True
                )
                return False
            workers.check_alive()
            rate = f"{done / elapsed:,.0f} jobs/s" if elapsed > 0.5 else "starting"
            progress.show(f"{done:,} / {options.jobs:,} settled · {rate}")
            time.sleep(0.25)
        elapsed = time.perf_counter() - started
        progress.show(
            f"{options.jobs:,} settled in {elapsed:.2f}s: {options.jobs / elapsed:,.0f} jobs/s",
            final=True,
        )
        return True
    finally:
        workers.stop()


# -- web -------------------------------------------------------------------------------------


def web(options: argparse.Namespace) -> bool:
    from cogworker.web import WebSettings, app

    print(f"== web: {options.web_threads} clients for {options.web_duration:g}s", flush=True)
    fresh(options.redis_url)
    config = cogworker.Config(redis_url=options.redis_url)
    seed.seed(config)
    dashboard = app(config, WebSettings(session_secret="stress-" + "s" * 60))
    progress = Progress()
    try:
        result = asyncio.run(
            stress_web.hammer(dashboard, options.web_threads, options.web_duration, progress.show)
        )
    finally:
        dashboard.close()
    progress.show(f"{result['total']:,} requests, {result['req_per_sec']:,}/s", final=True)
    print("STRESS_WEB_RESULT " + json.dumps(result), flush=True)
    return set(result["by_status"]) == {"200"}


# -- periodic --------------------------------------------------------------------------------


def periodic_problems(client: redis.Redis, entries: int) -> tuple[list[str], int]:
    """What went wrong with the runs queued (none is the pass), and how many there are."""
    runs = [json.loads(raw) for raw in client.lrange(keys.queue(stress_jobs.PERIODIC_QUEUE), 0, -1)]
    per_slot = Counter((run["args"][0]["entry"], run["periodic_slot"]) for run in runs)
    per_entry = Counter(run["args"][0]["entry"] for run in runs)
    problems = [
        f"entry {e} slot {s}: queued {n} times" for (e, s), n in sorted(per_slot.items()) if n > 1
    ]
    for entry in range(entries):
        if entry % 2 == 0 and per_entry[entry] != 1:
            problems.append(f"until_executed entry {entry}: {per_entry[entry]} runs (1 expected)")
        elif entry % 2 and per_entry[entry] == 0:
            problems.append(f"entry {entry}: never ran")
    return problems, len(runs)


def periodic(options: argparse.Namespace) -> bool:
    print(
        f"== periodic: {options.tickers} worker processes, {options.entries} per-second entries, "
        f"{options.seconds:g}s",
        flush=True,
    )
    client = fresh(options.redis_url)
    client.sadd(keys.PAUSED_QUEUES, stress_jobs.PERIODIC_QUEUE)  # the runs stay to be counted
    env = {stress_jobs.ENTRIES_ENV: str(options.entries)}
    args = ["-c", "1", "-q", stress_jobs.PERIODIC_QUEUE]
    workers = Workers(options.redis_url, options.tickers, args, env)
    try:
        workers.wait_registered(client)
        progress, deadline = Progress(), time.monotonic() + options.seconds
        while time.monotonic() < deadline:
            workers.check_alive()
            queued = client.llen(keys.queue(stress_jobs.PERIODIC_QUEUE))
            progress.show(f"{queued:,} runs queued · {deadline - time.monotonic():.0f}s to go")
            time.sleep(0.25)
    finally:
        workers.stop()
    problems, runs = periodic_problems(client, options.entries)
    progress.show(f"{runs:,} runs queued", final=True)
    if problems:
        print(f"  FAILED: {len(problems)} mismatches:\n    " + "\n    ".join(problems[:20]))
        return False
    print(
        f"  all {options.entries} entries: every slot had exactly one winner among "
        f"{options.tickers} processes ({runs:,} runs)",
        flush=True,
    )
    return True


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    chosen = COMMANDS[:-1] if options.command == "all" else (options.command,)
    scenarios = {"throughput": throughput, "web": web, "periodic": periodic}
    results = {name: scenarios[name](options) for name in chosen}
    failed = [name for name, passed in results.items() if not passed]
    print("stress: " + ("all passed" if not failed else f"FAILED: {', '.join(failed)}"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
