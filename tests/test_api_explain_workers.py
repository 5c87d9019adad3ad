"""``api.explain`` against real worker subprocesses: a running job (process, thread, since),
queues nobody reads, quiet and busy readers, a process killed mid-job (orphaned with its
recovery time, or lost with basic fetch), and finished jobs known by status and history.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from api_support import client, producer
from conftest import wait_for
from runtime_support import (
    Worker,
    closing_pools,
    cogworker_env,
    listening,
    redis_time,
    started_workers,
)

import cogworker
from cogworker import api, keys
from cogworker.api import Place, Why

_fixtures = (client, producer)  # from api_support, named here for pytest

JOBS_MODULE = '''
"""Jobs for the explain tests; status and history are on."""
import time

import cogworker

cogworker.status.enable(cogworker.default_config())
cogworker.history.enable(cogworker.default_config())


class GateJob(cogworker.Job):
    """Runs until the test sets test:gate:<marker> (at most 30 s)."""

    name = "Explain::Gate"

    def perform(self, marker):
        client = cogworker.default_config().redis()
        client.incr(f"test:runs:{marker}")
        deadline = time.monotonic() + 30
        while not client.exists(f"test:gate:{marker}") and time.monotonic() < deadline:
            time.sleep(0.02)


class CountJob(cogworker.Job):
    name = "Explain::Count"

    def perform(self, marker):
        cogworker.default_config().redis().incr(f"test:runs:{marker}")


class FailJob(cogworker.Job, retry=3):
    name = "Explain::Fail"

    def perform(self, marker):
        raise RuntimeError(f"failing on purpose: {marker}")
'''

BASE_CONFIG = "heartbeat_interval: 0.2\npoll_interval: 0.2\nshutdown_timeout: 2\n"

StartWorker = Callable[..., Worker]

_close_pools = pytest.fixture(autouse=True)(closing_pools)


@pytest.fixture
def start_worker(tmp_path: Path, redis_url: str, r: redis.Redis) -> Iterator[StartWorker]:
    """``start_worker(*flags, config="extra: yaml")``: a worker reading the given queues."""
    (tmp_path / "explain_jobs.py").write_text(JOBS_MODULE)
    with started_workers(tmp_path) as workers:

        def start(*flags: str, config: str = "") -> Worker:
            path = tmp_path / f"worker-{len(workers.started)}.yml"
            path.write_text(BASE_CONFIG + config)
            args = ["run", "-r", "explain_jobs", "-C", path.name, *flags]
            return workers.start(args, cogworker_env(redis_url))

        yield start


def reason(found: api.Explanation, why: Why) -> api.Reason:
    (match,) = [item for item in found.reasons if item.why is why]
    return match


def runs(r: redis.Redis, marker: str) -> int:
    return int(r.get(f"test:runs:{marker}") or 0)


def settled(client: redis.Redis, jid: str, place: Place, state: str) -> api.Explanation:
    """The explanation once the job is in ``place`` with nothing else of it pending: its
    in-progress copy acknowledged, its status ``state`` and its run recorded. (Status and
    history writes land on their own, and a failure is filed before the acknowledgement.)"""

    def ready() -> api.Explanation | None:
        found = api.explain(client, jid)
        at_rest = all(location.place is place for location in found.locations)
        current = (found.status or {}).get("status") == state
        return found if found.place is place and at_rest and current and found.runs else None

    return wait_for(ready, timeout=20)


def test_a_running_job_names_its_process_thread_and_start(
    r: redis.Redis, client: redis.Redis, producer: cogworker.Client, start_worker: StartWorker
) -> None:
    worker = start_worker("-c", "2")
    identity = worker.identity(r)
    jid = producer.push({"class": "Explain::Gate", "args": ["run"]})
    assert jid is not None
    wait_for(lambda: runs(r, "run") == 1, timeout=20)
    (work,) = wait_for(lambda: list(api.WorkSet(client)))
    wait_for(lambda: r.hget(keys.status(jid), "status") == "working")  # written on its own

    found = api.explain(client, jid)

    assert found.place is Place.RUNNING
    (location,) = found.locations
    assert (location.identity, location.thread_id) == (identity, work.thread_id)
    assert location.process_alive is True and location.queue == "default"
    assert location.at is not None and abs(location.at - redis_time(r)) <= 5
    assert found.reasons == []  # not waiting for anything
    assert found.status is not None and found.status["status"] == "working"
    r.set("test:gate:run", 1)


def test_a_queue_no_live_process_reads_names_the_queues_they_read(
    r: redis.Redis, client: redis.Redis, producer: cogworker.Client, start_worker: StartWorker
) -> None:
    worker = start_worker("-q", "low", "-q", "critical,2")
    worker.identity(r)
    jid = producer.push({"class": "Explain::Count", "args": ["x"], "queue": "default"})
    assert jid is not None

    found = api.explain(client, jid)

    no_reader = reason(found, Why.NO_READER)
    assert no_reader.queues == ("critical", "low")
    assert "no live process reads queue default (they read critical, low)" in no_reader.text
    assert runs(r, "x") == 0


def test_every_reader_quiet(
    r: redis.Redis, client: redis.Redis, producer: cogworker.Client, start_worker: StartWorker
) -> None:
    worker = start_worker()
    identity = worker.identity(r)
    wait_for(lambda: listening(r, identity), timeout=20)
    (process,) = api.ProcessSet(client)
    assert process.quiet_down() == 1
    wait_for(lambda: all(p.quiet for p in api.ProcessSet(client)))
    jid = producer.push({"class": "Explain::Count", "args": ["q"]})
    assert jid is not None

    found = api.explain(client, jid)

    quiet = reason(found, Why.READERS_QUIET)
    assert quiet.identities == (identity,) and quiet.queue == "default"
    assert Why.NO_READER not in [item.why for item in found.reasons]


def test_every_reader_busy_reports_the_queue_latency(
    r: redis.Redis, client: redis.Redis, producer: cogworker.Client, start_worker: StartWorker
) -> None:
    worker = start_worker("-c", "1")
    identity = worker.identity(r)
    producer.push({"class": "Explain::Gate", "args": ["busy"]})
    wait_for(lambda: runs(r, "busy") == 1, timeout=20)
    wait_for(lambda: next(iter(api.ProcessSet(client))).busy == 1)
    waiting = producer.push({"class": "Explain::Count", "args": ["behind"]})
    assert waiting is not None

    found = api.explain(client, waiting)

    assert found.place is Place.QUEUED and found.locations[0].position == 0
    busy = reason(found, Why.READERS_BUSY)
    assert busy.identities == (identity,)
    assert busy.latency is not None and busy.latency >= 0
    r.set("test:gate:busy", 1)
    wait_for(lambda: runs(r, "behind") == 1, timeout=20)


def killed_mid_job(
    r: redis.Redis, producer: cogworker.Client, worker: Worker, marker: str
) -> tuple[str, str]:
    """Start a gate job on ``worker``, SIGKILL it, and let its presence expire (as Redis does
    60 s after the last beat); returns (jid, identity)."""
    identity = worker.identity(r)
    jid = producer.push({"class": "Explain::Gate", "args": [marker]})
    assert jid is not None
    wait_for(lambda: runs(r, marker) == 1, timeout=20)
    wait_for(lambda: r.hget(keys.status(jid), "status") == "working")  # written on its own
    # and its workers entry, which a job handed over by the fetcher gets a round trip later
    wait_for(lambda: r.hlen(keys.workers(identity)) == 1)
    worker.kill()
    r.delete(keys.process(identity))
    return jid, identity


def test_a_job_left_by_a_killed_process_is_orphaned_until_recovery(
    r: redis.Redis, client: redis.Redis, producer: cogworker.Client, start_worker: StartWorker
) -> None:
    jid, identity = killed_mid_job(r, producer, start_worker("-c", "1"), "orphan")
    last_beat = int(r.hget(keys.LAST_BEAT, identity) or 0)

    found = api.explain(client, jid, orphan_threshold=120)

    assert found.place is Place.ORPHANED
    location = found.locations[0]
    assert (location.identity, location.process_alive) == (identity, False)
    assert location.last_beat == last_beat and location.recover_at == last_beat + 120
    assert location.thread_id is not None  # its workers entry outlives it for a while
    recovery = reason(found, Why.AWAITING_RECOVERY)
    assert recovery.at == last_beat + 120
    assert "no live process runs recovery" in recovery.text

    # a live worker with a short threshold recovers it, and the run finishes
    r.set("test:gate:orphan", 1)
    start_worker(config="orphan_threshold: 1\norphan_check_interval: 0.5\n")
    wait_for(lambda: runs(r, "orphan") == 2, timeout=30)

    done = settled(client, jid, Place.FINISHED, "complete")
    assert done.locations == []
    assert done.history_kept and done.runs[0].status == "success"


def test_a_job_running_at_a_killed_basic_fetch_process_goes_missing(
    r: redis.Redis, client: redis.Redis, producer: cogworker.Client, start_worker: StartWorker
) -> None:
    """Basic fetch keeps no in-progress copy: once the dead process's entries expire, only
    the job's status still knows it, and the explanation says it is missing."""
    worker = start_worker(config="fetch: basic\n")
    jid, identity = killed_mid_job(r, producer, worker, "lost")
    r.delete(keys.workers(identity))  # expires with the presence, 60 s after the last beat

    found = api.explain(client, jid)

    assert found.place is Place.MISSING and found.locations == []
    missing = reason(found, Why.MISSING)
    assert "its status says 'working'" in missing.text
    assert "basic fetch" in missing.text


