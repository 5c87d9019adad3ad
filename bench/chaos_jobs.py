"""Jobs for bench/chaos.py, loaded by every chaos worker (``-r bench/chaos_jobs.py``).

Every execution is recorded outside the Redis under test: a server middleware appends one line
when a job starts and one when it ends to ``$CHAOS_EVENTS_DIR/exec-<pid>.log`` and fsyncs each
line before the job goes on, so a ``kill -9`` just after ``perform`` returned still leaves the
completion on disk (the checker trusts these files, never Redis). Line format::

    S <epoch> <jid> <pid> <seq> <class> <kind> <retry_count> <interrupted_count> <slot>
    E <epoch> <jid> <pid> <seq> ok|fail

``seq`` numbers the executions of one process, so (pid, seq) names one execution; ``slot`` is
a cron run's ``periodic_slot`` (epoch seconds), ``-`` for other jobs.

The jobs only sleep (``ChaosJob``, ``CronJob``) or sleep and raise (``FailingJob``: ``retry``
1 and a ``retry_in`` of 0.5 s, so it ends in the dead set after two executions). The cron
entries come from ``$CHAOS_PERIODIC`` (JSON written by the driver): each runs ``CronJob``
with its name as first argument. SIGUSR1 dumps every thread's stack into the worker's
output: the driver sends it to a worker that doesn't exit after TERM before killing it, as
evidence.
"""

from __future__ import annotations

import faulthandler
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import cogworker

EVENTS_DIR_ENV = "CHAOS_EVENTS_DIR"
PERIODIC_ENV = "CHAOS_PERIODIC"


class ChaosFailure(RuntimeError):
    """What a FailingJob raises, every time."""


class _Recorder:
    """Appends fsynced lines to this process's execution file (opened on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._seq = 0

    def _write(self, line: str) -> None:
        if self._fd is None:
            directory = os.environ[EVENTS_DIR_ENV]
            path = os.path.join(directory, f"exec-{os.getpid()}.log")
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        data = line.encode()
        written = os.write(self._fd, data)
        if written != len(data):  # a regular file takes a short line whole; be sure anyway
            raise OSError(f"short write to the execution log ({written} of {len(data)} bytes)")
        os.fsync(self._fd)

    def start(self, job: dict[str, Any]) -> int:
        args = job.get("args") or ["?"]
        kind = str(args[0]) if args else "?"
        with self._lock:
            self._seq += 1
            seq = self._seq
            self._write(
                f"S {time.time():.6f} {job.get('jid')} {os.getpid()} {seq} {job.get('class')} "
                f"{kind} {int(job.get('retry_count') or 0)} "
                f"{int(job.get('interrupted_count') or 0)} {job.get('periodic_slot', '-')}\n"
            )
        return seq

    def end(self, job: dict[str, Any], seq: int, result: str) -> None:
        with self._lock:
            self._write(f"E {time.time():.6f} {job.get('jid')} {os.getpid()} {seq} {result}\n")


RECORDER = _Recorder()


class RecordExecutions:
    """Server middleware: the start and the end of every execution, on disk before it goes on."""

    def __call__(
        self, worker: Any, job: dict[str, Any], queue: str, call_next: Callable[[], None]
    ) -> None:
        seq = RECORDER.start(job)
        try:
            call_next()
        except BaseException:
            RECORDER.end(job, seq, "fail")
            raise
        RECORDER.end(job, seq, "ok")


class ChaosJob(cogworker.Job, retry=3):
    """Sleeps ``seconds``; ``kind`` (quick, long, delayed, unique) and ``key`` (which unique
    job it is) are only for the records."""

    name = "ChaosJob"

    def perform(self, kind: str, seconds: float, key: str = "") -> None:
        time.sleep(seconds)


class FailingJob(cogworker.Job, retry=1):
    """Always raises: one retry after 0.5 s, then the dead set."""

    name = "FailingJob"

    @classmethod
    def retry_in(cls, count: int, error: BaseException, job: dict[str, Any]) -> float:
        return 0.5

    def perform(self, kind: str, seconds: float, key: str = "") -> None:
        time.sleep(seconds)
        raise ChaosFailure(f"{kind} job {self.jid} fails on purpose")


class CronJob(cogworker.Job):
    """A cron entry's run: sleeps up to ``longest`` seconds (drawn per run)."""

    name = "CronJob"

    def perform(self, entry: str, longest: float) -> None:
        time.sleep(random.uniform(0, longest))


def _install(config: cogworker.Config) -> None:
    if not os.environ.get(EVENTS_DIR_ENV):
        raise RuntimeError(f"chaos_jobs needs ${EVENTS_DIR_ENV} (where executions are recorded)")
    config.server_middleware.add(RecordExecutions)
    for entry in json.loads(os.environ.get(PERIODIC_ENV) or "[]"):
        config.periodic.register(
            entry["cron"],
            CronJob,
            args=[entry["name"], entry["longest"]],
            unique=entry.get("unique"),
        )
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


cogworker.default_config().configure_server(_install)
