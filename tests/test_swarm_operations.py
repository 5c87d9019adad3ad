"""A swarm operated as one: listed as its supervisor with its children, quieted, resumed and
stopped remotely by the supervisor's identity; a child stopped alone is replaced.

Real ``python -m cogworker swarm`` processes and the real ``cogworker processes`` command.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from admin_support import cli, ok
from conftest import wait_for
from runtime_support import closing_pools
from swarm_support import StartSwarm, Supervisor, ready, swarms

from cogworker import keys
from cogworker.connection import redacted_url

pytestmark = pytest.mark.slow  # the full run only: real swarms of worker processes

JOBS_MODULE = '''
"""Jobs for the swarm operation tests (none run: the swarm only has to be up)."""
import cogworker


class NothingJob(cogworker.Job):
    name = "Operations::Nothing"

    def perform(self):
        pass
'''

BASE_CONFIG = """\
heartbeat_interval: 0.2
poll_interval: 0.2
concurrency: 2
"""

_close_pools = pytest.fixture(autouse=True)(closing_pools)


@pytest.fixture
def start_swarm(tmp_path: Path, redis_url: str) -> Iterator[StartSwarm]:
    with swarms(tmp_path, redis_url, JOBS_MODULE, BASE_CONFIG) as start:
        yield start


def supervisor_identity(r: redis.Redis, children: dict[int, str]) -> str:
    """What every child's info says its supervisor is (one identity for all)."""
    infos = [json.loads(str(r.hget(keys.process(child), "info"))) for child in children.values()]
    (identity,) = {info["supervisor"] for info in infos}
    return str(identity)


def swarm_up(start_swarm: StartSwarm, r: redis.Redis) -> tuple[Supervisor, dict[int, str], str]:
    """A swarm of two, with its children registered: (supervisor, pid -> identity of each
    child, the supervisor's identity)."""
    supervisor = start_swarm(count=2)
    children = ready(r, supervisor)
    return supervisor, children, supervisor_identity(r, children)


def quiet(r: redis.Redis, identity: str) -> str | None:
    value = r.hget(keys.process(identity), "quiet")
    return None if value is None else str(value)


def test_a_swarm_is_listed_as_its_supervisor_with_its_children(
    start_swarm: StartSwarm, r: redis.Redis, redis_url: str
) -> None:
    supervisor, children, identity = swarm_up(start_swarm, r)

    # the supervisor is no process of its own: a Ruby dashboard counts the two children
    assert identity.split(":")[-2] == str(supervisor.pid)
    assert r.smembers(keys.PROCESSES) == set(children.values())
    lines = ok(cli(redis_url, "processes")).splitlines()
    assert lines[1].split()[:5] == [identity, "(swarm,", "2", "children)", "0/4"]
    assert sorted(line.split()[0] for line in lines[2:]) == sorted(children.values())
    assert all(line.startswith("  ") for line in lines[2:])
    listed = json.loads(ok(cli(redis_url, "processes", "--json")))
    assert {entry["supervisor"] for entry in listed} == {identity}


def test_quiet_resume_and_stop_aimed_at_the_supervisor_reach_the_whole_swarm(
    start_swarm: StartSwarm, r: redis.Redis, redis_url: str
) -> None:
    supervisor, children, identity = swarm_up(start_swarm, r)
    on = f"on {redacted_url(redis_url)}"

    out = ok(cli(redis_url, "processes", "quiet", identity)).splitlines()
    assert sorted(out) == sorted(f"quiet -> {child} {on}" for child in children.values())
    for child in children.values():
        wait_for(lambda c=child: quiet(r, c) == "true")  # type: ignore[misc]

    ok(cli(redis_url, "processes", "resume", identity))
    for child in children.values():
        wait_for(lambda c=child: quiet(r, c) == "false")  # type: ignore[misc]

    ok(cli(redis_url, "processes", "stop", identity))
    assert supervisor.wait_exit(timeout=30) == 0
    output = supervisor.output()
    assert "exited unexpectedly" not in output
    assert len(re.findall(r"swarm: started child", output)) == 2  # nothing respawned
    assert "Received remote stop of the swarm" in output
    wait_for(lambda: r.scard(keys.PROCESSES) == 0)


def test_stop_all_stops_a_swarm_without_respawning_it(
    start_swarm: StartSwarm, r: redis.Redis, redis_url: str
) -> None:
    supervisor = start_swarm(count=2)
    ready(r, supervisor)

    ok(cli(redis_url, "processes", "stop", "--all"))

    assert supervisor.wait_exit(timeout=30) == 0
    assert "exited unexpectedly" not in supervisor.output()
    assert len(re.findall(r"swarm: started child", supervisor.output())) == 2


def test_a_child_stopped_alone_is_replaced_and_the_command_says_so(
    start_swarm: StartSwarm, r: redis.Redis, redis_url: str
) -> None:
    supervisor, children, identity = swarm_up(start_swarm, r)
    victim, survivor = sorted(children)

    out = ok(cli(redis_url, "processes", "stop", children[victim])).strip()

    assert out.startswith(f"stop -> {children[victim]} on ")
    assert f"its swarm supervisor {identity} forks a replacement" in out
    supervisor.wait_output(
        rf"swarm: child pid={victim} slot=\d stopped \(exit status 0\) after [\d.]+s: replacing it"
    )
    replaced = ready(r, supervisor)
    assert survivor in replaced and victim not in replaced
    assert supervisor_identity(r, replaced) == identity
    assert "exited unexpectedly" not in supervisor.output()
