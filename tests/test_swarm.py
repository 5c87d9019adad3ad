"""The swarm: a supervisor forking worker children and keeping them up.

The unit tests drive ``Swarm`` with an injected clock but fork real children; the end-to-end
tests run ``python -m cogworker swarm`` (real forked children booting full workers) and
watch the children through ``/proc``, ``ps`` and Redis.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    closing_pools,
    cogworker_env,
    cogworker_log_records,
    is_running,
    listening,
    process_title,
    registered_identity,
)
from swarm_support import StartSwarm, ready, swarms

import cogworker
from cogworker import keys
from cogworker.worker.swarm import KILL_GRACE, Child, Swarm, respawn_delay

pytestmark = pytest.mark.slow  # the full run only: real swarms of worker processes

JOBS_MODULE = '''
"""Jobs for the swarm tests."""
import ctypes
import os
import signal
import time

import cogworker


def _redis():
    return cogworker.default_config().redis()


def _wait_gate(client, marker):
    deadline = time.monotonic() + 30
    while not client.exists(f"test:gate:{marker}") and time.monotonic() < deadline:
        time.sleep(0.02)


class GateJob(cogworker.Job):
    name = "Swarm::Gate"

    def perform(self, marker):
        client = _redis()
        client.rpush(f"test:pids:{marker}", os.getpid())
        _wait_gate(client, marker)
        client.incr(f"test:finished:{marker}")


class IgnoreTermJob(cogworker.Job):
    """Makes its whole process ignore TERM (SIG_IGN below Python's own handler)."""

    name = "Swarm::IgnoreTerm"

    def perform(self, marker):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal(signal.SIGTERM, 1)  # SIG_IGN
        _redis().set(f"test:ignoring:{marker}", os.getpid())


class HogJob(cogworker.Job):
    """First run: holds `megabytes` of touched memory until test:gate:<marker>."""

    name = "Swarm::Hog"

    def perform(self, marker, megabytes):
        client = _redis()
        run = client.incr(f"test:runs:{marker}")
        client.rpush(f"test:pids:{marker}", os.getpid())
        if run == 1:
            hog = b"\\x01" * (megabytes * 1024 * 1024)
            _wait_gate(client, marker)
            del hog
        client.incr(f"test:finished:{marker}")
'''

FAST = """\
heartbeat_interval: 0.2
poll_interval: 0.2
orphan_check_interval: 0.5
concurrency: 2
"""

_close_pools = pytest.fixture(autouse=True)(closing_pools)


@pytest.fixture
def producer(config: cogworker.Config) -> cogworker.Client:
    return cogworker.Client(config)


WORKER_TITLE = re.escape(f"cogworker {cogworker.__version__}") + r" \[(\d+) of 2 busy\]"


# -- unit: Swarm with an injected clock, real forks ------------------------------------------


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def crash(child: Child) -> None:
    raise SystemExit(3)


@contextlib.contextmanager
def reaping(swarm: Swarm) -> Iterator[Swarm]:
    """Kill and reap whatever children the test's swarm still has, whatever happened."""
    try:
        yield swarm
    finally:
        for slot in swarm.slots:
            if slot.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(slot.pid, 0)


def step_until(swarm: Swarm, condition: Callable[[], bool]) -> None:
    def stepped() -> bool:
        swarm.step()
        return condition()

    wait_for(stepped)


def test_respawn_delays_double_from_the_second_quick_death_up_to_60s() -> None:
    delays = [respawn_delay(streak) for streak in range(11)]

    assert delays == [0, 0, 1, 2, 4, 8, 16, 32, 60, 60, 60]


def next_crash(swarm: Swarm, clock: Clock) -> float:
    """Let the slot's child crash and be reaped; check the respawn waits exactly its delay.
    Returns that delay."""
    slot = swarm.slots[0]
    crashed = slot.pid
    step_until(swarm, lambda: slot.pid != crashed)
    if slot.pid is not None:  # no delay: forked again in the same round
        return 0.0
    assert slot.respawn_at is not None
    delay = slot.respawn_at - clock()
    clock.now = slot.respawn_at - 0.05
    swarm.step()
    assert slot.pid is None, "respawned before its delay"
    clock.now = slot.respawn_at
    swarm.step()
    assert slot.pid is not None
    return delay


def test_crash_loop_backs_off_and_a_healthy_run_resets_it() -> None:
    """Respawn delays while children keep dying within 30 s, with children that really are
    forked and really exit at once."""
    clock = Clock()
    with reaping(Swarm(1, crash, clock=clock)) as swarm, cogworker_log_records() as records:
        swarm.fork(swarm.slots[0])

        quick = [next_crash(swarm, clock) for _ in range(9)]
        assert quick == [0, 1, 2, 4, 8, 16, 32, 60, 60]

        clock.now += 31  # this child counts as healthy when it dies
        after_healthy = [next_crash(swarm, clock) for _ in range(3)]
        assert after_healthy == [0, 0, 1]

    warnings = [r.getMessage() for r in records if "exited unexpectedly" in r.getMessage()]
    assert len(warnings) == 12
    assert warnings[1].endswith("respawning in 1s")
    assert warnings[8].endswith("respawning in 60s")


def test_unexpected_exit_log_names_the_exit_status() -> None:
    clock = Clock()
    with reaping(Swarm(1, crash, clock=clock)) as swarm, cogworker_log_records() as records:
        swarm.fork(swarm.slots[0])
        next_crash(swarm, clock)

    (warning,) = [r.getMessage() for r in records if "exited unexpectedly" in r.getMessage()]
    assert "(exit status 3)" in warning, warning  # the child's exit status, not the raw wait status


def test_unknown_queued_signal_is_logged_and_ignored() -> None:
    """A signal name the supervisor doesn't know is logged and changes nothing."""

    def never(child: Child) -> None:
        raise AssertionError("nothing may be forked")

    swarm = Swarm(2, never, clock=Clock())
    with cogworker_log_records() as records:
        swarm.handle("bogus")
        swarm.signals.put("reboot")
        swarm.step()

    messages = [r.getMessage() for r in records if r.levelname == "WARNING"]
    assert any("bogus" in message and "ignored" in message for message in messages)
    assert any("reboot" in message for message in messages)
    assert swarm.stopping is False and swarm.kill_at is None
    assert all(slot.pid is None and slot.respawn_at is None for slot in swarm.slots)


def test_a_child_ignoring_term_is_killed_once_after_the_deadline(tmp_path: Path) -> None:
    """TERM, then one KILL at shutdown_timeout + 10 s on the swarm's clock."""
    ready = tmp_path / "ignoring"

    def stubborn(child: Child) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ready.write_text("1")
        time.sleep(60)

    clock = Clock()
    swarm = Swarm(1, stubborn, shutdown_timeout=2, clock=clock)
    slot = swarm.slots[0]
    with reaping(swarm), cogworker_log_records() as records:
        swarm.fork(slot)
        child = slot.pid
        assert child is not None
        wait_for(ready.exists)

        swarm.handle("stop")
        assert swarm.kill_at == 1012.0
        clock.now = 1011.9
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # TERM was sent; the child stays
            swarm.step()
            assert slot.pid == child and is_running(child)
            time.sleep(0.02)

        clock.now = 1012.0
        step_until(swarm, lambda: slot.pid is None)
        for _ in range(5):
            swarm.step()

    kills = [r.getMessage() for r in records if "killing" in r.getMessage()]
    assert kills == [f"swarm: child pid={child} didn't stop within 12s, killing"]
    assert not is_running(child)


# -- end to end: python -m cogworker swarm ----------------------------------------------------


@pytest.fixture
def start_swarm(tmp_path: Path, redis_url: str, r: redis.Redis) -> Iterator[StartSwarm]:
    with swarms(tmp_path, redis_url, JOBS_MODULE, FAST) as start:
        yield start


def busy_in_title(pid: int) -> int | None:
    match = re.fullmatch(WORKER_TITLE, process_title(pid))
    return int(match.group(1)) if match else None


def test_children_register_distinct_identities_and_show_titles(
    start_swarm: StartSwarm, r: redis.Redis, producer: cogworker.Client
) -> None:
    """Each child resets its identity after the fork."""
    supervisor = start_swarm(count=2)

    identities = ready(r, supervisor)

    assert len(set(identities.values())) == 2
    for pid, identity in identities.items():
        assert identity.split(":")[-2] == str(pid)
    assert set(identities.values()) <= set(r.smembers(keys.PROCESSES))
    assert process_title(supervisor.pid) == f"cogworker {cogworker.__version__} swarm [2 children]"
    for pid in identities:
        wait_for(lambda pid=pid: busy_in_title(pid) == 0)  # type: ignore[misc]

    producer.push({"class": "Swarm::Gate", "args": ["title"]})
    runner = int(wait_for(lambda: r.lindex("test:pids:title", 0)))
    assert runner in identities
    wait_for(lambda: busy_in_title(runner) == 1)
    r.set("test:gate:title", 1)
    wait_for(lambda: busy_in_title(runner) == 0)


def test_a_killed_child_is_respawned_and_a_quick_second_death_waits(
    start_swarm: StartSwarm, r: redis.Redis
) -> None:
    supervisor = start_swarm(count=2)
    identities = ready(r, supervisor)
    victim, survivor = sorted(identities)

    os.kill(victim, signal.SIGKILL)

    line = supervisor.wait_output(
        rf"swarm: child pid={victim} slot=(\d) exited unexpectedly .*respawning in 0s"
    )
    slot = line.group(1)
    replaced = ready(r, supervisor)
    assert survivor in replaced and replaced[survivor] == identities[survivor]
    (replacement,) = set(replaced) - {survivor}
    assert replacement != victim
    assert replaced[replacement] not in identities.values()

    killed_at = time.monotonic()
    os.kill(replacement, signal.SIGKILL)  # dies again within 30 s of its start

    supervisor.wait_output(
        rf"swarm: child pid={replacement} slot={slot} exited unexpectedly .*respawning in 1s"
    )
    again = ready(r, supervisor)
    assert time.monotonic() - killed_at >= respawn_delay(2)  # not forked before its delay
    assert survivor in again and replacement not in again


def test_tstp_quiets_children_and_term_lets_them_drain_then_exits_zero(
    start_swarm: StartSwarm, r: redis.Redis, producer: cogworker.Client
) -> None:
    supervisor = start_swarm(count=2, timeout="10")
    identities = ready(r, supervisor)
    producer.push({"class": "Swarm::Gate", "args": ["drain"]})
    runner = int(wait_for(lambda: r.lindex("test:pids:drain", 0)))

    supervisor.send(signal.SIGTSTP)
    for identity in identities.values():
        wait_for(lambda i=identity: r.hget(keys.process(i), "quiet") == "true")  # type: ignore[misc]

    supervisor.send(signal.SIGTERM)
    for pid in identities:
        supervisor.wait_output(rf"pid={pid} tid=\S+ INFO: Received stop signal")
    assert is_running(runner)  # still finishing its job
    r.set("test:gate:drain", 1)

    assert supervisor.wait_exit(20) == 0
    assert int(r.get("test:finished:drain") or 0) == 1
    assert r.llen(keys.queue("default")) == 0  # finished, not handed back
    assert not set(identities.values()) & set(r.smembers(keys.PROCESSES))
    output = supervisor.output()
    assert "swarm: all children exited" in output
    assert "exited unexpectedly" not in output
    assert not any(is_running(pid) for pid in identities)


def test_a_job_stuck_past_the_timeout_goes_back_and_its_child_still_exits(
    start_swarm: StartSwarm, r: redis.Redis, producer: cogworker.Client
) -> None:
    """The child ends right after its launcher returns, whatever its job thread does: on its
    own, before the supervisor's KILL deadline (which would log a "killing" line)."""
    shutdown_timeout = 1
    supervisor = start_swarm(count=2, timeout=str(shutdown_timeout))
    identities = ready(r, supervisor)
    jid = producer.push({"class": "Swarm::Gate", "args": ["stuck"]})
    runner = int(wait_for(lambda: r.lindex("test:pids:stuck", 0)))

    supervisor.send(signal.SIGTERM)

    assert supervisor.wait_exit(shutdown_timeout + KILL_GRACE + 20) == 0
    assert "killing" not in supervisor.output()
    assert re.search(rf"swarm: child pid={runner} slot=\d exited$", supervisor.output(), re.M)
    (queued,) = r.lrange(keys.queue("default"), 0, -1)  # handed back, once
    assert f'"jid":"{jid}"' in queued
    assert r.get("test:finished:stuck") is None
    assert r.llen(keys.inprogress(identities[runner])) == 0


def test_a_bad_child_count_is_a_one_line_error(
    tmp_path: Path, redis_url: str, r: redis.Redis
) -> None:
    (tmp_path / "swarm_jobs.py").write_text(JOBS_MODULE)
    result = subprocess.run(
        [sys.executable, "-m", "cogworker", "swarm", "-r", "swarm_jobs"],
        cwd=tmp_path,
        env=cogworker_env(redis_url, COGWORKER_COUNT="two"),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert result.returncode != 0
    assert result.stderr.splitlines() == [
        "cogworker: COGWORKER_COUNT must be a whole number, got 'two'"
    ]
    assert r.smembers(keys.PROCESSES) == set()


def test_a_child_ignoring_term_is_killed_after_shutdown_timeout_plus_10s(
    start_swarm: StartSwarm, r: redis.Redis, producer: cogworker.Client
) -> None:
    """End to end, with -t 1: the child that drains exits on its own; the straggler gets
    KILL once, shutdown_timeout + 10 s after the supervisor received TERM."""
    shutdown_timeout = 1
    kill_after = shutdown_timeout + KILL_GRACE
    supervisor = start_swarm(count=2, timeout=str(shutdown_timeout))
    identities = ready(r, supervisor)
    producer.push({"class": "Swarm::IgnoreTerm", "args": ["it"]})
    straggler = int(wait_for(lambda: r.get("test:ignoring:it")))
    (other,) = set(identities) - {straggler}

    started = time.monotonic()
    supervisor.send(signal.SIGTERM)

    wait_for(lambda: not is_running(other), timeout=kill_after)
    assert is_running(straggler)  # the drained child went first: TERM alone won't end it
    wait_for(lambda: not is_running(straggler), timeout=kill_after + 20)
    # the supervisor's deadline is counted from when it got TERM, after `started`
    assert time.monotonic() - started >= kill_after
    assert supervisor.wait_exit(20) == 0
    kills = re.findall(r"didn't stop within .*killing", supervisor.output())
    assert kills == [f"didn't stop within {kill_after:.0f}s, killing"]
    assert f"swarm: child pid={straggler} didn't stop within" in supervisor.output()


def test_phased_restart_replaces_children_one_at_a_time(
    start_swarm: StartSwarm, r: redis.Redis
) -> None:
    """With PHASED_RESTART=true, USR2 never leaves the swarm without a child."""
    supervisor = start_swarm(count=2, phased=True)
    originals = ready(r, supervisor)
    samples: list[set[int]] = []

    def replaced() -> bool:
        children = supervisor.children()
        samples.append(children)
        return (
            len(children) == 2
            and not children & set(originals)
            and all(registered_identity(r, pid) for pid in children)
        )

    supervisor.send(signal.SIGUSR2)
    wait_for(replaced, timeout=40)

    assert min(len(sample) for sample in samples) >= 1
    first_new = next(sample for sample in samples if sample - set(originals))
    assert first_new & set(originals), "the second child was stopped before the first came back"
    output = supervisor.output()
    assert "swarm: restart signal received, phased=True" in output
    for pid in originals:
        assert f"swarm: phased restart stopping child pid={pid}" in output
        assert f"swarm: phased restart: child pid={pid} exited, respawning" in output
    assert not set(originals.values()) & set(r.smembers(keys.PROCESSES))  # clean stops
    assert "exited unexpectedly" not in output


def test_restart_without_phasing_replaces_every_child(
    start_swarm: StartSwarm, r: redis.Redis
) -> None:
    supervisor = start_swarm(count=2)
    originals = ready(r, supervisor)

    supervisor.send(signal.SIGUSR2)

    wait_for(lambda: not supervisor.children() & set(originals), timeout=20)
    assert not set(ready(r, supervisor)) & set(originals)
    output = supervisor.output()
    assert "swarm: restart signal received, phased=False" in output
    assert "exited unexpectedly" not in output


def test_a_child_over_max_memory_is_stopped_gracefully_and_replaced(
    start_swarm: StartSwarm, r: redis.Redis, producer: cogworker.Client
) -> None:
    supervisor = start_swarm(count=2, timeout="10", extra_config="max_memory: 60\n")
    identities = ready(r, supervisor)
    producer.push({"class": "Swarm::Hog", "args": ["hog", 100]})
    hog = int(wait_for(lambda: r.lindex("test:pids:hog", 0)))
    assert hog in identities

    line = supervisor.wait_output(
        rf"swarm: child pid={hog} slot=\d uses (\d+) MB, over max_memory 60 MB", timeout=20
    )
    assert int(line.group(1)) > 60
    supervisor.wait_output(rf"pid={hog} tid=\S+ INFO: Received stop signal")
    assert is_running(hog)  # draining: its job may finish
    r.set("test:gate:hog", 1)

    wait_for(lambda: not is_running(hog), timeout=15)
    after = ready(r, supervisor)
    assert hog not in after and len(after) == 2
    assert int(r.get("test:runs:hog") or 0) == 1  # finished in time: not handed back
    assert int(r.get("test:finished:hog") or 0) == 1
    assert identities[hog] not in r.smembers(keys.PROCESSES)  # a clean stop
    assert "exited unexpectedly" not in supervisor.output()
    wait_for(lambda: all(listening(r, identity) for identity in after.values()))
