"""Status and history writes never hold a job up, even while Redis does not answer.

A real worker on a private server runs a job that pauses every Redis client (``CLIENT PAUSE
ALL``, from its own connection) as it starts, then reports progress, stores a field and
sleeps. Every status and history write of that run meets a Redis that answers nothing; each
would have waited for the socket timeout. The run time the processor logs must stay below the
job's sleep plus one socket timeout, and once the pause is over every write lands, in order.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from runtime_support import cogworker_env, kill_session, registered_identity, spawn_cogworker

import cogworker
from cogworker import history, keys, status
from cogworker.local.server import RedisServer

SOCKET_TIMEOUT = 2.0  # the worker's redis_socket_timeout: what one blocked write would cost
SLEEP = 1.0  # the job's own work
PAUSE = SLEEP + 3 * SOCKET_TIMEOUT  # outlasts the run and any write it could wait for

JOBS_MODULE = """
import time

import redis

import cogworker
from cogworker import connection, history, status

config = cogworker.default_config()
status.enable(config, expiration=600)
history.enable(config)


class PausingJob(cogworker.Job, retry=False):
    name = "SO::Pausing"

    def perform(self, pause_ms, sleep):
        pauser = redis.Redis.from_url(connection.resolve_url(config.redis_url))
        pauser.execute_command("CLIENT", "PAUSE", pause_ms, "ALL")  # answered before it applies
        pauser.close()
        status.at(self.jid, 50, "halfway")
        status.store(self.jid, step="slept")
        time.sleep(sleep)
"""

WORKER_CONFIG = f"""\
concurrency: 2
heartbeat_interval: 0.5
poll_interval: 0.5
shutdown_timeout: 5
redis_socket_timeout: {SOCKET_TIMEOUT}
"""


@pytest.fixture
def server(redis_server_factory: Callable[..., RedisServer]) -> RedisServer:
    return redis_server_factory()


@pytest.fixture
def worker(tmp_path: Path, server: RedisServer) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    (tmp_path / "so_jobs.py").write_text(JOBS_MODULE)
    (tmp_path / "worker.yml").write_text(WORKER_CONFIG)
    log = tmp_path / "worker.out"
    process = spawn_cogworker(
        ["run", "-r", "so_jobs", "-C", "worker.yml"], tmp_path, log, cogworker_env(server.url)
    )
    try:
        yield process, log
    finally:
        kill_session(process)
        print(f"--- worker:\n{log.read_text(errors='replace')}")


def test_writes_during_an_outage_cost_the_job_nothing_and_land_afterwards(
    server: RedisServer, worker: tuple[subprocess.Popen[bytes], Path]
) -> None:
    process, log = worker
    client = redis.Redis.from_url(server.url, decode_responses=True)
    config = cogworker.Config(redis_url=server.url)
    try:
        wait_for(lambda: registered_identity(client, process.pid), timeout=20)
        jid = cogworker.Client(config).push(
            {"class": "SO::Pausing", "args": [int(PAUSE * 1000), SLEEP]}
        )
        assert jid is not None

        done = re.compile(rf"done: SO::Pausing jid={jid} in ([0-9.]+)s")
        found = wait_for(lambda: done.search(log.read_text(errors="replace")), timeout=30)
        run_time = float(found.group(1))
        assert SLEEP <= run_time < SLEEP + SOCKET_TIMEOUT

        def landed() -> dict[str, str] | None:
            try:
                fields = status.get(jid, config=config) or {}
            except redis.RedisError:  # still paused: this read timed out
                return None
            return fields if fields.get("status") == "complete" else None

        fields = wait_for(landed, timeout=PAUSE + 30)
        assert (fields["pct"], fields["message"], fields["step"]) == ("50", "halfway", "slept")
        wait_for(lambda: client.zcard(keys.HISTORY_SUCCESS) == 1, timeout=10)
        (raw,) = client.zrange(keys.HISTORY_SUCCESS, 0, -1)
        entry = json.loads(raw)
        assert entry["jid"] == jid
        assert entry["duration"] == history.duration_ms(entry["started_at"], entry["finished_at"])
        assert entry["duration"] >= SLEEP * 1000
        output = log.read_text(errors="replace")
        assert "Redis unavailable" in output  # the writes did meet the outage, and waited
        assert "dropped" not in output
    finally:
        client.close()
        config.close()
