"""The Schedules tab's actions through the page's own forms, with and without JavaScript: run
now (onto the entry's queue; an until_executed entry's running lock taken, and a run refused
while one holds it), disable and enable, the search and page they keep, entries gone or
unreadable, awkward pjids, and refusals (cross-site, GET)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis
import web_support
from runtime_support import cogworker_log_records
from web_schedules_support import publish, queued, row_of, three
from web_support import client_for, form_with, forms, make_dash, post, submit

import cogworker
from cogworker import keys

_dash = pytest.fixture(name="dash")(web_support.dashboard)
_client = pytest.fixture(name="client")(web_support.dashboard_client)


def shown_after(client: Any, answer: Any, js: bool) -> str:
    if js:
        assert answer.status_code == 200 and "<html" not in answer.text
        return str(answer.text)
    assert answer.status_code == 303, answer.text
    return str(client.get(answer.headers["location"]).text)


_sessionless = pytest.fixture(name="sessionless")(web_support.sessionless_client)


# -- run now ---------------------------------------------------------------------------------


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_run_now_pushes_onto_the_entrys_queue(client: Any, r: redis.Redis, js: bool) -> None:
    entry = publish(
        r, "0 3 * * *", "Reports::Nightly", args=[7], retry=3, queue="low", last_slot=1_700_000_000
    )
    row = row_of(client.get("/schedules").text, "Reports::Nightly")
    shown = shown_after(client, submit(client, form_with(row, "run now"), js=js), js)
    assert "Queued one run of the entry on its queue" in shown
    (job,) = queued(r, "low")
    assert (job["class"], job["args"], job["retry"], job["queue"]) == (
        "Reports::Nightly",
        [7],
        3,
        "low",
    )
    assert "periodic_pjid" not in job and "periodic_slot" not in job
    assert r.llen(keys.queue("default")) == 0
    assert r.get(keys.periodic_last_slot(entry.pjid)) == "1700000000"  # not a slot


def test_run_now_of_an_until_executed_entry_holds_its_running_lock(
    client: Any, config: cogworker.Config, r: redis.Redis
) -> None:
    entry = publish(r, "* * * * *", "Exclusive", unique="until_executed")
    row = row_of(client.get("/schedules").text, "Exclusive")
    submit(client, form_with(row, "run now"), js=True)
    (job,) = queued(r, "default")
    assert job["periodic_pjid"] == entry.pjid and job["periodic_until_executed"] is True
    assert "periodic_slot" not in job
    lock = keys.periodic_running(entry.pjid)
    assert r.get(lock) == job["jid"]
    assert config.unique_lock_ttl - 5 <= r.ttl(lock) <= config.unique_lock_ttl
    # a second one is refused while the first holds the lock: no overlap
    shown = submit(client, form_with(row, "run now"), js=True).text
    assert "Not run: an earlier run of this until_executed entry is still queued" in shown
    assert r.llen(keys.queue("default")) == 1
    r.delete(lock)  # the run finished: the next one goes
    submit(client, form_with(row, "run now"), js=True)
    assert r.llen(keys.queue("default")) == 2


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_run_now_is_refused_while_a_cron_run_holds_the_lock(
    client: Any, r: redis.Redis, js: bool
) -> None:
    entry = publish(r, "* * * * *", "Busy", unique="until_executed")
    lock = keys.periodic_running(entry.pjid)
    r.set(lock, "cron-run-jid", ex=300)
    row = row_of(client.get("/schedules").text, "Busy")
    with cogworker_log_records() as records:
        shown = shown_after(client, submit(client, form_with(row, "run now"), js=js), js)
    assert "Not run: an earlier run of this until_executed entry" in shown
    assert r.llen(keys.queue("default")) == 0
    assert r.get(lock) == "cron-run-jid" and r.ttl(lock) > 250
    assert any("jid=cron-run-jid holds its running lock" in rec.getMessage() for rec in records)


def test_run_now_logs_what_it_pushed(client: Any, r: redis.Redis) -> None:
    entry = publish(r, "* * * * *", "Logged", queue="mail")
    with cogworker_log_records() as records:
        post(client, f"/schedules/{entry.pjid}/run_now", {"pjid": entry.pjid}, hx=True)
    (job,) = queued(r, "mail")
    lines = [rec.getMessage() for rec in records]
    assert lines == [
        f"Web: ran periodic entry {entry.pjid!r} now: pushed 'Logged' jid={job['jid']} onto "
        "queue 'mail', where it waits its turn (from testclient)"
    ]


class Refuse:
    """A client middleware that stops every push (as a unique-job lock does)."""

    def __call__(
        self, job_class: str, job: Any, queue: str, client: Any, call_next: Callable[[], None]
    ) -> None:
        return None


def test_a_push_a_client_middleware_stops_leaves_no_lock(
    config: cogworker.Config, r: redis.Redis
) -> None:
    config.client_middleware.add(Refuse)
    dashboard = make_dash(config)
    try:
        with client_for(dashboard) as refused:
            entry = publish(r, "* * * * *", "Stopped", unique="until_executed")
            shown = post(refused, f"/schedules/{entry.pjid}/run_now", {"pjid": entry.pjid}, hx=True)
            assert "a client middleware (a unique-job lock, say) stopped the push" in shown.text
            assert r.exists(keys.periodic_running(entry.pjid)) == 0
            assert r.llen(keys.queue("default")) == 0
    finally:
        dashboard.close()


def test_run_now_of_an_entry_gone_or_unreadable_pushes_nothing(client: Any, r: redis.Redis) -> None:
    r.hset(
        keys.PERIODIC_SCHEDULE, mapping={"broken": "{not json", "noclass": '{"cron":"* * * * *"}'}
    )
    gone = post(client, "/schedules/vanished/run_now", {"pjid": "vanished"}, hx=True).text
    assert "That entry is no longer published by any worker" in gone
    for pjid in ("broken", "noclass"):
        shown = post(client, f"/schedules/{pjid}/run_now", {"pjid": pjid}, hx=True).text
        assert "can&#39;t be read as a job, so it can&#39;t be run" in shown
    assert [str(k) for k in r.keys("cogworker:queue:*")] == []


# -- disable and enable ----------------------------------------------------------------------


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_disable_then_enable(client: Any, r: redis.Redis, js: bool) -> None:
    entry = publish(r, "* * * * *", "Toggled", last_slot=1_700_000_040)
    row = row_of(client.get("/schedules").text, "Toggled")
    shown = shown_after(client, submit(client, form_with(row, "disable"), js=js), js)
    assert r.sismember(keys.PERIODIC_DISABLED, entry.pjid)
    row = row_of(shown, "Toggled")
    assert '<span class="tag tag-warning">Disabled</span>' in row
    assert '<em class="muted">disabled</em>' in row  # no next run while disabled
    assert "2023-11-14T22:14:00Z" in row  # the last real run stays
    assert [f.button for f in forms(row)] == ["run now", "enable"]
    assert "Disabled: workers skip its slots until it is enabled again" in shown
    shown = shown_after(client, submit(client, form_with(row, "enable"), js=js), js)
    assert not r.sismember(keys.PERIODIC_DISABLED, entry.pjid)
    row = row_of(shown, "Toggled")
    assert '<span class="tag tag-success">Enabled</span>' in row
    assert [f.button for f in forms(row)] == ["run now", "disable"]
    assert "Enabled: workers run its next slot" in shown


def test_disabling_an_entry_that_is_not_published_changes_nothing(
    client: Any, r: redis.Redis
) -> None:
    shown = post(client, "/schedules/nope/disable", {"pjid": "nope"}, hx=True).text
    assert "no longer published" in shown
    assert r.exists(keys.PERIODIC_DISABLED) == 0
    r.sadd(keys.PERIODIC_DISABLED, "stale")  # enabling clears a flag left behind anyway
    post(client, "/schedules/stale/enable", {"pjid": "stale"}, hx=True)
    assert r.exists(keys.PERIODIC_DISABLED) == 0


def test_an_action_keeps_the_search(client: Any, sessionless: Any, r: redis.Redis) -> None:
    three(r)
    entry = publish(r, "0 5 * * *", "Purge::Later")
    html = client.get("/schedules?q=PURGE").text
    row = row_of(html, "Purge::Later")
    form = form_with(row, "disable")
    assert form.values()["q"] == "PURGE"
    fragment = submit(client, form, js=True).text
    assert "2 of 4 shown" in fragment and "Reports::Daily" not in fragment
    answer = submit(sessionless, form_with(row_of(html, "Purge::Later"), "run now"), js=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/schedules?q=PURGE&notice=schedule_run"
    assert r.sismember(keys.PERIODIC_DISABLED, entry.pjid)


def test_an_awkward_pjid_is_named_exactly(client: Any, b: redis.Redis) -> None:
    value = json.dumps({"cron": "* * * * *", "class": "Odd"})
    awkward = {b"a/b c+%", b"line\nbreak", b"..", b"caf\xe9"}  # the last isn't UTF-8
    for pjid in awkward:
        b.hset(keys.PERIODIC_SCHEDULE, pjid, value)
    html = client.get("/schedules").text
    disables = [form for form in forms(html) if form.button == "disable"]
    assert len(disables) == 4
    for form in disables:
        assert submit(client, form, js=True).status_code == 200
    assert b.smembers(keys.PERIODIC_DISABLED) == awkward
    for form in disables:
        submit(client, form, js=False)  # without JavaScript: the same exact names
    run = [form for form in forms(html) if form.button == "run now"]
    for form in run:
        submit(client, form, js=False)
    assert b.llen(keys.queue("default")) == 4


def test_a_get_of_an_action_is_not_found(client: Any, r: redis.Redis) -> None:
    entry = publish(r, "* * * * *", "NoGet")
    for name in ("run_now", "disable", "enable"):
        assert client.get(f"/schedules/{entry.pjid}/{name}").status_code in (404, 405)
    assert r.llen(keys.queue("default")) == 0


def test_a_cross_site_action_is_refused(client: Any, r: redis.Redis) -> None:
    entry = publish(r, "* * * * *", "Guarded")
    answer = client.post(
        f"/schedules/{entry.pjid}/disable",
        data={"pjid": entry.pjid},
        headers={"sec-fetch-site": "cross-site"},
    )
    assert answer.status_code == 403
    assert r.exists(keys.PERIODIC_DISABLED) == 0