def test_a_failed_job_waits_for_its_retry_with_the_attempt_count(
    r: redis.Redis, client: redis.Redis, producer: cogworker.Client, start_worker: StartWorker
) -> None:
    start_worker().identity(r)
    jid = producer.push({"class": "Explain::Fail", "args": ["f"], "retry": 3})
    assert jid is not None

    found = settled(client, jid, Place.RETRY, "retrying")

    (location,) = found.locations
    assert (location.retry, location.max_retries) == (1, 3)
    assert location.error == "RuntimeError: failing on purpose: f"
    assert location.at is not None and location.at > time.time()
    assert reason(found, Why.NOT_DUE).at == location.at
    assert [run.status for run in found.runs] == ["failed"]


def test_a_finished_job_is_known_by_status_and_history_only(
    r: redis.Redis, client: redis.Redis, producer: cogworker.Client, start_worker: StartWorker
) -> None:
    start_worker().identity(r)
    jid = producer.push({"class": "Explain::Count", "args": ["done"]})
    assert jid is not None
    wait_for(lambda: runs(r, "done") == 1, timeout=20)

    found = settled(client, jid, Place.FINISHED, "complete")

    assert found.locations == []
    assert found.runs[0].status == "success" and found.runs[0].queue == "default"
    r.delete(keys.status(jid), keys.HISTORY_ALL)  # as if both were off
    assert api.explain(client, jid).place is Place.UNKNOWN
