"""Cron entries end to end: real ``cogworker`` worker processes configured by a YAML file
(``-C``, with short intervals) against a real Redis.

* three processes share a per-second schedule: every slot runs exactly once (the one long
  test, about a minute, marked slow);
* kill -9 of the process running an ``until_executed`` entry: nothing else starts until the
  run is recovered and finishes, then slots run again;
* a push refused after a won claim (ACL) runs on a later tick once allowed;
* a cold start with catch-up off and two racing processes enqueues nothing;
* a bad ``periodic:`` entry stops the worker at boot with one line.

Each run is recorded by a server middleware of the app (``start``/``done`` with jid,
periodic_slot and pid) in the list ``test:events``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    AclServer,
    cogworker_env,
    command_calls,
    events,
    holds,
    kill_session,
    registered_identity,
    spawn_cogworker,
)

from cogworker import keys
from cogworker.local.server import RedisServer
from cogworker.periodic.entries import Entry

pytestmark = pytest.mark.slow  # the full run only: cron schedules across several worker processes

APP = textwrap.dedent(
    '''
    """Jobs for the periodic end-to-end tests."""
    import os
    import time

    import cogworker

    config = cogworker.default_config()


    class Recorder:
        """Records every cron run: start / done, jid, slot, pid."""

        def __call__(self, worker, job, queue, call_next):
            if "periodic_pjid" not in job:
                call_next()
                return
            client = config.redis()
            tag = f"{job.get('jid')} {job.get('periodic_slot')} {os.getpid()} {queue}"
            client.rpush("test:events", f"start {tag}")
            call_next()
            client.rpush("test:events", f"done {tag}")


    config.server_middleware.add(Recorder)


    class TickJob(cogworker.Job):
        name = "PE2E::Tick"

        def perform(self, *args):
            pass


    class HoldJob(cogworker.Job):
        """Runs until the test sets ``test:gate:<marker>`` (at most 60 s)."""

        name = "PE2E::Hold"

        def perform(self, marker):
            client = config.redis()
            deadline = time.monotonic() + 60
            while not client.exists(f"test:gate:{marker}") and time.monotonic() < deadline:
                time.sleep(0.02)
    '''
)

FAST = """\
heartbeat_interval: 0.3
poll_interval: 0.3
orphan_check_interval: 0.3
orphan_threshold: 2
shutdown_timeout: 3
concurrency: 3
"""


class Fleet:
    """Worker processes of one test; all killed (process group) afterwards."""

    def __init__(self, directory: Path, redis_url: str) -> None:
        self.directory = directory
        self.redis_url = redis_url
        self.processes: list[subprocess.Popen[bytes]] = []
        (directory / "cron_app.py").write_text(APP)

    def start(
        self, config: str, *extra: str, redis_url: str | None = None
    ) -> subprocess.Popen[bytes]:
        index = len(self.processes)
        path = self.directory / f"worker-{index}.yml"
        path.write_text(config)
        process = spawn_cogworker(
            ["run", "-r", "cron_app", "-C", str(path), *extra],
            self.directory,
            self.log(index),
            cogworker_env(redis_url or self.redis_url),
        )
        self.processes.append(process)
        return process

    def log(self, index: int) -> Path:
        return self.directory / f"worker-{index}.out"

    def output(self, process: subprocess.Popen[bytes]) -> str:
        return self.log(self.processes.index(process)).read_text(errors="replace")

    def kill_all(self) -> None:
        for process in self.processes:
            kill_session(process)


@pytest.fixture
def fleet(tmp_path: Path, redis_url: str) -> Iterator[Fleet]:
    workers = Fleet(tmp_path, redis_url)
    try:
        yield workers
    finally:
        workers.kill_all()
        for index, process in enumerate(workers.processes):
            print(f"--- worker {process.pid}:\n{workers.log(index).read_text(errors='replace')}")


def cron_config(*entries: dict[str, Any], base: str = FAST, **options: Any) -> str:
    lines = [base.rstrip("\n")]
    lines += [f"{name}: {json.dumps(value)}" for name, value in options.items()]
    lines.append("periodic: " + json.dumps(list(entries)))
    return "\n".join(lines) + "\n"


def pjid(cron: str, job: str, args: list[Any]) -> str:
    return Entry(cron=cron, job=job, args=args).pjid


def starts(client: redis.Redis) -> list[list[str]]:
    return [record for record in events(client, "test:events") if record[0] == "start"]


# -- three processes, one per-second schedule ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_three_processes_run_every_slot_of_a_per_second_schedule_exactly_once(
    fleet: Fleet, r: redis.Redis
) -> None:
    """About a minute: 31 slots two seconds apart, each raced by three tickers. The slots span
    62 s, so the run crosses a minute boundary of the per-second schedule and outlives the
    20 s slot lock three times over; both are what more slots would add, and a shorter period
    would leave a loaded machine's tickers less than a second to keep up."""
    cron = "*/2 * * * * * UTC"
    entry = {"cron": cron, "job": "PE2E::Tick", "args": ["fleet"], "queue": "cron"}
    config = cron_config(entry, queues=["cron"])
    period = 2
    workers = [fleet.start(config) for _ in range(3)]
    wait_for(lambda: all(registered_identity(r, w.pid) for w in workers), timeout=20)
    registered_at = time.time()  # every process has beaten: its ticker starts right after
    wanted = 31
    wait_for(
        lambda: len({s[2] for s in starts(r)}) >= wanted, timeout=wanted * 2 + 40, interval=0.5
    )
    for worker in workers:
        worker.terminate()
    for worker in workers:
        assert worker.wait(20) == 0

    records = events(r, "test:events")
    slots = [int(record[2]) for record in records if record[0] == "start"]
    assert len(slots) == len(set(slots)), f"a slot ran twice: {sorted(slots)}"
    assert sorted(slots) == list(range(min(slots), max(slots) + 1, 2)), "a slot was missed"
    assert len(slots) >= wanted
    # from the start, not after some warm-up: within a few periods of the fleet's boot
    assert min(slots) <= registered_at + 5 * period
    done = [record[1] for record in records if record[0] == "done"]
    assert sorted(done) == sorted(record[1] for record in records if record[0] == "start")
    assert {record[4] for record in records} == {"cron"}
    assert r.llen(keys.queue("cron")) == 0
    published = json.loads(r.hget(keys.PERIODIC_SCHEDULE, pjid(cron, "PE2E::Tick", ["fleet"])))
    assert published["queue"] == "cron" and published["cron"] == cron


