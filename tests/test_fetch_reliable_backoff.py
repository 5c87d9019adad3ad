"""Reliable and basic fetch under conditions no other test provokes: the idle back-off of a
worker reading several empty queues, and the requeue scripts re-taking a cron run's running
lock in the same step that puts the run back on its queue.

Both are observed through Redis itself: MONITOR on a private server reports every command
with the server's own timestamp, and marks the commands a Lua script ran (client ``lua``), so
a test can see when each fetch happened and which writes one script made.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    fresh_runtime,
    plant_orphan,
    private_config,
    release,
    running,
    ttl_was_set_to,
)

import cogworker
from cogworker import keys, wire
from cogworker.fetch.reliable import EMPTY_POLL_INTERVAL, FETCH_BATCH, ReliableFetch
from cogworker.identity import new_identity
from cogworker.periodic.running_lock import active_ttl, queued_ttl
from cogworker.redis_server import RedisServer
from cogworker.worker.manager import Manager
from cogworker.worker.recovery.handback import hand_back_list, hand_back_registered

ServerFactory = Callable[..., RedisServer]

RUNS: list[str] = []

# Slack for thread wake-ups and round trips between two fetches on a shared, loaded machine.
# It stays below what tells the levels apart: a pause that started one level too high is at
# least 0.75 x 0.5 s longer than the 0.25 s level.
SCHEDULING_NOISE = 0.45
CLOCK_RESOLUTION = 0.01
SCRIPT_CALLS = ("EVALSHA", "EVAL")


class IdleJob(cogworker.Job):
    name = "FMFetch::Idle"

    def perform(self, token: str) -> None:
        RUNS.append(token)


@pytest.fixture(autouse=True)
def _fresh_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    yield from fresh_runtime(request, RUNS)


@dataclass(frozen=True)
class Command:
    at: float  # the server's clock, seconds
    by_script: bool
    words: list[str]


class Monitor:
    """Every command a server runs while the monitor is open (Redis MONITOR)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._marker = f"end-of-monitor-{uuid.uuid4().hex}"
        self._seen: list[Command] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._read, name="monitor", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        assert self._ready.wait(10), "MONITOR never started"
        return self

    def __exit__(self, *exc: object) -> None:
        poke = redis.Redis.from_url(self._url, decode_responses=True)
        try:
            poke.echo(self._marker)  # the reader stops at this one
        finally:
            poke.close()
        self._thread.join(10)

    def _read(self) -> None:
        client = redis.Redis.from_url(self._url, decode_responses=True)
        try:
            with client.monitor() as feed:
                self._ready.set()
                while True:
                    line: dict[str, Any] = feed.next_command()
                    words = str(line["command"]).split(" ")
                    if words == ["ECHO", self._marker]:
                        return
                    self._seen.append(Command(line["time"], line["client_type"] == "lua", words))
        finally:
            client.close()

    def commands(self) -> list[Command]:
        return list(self._seen)

    def calls_of(self, sha: str) -> list[float]:
        """When the script with this SHA was called (EVALSHA), oldest first."""
        return [c.at for c in self.commands() if c.words[:2] == ["EVALSHA", sha]]

    def script_writes(self) -> list[list[list[str]]]:
        """The commands each script call ran, one list per EVALSHA / EVAL."""
        groups: list[list[list[str]]] = []
        for command in self.commands():
            if command.words[0] in SCRIPT_CALLS:
                groups.append([])
            elif command.by_script and groups:
                groups[-1].append(command.words)
        return groups


def assert_pause(gap: float, level: float) -> None:
    """A pause of the ``level`` back-off step: jittered to 75-100 % of it, plus noise."""
    assert 0.75 * level - CLOCK_RESOLUTION <= gap <= level + SCHEDULING_NOISE, (gap, level)


# -- the idle back-off of a multi-queue worker -----------------------------------------------------


def test_idle_multi_queue_fetch_backs_off_to_the_cap_and_starts_over_after_a_job(
    redis_server_factory: ServerFactory,
) -> None:
    """Empty polls of several queues wait 0.25 s, then twice as long each time up to
    ``fetch_idle_max_interval`` (each pause jittered to 75-100 %); a job taken starts the
    series over. Seen as the server's timestamps of the fetch script's calls."""
    server = redis_server_factory()
    cap = 2.0
    cfg = private_config(
        server.url,
        queues=["alpha", "beta"],
        concurrency=1,
        fetch_idle_max_interval=cap,
        shutdown_timeout=1.0,
    )
    levels = [EMPTY_POLL_INTERVAL]
    while levels[-1] < cap:
        levels.append(min(levels[-1] * 2, cap))
    levels.append(cap)  # 0.25, 0.5, 1, 2, 2: the cap holds
    manager = Manager(cfg, new_identity())
    try:
        with Monitor(server.url) as monitor, running(manager, stop_timeout=2.0):
            fetches = lambda: monitor.calls_of(FETCH_BATCH.sha)  # noqa: E731
            wait_for(lambda: len(fetches()) >= len(levels) + 1, timeout=30, interval=0.1)
            job = {"class": IdleJob.name, "args": ["wakes"], "queue": "beta"}
            cogworker.Client(cfg).push(job)
            wait_for(lambda: RUNS == ["wakes"], timeout=10, interval=0.1)
            before_job = len(fetches())  # the next fetch, or this one, took the job
            wait_for(lambda: len(fetches()) >= before_job + 4, timeout=30, interval=0.1)
    finally:
        release(cfg)
    pushed_at = next(c.at for c in monitor.commands() if c.words[0] == "LPUSH")
    times = monitor.calls_of(FETCH_BATCH.sha)
    idle = [at for at in times if at < pushed_at]
    took_job = next(at for at in times if at > pushed_at)
    after = [at for at in times if at > took_job]
    gaps = [later - earlier for earlier, later in itertools.pairwise(idle)]
    assert len(gaps) >= len(levels)
    for gap, level in zip(gaps, levels + [cap] * len(gaps), strict=False):
        assert_pause(gap, level)
    # the poll that found the job had waited out a pause of the series too
    assert_pause(took_job - idle[-1], levels[min(len(gaps), len(levels) - 1)])
    # after[0] is the first poll once the job was done (no pause before it); from there the
    # series starts over at 0.25 s: without the reset the pause would be >= 0.75 x the cap
    assert_pause(after[1] - after[0], levels[0])
    assert_pause(after[2] - after[1], levels[1])
    assert RUNS == ["wakes"]


