"""periodic.admin.run_now, the console's and the CLI's spelling of the Schedules tab's action:
an until_executed entry's run holds its running lock, so a second run can't overlap it."""

from __future__ import annotations

import json

import pytest
import redis

import cogworker
from cogworker import keys
from cogworker.client import Client
from cogworker.periodic import admin

PJID = "e" * 40


def publish(r: redis.Redis, unique: str | None) -> None:
    """The entry as any process of the fleet publishes it (a Ruby one included)."""
    value = {"cron": "0 * * * *", "class": "Reports::Daily", "args": [7], "retry": 2}
    r.hset(keys.PERIODIC_SCHEDULE, PJID, json.dumps(value | {"unique": unique, "queue": "reports"}))


def queued(r: redis.Redis) -> list[dict[str, object]]:
    return [json.loads(raw) for raw in r.lrange(keys.queue("reports"), 0, -1)]


def test_an_until_executed_run_holds_the_entry_until_it_ends(
    config: cogworker.Config, r: redis.Redis
) -> None:
    publish(r, "until_executed")
    client = Client(config)
    jid = admin.run_now(client, PJID)
    assert jid is not None and r.get(keys.periodic_running(PJID)) == jid
    [job] = queued(r)
    assert job["jid"] == jid and job["periodic_pjid"] == PJID and job["args"] == [7]
    # the lock outlives the push: it lasts until the run releases it
    assert r.ttl(keys.periodic_running(PJID)) > 20

    with pytest.raises(admin.EntryBusy, match=f"jid={jid} still holds it"):
        admin.run_now(client, PJID)
    assert len(queued(r)) == 1  # nothing pushed

    r.delete(keys.periodic_running(PJID))  # what the run does when it ends
    assert admin.run_now(client, PJID) not in (None, jid)
    assert len(queued(r)) == 2


def test_a_plain_entry_runs_now_as_often_as_asked(config: cogworker.Config, r: redis.Redis) -> None:
    publish(r, None)
    client = Client(config)
    first, second = admin.run_now(client, PJID), admin.run_now(client, PJID)
    assert first != second and [job["jid"] for job in queued(r)] == [second, first]
    assert r.exists(keys.periodic_running(PJID)) == 0


def test_an_unreadable_or_missing_entry_is_refused(
    config: cogworker.Config, r: redis.Redis
) -> None:
    client = Client(config)
    with pytest.raises(KeyError, match="no periodic entry"):
        admin.run_now(client, PJID)
    r.hset(keys.PERIODIC_SCHEDULE, PJID, "{not json")
    with pytest.raises(ValueError, match="not a readable job"):
        admin.run_now(client, PJID)
    assert queued(r) == []