# -- kill -9 under an until_executed entry --------------------------------------------------------


def test_killed_until_executed_run_blocks_new_slots_until_it_is_recovered_and_done(
    fleet: Fleet, r: redis.Redis
) -> None:
    cron = "*/2 * * * * * UTC"
    entry = {"cron": cron, "job": "PE2E::Hold", "args": ["k"], "unique": "until_executed"}
    config = cron_config(entry)
    workers = [fleet.start(config) for _ in range(2)]
    lock = keys.periodic_running(pjid(f"{cron}", "PE2E::Hold", ["k"]))
    wait_for(lambda: len(starts(r)) == 1, timeout=20)
    [[_, jid, slot, pid, _]] = starts(r)
    assert r.get(lock) == jid
    holds(lambda: len(starts(r)) == 1, 3.0)  # several slots pass: all blocked by the run

    [victim] = [w for w in workers if str(w.pid) == pid]
    [survivor] = [w for w in workers if w is not victim]
    identity = registered_identity(r, victim.pid)
    assert identity is not None
    kill_session(victim)
    holds(lambda: len(starts(r)) == 1 and r.get(lock) == jid, 3.0)  # waits for recovery

    r.set("test:gate:k", "open")  # the recovered run finishes at once
    r.delete(keys.process(identity))  # what its 60 s presence TTL would do
    wait_for(lambda: len(starts(r)) >= 2, timeout=15)
    assert starts(r)[1][:3] == ["start", jid, slot]  # the same run, not a new slot
    assert starts(r)[1][3] == str(survivor.pid)
    wait_for(lambda: len(starts(r)) >= 3, timeout=15)  # then new slots run again
    records = events(r, "test:events")
    assert [record[:3] for record in records[:3]] == [
        ["start", jid, slot],
        ["start", jid, slot],
        ["done", jid, slot],
    ]
    new_jid, new_slot = records[3][1], int(records[3][2])
    assert records[3][0] == "start" and new_jid != jid and new_slot > int(slot)
    wait_for(lambda: r.get(lock) in (None, new_jid) and len(events(r, "test:events")) >= 5)
    assert all(record[1] != jid for record in events(r, "test:events")[3:])


