"""A swarm supervisor that reaps a child requeues that child's running jobs at once.

Real ``python -m cogworker swarm`` processes, real kill -9. With the default presence TTL
(60 s) and orphan threshold (300 s) no orphan check could give a job back within the waits
below, so a job that runs again within them was given back by the supervisor.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    HOLD_JOB_MODULE,
    closing_pools,
    cogworker_log_records,
    private_config,
    release,
)
from swarm_support import StartSwarm, ready, swarms

import cogworker
from cogworker import keys, redis_errors
from cogworker.local.server import RedisServer
from cogworker.worker.identity import new_identity
from cogworker.worker.recovery.reaped import RETRY_INTERVAL, ReapedChildren

pytestmark = pytest.mark.slow  # the full run only: real swarms of worker processes

JOBS_MODULE = HOLD_JOB_MODULE + '''

class KillerJob(cogworker.Job):
    """Kills the process that runs it, every time."""

    name = "Recovery::Killer"

    def perform(self, marker):
        cogworker.default_config().redis().rpush(f"test:starts:{marker}", os.getpid())
        os.kill(os.getpid(), 9)  # SIGKILL
'''

# the defaults that matter here: presence TTL 60 s, orphan threshold 300 s
BASE_CONFIG = """\
heartbeat_interval: 0.5
poll_interval: 0.5
concurrency: 2
"""
ORPHAN_WAIT = 60.0  # the presence TTL: no orphan check can requeue a job sooner

_close_pools = pytest.fixture(autouse=True)(closing_pools)


@pytest.fixture
def start_swarm(tmp_path: Path, redis_url: str) -> Iterator[StartSwarm]:
    with swarms(tmp_path, redis_url, JOBS_MODULE, BASE_CONFIG) as start:
        yield start


@pytest.fixture
def producer(config: cogworker.Config) -> cogworker.Client:
    return cogworker.Client(config)


def starts(r: redis.Redis, marker: str) -> list[str]:
    return [str(entry) for entry in r.lrange(f"test:starts:{marker}", 0, -1)]


def test_a_killed_childs_running_job_runs_again_at_once(
    start_swarm: StartSwarm, r: redis.Redis, producer: cogworker.Client
) -> None:
    supervisor = start_swarm(count=2)
    identities = ready(r, supervisor)
    jid = producer.push({"class": "Test::Hold", "args": ["kill"]})
    first = wait_for(lambda: starts(r, "kill")[:1])[0]
    victim = int(first.split()[0])
    identity = identities[victim]
    assert r.llen(keys.inprogress(identity)) == 1

    killed_at = time.time()
    os.kill(victim, signal.SIGKILL)

    wait_for(lambda: len(starts(r, "kill")) == 2, timeout=ORPHAN_WAIT / 2)
    pid, started = starts(r, "kill")[1].split()
    assert int(pid) != victim
    print(f"job started again {float(started) - killed_at:.3f} s after the kill")
    supervisor.wait_output(
        rf"swarm: requeued 1 job\(s\) left running by child pid={victim} identity={identity}"
    )
    # the recovery counted, and the dead child is gone from every registry
    assert r.get(keys.orphanings(jid)) == "1"
    assert identity not in r.smembers(keys.PROCESSES)
    assert identity not in r.smembers(keys.INPROGRESS_IDENTITIES)
    assert not r.exists(keys.process(identity), keys.workers(identity))
    assert r.hget(keys.LAST_BEAT, identity) is None
    assert r.llen(keys.inprogress(identity)) == 0

    r.set("test:gate:kill", 1)
    wait_for(lambda: r.get("test:finished:kill") == "1")
    assert r.zcard(keys.DEAD) == 0 and r.zcard(keys.RETRY) == 0


def test_a_job_that_kills_every_child_goes_to_dead_after_max_orphanings(
    start_swarm: StartSwarm, r: redis.Redis, producer: cogworker.Client
) -> None:
    supervisor = start_swarm(count=2, extra_config="max_orphanings: 2\n")
    ready(r, supervisor)
    jid = producer.push({"class": "Recovery::Killer", "args": ["loop"]})

    # three deaths (two recoveries, then parked): respawns wait 0, 1 and 2 s between them
    entry = wait_for(lambda: r.zrange(keys.DEAD, 0, -1), timeout=ORPHAN_WAIT / 2)
    (dead,) = [json.loads(raw) for raw in entry]
    assert dead["jid"] == jid and dead["error_class"] == "Cogworker::ProcessDied"
    assert len(starts(r, "loop")) == 3
    assert r.llen(keys.QUEUE_PREFIX + "default") == 0
    assert r.llen(keys.REPEAT_ORPHANS) == 0
    supervisor.wait_output(
        r"swarm: 1 job\(s\) left running by child pid=\d+ identity=\S+ were orphaned more than 2 "
        r"times \(max_orphanings\): they go to dead"
    )
    assert len(re.findall(r"swarm: requeued 1 job\(s\)", supervisor.output())) == 2
    ready(r, supervisor)  # the children are up again and stay up
    assert len(starts(r, "loop")) == 3


def test_a_reap_while_redis_is_unreachable_is_recovered_once_it_is_back(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    """The supervisor reaps a child during an outage: the recovery waits, one line says so,
    and the list goes back to its queue once Redis answers (tried again every second)."""
    server = redis_server_factory()
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    cfg = private_config(server.url)
    child = new_identity()
    job = {"class": "Test::Hold", "args": ["outage"], "queue": "default", "jid": "a" * 24}
    raw = json.dumps(job)
    server.stop()
    reaped = ReapedChildren(cfg)
    try:
        with cogworker_log_records() as records:
            reaped.exited(child, 4242)
            assert redis_errors.reporter.in_outage("Swarm recovery")
            server.start()  # same port, no persistence: the child's list is planted now
            admin.lpush(keys.inprogress(child), raw)
            admin.sadd(keys.INPROGRESS_IDENTITIES, child)

            def recovered() -> bool:
                reaped.retry()  # what the supervisor does every round
                return admin.llen(keys.queue("default")) == 1

            wait_for(recovered, timeout=RETRY_INTERVAL + 10)
        assert admin.lrange(keys.queue("default"), 0, -1) == [raw]
        assert admin.llen(keys.inprogress(child)) == 0
        assert not redis_errors.reporter.in_outage("Swarm recovery")
        outage = [r.getMessage() for r in records if "Swarm recovery" in r.getMessage()]
        assert outage and "Redis unavailable" in outage[0]
    finally:
        release(cfg)
        admin.close()
