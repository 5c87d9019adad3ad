"""Job status and run history, with the History tab's query API.

Status and the history middleware are exercised in a real ``python -m cogworker`` worker
whose app module enables them; ``history.record``'s trimming, ``daily_counts`` and the
History tab's ``query`` are checked against entries the test wrote itself.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    AclServer,
    closing_pools,
    cogworker_env,
    kill_session,
    registered_identity,
    release,
    spawn_cogworker,
)

import cogworker
from cogworker import api, history, keys, status, wire
from cogworker.history import index as history_index
from cogworker.local.server import RedisServer

JOBS_MODULE = '''
"""Jobs for the status / history tests."""
import time

import cogworker
from cogworker import history, status

config = cogworker.default_config()
status.enable(config, expiration=600)
history.enable(config)


def _redis():
    return config.redis()


def _wait_gate(client, marker):
    deadline = time.monotonic() + 30
    while not client.exists(f"test:gate:{marker}") and time.monotonic() < deadline:
        time.sleep(0.02)


class StepJob(cogworker.Job):
    """Reports progress and custom fields, then waits for test:gate:<marker>."""

    name = "SH::Step"

    def perform(self, marker):
        client = _redis()
        status.at(self.jid, 40, "reading rows")
        status.store(self.jid, rows=12, source="csv", nothing=None)
        client.incr(f"test:runs:{marker}")
        _wait_gate(client, marker)
        client.incr(f"test:finished:{marker}")


class OkJob(cogworker.Job):
    name = "SH::Ok"

    def perform(self, marker, *rest):
        _redis().incr(f"test:runs:{marker}")


class FlakyJob(cogworker.Job, retry=1):
    name = "SH::Flaky"

    def perform(self, marker):
        _redis().incr(f"test:runs:{marker}")
        raise ValueError(f"flaky {marker}")


class FailJob(cogworker.Job, retry=False):
    name = "SH::Fail"

    def perform(self, marker):
        raise RuntimeError(f"broken: {marker}")


class FailsOnceJob(cogworker.Job, retry=2):
    """Stores a field every run; the first run reports progress, then fails."""

    name = "SH::FailsOnce"

    @classmethod
    def retry_in(cls, count, error, job):
        return 0  # retried at the scheduler's next poll

    def perform(self, marker):
        status.store(self.jid, kept="mine")
        if _redis().incr(f"test:runs:{marker}") == 1:
            status.at(self.jid, 30, "first try")
            raise ValueError("the first try fails")


def _down_a(depth):
    if depth <= 0:
        raise RuntimeError("deep")
    _down_b(depth - 1)


def _down_b(depth):
    _down_a(depth - 1)


class DeepJob(cogworker.Job, retry=False):
    """Fails 300 frames down (alternating functions: no collapsed repeats)."""

    name = "SH::Deep"

    def perform(self):
        _down_a(300)
'''

WORKER_CONFIG = """\
heartbeat_interval: 0.2
poll_interval: 0.2
concurrency: 3
shutdown_timeout: 5
"""

_close_pools = pytest.fixture(autouse=True)(closing_pools)

StartWorker = Callable[[str], tuple[subprocess.Popen[bytes], Path]]


@pytest.fixture
def start_worker(tmp_path: Path, r: redis.Redis) -> Iterator[StartWorker]:
    """Start a worker on the given Redis URL (killed with its session after the test)."""
    (tmp_path / "sh_jobs.py").write_text(JOBS_MODULE)
    (tmp_path / "worker.yml").write_text(WORKER_CONFIG)
    started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(url: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"worker-{len(started)}.out"
        process = spawn_cogworker(
            ["run", "-r", "sh_jobs", "-C", "worker.yml"], tmp_path, log, cogworker_env(url)
        )
        started.append((process, log))
        return process, log

    try:
        yield start
    finally:
        for process, log in started:
            kill_session(process)
            print(f"--- worker {process.pid}:\n{log.read_text(errors='replace')}")


def booted(client: redis.Redis, process: subprocess.Popen[bytes]) -> str:
    def registered() -> str | None:
        assert process.poll() is None, "the worker exited early"
        return registered_identity(client, process.pid)

    return str(wait_for(registered, timeout=20))


def counter(client: redis.Redis, name: str) -> int:
    return int(client.get(name) or 0)


def status_of(config: cogworker.Config, jid: str) -> dict[str, str]:
    return status.get(jid, config=config) or {}


# -- status ----------------------------------------------------------------------------------


def test_status_goes_queued_working_complete_with_progress_and_fields(
    config: cogworker.Config, r: redis.Redis, redis_url: str, start_worker: StartWorker
) -> None:
    status.enable(config, expiration=600)
    before = time.time()
    jid = cogworker.Client(config).push({"class": "SH::Step", "args": ["step"]})
    assert jid is not None

    queued = status_of(config, jid)
    assert status.status(jid, config=config) == "queued"
    assert queued["class"] == "SH::Step" and queued["queue"] == "default"
    assert before <= float(queued["update_time"]) <= time.time()
    assert 590 <= r.ttl(keys.status(jid)) <= 600

    start_worker(redis_url)
    # at() then store(): wait for the second write, or the first may be all there is yet
    working = wait_for(lambda: (s := status_of(config, jid)).get("rows") and s, timeout=20)
    assert working["status"] == "working"
    assert working["pct"] == "40"
    assert working["message"] == "reading rows"
    assert working["rows"] == "12" and working["source"] == "csv"
    assert "nothing" not in working  # None values are not written
    assert all(isinstance(value, str) for value in working.values())

    r.set("test:gate:step", 1)
    wait_for(lambda: status.status(jid, config=config) == "complete")
    done = status_of(config, jid)
    assert float(done["update_time"]) >= float(working["update_time"])
    assert done["pct"] == "40"  # earlier fields stay
    assert 590 <= r.ttl(keys.status(jid)) <= 600  # refreshed by the last write


def test_status_retrying_then_failed_for_a_job_with_one_retry(
    config: cogworker.Config, r: redis.Redis, redis_url: str, start_worker: StartWorker
) -> None:
    status.enable(config, expiration=600)
    start_worker(redis_url)
    jid = cogworker.Client(config).push({"class": "SH::Flaky", "args": ["f"], "retry": 1})
    assert jid is not None

    wait_for(lambda: status.status(jid, config=config) == "retrying", timeout=20)
    retrying = status_of(config, jid)
    assert retrying["error_class"] == "ValueError"
    assert retrying["error_message"] == "flaky f"
    (entry,) = wait_for(lambda: api.retry_set(config.redis()).find_jobs(jid))

    assert api.retry_set(config.redis()).retry_now(entry.raw) == "requeued"

    wait_for(lambda: status.status(jid, config=config) == "failed")
    assert status_of(config, jid)["error_class"] == "ValueError"
    wait_for(lambda: api.dead_set(config.redis()).size() == 1)
    assert counter(r, "test:runs:f") == 2


def test_a_job_that_failed_once_then_succeeded_shows_no_old_progress_or_error(
    config: cogworker.Config, r: redis.Redis, redis_url: str, start_worker: StartWorker
) -> None:
    status.enable(config, expiration=600)
    start_worker(redis_url)
    jid = cogworker.Client(config).push({"class": "SH::FailsOnce", "args": ["once"]})
    assert jid is not None

    wait_for(lambda: status.status(jid, config=config) == "complete", timeout=20)
    assert counter(r, "test:runs:once") == 2  # it did fail first
    done = status_of(config, jid)
    for field in status.ATTEMPT_FIELDS:  # pct, message, error_class, error_message
        assert field not in done, field
    assert done["kept"] == "mine"  # what the job stored itself stays
    assert (done["class"], done["queue"]) == ("SH::FailsOnce", "default")
    outcomes = wait_for(lambda: len(runs := history.query(r, jid=jid)[0]) == 2 and runs)
    assert [run["status"] for run in outcomes] == ["success", "failed"]


def test_status_of_a_failing_job_with_retry_false_is_failed(
    config: cogworker.Config, r: redis.Redis
) -> None:
    """``retry: false`` allows no retry, so the first failure ends the job: ``failed``."""
    from cogworker import testing

    class NoRetryJob(cogworker.Job, retry=False):
        name = "SH::NoRetry"

        def perform(self, marker: str) -> None:
            raise RuntimeError(f"broken: {marker}")

    status.enable(config, expiration=600)
    with testing.inline():
        with pytest.raises(RuntimeError, match="broken: no-retry"):
            NoRetryJob.perform_async("no-retry")
        ((jid, _),) = testing.memory.statuses.items()
        fields = status_of(config, jid)
    assert fields["status"] == "failed"
    assert fields["error_class"] == "RuntimeError"
    assert r.keys("status:*") == []  # kept in memory: inline mode never writes to Redis


def test_status_of_an_unknown_job_is_none(config: cogworker.Config) -> None:
    assert status.status("no-such-jid", config=config) is None
    assert status.get("no-such-jid", config=config) is None


def test_a_failing_status_write_never_changes_a_jobs_fate(
    redis_server_factory: Callable[..., RedisServer], start_worker: StartWorker
) -> None:
    """Every ``status:*`` write is refused (NOPERM); jobs are pushed, run and filed as usual."""
    acl = AclServer(redis_server_factory)
    acl.admin.execute_command(
        "ACL", "SETUSER", "worker", "resetkeys", "~cogworker:*", "~periodic:*", "~test:*"
    )
    producer_config = cogworker.Config(redis_url=acl.worker_url)
    status.enable(producer_config)
    admin = acl.admin
    try:
        push = cogworker.Client(producer_config).push
        ok = push({"class": "SH::Ok", "args": ["ok"]})
        step = push({"class": "SH::Step", "args": ["step"]})
        flaky = push({"class": "SH::Flaky", "args": ["flaky"], "retry": 1})
        assert ok and step and flaky
        assert admin.llen(keys.queue("default")) == 3
        admin.set("test:gate:step", 1)

        worker, log = start_worker(acl.worker_url)
        booted(admin, worker)

        wait_for(lambda: counter(admin, keys.STATS_PROCESSED) == 2, timeout=20)
        wait_for(lambda: admin.zcard(keys.RETRY) == 1)
        assert counter(admin, "test:finished:step") == 1
        (raw,) = admin.zrange(keys.RETRY, 0, -1)
        filed = json.loads(raw)
        assert filed["jid"] == flaky
        assert filed["error_class"] == "ValueError"  # the job's own error, not NOPERM
        assert filed["retry_count"] == 1
        assert admin.zcard(keys.DEAD) == 0
        assert admin.llen(keys.queue("default")) == 0
        assert admin.keys("status:*") == []
        # the writes were made, and refused
        assert "Status: NoPermissionError" in log.read_text(errors="replace")
    finally:
        release(producer_config)
        acl.close()


# -- history middleware in a real worker -----------------------------------------------------


def history_entries(r: redis.Redis, which: str = "all") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.zrevrange(history.SETS[which], 0, -1)]


def test_history_records_successes_failures_and_unknown_classes(
    config: cogworker.Config, r: redis.Redis, redis_url: str, start_worker: StartWorker
) -> None:
    status.enable(config)
    push = cogworker.Client(config).push
    ok = push({"class": "SH::Ok", "args": ["h", {"k": [1, 2]}], "queue": "default"})
    fail = push({"class": "SH::Fail", "args": ["x"], "retry": False})
    deep = push({"class": "SH::Deep", "args": [], "retry": False})
    missing = push({"class": "SH::Missing", "args": [7], "retry": False})
    start_worker(redis_url)

    wait_for(lambda: r.zcard(keys.HISTORY_ALL) == 4, timeout=20)
    # the worker's writer indexed every run in the same pipeline (no read has caught up yet)
    wait_for(lambda: r.zcard(keys.HISTORY_INDEX_TIME) == 4)
    assert history_index.values(r, "class") == ["sh::deep", "sh::fail", "sh::missing", "sh::ok"]
    assert r.hget(keys.HISTORY_INDEX_META, "cursor") is None

    entries = {entry["jid"]: entry for entry in history_entries(r)}
    assert set(entries) == {ok, fail, deep, missing}
    assert [e["jid"] for e in history_entries(r, "success")] == [ok]
    assert {e["jid"] for e in history_entries(r, "failed")} == {fail, deep, missing}
    for raw, score in r.zrange(keys.HISTORY_ALL, 0, -1, withscores=True):
        entry = json.loads(raw)
        assert score == entry["finished_at"] >= entry["started_at"]
        assert entry["duration"] == round((entry["finished_at"] - entry["started_at"]) * 1000)
        assert entry["queue"] == "default"

    success = entries[ok]
    assert success["class"] == "SH::Ok" and success["args"] == ["h", {"k": [1, 2]}]
    assert success["status"] == "success"
    assert "backtrace" not in success and "error_class" not in success

    failed = entries[fail]
    assert failed["status"] == "failed"
    assert failed["error_class"] == "RuntimeError"
    assert failed["error_message"] == "broken: x"
    assert isinstance(failed["backtrace"], list) and 0 < len(failed["backtrace"]) <= 200
    assert all(isinstance(line, str) for line in failed["backtrace"])

    deep_entry = entries[deep]
    assert len(deep_entry["backtrace"]) == 200  # cut to 200 lines
    assert "RuntimeError: deep" in deep_entry["backtrace"][-1]  # the innermost part is kept

    unknown = entries[missing]
    assert unknown["status"] == "failed"
    assert unknown["class"] == "SH::Missing"
    assert unknown["error_class"] == "NameError"
    assert status.status(missing, config=config) == "failed"
    wait_for(lambda: r.zcard(keys.DEAD) == 3)  # the jobs' fate is unchanged

    expected: dict[str, Counter[str]] = {}
    for entry in entries.values():
        day = datetime.fromtimestamp(entry["finished_at"], UTC).strftime("%Y-%m-%d")
        expected.setdefault(day, Counter())[entry["status"]] += 1
    for day, counts in expected.items():  # one day, unless the runs straddled midnight
        stored = r.hgetall(keys.history_daily(day))
        assert {field: int(n) for field, n in stored.items()} == dict(counts)
        assert 399 * 86400 < r.ttl(keys.history_daily(day)) <= 400 * 86400


# -- trimming and daily counts ---------------------------------------------------------------


def run_entry(jid: str, finished_at: float, **fields: Any) -> dict[str, Any]:
    entry = {
        "jid": jid,
        "class": "Some::Job",
        "queue": "default",
        "args": [],
        "status": "success",
        "started_at": finished_at - 0.1,
        "finished_at": finished_at,
    }
    entry.update(fields)
    return entry


def test_record_trims_by_age(r: redis.Redis) -> None:
    now = time.time()
    old, recent = run_entry("old", now - 2 * 86400), run_entry("recent", now - 0.5 * 86400)
    for key in (keys.HISTORY_ALL, keys.HISTORY_SUCCESS):
        r.zadd(key, {wire.dumps(old): old["finished_at"], wire.dumps(recent): now - 43200})

    history.record(r, history.Retention(days=1), {"jid": "new", "class": "C"}, "q", now)

    for key in (keys.HISTORY_ALL, keys.HISTORY_SUCCESS):
        assert [json.loads(raw)["jid"] for raw in r.zrange(key, 0, -1)] == ["recent", "new"]


def test_record_trims_by_count_oldest_first(r: redis.Redis) -> None:
    retention = history.Retention(max_entries=3)
    for n in range(5):
        history.record(r, retention, {"jid": f"ok{n}", "class": "C"}, "q", time.time())

    def jids(key: str) -> list[str]:
        return [json.loads(raw)["jid"] for raw in r.zrange(key, 0, -1)]

    assert jids(keys.HISTORY_ALL) == ["ok2", "ok3", "ok4"]
    assert jids(keys.HISTORY_SUCCESS) == ["ok2", "ok3", "ok4"]

    history.record(r, retention, {"jid": "bad", "class": "C"}, "q", time.time(), KeyError("k"))

    assert jids(keys.HISTORY_ALL) == ["ok3", "ok4", "bad"]
    assert jids(keys.HISTORY_FAILED) == ["bad"]
    assert jids(keys.HISTORY_SUCCESS) == ["ok2", "ok3", "ok4"]  # not written: not trimmed
    (entry,) = [json.loads(raw) for raw in r.zrange(keys.HISTORY_FAILED, 0, -1)]
    assert (entry["error_class"], entry["error_message"]) == ("KeyError", "'k'")


def test_daily_counts_for_the_last_days_skip_empty_days(r: redis.Redis) -> None:
    now = datetime(2026, 3, 10, 12, 0, tzinfo=UTC).timestamp()
    r.hset(keys.history_daily("2026-03-10"), mapping={"success": 4, "failed": 1})
    r.hset(keys.history_daily("2026-03-08"), mapping={"failed": 2})
    r.hset(keys.history_daily("2026-03-03"), mapping={"success": 9})  # 8 days back: outside
    r.hset(keys.history_daily("2026-03-11"), mapping={"success": 5})  # tomorrow: outside

    assert history.daily_counts(r, days=7, now=now) == {
        "2026-03-10": {"success": 4, "failed": 1},
        "2026-03-08": {"success": 0, "failed": 2},
    }
    assert history.daily_counts(r, days=1, now=now) == {"2026-03-10": {"success": 4, "failed": 1}}


def test_record_counts_the_run_for_its_utc_day(r: redis.Redis) -> None:
    retention = history.Retention(daily_stats_days=10)
    history.record(r, retention, {"jid": "a", "class": "C"}, "q", time.time())
    history.record(r, retention, {"jid": "b", "class": "C"}, "q", time.time(), ValueError())

    (raw,) = r.zrange(keys.HISTORY_ALL, 0, 0)
    day = datetime.fromtimestamp(json.loads(raw)["finished_at"], UTC).strftime("%Y-%m-%d")
    assert r.hgetall(keys.history_daily(day)) == {"success": "1", "failed": "1"}
    assert 9 * 86400 < r.ttl(keys.history_daily(day)) <= 10 * 86400
    assert history.daily_counts(r, days=2)[day] == {"success": 1, "failed": 1}


# -- query (the History tab) -----------------------------------------------------------------


def store(r: redis.Redis, *entries: dict[str, Any]) -> None:
    for entry in entries:
        raw = wire.dumps(entry)
        r.zadd(keys.HISTORY_ALL, {raw: entry["finished_at"]})
        r.zadd(history.SETS[entry["status"]], {raw: entry["finished_at"]})


def timed(jid: str, finished_at: float, duration_ms: int, **fields: Any) -> dict[str, Any]:
    entry = run_entry(jid, finished_at, **fields)
    entry["started_at"] = finished_at - duration_ms / 1000
    return entry


FIVE = [
    timed("e1", 1000.0, 100, **{"class": "UserMailer"}),
    timed(
        "e2",
        2000.0,
        700,
        **{"class": "ReportJob", "status": "failed"},
        error_class="Timeout::Error",
        error_message="took too long",
    ),
    timed("e3", 3000.0, 50, **{"class": "mailer::Digest"}),
    timed(
        "e4",
        4000.0,
        900,
        **{"class": "CleanupJob", "status": "failed"},
        error_class="RuntimeError",
        error_message="boom",
    ),
    timed("e5", 5000.0, 300, **{"class": "ImportJob"}),
]


@pytest.fixture
def five(r: redis.Redis) -> redis.Redis:
    store(r, *FIVE)
    return r


def jids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["jid"] for row in rows]


def test_query_slices_with_offset_and_limit(five: redis.Redis) -> None:
    # the grid's start=2&end=4: offset 2, limit 2 -> the 3rd and 4th newest
    rows, total = history.query(five, offset=2, limit=2)
    assert (jids(rows), total) == (["e3", "e2"], 5)
    assert rows[0] == FIVE[2]  # stored entries as they are

    assert history.query(five, offset=-3, limit=1)[0] == [FIVE[4]]  # offset clamped to 0
    assert history.query(five, offset=0, limit=-1) == ([], 5)  # limit clamped to 0
    assert history.query(five, offset=10, limit=5) == ([], 5)


def test_query_status_picks_the_set(five: redis.Redis) -> None:
    assert jids(history.query(five, status="failed")[0]) == ["e4", "e2"]
    assert history.query(five, status="success")[1] == 3
    assert history.query(five, status="bogus")[1] == 5  # unknown: all


def test_query_sorts_by_duration_and_finished_at(five: redis.Redis) -> None:
    by_duration = history.query(five, sort='[{"colId":"duration","sort":"asc"}]')
    assert jids(by_duration[0]) == ["e3", "e1", "e5", "e2", "e4"]
    descending = history.query(five, sort=[{"colId": "duration", "sort": "desc"}], limit=2)
    assert (jids(descending[0]), descending[1]) == (["e4", "e2"], 5)

    oldest_first = history.query(five, sort='[{"colId":"finished_at","sort":"asc"}]')
    assert jids(oldest_first[0]) == ["e1", "e2", "e3", "e4", "e5"]
    # the same order through the scan path (a filter matching everything)
    scanned = history.query(
        five,
        sort='[{"colId":"finished_at","sort":"asc"}]',
        filters='{"class":{"filterType":"text","type":"notBlank"}}',
        offset=1,
        limit=3,
    )
    assert (jids(scanned[0]), scanned[1]) == (["e2", "e3", "e4"], 5)

    # an unknown column is skipped in favour of the next known one
    skipped = history.query(five, sort='[{"colId":"nope"},{"colId":"class","sort":"asc"}]')
    assert jids(skipped[0]) == ["e4", "e5", "e2", "e1", "e3"]


def test_query_sort_keeps_ties_in_newest_first_order(r: redis.Redis) -> None:
    store(r, timed("t1", 10.0, 200), timed("t2", 20.0, 100), timed("t3", 30.0, 200))
    scan = {"class": {"type": "notBlank"}}  # matches every run, but only the scan answers it

    for direction, expected in (("asc", ["t2", "t3", "t1"]), ("desc", ["t3", "t1", "t2"])):
        sort = [{"colId": "duration", "sort": direction}]
        assert jids(history.query(r, sort=sort, filters=scan)[0]) == expected
    # the index's sets (a page by rank) keep equal values newest first in a column's first
    # direction (descending for a duration), and read the same set backwards for the other
    assert jids(history.query(r, sort=[{"colId": "duration", "sort": "desc"}])[0]) == [
        "t3",
        "t1",
        "t2",
    ]
    assert jids(history.query(r, sort=[{"colId": "duration", "sort": "asc"}])[0]) == [
        "t2",
        "t1",
        "t3",
    ]


def text(kind: str, value: str) -> dict[str, str]:
    return {"filterType": "text", "type": kind, "filter": value}


def test_query_text_filters_are_case_insensitive(five: redis.Redis) -> None:
    rows, total = history.query(five, filters=json.dumps({"class": text("contains", "MAILER")}))
    assert (jids(rows), total) == (["e3", "e1"], 2)

    rows, total = history.query(five, filters={"error": text("startsWith", "timeout::")})
    assert (jids(rows), total) == (["e2"], 1)

    rows, _ = history.query(five, filters={"error": text("blank", "")})
    assert jids(rows) == ["e5", "e3", "e1"]


def test_query_number_filter_on_duration(five: redis.Redis) -> None:
    greater = {"duration": {"filterType": "number", "type": "greaterThan", "filter": 600}}
    rows, total = history.query(five, filters=greater)
    assert (jids(rows), total) == (["e4", "e2"], 2)

    in_range = {
        "duration": {"filterType": "number", "type": "inRange", "filter": 50, "filterTo": 300}
    }
    assert jids(history.query(five, filters=in_range)[0]) == ["e1"]  # both ends exclusive

    # a filter value that is not a number, or an unknown condition, matches everything
    odd = {"duration": {"filterType": "number", "type": "greaterThan", "filter": "soon"}}
    assert history.query(five, filters=odd)[1] == 5
    assert history.query(five, filters={"class": text("resembles", "x")})[1] == 5


def test_query_or_and_and_of_conditions(five: redis.Redis) -> None:
    conditions = [text("equals", "importjob"), text("endsWith", "DIGEST")]
    either = {"class": {"filterType": "text", "operator": "OR", "conditions": conditions}}
    rows, total = history.query(five, filters=either)
    assert (jids(rows), total) == (["e5", "e3"], 2)

    both = {"class": {"filterType": "text", "operator": "AND", "conditions": conditions}}
    assert history.query(five, filters=both) == ([], 0)


def test_query_limit_is_capped(r: redis.Redis) -> None:
    r.zadd(
        keys.HISTORY_ALL,
        {wire.dumps(run_entry(f"j{n}", float(n))): float(n) for n in range(1205)},
    )

    rows, total = history.query(r, limit=5000)
    assert (len(rows), total) == (history.MAX_LIMIT, 1205)
    assert rows[0]["jid"] == "j1204"

    # the scan path reads past its first chunk of 1000 too
    rows, total = history.query(r, filters={"status": text("equals", "success")}, limit=5000)
    assert (len(rows), total) == (history.MAX_LIMIT, 1205)
    assert rows[-1]["jid"] == "j205"


def test_query_by_jid_gives_only_that_jid(r: redis.Redis) -> None:
    store(
        r,
        run_entry("wanted", 1.0, status="failed"),
        run_entry("other", 2.0),
        run_entry("decoy", 3.0, args=[{"jid": "wanted"}]),  # mentions it
        run_entry("wanted", 4.0),  # its retry, which succeeded
        run_entry("wanted-not", 5.0),
    )

    rows, total = history.query(r, jid="wanted")

    assert total == 2
    assert [(row["jid"], row["finished_at"]) for row in rows] == [("wanted", 4.0), ("wanted", 1.0)]


@pytest.mark.parametrize(
    ("sort", "filters"),
    [
        ("not json", None),
        ('{"colId":"duration"}', None),  # an object, not a list
        ("[1, 2]", None),
        (None, "{bad"),
        (None, "[1]"),  # a list, not an object
        (None, '{"unknown_column":{"type":"equals","filter":"x"}}'),
        (None, '{"class":"not a model"}'),
    ],
)
def test_query_ignores_malformed_sort_and_filter(
    five: redis.Redis, sort: str | None, filters: str | None
) -> None:
    rows, total = history.query(five, sort=sort, filters=filters)

    assert (jids(rows), total) == (["e5", "e4", "e3", "e2", "e1"], 5)


def test_record_stores_the_duration_in_whole_milliseconds(r: redis.Redis) -> None:
    started = time.time() - 1.2345
    history.record(r, history.Retention(), {"jid": "d", "class": "C"}, "q", started)

    (entry,) = [json.loads(raw) for raw in r.zrange(keys.HISTORY_ALL, 0, -1)]
    assert isinstance(entry["duration"], int)
    assert entry["duration"] == history.duration_ms(entry["started_at"], entry["finished_at"])
    assert 1234 <= entry["duration"] < 60_000
    assert entry["started_at"] == started  # both stamps stay, in epoch seconds


def test_entries_without_a_duration_sort_and_filter_with_those_that_have_one(
    r: redis.Redis,
) -> None:
    older = [timed("old-slow", 10.0, 800), timed("old-fast", 20.0, 40)]  # no "duration" key
    newer = [timed("new-mid", 30.0, 300), timed("new-slow", 40.0, 900)]
    for entry in newer:
        entry["duration"] = history.duration_ms(entry["started_at"], entry["finished_at"])
    store(r, *older, *newer)

    by_duration = history.query(r, sort=[{"colId": "duration", "sort": "asc"}])
    assert jids(by_duration[0]) == ["old-fast", "new-mid", "old-slow", "new-slow"]
    slow = {"duration": {"filterType": "number", "type": "greaterThan", "filter": 500}}
    assert jids(history.query(r, filters=slow)[0]) == ["new-slow", "old-slow"]
    assert history.duration_of({"jid": "no stamps"}) == 0
