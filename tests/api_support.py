"""What the read API's tests (tests/test_api_*.py) share; not a test module: the jobs
module and config of a real worker, payloads written straight into Redis, the fixtures
``client`` (the config's own client, as the API is given in production), ``producer`` and
``worker`` (a real ``python -m cogworker`` subprocess)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    registered_identity,
    worker_process,
)

import cogworker
from cogworker import api, keys, wire

JOBS_MODULE = '''
"""Jobs for the API tests; runs are counted in Redis under test:*."""
import time

import cogworker


def _redis():
    return cogworker.default_config().redis()


class GateJob(cogworker.Job):
    """Runs until the test sets test:gate:<marker> (at most 30 s)."""

    name = "Api::Gate"

    def perform(self, marker):
        client = _redis()
        client.incr(f"test:runs:{marker}")
        deadline = time.monotonic() + 30
        while not client.exists(f"test:gate:{marker}") and time.monotonic() < deadline:
            time.sleep(0.02)
        client.incr(f"test:finished:{marker}")


class CountJob(cogworker.Job):
    name = "Api::Count"

    def perform(self, marker):
        _redis().incr(f"test:runs:{marker}")


class FailJob(cogworker.Job, retry=1):
    name = "Api::Fail"

    def perform(self, marker):
        raise RuntimeError(f"failing on purpose: {marker}")
'''

WORKER_CONFIG = """\
heartbeat_interval: 0.2
poll_interval: 0.2
concurrency: 3
shutdown_timeout: 5
"""


def payload(jid: str | None = None, **fields: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "class": "Api::Count",
        "args": [],
        "queue": "default",
        "jid": jid or wire.new_jid(),
        "retry": True,
        "created_at": 1_700_000_000.0,
    }
    job.update(fields)
    return job


def lpush(r: redis.Redis, queue: str, *jobs: dict[str, Any]) -> list[str]:
    """LPUSH the jobs in order (the last one given is the newest) and register the queue."""
    raws = [wire.dumps(job) for job in jobs]
    if raws:
        r.lpush(keys.queue(queue), *raws)
    r.sadd(keys.QUEUES, queue)
    return raws


def zadd(r: redis.Redis, key: str, job: dict[str, Any] | str, score: float) -> str:
    raw = job if isinstance(job, str) else wire.dumps(job)
    r.zadd(key, {raw: score})
    return raw


@pytest.fixture
def client(config: cogworker.Config) -> redis.Redis:
    """The client the API is given: the config's own (decode_responses, as in production)."""
    return config.redis()


@pytest.fixture
def producer(config: cogworker.Config) -> cogworker.Client:
    return cogworker.Client(config)


@pytest.fixture
def worker(tmp_path: Path, redis_url: str, r: redis.Redis) -> Iterator[subprocess.Popen[bytes]]:
    """A real worker (concurrency 3, 0.2 s heartbeat) on the shared, flushed server."""
    yield from worker_process(tmp_path, redis_url, "api_jobs", JOBS_MODULE, WORKER_CONFIG)


def identity_of(r: redis.Redis, process: subprocess.Popen[bytes]) -> str:
    def registered() -> str | None:
        assert process.poll() is None, "the worker exited early"
        return registered_identity(r, process.pid)

    return str(wait_for(registered, timeout=20))


def find_process(client: redis.Redis, identity: str) -> api.Process:
    found = [p for p in api.ProcessSet(client) if p.identity == identity]
    assert len(found) == 1, found
    return found[0]


def runs(r: redis.Redis, marker: str, what: str = "runs") -> int:
    return int(r.get(f"test:{what}:{marker}") or 0)
