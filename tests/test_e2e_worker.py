"""End to end: real ``cogworker`` worker processes against a real Redis.

Signals (TERM / TSTP) and remote commands (a remote stop drains and exits),
reliable delivery across a ``kill -9`` and the orphan-recovery liveness rule (a process whose
presence expired but whose last beat is recent is left alone), startup while Redis is
unreachable and ``cogworker demo``.

Workers run in their own session (killed with their whole group after each test) and write
stdout+stderr to a file; ``PYTHONUNBUFFERED`` is removed from their environment so the tests
also check that the worker flushes its own log lines. Everything synchronises by polling
Redis or the worker's output. To know that a worker *judged* a process and left it alone, a
test plants "decoy" dead processes and waits until that worker recovers them (see
``prove_orphan_passes``).
"""

from __future__ import annotations

import calendar
import json
import os
import re
import secrets
import signal
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    StartWorker,
    Worker,
    closing_producer,
    cogworker_env,
    holds,
    kill_session,
    spawn_cogworker,
    started_workers,
)

import cogworker
from cogworker import keys, wire
from cogworker.local.server import RedisServer

pytestmark = pytest.mark.slow  # the full run only: real `cogworker run` processes

JOBS_MODULE = textwrap.dedent(
    '''
    """Jobs for the end-to-end tests; every run is counted in Redis."""
    import os
    import time

    import cogworker


    def _redis():
        return cogworker.default_config().redis()


    class SlowJob(cogworker.Job):
        name = "SlowJob"

        def perform(self, seconds, marker):
            client = _redis()
            client.incr(f"test:runs:{marker}")
            time.sleep(seconds)
            client.incr(f"test:finished:{marker}")


    class GateJob(cogworker.Job):
        """Runs until the test sets ``test:gate:<marker>`` (at most 60 s)."""

        name = "GateJob"

        def perform(self, marker):
            client = _redis()
            client.incr(f"test:runs:{marker}")
            deadline = time.monotonic() + 60
            while not client.exists(f"test:gate:{marker}") and time.monotonic() < deadline:
                time.sleep(0.02)
            client.incr(f"test:finished:{marker}")
    '''
)

FAST_CONFIG = """\
heartbeat_interval: 0.2
poll_interval: 0.2
orphan_check_interval: 0.3
orphan_threshold: {threshold}
shutdown_timeout: {shutdown}
concurrency: 2
"""

LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) pid=\d+ tid=\S+ [A-Z]+: ")


# -- helpers -------------------------------------------------------------------------------


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "e2e_jobs.py").write_text(JOBS_MODULE)
    return tmp_path


@pytest.fixture
def start_worker(app_dir: Path, redis_url: str) -> Iterator[StartWorker]:
    """Start workers running ``e2e_jobs``; every one is killed (group-wide) after the test."""
    with started_workers(app_dir) as workers:

        def start(
            *args: str, config: str | None = None, env: dict[str, str] | None = None
        ) -> Worker:
            command = ["run", "-r", "e2e_jobs", *args]
            if config is not None:
                path = app_dir / f"worker-{len(workers.started)}.yml"
                path.write_text(config)
                command += ["-C", str(path)]
            return workers.start(command, cogworker_env(redis_url, **(env or {})))

        yield start


def fast(threshold: float = 300, shutdown: float = 10) -> str:
    return FAST_CONFIG.format(threshold=threshold, shutdown=shutdown)


@pytest.fixture
def producer(r: redis.Redis, redis_url: str) -> Iterator[cogworker.Client]:
    """Enqueues on the shared (flushed) server."""
    yield from closing_producer(redis_url)


def push(producer: cogworker.Client, job_class: str, *args: Any) -> str:
    jid = producer.push({"class": job_class, "args": list(args), "queue": "default"})
    assert jid is not None
    return jid


def count(client: redis.Redis, what: str, marker: str) -> int:
    return int(client.get(f"test:{what}:{marker}") or 0)


def redis_now(client: redis.Redis) -> int:
    return int(client.time()[0])


def presence(client: redis.Redis, identity: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in client.hgetall(keys.process(identity)).items()}


def assert_gone(client: redis.Redis, identity: str) -> None:
    assert client.exists(keys.process(identity)) == 0
    assert not client.sismember(keys.PROCESSES, identity)
    assert client.llen(keys.inprogress(identity)) == 0


def subscribed(client: redis.Redis, identity: str) -> bool:
    channel = keys.signal_channel(identity)
    return dict(client.pubsub_numsub(channel)).get(channel) == 1