# -- requeueing a cron run re-takes its running lock in the same script ------------------------

PJID = "fm-fetch-pj"
LOCK = keys.periodic_running(PJID)
QUEUE = "cronq"


def cron_raw(token: str) -> str:
    job = {
        "class": IdleJob.name,
        "args": [token],
        "queue": QUEUE,
        "periodic_pjid": PJID,
        "periodic_until_executed": True,
    }
    return wire.dumps(wire.normalize(job))


def jid_of(raw: str) -> str:
    return str(json.loads(raw)["jid"])


Requeue = Callable[[cogworker.Config, redis.Redis, str], None]


def give_back(cfg: cogworker.Config, admin: redis.Redis, raw: str) -> None:
    """A job fetched but not started goes back (reliable fetch)."""
    cfg.queues = [QUEUE]
    admin.lpush(keys.queue(QUEUE), raw)
    fetch = ReliableFetch(cfg, new_identity(), threading.Event())
    try:
        [work] = fetch.retrieve(1, wait=False)
        fetch.give_back(work)
    finally:
        fetch.close()


def shutdown_requeue(cfg: cogworker.Config, admin: redis.Redis, raw: str) -> None:
    """A stopping reliable process puts its unfinished job back."""
    identity = new_identity()
    admin.lpush(keys.inprogress(identity), raw)
    assert hand_back_list(cfg, cfg.redis(), identity) == 1


def orphan_recovery(cfg: cogworker.Config, admin: redis.Redis, raw: str) -> None:
    """Another process requeues the list of a process that died running the job."""
    plant_orphan(admin, new_identity(), [raw])
    report = Manager(cfg, new_identity()).orphans.recover(scan=False)
    assert report.moved == 1


def basic_shutdown_requeue(cfg: cogworker.Config, admin: redis.Redis, raw: str) -> None:
    """A stopping basic-fetch process puts back what its workers hash says is running."""
    identity = new_identity()
    entry = {"queue": QUEUE, "payload": json.loads(raw), "run_at": int(time.time())}
    admin.hset(keys.workers(identity), "tid-1", json.dumps(entry))
    assert hand_back_registered(cfg, cfg.redis(), identity) == 1


REQUEUES: dict[str, Requeue] = {
    "give back": give_back,
    "shutdown requeue": shutdown_requeue,
    "orphan recovery": orphan_recovery,
    "basic shutdown requeue": basic_shutdown_requeue,
}


@pytest.mark.parametrize("path", list(REQUEUES))
def test_requeue_retakes_a_lapsed_cron_lock_in_the_script_that_pushes_the_run(
    redis_server_factory: ServerFactory, path: str
) -> None:
    """The run's lock expired while it was in progress: the script that puts the run back
    on its queue sets the lock again, so the entry is never open while its run waits."""
    server = redis_server_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    cfg = private_config(server.url)
    raw = cron_raw(path)
    try:
        started = time.monotonic()
        with Monitor(server.url) as monitor:
            REQUEUES[path](cfg, admin, raw)
        assert admin.lrange(keys.queue(QUEUE), 0, -1) == [raw]
        assert admin.get(LOCK) == jid_of(raw)
        assert ttl_was_set_to(admin, LOCK, queued_ttl(cfg), started)
        assert queued_ttl(cfg) > active_ttl(cfg)
        [group] = [
            group
            for group in monitor.script_writes()
            if ["RPUSH", keys.queue(QUEUE)] in [words[:2] for words in group]
        ]
        assert ["SET", LOCK, jid_of(raw), "EX", str(queued_ttl(cfg))] in group
        sent = [c.words for c in monitor.commands() if not c.by_script]
        assert not [words for words in sent if LOCK in words and words[0] not in SCRIPT_CALLS]
    finally:
        release(cfg)
        admin.close()


@pytest.mark.parametrize("path", list(REQUEUES))
@pytest.mark.parametrize("holder", ["own", "newer"])
def test_requeue_extends_its_own_lock_and_leaves_a_newer_runs_alone(
    redis_server_factory: ServerFactory, path: str, holder: str
) -> None:
    server = redis_server_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    cfg = private_config(server.url)
    raw = cron_raw(f"{path} {holder}")
    owner = jid_of(raw) if holder == "own" else "a-newer-run"
    admin.set(LOCK, owner, ex=50)
    try:
        started = time.monotonic()
        REQUEUES[path](cfg, admin, raw)
        assert admin.lrange(keys.queue(QUEUE), 0, -1) == [raw]
        assert admin.get(LOCK) == owner
        if holder == "own":
            assert ttl_was_set_to(admin, LOCK, queued_ttl(cfg), started)
        else:
            assert 0 < admin.ttl(LOCK) <= 50
    finally:
        release(cfg)
        admin.close()
