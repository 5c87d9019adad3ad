"""The introspection API: stats, queues, the scheduled /
retry / dead sets, processes and their work, throughput and attempts.

Figures are checked against a Redis state the test wrote itself; processes, remote commands
and running work against a real ``python -m cogworker`` worker subprocess.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    closing_pools,
    holds,
    listening,
    redis_time,
    registered_identity,
    worker_process,
)

import cogworker
from cogworker import api, keys, wire

JOBS_MODULE = '''
"""Jobs for the API tests; runs are counted in Redis under test:*."""
import time

import cogworker


def _redis():
    return cogworker.default_config().redis()


class GateJob(cogworker.Job):
    """Runs until the test sets test:gate:<marker> (at most 30 s)."""

    name = "Api::Gate"

    def perform(self, marker):
        client = _redis()
        client.incr(f"test:runs:{marker}")
        deadline = time.monotonic() + 30
        while not client.exists(f"test:gate:{marker}") and time.monotonic() < deadline:
            time.sleep(0.02)
        client.incr(f"test:finished:{marker}")


class CountJob(cogworker.Job):
    name = "Api::Count"

    def perform(self, marker):
        _redis().incr(f"test:runs:{marker}")


class FailJob(cogworker.Job, retry=1):
    name = "Api::Fail"

    def perform(self, marker):
        raise RuntimeError(f"failing on purpose: {marker}")
'''

WORKER_CONFIG = """\
heartbeat_interval: 0.2
poll_interval: 0.2
concurrency: 3
shutdown_timeout: 5
"""

_close_pools = pytest.fixture(autouse=True)(closing_pools)


# -- helpers ---------------------------------------------------------------------------------


def payload(jid: str | None = None, **fields: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "class": "Api::Count",
        "args": [],
        "queue": "default",
        "jid": jid or wire.new_jid(),
        "retry": True,
        "created_at": 1_700_000_000.0,
    }
    job.update(fields)
    return job


def lpush(r: redis.Redis, queue: str, *jobs: dict[str, Any]) -> list[str]:
    """LPUSH the jobs in order (the last one given is the newest) and register the queue."""
    raws = [wire.dumps(job) for job in jobs]
    if raws:
        r.lpush(keys.queue(queue), *raws)
    r.sadd(keys.QUEUES, queue)
    return raws


def zadd(r: redis.Redis, key: str, job: dict[str, Any] | str, score: float) -> str:
    raw = job if isinstance(job, str) else wire.dumps(job)
    r.zadd(key, {raw: score})
    return raw


@pytest.fixture
def client(config: cogworker.Config) -> redis.Redis:
    """The client the API is given: the config's own (decode_responses, as in production)."""
    return config.redis()


@pytest.fixture
def producer(config: cogworker.Config) -> cogworker.Client:
    return cogworker.Client(config)


@pytest.fixture
def worker(tmp_path: Path, redis_url: str, r: redis.Redis) -> Iterator[subprocess.Popen[bytes]]:
    """A real worker (concurrency 3, 0.2 s heartbeat) on the shared, flushed server."""
    yield from worker_process(tmp_path, redis_url, "api_jobs", JOBS_MODULE, WORKER_CONFIG)


def identity_of(r: redis.Redis, process: subprocess.Popen[bytes]) -> str:
    def registered() -> str | None:
        assert process.poll() is None, "the worker exited early"
        return registered_identity(r, process.pid)

    return str(wait_for(registered, timeout=20))


def find_process(client: redis.Redis, identity: str) -> api.Process:
    found = [p for p in api.ProcessSet(client) if p.identity == identity]
    assert len(found) == 1, found
    return found[0]


def runs(r: redis.Redis, marker: str, what: str = "runs") -> int:
    return int(r.get(f"test:{what}:{marker}") or 0)


# -- stats -----------------------------------------------------------------------------------