# -- a push refused after the claim ----------------------------------------------------------------


def test_push_refused_after_a_won_claim_runs_the_slot_once_allowed_again(
    fleet: Fleet, redis_server_factory: Callable[..., RedisServer]
) -> None:
    acl = AclServer(redis_server_factory)
    admin = acl.admin
    try:
        cron = "*/10 * * * * * UTC"
        entry = {"cron": cron, "job": "PE2E::Tick", "args": ["acl"]}
        entry_id = pjid(cron, "PE2E::Tick", ["acl"])
        acl.deny("lpush")
        worker = fleet.start(
            cron_config(entry, periodic_catch_up=False), "--redis-url", acl.worker_url
        )
        wait_for(lambda: admin.get(keys.periodic_last_slot(entry_id)) is not None, timeout=20)
        primed = int(admin.get(keys.periodic_last_slot(entry_id)))
        failure = f"Periodic tick: {entry_id} ({cron}) failed (next try in 5s)"
        wait_for(lambda: failure in fleet.output(worker), timeout=20)
        acl.allow("lpush")
        assert admin.get(keys.periodic_last_slot(entry_id)) == str(primed)  # rolled back
        assert "NoPermissionError" in fleet.output(worker)
        wait_for(lambda: len(starts(admin)) == 1, timeout=9)
        [[_, _, slot, _, _]] = starts(admin)
        assert int(slot) == primed + 10
        assert admin.get(keys.periodic_last_slot(entry_id)) == slot
        assert admin.llen(keys.queue("default")) == 0
    finally:
        admin.close()


# -- cold start without catch-up -------------------------------------------------------------------


def test_cold_start_without_catch_up_two_racing_processes_enqueue_nothing(
    fleet: Fleet, redis_server_factory: Callable[..., RedisServer]
) -> None:
    server = redis_server_factory()
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        cron = "0 0 1 1 * UTC"  # its slot is months old; the next is months away
        entry = {"cron": cron, "job": "PE2E::Tick", "args": ["cold"], "unique": "until_executed"}
        entry_id = pjid(cron, "PE2E::Tick", ["cold"])
        config = cron_config(entry, periodic_catch_up=False)
        workers = [fleet.start(config, "--redis-url", server.url) for _ in range(2)]
        wait_for(lambda: all(registered_identity(client, w.pid) for w in workers), timeout=20)
        # each process primes once (SET NX; nothing else in an idle fleet sends SET)
        wait_for(lambda: command_calls(client).get("set", 0) >= 2, timeout=15)
        slot = Entry(cron=cron, job="PE2E::Tick").schedule.slot(time.time())
        holds(lambda: command_calls(client).get("set", 0) == 2, 1.5)
        assert client.get(keys.periodic_last_slot(entry_id)) == str(slot)
        assert client.keys("periodic:lock:*") == []
        assert client.exists(keys.periodic_running(entry_id)) == 0
        assert client.llen(keys.queue("default")) == 0
        assert starts(client) == []
        assert all(w.poll() is None for w in workers)
    finally:
        client.close()


# -- a bad entry in the config file ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "fragments"),
    [
        ({"cron": "61 * * * *", "job": "PE2E::Tick"}, ["'61 * * * *'", "PE2E::Tick", "minute"]),
        ({"cron": "@hourly", "job": "Missing::Job"}, ["Missing::Job", "unknown job"]),
        ({"cron": "0 9 * * *", "job": "PE2E::Tick", "tz": "Mars/Olympus"}, ["Mars/Olympus"]),
        ({"cron": "@hourly", "job": "PE2E::Tick", "every": 2}, ["unknown key 'every'"]),
    ],
)
def test_bad_periodic_entry_in_the_config_file_stops_the_boot_with_one_line(
    tmp_path: Path, redis_url: str, entry: dict[str, Any], fragments: list[str]
) -> None:
    (tmp_path / "cron_app.py").write_text(APP)
    (tmp_path / "bad.yml").write_text(cron_config(entry))
    done = subprocess.run(
        [sys.executable, "-m", "cogworker", "run", "-r", "cron_app", "-C", "bad.yml"],
        cwd=tmp_path,
        env=cogworker_env(redis_url),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("cogworker: periodic entry")
    for fragment in fragments:
        assert fragment in lines[0]