def plant_dead_process(client: redis.Redis) -> str:
    """A process that is dead by every rule: no presence, last beat long ago, one job listed.

    Its name starts with ``~`` so it sorts after any real identity.
    """
    identity = f"~decoy:{secrets.token_hex(6)}"
    payload = wire.normalize({"class": "SlowJob", "args": [0, "decoy"], "queue": "default"})
    pipe = client.pipeline()
    pipe.rpush(keys.inprogress(identity), wire.dumps(payload))
    pipe.hset(keys.LAST_BEAT, identity, str(redis_now(client) - 10_000))
    pipe.sadd(keys.INPROGRESS_IDENTITIES, identity)
    pipe.execute()
    return identity


def prove_orphan_passes(client: redis.Redis, worker: Worker) -> None:
    """Return once ``worker`` has run at least one complete orphan-recovery pass that started
    after this call, i.e. judged every process registered now.

    A first decoy recovered by ``worker`` marks a pass; a second decoy, planted after the
    first was recovered, can only be seen by a later pass of the same (single) scheduler
    thread, so the first pass had completed.
    """
    for _ in range(2):
        decoy = plant_dead_process(client)
        worker.wait_output(f"left in progress by dead process {decoy}", timeout=15)


def stamp_of(line: str) -> int:
    match = LINE.match(line)
    assert match, f"not a log line: {line!r}"
    return calendar.timegm(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%SZ"))


# -- signals and remote commands -----------------------------------------------------------


def test_term_lets_a_short_running_job_finish_then_exits_cleanly(
    start_worker: StartWorker, producer: cogworker.Client, r: redis.Redis
) -> None:
    worker = start_worker("-t", "10", config=fast())
    identity = worker.identity(r)
    push(producer, "SlowJob", 1.0, "short")
    wait_for(lambda: count(r, "runs", "short") == 1)
    worker.send(signal.SIGTERM)

    assert worker.wait(20) == 0
    assert count(r, "finished", "short") == 1
    assert count(r, "runs", "short") == 1
    assert r.llen(keys.queue("default")) == 0
    assert_gone(r, identity)
    output = worker.output()
    assert f"Received stop signal, identity={identity}" in output
    assert "requeued" not in output


def test_term_hands_a_job_longer_than_the_timeout_back_to_its_queue(
    start_worker: StartWorker, producer: cogworker.Client, r: redis.Redis
) -> None:
    worker = start_worker("-t", "1", config=fast(shutdown=30))  # the flag wins: 1 s
    identity = worker.identity(r)
    jid = push(producer, "GateJob", "long")
    wait_for(lambda: count(r, "runs", "long") == 1)
    assert r.llen(keys.inprogress(identity)) == 1
    began = time.monotonic()
    worker.send(signal.SIGTERM)

    assert worker.wait(20) == 0
    assert time.monotonic() - began < 10
    queued = [json.loads(raw) for raw in r.lrange(keys.queue("default"), 0, -1)]
    assert [job["jid"] for job in queued] == [jid]
    assert r.llen(keys.inprogress(identity)) == 0
    assert count(r, "finished", "long") == 0
    assert_gone(r, identity)
    assert "requeued 1 job(s) unfinished at shutdown" in worker.output()


def test_tstp_quiets_and_remote_resume_restarts_fetching(
    start_worker: StartWorker, producer: cogworker.Client, r: redis.Redis
) -> None:
    worker = start_worker(config=fast())
    identity = worker.identity(r)
    wait_for(lambda: subscribed(r, identity))
    worker.send(signal.SIGTSTP)
    wait_for(lambda: presence(r, identity).get("quiet") == "true")
    worker.wait_output(f"Received quiet signal, identity={identity}")

    push(producer, "SlowJob", 0, "while-quiet")
    holds(lambda: count(r, "runs", "while-quiet") == 0 and worker.alive(), 1.5)
    wait_for(lambda: r.llen(keys.queue("default")) == 1)
    assert r.llen(keys.inprogress(identity)) == 0

    assert r.publish(keys.signal_channel(identity), "resume") == 1
    wait_for(lambda: count(r, "finished", "while-quiet") == 1)
    wait_for(lambda: presence(r, identity).get("quiet") == "false")
    assert count(r, "runs", "while-quiet") == 1

    worker.send(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert_gone(r, identity)


def test_remote_quiet_then_stop_exits_the_process_with_its_output_flushed(
    start_worker: StartWorker, producer: cogworker.Client, r: redis.Redis
) -> None:
    """A remote ``stop`` after ``quiet`` drains the running job, removes the presence and
    ends the OS process; its last log line is written even though stdout is a file and not
    line-buffered."""
    worker = start_worker(config=fast())
    identity = worker.identity(r)
    wait_for(lambda: subscribed(r, identity))
    channel = keys.signal_channel(identity)

    push(producer, "SlowJob", 0.8, "draining")
    wait_for(lambda: count(r, "runs", "draining") == 1)
    assert r.publish(channel, "quiet") == 1
    wait_for(lambda: presence(r, identity).get("quiet") == "true")
    assert r.publish(channel, "stop") == 1

    assert worker.wait(20) == 0
    assert count(r, "finished", "draining") == 1
    assert_gone(r, identity)
    assert r.llen(keys.queue("default")) == 0
    lines = worker.output().splitlines()
    assert any(f"Received remote stop, identity={identity}" in line for line in lines)
    assert f"cogworker stopped, identity={identity}" in lines[-1]
    assert all(LINE.match(line) for line in lines), lines


# -- reliable delivery ---------------------------------------------------------------------


def test_job_of_a_killed_worker_runs_again_exactly_once_after_the_threshold(
    start_worker: StartWorker, producer: cogworker.Client, r: redis.Redis
) -> None:
    threshold = 2
    workers = [start_worker(config=fast(threshold=threshold)) for _ in range(2)]
    identities = [worker.identity(r) for worker in workers]
    jid = push(producer, "GateJob", "orphan")
    wait_for(lambda: count(r, "runs", "orphan") == 1)
    taken = [r.llen(keys.inprogress(identity)) for identity in identities]
    assert sorted(taken) == [0, 1]
    victim, rescuer = (0, 1) if taken[0] == 1 else (1, 0)
    dead, dead_identity = workers[victim], identities[victim]

    dead.kill()  # mid-job: the job is on its in-progress list, not finished
    last_beat = int(r.hget(keys.LAST_BEAT, dead_identity) or 0)
    assert last_beat > 0
    # the presence key would expire 60 s after the last beat: let that happen now
    r.delete(keys.process(dead_identity))
    r.set("test:gate:orphan", "open")  # the next run finishes at once
    assert count(r, "finished", "orphan") == 0

    wait_for(lambda: count(r, "finished", "orphan") == 1, timeout=20)
    assert count(r, "runs", "orphan") == 2
    survivor = workers[rescuer]
    note = f"requeued 1 job(s) left in progress by dead process {dead_identity}"
    survivor.wait_output(note)  # logged after the requeue: the rerun may finish first
    recovered = [line for line in survivor.output().splitlines() if note in line]
    assert len(recovered) == 1, survivor.output()
    # not before the threshold: recovered only when Redis-now - last beat > threshold
    assert stamp_of(recovered[0]) >= last_beat + threshold + 1

    prove_orphan_passes(r, survivor)  # more passes: nothing recovered twice
    # the decoys' jobs were requeued onto default: the survivor runs and acks them
    rescuer_list = keys.inprogress(identities[rescuer])
    wait_for(lambda: r.llen(keys.queue("default")) == 0 and r.llen(rescuer_list) == 0)
    assert count(r, "runs", "orphan") == 2
    assert count(r, "finished", "orphan") == 1
    assert r.exists(keys.inprogress(dead_identity)) == 0
    assert not r.sismember(keys.INPROGRESS_IDENTITIES, dead_identity)
    assert r.hget(keys.LAST_BEAT, dead_identity) is None
    assert r.exists(keys.orphanings(jid)) == 0
    assert r.llen(keys.queue("default")) == 0
    assert r.llen(rescuer_list) == 0


def test_fresh_last_beat_protects_a_dead_workers_job_from_a_big_threshold(
    start_worker: StartWorker, producer: cogworker.Client, r: redis.Redis
) -> None:
    """A process whose presence key is gone but whose last beat is younger than
    orphan_threshold is not dead yet: its in-progress job is left where it is."""
    victim = start_worker(config=fast())
    victim_identity = victim.identity(r)
    push(producer, "GateJob", "fresh")
    wait_for(lambda: count(r, "runs", "fresh") == 1)
    victim.kill()
    r.delete(keys.process(victim_identity))

    checker = start_worker(config=fast(threshold=300))
    checker.identity(r)
    prove_orphan_passes(r, checker)

    assert r.llen(keys.inprogress(victim_identity)) == 1
    assert count(r, "runs", "fresh") == 1
    assert r.hget(keys.LAST_BEAT, victim_identity) is not None
    assert r.sismember(keys.INPROGRESS_IDENTITIES, victim_identity)
    assert "dead process " + victim_identity not in checker.output()


def test_live_silent_worker_with_a_presence_key_is_never_robbed(
    start_worker: StartWorker, producer: cogworker.Client, r: redis.Redis
) -> None:
    """A stopped (SIGSTOP) process beats no more, but its presence key still says it lives.

    One processor thread, busy with the job: no BLMOVE of the stopped process is pending on
    the server, which would take the decoys' jobs."""
    silent = start_worker("-c", "1", config=fast())
    silent_identity = silent.identity(r)
    push(producer, "GateJob", "silent")
    wait_for(lambda: count(r, "runs", "silent") == 1)
    silent.send(signal.SIGSTOP)
    wait_for(lambda: Path(f"/proc/{silent.pid}/stat").read_text().split(") ")[1][0] == "T")
    # its last beat is far older than any threshold; only the presence key protects it
    r.hset(keys.LAST_BEAT, silent_identity, str(redis_now(r) - 10_000))

    checker = start_worker(config=fast(threshold=2))
    checker.identity(r)
    prove_orphan_passes(r, checker)
    assert r.llen(keys.inprogress(silent_identity)) == 1
    assert count(r, "runs", "silent") == 1
    assert "dead process " + silent_identity not in checker.output()

    silent.send(signal.SIGCONT)
    r.set("test:gate:silent", "open")
    wait_for(lambda: count(r, "finished", "silent") == 1)
    assert count(r, "runs", "silent") == 1
    silent.send(signal.SIGTERM)
    assert silent.wait(20) == 0
    assert_gone(r, silent_identity)


# -- startup while Redis is unreachable ----------------------------------------------------


def test_worker_waits_for_unreachable_redis_then_starts_processing(
    start_worker: StartWorker, redis_server_factory: Callable[..., RedisServer]
) -> None:
    server = redis_server_factory()
    server.stop()
    worker = start_worker("--redis-url", server.url, config=fast())
    worker.wait_output("Heartbeat: Redis unavailable")
    assert worker.alive()
    assert "started, identity=" not in worker.output()

    server.start()  # same port
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        identity = worker.identity(client, timeout=20)
        worker.wait_output("Heartbeat: Redis available again")
        payload = wire.normalize({"class": "SlowJob", "args": [0, "late"], "queue": "default"})
        client.lpush(keys.queue("default"), wire.dumps(payload))
        wait_for(lambda: count(client, "finished", "late") == 1)
        worker.send(signal.SIGTERM)
        assert worker.wait(20) == 0
        assert_gone(client, identity)
    finally:
        client.close()


def test_term_while_waiting_for_redis_exits_without_starting(
    start_worker: StartWorker, redis_server_factory: Callable[..., RedisServer]
) -> None:
    server = redis_server_factory()
    server.stop()
    worker = start_worker("--redis-url", server.url, config=fast())
    worker.wait_output("Heartbeat: Redis unavailable")
    worker.send(signal.SIGTERM)

    assert worker.wait(10) == 0
    output = worker.output()
    assert "Received stop signal before startup completed" in output
    assert "started, identity=" not in output
    assert "start:" not in output


# -- the demo ------------------------------------------------------------------------------


def test_demo_runs_jobs_and_reports_one_dead(tmp_path: Path) -> None:
    out_path = tmp_path / "demo.out"
    demo = spawn_cogworker(["demo", "--jobs", "5"], tmp_path, out_path, dict(os.environ))
    try:
        code = demo.wait(60)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if demo.poll() is None:
            kill_session(demo)
    output = out_path.read_text(errors="replace")
    assert code == 0, output
    summary = re.search(
        r"^demo: processed=(\d+) failed attempts=(\d+) retry set=0 dead set=1$",
        output,
        re.MULTILINE,
    )
    assert summary, output
    assert int(summary.group(1)) >= 8  # 5 greetings, the delayed one, the report, flaky
    assert "demo: worker exited with status 0" in output
    # the one traceback is the flaky job's, on the continuation lines of its fail: record
    head = ""
    for line in output.splitlines():
        if not line.startswith("    "):
            head = line
        elif "Traceback" in line:
            assert " fail: " in head, head