def test_the_read_api_loads_nothing_of_the_worker_runtime() -> None:
    """A dashboard or an admin command reads through the API without loading the worker."""
    probe = (
        "import sys, cogworker.api; "
        "print(sorted(m for m in sys.modules if m.startswith('cogworker.worker')))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert shown.stdout.strip() == "[]"


def test_stats_of_an_empty_redis_are_all_zero(client: redis.Redis) -> None:
    figures = api.stats(client)
    assert (figures.processed, figures.failed, figures.enqueued) == (0, 0, 0)
    assert (figures.scheduled_size, figures.retry_size, figures.dead_size) == (0, 0, 0)
    assert figures.queues == []


def test_stats_figures_match_a_known_redis_state(r: redis.Redis, client: redis.Redis) -> None:
    now = time.time()
    r.set(keys.STATS_PROCESSED, 7)
    r.set(keys.STATS_FAILED, 3)
    lpush(r, "default", *(payload(enqueued_at=now - 50 + i) for i in range(3)))
    lpush(r, "low", payload(enqueued_at=now - 5), payload(enqueued_at=now - 1))
    r.sadd(keys.QUEUES, "mail")  # known, empty
    r.lpush(keys.queue("unregistered"), *["x"] * 4)  # not in cogworker:queues: not counted
    r.sadd(keys.PAUSED_QUEUES, "mail")
    for i in range(2):
        zadd(r, keys.SCHEDULE, payload(at=now + 60), now + 60 + i)
    zadd(r, keys.RETRY, payload(), now + 30)
    for i in range(4):
        zadd(r, keys.DEAD, payload(), now - i)

    figures = api.stats(client)

    assert (figures.processed, figures.failed) == (7, 3)
    assert figures.enqueued == 5
    assert (figures.scheduled_size, figures.retry_size, figures.dead_size) == (2, 1, 4)
    assert [(q.name, q.size, q.paused) for q in figures.queues] == [
        ("default", 3, False),
        ("low", 2, False),
        ("mail", 0, True),
    ]
    default, low, mail = figures.queues
    assert 49 <= default.latency <= 50 + (time.time() - now)  # the tail: the oldest job
    assert 4 <= low.latency <= 5 + (time.time() - now)
    assert mail.latency == 0
    as_dict = figures.to_dict()
    assert {k: as_dict[k] for k in as_dict if k != "queues"} == {
        "processed": 7,
        "failed": 3,
        "enqueued": 5,
        "scheduled_size": 2,
        "retry_size": 1,
        "dead_size": 4,
    }
    assert [q["name"] for q in as_dict["queues"]] == ["default", "low", "mail"]
    assert as_dict["queues"][0]["latency"] == round(default.latency, 3)


# -- queues ----------------------------------------------------------------------------------


def test_queue_size_and_latency_read_the_tail(r: redis.Redis, client: redis.Redis) -> None:
    queue = api.Queue(client, "default")
    assert queue.size() == 0
    assert queue.latency() == 0  # empty
    now = time.time()
    lpush(r, "default", payload(enqueued_at=now - 100), payload(enqueued_at=now - 3))
    assert queue.size() == 2
    assert 100 <= queue.latency() <= 100 + (time.time() - now) + 0.5

    # created_at is the fallback for a tail without enqueued_at
    lpush(r, "fallback", payload(created_at=now - 40))
    assert 40 <= api.Queue(client, "fallback").latency() <= 41

    # a clock ahead of ours never gives a negative latency
    lpush(r, "future", payload(enqueued_at=now + 3600))
    assert api.Queue(client, "future").latency() == 0

    # no timestamp at all, or an unreadable tail: 0
    no_stamp = payload()
    del no_stamp["created_at"]
    lpush(r, "nostamp", no_stamp)
    assert api.Queue(client, "nostamp").latency() == 0
    r.lpush(keys.queue("corrupt"), "{not json")
    assert api.Queue(client, "corrupt").latency() == 0


def test_queue_page_is_newest_first(producer: cogworker.Client, client: redis.Redis) -> None:
    jids = [producer.push({"class": "Api::Count", "args": [n]}) for n in range(5)]
    queue = api.Queue(client, "default")

    first, second = queue.page(0, 2), queue.page(2, 2)

    assert [record.jid for record in first] == [jids[4], jids[3]]
    assert [record.jid for record in second] == [jids[2], jids[1]]
    assert [record.args for record in first] == [[4], [3]]
    assert first[0].job_class == "Api::Count"
    assert first[0].queue == "default"
    assert first[0].item is not None and first[0].item["jid"] == jids[4]
    assert queue.page(0, 0) == []


def test_queue_iteration_reads_every_job_across_pages(r: redis.Redis, client: redis.Redis) -> None:
    jobs = [payload(args=[n]) for n in range(251)]  # several pages
    lpush(r, "default", *jobs)

    seen = [record.args[0] for record in api.Queue(client, "default")]

    assert seen == list(range(250, -1, -1))  # newest first, none missing or repeated


def test_find_job_compares_the_jid_not_just_the_text(r: redis.Redis, client: redis.Redis) -> None:
    wanted = wire.new_jid()
    decoy = payload(args=[{"jid": wanted}])  # its raw text contains "jid":"<wanted>"
    jobs = [payload(args=[n]) for n in range(150)]
    lpush(r, "default", payload(wanted, args=["target"]), *jobs[:120], decoy, *jobs[120:])
    queue = api.Queue(client, "default")

    found = queue.find_job(wanted)

    assert found is not None
    assert found.jid == wanted and found.args == ["target"]
    assert queue.find_job("no-such-jid") is None


def test_queue_delete_removes_every_copy_of_the_exact_raw(
    r: redis.Redis, client: redis.Redis
) -> None:
    jid = wire.new_jid()
    job = payload(jid, args=[1])
    same_jid_other_text = payload(jid, args=[1], enqueued_at=1.5)
    raw = wire.dumps(job)
    r.lpush(keys.queue("default"), raw, wire.dumps(same_jid_other_text), raw)
    queue = api.Queue(client, "default")

    assert queue.delete(raw) == 2
    assert r.lrange(keys.queue("default"), 0, -1) == [wire.dumps(same_jid_other_text)]
    assert queue.delete(raw) == 0
    assert queue.delete(raw.replace('"args":[1]', '"args": [1]')) == 0  # not byte-identical
    assert queue.size() == 1


def test_queue_clear_keeps_the_name(r: redis.Redis, client: redis.Redis) -> None:
    lpush(r, "default", *(payload() for _ in range(3)))
    lpush(r, "other", payload())

    assert api.Queue(client, "default").clear() == 3

    assert r.exists(keys.queue("default")) == 0
    assert "default" in r.smembers(keys.QUEUES)
    assert api.queue_names(client) == ["default", "other"]
    assert api.Queue(client, "other").size() == 1
    assert api.Queue(client, "default").clear() == 0


def test_pause_and_resume_each_queue_on_its_own(r: redis.Redis, client: redis.Redis) -> None:
    mail, low = api.Queue(client, "mail"), api.Queue(client, "low")
    assert not mail.paused() and not low.paused()

    mail.pause()
    assert mail.paused() and not low.paused()
    assert r.smembers(keys.PAUSED_QUEUES) == {"mail"}

    low.pause()
    mail.resume()
    assert not mail.paused() and low.paused()
    assert r.smembers(keys.PAUSED_QUEUES) == {"low"}


# -- scheduled / retry / dead sets -----------------------------------------------------------


def test_set_page_order_and_scores(r: redis.Redis, client: redis.Redis) -> None:
    raws = [zadd(r, keys.RETRY, payload(args=[n]), 1000.0 + n) for n in range(5)]
    retry = api.retry_set(client)

    assert retry.size() == 5
    assert [rec.raw for rec in retry.page(0, 2)] == [raws[4], raws[3]]
    assert [rec.score for rec in retry.page(0, 2)] == [1004.0, 1003.0]
    assert [rec.raw for rec in retry.page(2, 2)] == [raws[2], raws[1]]
    assert [rec.raw for rec in retry.page(0, 2, newest_first=False)] == [raws[0], raws[1]]
    assert retry.page(0, 0) == []


def test_set_iteration_covers_more_than_one_page(r: redis.Redis, client: redis.Redis) -> None:
    r.zadd(keys.DEAD, {wire.dumps(payload(args=[n])): float(n) for n in range(1203)})

    seen = [record.args[0] for record in api.dead_set(client)]

    assert seen == list(range(1202, -1, -1))


def test_find_jobs_returns_every_entry_with_that_jid(r: redis.Redis, client: redis.Redis) -> None:
    jid = wire.new_jid()
    entries = {wire.dumps(payload(args=[n])): float(n) for n in range(1100)}
    copies = [payload(jid, retry_count=n, error_class="E") for n in (1, 2, 3)]
    for copy, score in zip(copies, (0.5, 700.5, 1099.5), strict=True):
        entries[wire.dumps(copy)] = score
    entries[wire.dumps(payload(args=[{"jid": jid}]))] = 42.5  # mentions the jid in its args
    r.zadd(keys.DEAD, entries)

    found = api.dead_set(client).find_jobs(jid)

    assert sorted(record.raw for record in found) == sorted(wire.dumps(c) for c in copies)
    assert api.dead_set(client).find_jobs("nope") == []


def test_retry_now_requeues_the_job_unchanged_apart_from_enqueued_at(
    r: redis.Redis, client: redis.Redis
) -> None:
    job = payload(
        queue="mail",
        args=[2**63 + 7, 1.0e20, "naïve ☃", {"nested": [1, 2.5]}],
        retry_count=3,
        error_class="Timeout::Error",
        error_message="took too long",
        failed_at=1_700_000_100.25,
        enqueued_at=1_700_000_000.5,
    )
    raw = zadd(r, keys.RETRY, job, time.time() + 3600)
    before = time.time()

    assert api.retry_set(client).retry_now(raw) == "requeued"

    assert r.zcard(keys.RETRY) == 0
    (requeued_raw,) = r.lrange(keys.queue("mail"), 0, -1)
    assert str(2**63 + 7) in requeued_raw  # not rounded through a double
    requeued = json.loads(requeued_raw)
    stored = json.loads(raw)
    assert before <= requeued.pop("enqueued_at") <= time.time()
    stored.pop("enqueued_at")
    assert requeued == stored
    assert "mail" in r.smembers(keys.QUEUES)


def test_retry_now_twice_queues_the_job_once(r: redis.Redis, client: redis.Redis) -> None:
    raw = zadd(r, keys.DEAD, payload(), time.time())
    dead = api.dead_set(client)

    assert dead.retry_now(raw) == "requeued"
    assert dead.retry_now(raw) == "gone"

    assert r.llen(keys.queue("default")) == 1
    assert r.zcard(keys.DEAD) == 0


@pytest.mark.parametrize(
    "raw",
    [
        wire.dumps({"class": "X", "args": [], "jid": "j1"}),  # no queue
        wire.dumps({"class": "X", "args": [], "jid": "j2", "queue": ""}),
        "{not json",
        "[1, 2]",
    ],
)
def test_retry_now_of_a_non_requeueable_entry_is_invalid_and_leaves_it(
    r: redis.Redis, client: redis.Redis, raw: str
) -> None:
    r.zadd(keys.SCHEDULE, {raw: 10.0})

    assert api.scheduled_set(client).retry_now(raw) == "invalid"

    assert r.zscore(keys.SCHEDULE, raw) == 10.0
    assert r.keys(f"{keys.QUEUE_PREFIX}*") == []


def test_reschedule_moves_the_score_without_duplicating(
    r: redis.Redis, client: redis.Redis
) -> None:
    raw = zadd(r, keys.RETRY, payload(retry_count=2, error_class="E"), 100.0)
    other = zadd(r, keys.RETRY, payload(), 200.0)
    target = time.time() + 1800

    assert api.retry_set(client).reschedule(raw, target) is True

    assert r.zcard(keys.RETRY) == 2
    assert r.zscore(keys.RETRY, raw) == pytest.approx(target)
    assert r.zscore(keys.RETRY, other) == 200.0


def test_reschedule_of_a_gone_entry_is_a_no_op(r: redis.Redis, client: redis.Redis) -> None:
    raw = wire.dumps(payload())

    assert api.scheduled_set(client).reschedule(raw, time.time() + 60) is False

    assert r.exists(keys.SCHEDULE) == 0  # not re-added


def test_delete_removes_the_entry_and_clears_its_attempts(
    r: redis.Redis, client: redis.Redis
) -> None:
    jid = wire.new_jid()
    raw = zadd(r, keys.DEAD, payload(jid), 5.0)
    kept = zadd(r, keys.DEAD, payload(), 6.0)
    r.rpush(keys.job_attempts(jid), '{"attempt":1}', '{"attempt":2}')
    dead = api.dead_set(client)

    assert dead.delete(raw) is True
    assert r.zrange(keys.DEAD, 0, -1) == [kept]
    assert r.exists(keys.job_attempts(jid)) == 0

    # the attempts go even when the entry was already gone
    r.rpush(keys.job_attempts(jid), '{"attempt":3}')
    assert dead.delete(raw) is False
    assert r.exists(keys.job_attempts(jid)) == 0


def test_delete_of_an_unparseable_entry_uses_its_pseudo_jid(
    r: redis.Redis, client: redis.Redis
) -> None:
    raw = "{not json"
    r.zadd(keys.RETRY, {raw: 1.0})
    pseudo = api.JobRecord(raw).jid
    assert re.fullmatch(r"unparseable-[0-9a-f]{12}", pseudo)
    r.rpush(keys.job_attempts(pseudo), "{}")

    assert api.retry_set(client).delete(raw) is True

    assert r.exists(keys.RETRY, keys.job_attempts(pseudo)) == 0


def test_clear_empties_the_set_and_its_attempts(r: redis.Redis, client: redis.Redis) -> None:
    jids = [wire.new_jid() for _ in range(3)]
    for n, jid in enumerate(jids):
        zadd(r, keys.RETRY, payload(jid), float(n))
        r.rpush(keys.job_attempts(jid), "{}")
    r.rpush(keys.job_attempts("elsewhere"), "{}")

    assert api.retry_set(client).clear() == 3

    assert r.exists(keys.RETRY) == 0
    assert all(r.exists(keys.job_attempts(jid)) == 0 for jid in jids)
    assert r.llen(keys.job_attempts("elsewhere")) == 1


def test_kill_moves_the_entry_to_dead(r: redis.Redis, client: redis.Redis) -> None:
    raw = zadd(r, keys.RETRY, payload(retry_count=1), time.time() + 600)
    before = time.time()
    retry = api.retry_set(client)

    assert retry.kill(raw) is True

    assert r.zcard(keys.RETRY) == 0
    assert r.zrange(keys.DEAD, 0, -1) == [raw]  # the same string
    assert before <= r.zscore(keys.DEAD, raw) <= time.time()
    assert retry.kill(raw) is False  # gone
    assert api.dead_set(client).kill(raw) is False  # already dead
    assert r.zcard(keys.DEAD) == 1


# -- throughput, attempts --------------------------------------------------------------------


def test_throughput_one_bucket_per_hour_oldest_first(r: redis.Redis, client: redis.Redis) -> None:
    now = 1_750_000_000.0
    hour = int(now // 3600)
    r.hset(keys.throughput(hour), mapping={"processed": 5, "failed": 1})
    r.hset(keys.throughput(hour - 2), mapping={"processed": 2})
    r.hset(keys.throughput(hour - 5), mapping={"processed": 99})  # outside the window

    series = api.throughput(client, hours=4, now=now)

    assert series == [
        {"time": (hour - 3) * 3600, "processed": 0, "failed": 0},
        {"time": (hour - 2) * 3600, "processed": 2, "failed": 0},
        {"time": (hour - 1) * 3600, "processed": 0, "failed": 0},
        {"time": hour * 3600, "processed": 5, "failed": 1},
    ]


def test_attempts_oldest_first_skipping_unreadable_entries(
    r: redis.Redis, client: redis.Redis
) -> None:
    key = keys.job_attempts("j1")
    r.rpush(key, '{"attempt":1,"outcome":"retrying"}', "garbage", '{"attempt":2,"outcome":"dead"}')

    assert api.attempts(client, "j1") == [
        {"attempt": 1, "outcome": "retrying"},
        {"attempt": 2, "outcome": "dead"},
    ]
    assert api.attempts(client, "unknown") == []


# -- processes (seeded) ----------------------------------------------------------------------


def seed_process(r: redis.Redis, identity: str, **fields: str) -> None:
    info = {"hostname": "h", "pid": 4242, "concurrency": 5, "queues": ["a", "a", "b"]}
    r.hset(keys.process(identity), mapping={"info": json.dumps(info), **fields})
    r.sadd(keys.PROCESSES, identity)


def test_last_beat_comes_from_the_beat_field_else_the_last_beat_hash(
    r: redis.Redis, client: redis.Redis
) -> None:
    seed_process(r, "h:1:aaaaaaaaaaaa", busy="2", quiet="true", beat="1700000100")
    seed_process(r, "h:2:bbbbbbbbbbbb", busy="0", quiet="false")
    seed_process(r, "h:3:cccccccccccc", busy="1", quiet="false")
    r.hset(keys.LAST_BEAT, mapping={"h:1:aaaaaaaaaaaa": "1700000000", "h:2:bbbbbbbbbbbb": "1"})

    found = {p.identity: p for p in api.ProcessSet(client)}

    assert found["h:1:aaaaaaaaaaaa"].last_beat == 1_700_000_100
    assert found["h:2:bbbbbbbbbbbb"].last_beat == 1
    assert found["h:3:cccccccccccc"].last_beat is None
    first = found["h:1:aaaaaaaaaaaa"]
    assert (first.busy, first.quiet, first.concurrency, first.pid) == (2, True, 5, 4242)
    assert first.queues == ["a", "a", "b"]
    assert api.ProcessSet(client).total_busy() == 3
    assert api.ProcessSet(client).size() == 3


def test_stale_members_are_removed_while_iterating(r: redis.Redis, client: redis.Redis) -> None:
    seed_process(r, "live:1:aaaaaaaaaaaa", busy="0", quiet="false")
    r.sadd(keys.PROCESSES, "gone:1:bbbbbbbbbbbb", "gone:2:cccccccccccc")  # presence expired

    assert [p.identity for p in api.ProcessSet(client)] == ["live:1:aaaaaaaaaaaa"]

    assert r.smembers(keys.PROCESSES) == {"live:1:aaaaaaaaaaaa"}


def test_stale_members_seen_before_an_early_stop_are_removed_too(
    r: redis.Redis, client: redis.Redis
) -> None:
    """A stale member is removed as soon as iteration reaches it, even if the caller stops
    early (``find`` returns at the first match)."""
    r.sadd(keys.PROCESSES, "a-gone:1:bbbbbbbbbbbb")  # sorts before the live one
    seed_process(r, "b-live:1:aaaaaaaaaaaa", busy="0", quiet="false")

    found = api.ProcessSet(client).find("b-live:1:aaaaaaaaaaaa")

    assert found is not None
    assert r.smembers(keys.PROCESSES) == {"b-live:1:aaaaaaaaaaaa"}


def test_process_signal_refuses_an_unknown_command(r: redis.Redis, client: redis.Redis) -> None:
    seed_process(r, "h:1:aaaaaaaaaaaa", busy="0", quiet="false")
    (process,) = api.ProcessSet(client)

    with pytest.raises(ValueError, match="unknown command"):
        process.signal("reboot")
    assert process.quiet_down() == 0  # nobody listening: lost, and it says so


# -- processes, remote commands and work with a real worker ----------------------------------


def test_process_set_describes_a_live_worker(
    worker: subprocess.Popen[bytes],
    r: redis.Redis,
    client: redis.Redis,
    producer: cogworker.Client,
) -> None:
    identity = identity_of(r, worker)

    process = find_process(client, identity)

    hostname, pid, suffix = identity.rsplit(":", 2)
    assert re.fullmatch(r"[0-9a-f]{12}", suffix)
    assert process.pid == worker.pid == int(pid)
    assert process.hostname == hostname
    assert process.concurrency == 3
    assert process.queues == ["default"]
    assert (process.busy, process.quiet) == (0, False)
    assert process.rss_kb is not None and process.rss_kb > 0
    assert process.started_at is not None and process.started_at <= time.time()
    assert process.last_beat is not None and abs(process.last_beat - redis_time(r)) <= 2

    producer.push({"class": "Api::Gate", "args": ["busy"]})
    wait_for(lambda: find_process(client, identity).busy == 1)
    r.set("test:gate:busy", 1)
    wait_for(lambda: find_process(client, identity).busy == 0)
    assert runs(r, "busy", "finished") == 1


def test_work_set_shows_the_running_job(
    worker: subprocess.Popen[bytes],
    r: redis.Redis,
    client: redis.Redis,
    producer: cogworker.Client,
) -> None:
    identity = identity_of(r, worker)
    before = int(time.time())
    jid = producer.push({"class": "Api::Gate", "args": ["work"]})

    def running() -> api.Work | None:
        return next((work for work in api.WorkSet(client) if work.job.get("jid") == jid), None)

    work = wait_for(running)

    assert work.identity == identity
    assert re.fullmatch(r"[0-9a-f]{12}", work.thread_id)
    assert work.queue == "default"
    assert work.run_at is not None and before - 1 <= work.run_at <= time.time() + 1
    assert work.job["class"] == "Api::Gate" and work.job["args"] == ["work"]
    assert api.WorkSet(client).size() == 1

    r.set("test:gate:work", 1)
    wait_for(lambda: api.WorkSet(client).size() == 0)


def test_quiet_resume_and_stop_reach_a_real_worker(
    worker: subprocess.Popen[bytes],
    r: redis.Redis,
    client: redis.Redis,
    producer: cogworker.Client,
) -> None:
    identity = identity_of(r, worker)
    wait_for(lambda: listening(r, identity))
    process = find_process(client, identity)

    assert process.quiet_down() == 1
    wait_for(lambda: find_process(client, identity).quiet)
    producer.push({"class": "Api::Count", "args": ["while-quiet"]})
    holds(lambda: runs(r, "while-quiet") == 0 and r.llen(keys.queue("default")) == 1, 1.0)

    assert process.resume() == 1
    wait_for(lambda: runs(r, "while-quiet") == 1)
    wait_for(lambda: not find_process(client, identity).quiet)

    assert process.stop() == 1
    assert worker.wait(20) == 0
    assert [p.identity for p in api.ProcessSet(client)] == []
    assert r.exists(keys.process(identity)) == 0


def test_figures_after_real_runs(
    worker: subprocess.Popen[bytes],
    r: redis.Redis,
    client: redis.Redis,
    producer: cogworker.Client,
) -> None:
    identity_of(r, worker)
    for marker in ("a", "b"):
        producer.push({"class": "Api::Count", "args": [marker]})
    failing = producer.push({"class": "Api::Fail", "args": ["x"], "retry": 1})
    assert failing is not None

    wait_for(lambda: api.stats(client).processed == 2 and api.stats(client).failed == 1)
    wait_for(lambda: api.retry_set(client).size() == 1)

    figures = api.stats(client)
    assert (figures.enqueued, figures.retry_size, figures.dead_size) == (0, 1, 0)
    series = api.throughput(client, hours=2)  # two buckets, in case the hour just turned
    assert sum(b["processed"] for b in series) == 2
    assert sum(b["failed"] for b in series) == 1
    (attempt,) = api.attempts(client, failing)
    assert attempt["attempt"] == 1
    assert attempt["outcome"] == "retrying"
    assert attempt["error_class"] == "RuntimeError"
    assert attempt["error_message"] == "failing on purpose: x"
    assert isinstance(attempt["failed_at"], float)
    (entry,) = api.retry_set(client).find_jobs(failing)
    assert entry.error == "RuntimeError: failing on purpose: x"
