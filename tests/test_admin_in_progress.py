"""Jobs in progress and orphaned in ``api.stats`` and ``cogworker stats``, and a process that
stopped beating shown silent, not busy.

The API tests plant the lists; the end-to-end ones kill -9 a real worker running a job and
read the real commands while its job waits for recovery, then while another worker runs it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from admin_support import cli, ok
from conftest import wait_for
from runtime_support import (
    HOLD_JOB_MODULE,
    StartWorker,
    Worker,
    closing_pools,
    cogworker_env,
    redis_time,
    started_workers,
)

import cogworker
from cogworker import api, keys
from cogworker.api import waiting

JOBS_MODULE = HOLD_JOB_MODULE

_close_pools = pytest.fixture(autouse=True)(closing_pools)


def plant(r: redis.Redis, identity: str, jobs: int, *, alive: bool, beat_age: int | None) -> None:
    for index in range(jobs):
        r.lpush(keys.inprogress(identity), json.dumps({"jid": f"{identity}-{index}"}))
    r.sadd(keys.INPROGRESS_IDENTITIES, identity)
    if beat_age is not None:
        r.hset(keys.LAST_BEAT, identity, redis_time(r) - beat_age)
    if alive:
        r.hset(keys.process(identity), mapping={"info": "{}", "busy": "1", "quiet": "false"})


def test_in_progress_counts_live_lists_and_dates_the_recovery_of_orphaned_ones(
    r: redis.Redis,
) -> None:
    plant(r, "live:1:aaaaaaaaaaaa", 2, alive=True, beat_age=1)
    plant(r, "gone:2:bbbbbbbbbbbb", 3, alive=False, beat_age=100)
    plant(r, "gone:3:cccccccccccc", 1, alive=False, beat_age=None)
    plant(r, "gone:4:dddddddddddd", 0, alive=False, beat_age=100)  # nothing left: not listed

    work = api.in_progress(r, orphan_threshold=300)

    assert work.running == 2 and work.orphaned == 4
    first, second = work.gone
    assert (first.identity, first.jobs) == ("gone:2:bbbbbbbbbbbb", 3)
    assert first.last_beat is not None and first.recover_from == first.last_beat + 300
    assert (second.identity, second.jobs, second.recover_from) == ("gone:3:cccccccccccc", 1, None)
    figures = api.stats(r, orphan_threshold=60).to_dict()
    assert (figures["in_progress"], figures["orphaned"]) == (2, 4)
    assert figures["gone_processes"][0]["recover_from"] == first.last_beat + 60


@pytest.fixture
def start_worker(tmp_path: Path, redis_url: str) -> Iterator[StartWorker]:
    (tmp_path / "progress_jobs.py").write_text(JOBS_MODULE)
    with started_workers(tmp_path) as workers:

        def start(config: str) -> Worker:
            path = tmp_path / f"worker-{len(workers.started)}.yml"
            path.write_text(config)
            args = ["run", "-r", "progress_jobs", "-C", str(path)]
            return workers.start(args, cogworker_env(redis_url))

        yield start


def stats_line(redis_url: str) -> str:
    return ok(cli(redis_url, "stats", "--orphan-threshold", "300")).splitlines()[0]


def test_a_killed_workers_job_is_silent_then_orphaned_then_in_progress_again(
    r: redis.Redis, redis_url: str, start_worker: StartWorker, config: cogworker.Config
) -> None:
    # silent 2.5 s after its last beat (three beats, + 1 s of stamping), gone after 8 s
    victim = start_worker("heartbeat_interval: 0.5\npresence_ttl: 8\norphan_threshold: 300\n")
    identity = victim.identity(r)
    cogworker.Client(config).push({"class": "Test::Hold", "args": ["p"]})
    wait_for(lambda: r.llen("test:starts:p") == 1)
    assert "in progress 1   orphaned 0" in stats_line(redis_url)

    victim.kill()

    # its presence lives on, but it no longer beats: silent, and no busy thread counted
    def listed() -> dict[str, object]:
        (entry,) = json.loads(ok(cli(redis_url, "processes", "--json")))
        return dict(entry)

    wait_for(lambda: listed()["silent"] is True, timeout=10)
    row = ok(cli(redis_url, "processes")).splitlines()[1].split()
    assert row[:3] == [identity, "0/10", "silent"]
    assert api.ProcessSet(r).total_busy() == 0

    # presence expired: the job is orphaned, recovered only after the threshold
    wait_for(lambda: not r.exists(keys.process(identity)), timeout=20)
    out = ok(cli(redis_url, "stats", "--orphan-threshold", "300")).splitlines()
    assert "in progress 0   orphaned 1" in out[0]
    last_beat = int(r.hget(keys.LAST_BEAT, identity))
    assert out[1] == (
        f"  1 job(s) left by {identity} (gone, last beat {waiting.when(last_beat)}): back on "
        f"their queues at the first orphan check after {waiting.when(last_beat + 300)}, with "
        "orphan_threshold 300s"
    )

    # a worker with a short threshold recovers it and runs it
    start_worker("heartbeat_interval: 0.5\norphan_threshold: 1\norphan_check_interval: 0.5\n")
    wait_for(lambda: r.llen("test:starts:p") == 2, timeout=20)
    assert "in progress 1   orphaned 0" in stats_line(redis_url)
    r.set("test:gate:p", 1)
    wait_for(lambda: "in progress 0   orphaned 0" in stats_line(redis_url))
