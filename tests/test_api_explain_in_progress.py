"""``api.explain`` for jobs in progress, from planted process state: taken but not started,
lost with a process that kept no copy, orphaned without a last beat, and a job that only its
status knows. The same with real worker subprocesses is in test_explain_workers.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from api_support import client
from runtime_support import closing_pools

from cogworker import api, keys, wire
from cogworker.api import Place, Why

_fixtures = (client,)  # from api_support, named here for pytest

_close_pools = pytest.fixture(autouse=True)(closing_pools)


def payload(**fields: Any) -> dict[str, Any]:
    return {
        "class": "Explain::Job",
        "args": [1],
        "queue": "default",
        "jid": wire.new_jid(),
        **fields,
    }


def reason(found: api.Explanation, why: Why) -> api.Reason:
    (match,) = [item for item in found.reasons if item.why is why]
    return match


def plant_process(r: redis.Redis, identity: str, *, alive: bool, listed: list[str]) -> None:
    if alive:
        info = json.dumps({"hostname": "h", "pid": 1, "concurrency": 1, "queues": ["default"]})
        r.hset(keys.process(identity), mapping={"info": info, "busy": "1", "quiet": "false"})
    r.sadd(keys.PROCESSES, identity)
    if listed:
        r.lpush(keys.inprogress(identity), *listed)
        r.sadd(keys.INPROGRESS_IDENTITIES, identity)


def test_taken_by_a_live_process_but_not_running_yet(r: redis.Redis, client: redis.Redis) -> None:
    job = payload()
    plant_process(r, "h:1:aaaaaaaaaaaa", alive=True, listed=[wire.dumps(job)])

    found = api.explain(client, job["jid"])

    assert found.place is Place.TAKEN
    assert found.locations[0].identity == "h:1:aaaaaaaaaaaa"
    assert found.reasons == []


def test_running_at_a_process_gone_without_a_copy_is_lost(
    r: redis.Redis, client: redis.Redis
) -> None:
    job = payload()
    plant_process(r, "h:2:bbbbbbbbbbbb", alive=False, listed=[])
    entry = {"queue": "default", "payload": job, "run_at": 1_700_000_000}
    r.hset(keys.workers("h:2:bbbbbbbbbbbb"), "t1", json.dumps(entry))

    found = api.explain(client, job["jid"])

    assert found.place is Place.LOST
    assert (found.locations[0].thread_id, found.locations[0].at) == ("t1", 1_700_000_000)
    assert reason(found, Why.LOST_WITH_PROCESS).identities == ("h:2:bbbbbbbbbbbb",)


def test_orphan_without_a_last_beat_is_recoverable_now(r: redis.Redis, client: redis.Redis) -> None:
    job = payload()
    plant_process(r, "h:3:cccccccccccc", alive=False, listed=[wire.dumps(job)])
    r.set(keys.orphanings(job["jid"]), 2)

    found = api.explain(client, job["jid"])

    assert found.place is Place.ORPHANED
    recovery = reason(found, Why.AWAITING_RECOVERY)
    assert recovery.count == 2 and "recovered 2 time(s) before" in recovery.text
    assert "recovery may requeue it now" in recovery.text


def test_a_status_saying_queued_for_a_job_found_nowhere_is_missing(
    r: redis.Redis, client: redis.Redis
) -> None:
    jid = wire.new_jid()
    r.hset(keys.status(jid), mapping={"status": "queued", "update_time": "1700000000.0"})

    found = api.explain(client, jid)

    assert found.place is Place.MISSING and found.found
    assert "its status says 'queued', updated 2023-11-14 22:13:20 UTC" in found.reasons[0].text
