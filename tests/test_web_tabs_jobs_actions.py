"""The Jobs tab's actions through the page's own forms, with and without JavaScript: their
effect in Redis, notice and redirect; entries that moved or went away between the page and the
click; refusals (bad minutes, cross-site requests); the view and panel after an action."""

from __future__ import annotations

import html as html_module
import json
import time
from typing import Any

import pytest
import redis
import web_support
from runtime_support import cogworker_log_records
from web_support import (
    HX,
    add_to_set,
    client_for,
    form_with,
    forms,
    jids,
    job,
    panel_of,
    post,
    push,
    selection_link,
    submit,
)

from cogworker import api, keys, wire
from cogworker.web.tabs.jobs import ROUTES

_dash = pytest.fixture(name="dash")(web_support.dashboard)
_client = pytest.fixture(name="client")(web_support.dashboard_client)


_sessionless = pytest.fixture(name="sessionless")(web_support.sessionless_client)


def shown_after(client: Any, answer: Any, js: bool) -> str:
    """What the browser shows after an action: the fragment, or the page redirected to."""
    if js:
        assert answer.status_code == 200 and "<html" not in answer.text
        return str(answer.text)
    assert answer.status_code == 303, answer.text
    return str(client.get(answer.headers["location"]).text)


def button_for(html: str, raw: str, button: str) -> Any:
    """The form of the button ``button`` acting on the entry ``raw``."""
    return next(f for f in forms(html) if f.values().get("raw") == raw and f.button == button)


def attempt_log(r: redis.Redis, jid: str) -> None:
    r.rpush(keys.job_attempts(jid), wire.dumps({"attempt": 1, "outcome": "retrying"}))


def confirmed(client: Any, form: Any, js: bool) -> Any:
    """Submit a form that asks first: the dialog's yes with JavaScript, else through the
    confirmation page the button leads to."""
    assert form.confirm
    if js:
        return submit(client, form, js=True)
    page = submit(client, form, js=False)
    assert page.status_code == 200 and "This can't be undone." in html_module.unescape(page.text)
    return submit(client, the_post(page.text), js=False)


def the_post(html: str) -> Any:
    """The form of a confirmation page that posts (the header's intake buttons aside)."""
    posting = [f for f in forms(html) if f.method == "post" and f.action.startswith("/jobs/")]
    assert len(posting) == 1
    return posting[0]


# -- deleting --------------------------------------------------------------------------------


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_deleting_an_enqueued_job_removes_every_copy(client: Any, r: redis.Redis, js: bool) -> None:
    raw = push(r, "low prio/+%", jid="twice")
    r.lpush(keys.queue("low prio/+%"), raw)
    keep = push(r, "low prio/+%", jid="keep")
    html = client.get("/jobs").text
    delete = button_for(html, raw, "delete")
    assert delete.confirm and delete.confirm.startswith("Delete job twice (Demo::Job) from queue")
    shown = shown_after(client, confirmed(client, delete, js), js)
    assert r.lrange(keys.queue("low prio/+%"), 0, -1) == [keep]
    assert "Deleted the job (2 copies)." in shown and jids(shown) == ["keep"]


@pytest.mark.parametrize("status", ["Scheduled", "Retrying", "Dead"])
@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_deleting_from_a_set_removes_the_entry_and_its_retry_history(
    client: Any, r: redis.Redis, status: str, js: bool
) -> None:
    key = {"Scheduled": keys.SCHEDULE, "Retrying": keys.RETRY, "Dead": keys.DEAD}[status]
    raw = add_to_set(r, key, time.time() + 60, jid="gone-soon")
    add_to_set(r, key, time.time() + 90, jid="stays")
    attempt_log(r, "gone-soon")
    html = client.get(f"/jobs?status={status}").text
    delete = button_for(html, raw, "delete")
    shown = shown_after(client, confirmed(client, delete, js), js)
    assert "Deleted the job." in shown and jids(shown) == ["stays"]
    assert r.zscore(key, raw) is None and r.zcard(key) == 1
    assert not r.exists(keys.job_attempts("gone-soon"))
    if not js:
        assert html_module.unescape(shown).count(f'hx-get="/jobs?status={status}"') == 1


def test_deleting_an_entry_that_is_gone_changes_nothing_and_says_so(
    client: Any, r: redis.Redis
) -> None:
    raw = add_to_set(r, keys.DEAD, jid="ran-away")
    delete = form_with(client.get("/jobs").text, "delete")
    assert r.zrem(keys.DEAD, raw) == 1  # someone else deleted it meanwhile
    answer = submit(client, delete, js=True)
    assert "That job was no longer there" in answer.text
    page = submit(client, delete, js=False)  # the confirmation page can't find it either
    assert page.status_code == 404 and "Nothing was deleted." in page.text


# -- putting back on a queue -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "button"),
    [("Retrying", "retry now"), ("Dead", "retry"), ("Scheduled", "add to queue")],
)
@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_retrying_puts_the_exact_job_back_on_its_queue_once(
    client: Any, r: redis.Redis, status: str, button: str, js: bool
) -> None:
    key = {"Scheduled": keys.SCHEDULE, "Retrying": keys.RETRY, "Dead": keys.DEAD}[status]
    stored = job(jid="again", queue="mail", args=[{"n": 2**60 + 1}], retry_count=3)
    raw = wire.dumps(stored)
    r.zadd(key, {raw: time.time() + 60})
    link = selection_link(client.get(f"/jobs?status={status}").text, "again")
    form = form_with(panel_of(client.get(link).text), button)
    before = wire.now()
    shown = shown_after(client, submit(client, form, js=js), js)
    assert "The job is back on its queue" in shown
    assert r.zcard(key) == 0 and r.sismember(keys.QUEUES, "mail")
    queued = json.loads(r.lindex(keys.queue("mail"), 0))
    assert queued.pop("enqueued_at") >= before and queued == stored  # big ints intact
    panel = panel_of(shown)  # the panel follows the job by its jid
    assert ">again<" in panel and 'data-cw-load="/jobs/explain?' in panel
    again = submit(client, form, js=js)  # a double submission queues it once
    assert r.llen(keys.queue("mail")) == 1
    assert "That entry was no longer there" in shown_after(client, again, js)


def test_an_entry_without_a_queue_stays_and_the_notice_says_why(
    sessionless: Any, r: redis.Redis
) -> None:
    raw = wire.dumps({"class": "Orphan", "jid": "noqueue", "args": []})
    r.zadd(keys.DEAD, {raw: 1})
    html = sessionless.get("/jobs?status=Dead").text
    assert not [f for f in forms(html) if f.button.strip() == "retry"]  # not offered
    answer = post(sessionless, "/jobs/dead/retry", {"raw": raw, "status": "Dead"})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/jobs?status=Dead&notice=not_requeueable"
    page = sessionless.get(answer.headers["location"]).text
    assert "be put back on a queue" in page and 'hx-get="/jobs?status=Dead"' in page
    assert "be put back on a queue" not in sessionless.get("/jobs?status=Dead", headers=HX).text
    r.zadd(keys.RETRY, {"{not json": 1})
    buried = post(sessionless, "/jobs/retrying/retry_now", {"raw": "{not json"}, hx=True)
    assert "be put back on a queue" in buried.text
    assert r.zscore(keys.DEAD, raw) == 1 and r.zscore(keys.RETRY, "{not json") == 1


@pytest.mark.parametrize("status", ["Retrying", "Dead"])
def test_retry_all_moves_what_can_go_back_and_leaves_the_rest(
    client: Any, r: redis.Redis, status: str
) -> None:
    key = keys.RETRY if status == "Retrying" else keys.DEAD
    for number in range(3):
        add_to_set(r, key, number, jid=f"back{number}", queue="default" if number else "low")
    r.zadd(key, {"[1, 2]": 9})
    form = form_with(client.get(f"/jobs?status={status}").text, "retry all")
    shown = html_module.unescape(submit(client, form, js=True).text)
    assert "3 jobs went back on their queues; the entries that can't be put back" in shown
    assert r.zrange(key, 0, -1) == ["[1, 2]"]
    assert r.llen(keys.queue("default")) == 2 and r.llen(keys.queue("low")) == 1
    r.zrem(key, "[1, 2]")
    assert (
        "The set was empty: nothing changed."
        in post(client, f"/jobs/{status.lower()}/retry_all", {"status": status}, hx=True).text
    )


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_delete_all_empties_the_set_and_its_retry_histories(
    client: Any, r: redis.Redis, js: bool
) -> None:
    for number in range(3):
        add_to_set(r, keys.DEAD, number, jid=f"dead{number}")
        attempt_log(r, f"dead{number}")
    add_to_set(r, keys.RETRY, jid="retrying")
    form = form_with(client.get("/jobs?status=Dead").text, "delete all")
    assert form.confirm and form.confirm.startswith("Delete all 3 entries of the dead set?")
    shown = shown_after(client, confirmed(client, form, js), js)
    assert "Deleted 3 entries of the set." in shown
    assert r.zcard(keys.DEAD) == 0 and r.zcard(keys.RETRY) == 1
    assert not any(r.exists(keys.job_attempts(f"dead{number}")) for number in range(3))
    assert "delete all" not in shown  # nothing left to delete


# -- rescheduling and killing ----------------------------------------------------------------


@pytest.mark.parametrize("status", ["Scheduled", "Retrying"])
def test_reschedule_moves_the_due_time_in_one_step(
    client: Any, r: redis.Redis, status: str
) -> None:
    key = keys.SCHEDULE if status == "Scheduled" else keys.RETRY
    raw = add_to_set(r, key, time.time() + 60, jid="later")
    link = selection_link(client.get(f"/jobs?status={status}").text, "later")
    form = form_with(panel_of(client.get(link).text), "reschedule")
    data = [(f.name, "30" if f.name == "minutes" else f.value) for f in form.fields]
    before = wire.now()
    answer = post(client, form.hx_post or "", data, hx=True)
    after = wire.now()
    score = r.zscore(key, raw)
    assert score is not None and before + 1800 <= score <= after + 1800
    assert r.zcard(key) == 1 and "it is due in 30 minutes" in answer.text
    assert ">later<" in panel_of(answer.text)  # the panel follows it to its new due time
    assert "no longer where the page saw it" not in answer.text


@pytest.mark.parametrize("minutes", ["0", "10081", "999999999", "abc", "", "1.5"])
def test_reschedule_refuses_minutes_out_of_range(client: Any, r: redis.Redis, minutes: str) -> None:
    raw = add_to_set(r, keys.SCHEDULE, 100.0, jid="stays")
    answer = post(client, "/jobs/scheduled/reschedule", {"raw": raw, "minutes": minutes}, hx=True)
    assert answer.status_code == 400
    assert answer.text == (
        f"Bad request: minutes must be a whole number from 1 to 10080 (a week) (got {minutes!r})"
    )
    assert r.zscore(keys.SCHEDULE, raw) == 100.0


def test_reschedule_of_an_entry_that_is_gone_changes_nothing(client: Any, r: redis.Redis) -> None:
    raw = wire.dumps(job(jid="never-there"))
    answer = post(client, "/jobs/retrying/reschedule", {"raw": raw, "minutes": "5"}, hx=True)
    assert answer.status_code == 200 and "That entry was no longer there" in answer.text
    assert r.zcard(keys.RETRY) == 0


def test_kill_moves_a_retrying_job_to_the_dead_set(client: Any, r: redis.Redis) -> None:
    raw = add_to_set(r, keys.RETRY, time.time() + 60, jid="doomed")
    link = selection_link(client.get("/jobs?status=Retrying").text, "doomed")
    shown = submit(client, form_with(panel_of(client.get(link).text), "kill"), js=False)
    assert shown.status_code == 303 and r.zscore(keys.DEAD, raw) is not None
    assert r.zcard(keys.RETRY) == 0
    assert "Moved the job to the dead set" in client.get(shown.headers["location"]).text


# -- entries that moved, refusals, logs ------------------------------------------------------


def test_an_action_acts_on_the_entry_wherever_it_moved(client: Any, r: redis.Redis) -> None:
    raws = [push(r, "default", jid=f"q{number}") for number in range(5)]
    html = client.get("/jobs").text
    delete = button_for(html, raws[3], "delete")
    for _ in range(2):
        r.rpop(keys.queue("default"))  # workers took q0 and q1: q3 moved up the line
    push(r, "default", jid="newer")
    page = submit(client, delete, js=False)  # the confirmation page still finds it
    assert page.status_code == 200 and "Delete job q3" in page.text
    submit(client, the_post(page.text), js=False)
    assert raws[3] not in r.lrange(keys.queue("default"), 0, -1)
    assert r.llen(keys.queue("default")) == 3


def test_every_jobs_action_refuses_a_cross_site_request(client: Any, r: redis.Redis) -> None:
    raw = add_to_set(r, keys.RETRY, jid="safe")
    routes = [f"/jobs/{status.slug}/{name}" for status, names in ROUTES.items() for name in names]
    assert len(routes) == 15
    for route in routes:
        for headers in ({"sec-fetch-site": "cross-site"}, {"origin": "http://evil.example"}, {}):
            answer = client.post(route, data={"raw": raw, "minutes": "5"}, headers=headers)
            assert answer.status_code == 403 and answer.text == "Forbidden", (route, headers)
    assert r.zrange(keys.RETRY, 0, -1) == [raw]
    assert client.get("/jobs/retrying/retry_now").status_code == 405  # POST only


def test_actions_keep_the_view_and_close_a_panel_whose_entry_left(
    client: Any, r: redis.Redis
) -> None:
    for number in range(3):
        add_to_set(r, keys.DEAD, number, jid=f"d{number}", **{"class": "Kept"})
    open_on_d1 = selection_link(client.get("/jobs?status=Dead&q=kept").text, "d1")
    page = client.get(open_on_d1).text
    other = [f for f in forms(page) if f.button.strip() == "delete" and "d0" in (f.confirm or "")]
    answer = submit(client, other[0], js=True)  # another row: the panel stays open on d1
    assert jids(answer.text) == ["d2", "d1"] and ">d1<" in panel_of(answer.text)
    mine = next(f for f in forms(panel_of(page)) if f.button == "delete")
    asked = submit(client, mine, js=False)
    done = submit(client, the_post(asked.text), js=False)
    assert done.headers["location"] == "/jobs?status=Dead&q=kept"  # its panel closed


def test_each_action_logs_one_line_with_the_jid(client: Any, r: redis.Redis) -> None:
    raw = add_to_set(r, keys.RETRY, jid="logged", **{"class": "Billing::Invoice"})
    with cogworker_log_records() as records:
        post(client, "/jobs/retrying/retry_now", {"raw": raw}, hx=True)
    lines = [record.getMessage() for record in records if record.getMessage().startswith("Web:")]
    assert lines == [
        "Web: put job 'logged' ('Billing::Invoice') from the retry set back on queue 'default': "
        "it runs after the jobs waiting there (from testclient)"
    ]


def test_an_entry_that_is_not_text_travels_and_is_deleted_by_its_bytes(
    client: Any, r: redis.Redis, redis_url: str
) -> None:
    exact = b'{"class":"X","jid":"bin","queue":"q","args":["\xff\r\n"]}'
    raw_bytes = redis.Redis.from_url(redis_url)
    try:
        raw_bytes.zadd(keys.DEAD, {exact: 1, b"{good}": 2})
        html = client.get("/jobs?status=Dead").text
        delete = next(f for f in forms(html) if f.values().get("raw_b64"))
        assert submit(client, delete, js=True).status_code == 200
        assert raw_bytes.zrange(keys.DEAD, 0, -1) == [b"{good}"]
    finally:
        raw_bytes.close()
    assert api.dead_set(r).size() == 1


def test_under_a_mount_prefix_every_link_form_and_redirect_keeps_it(
    dash: Any, r: redis.Redis
) -> None:
    raw = add_to_set(r, keys.DEAD, jid="mounted")
    with client_for(dash, root_path="/ops/cw") as mounted:
        html = mounted.get("/ops/cw/jobs?status=Dead").text
        assert 'id="jobs-content" hx-get="/ops/cw/jobs?status=Dead"' in html
        assert 'action="/ops/cw/jobs"' in html  # the search
        link = selection_link(html, "mounted")
        assert link.startswith("/ops/cw/jobs?status=Dead&selected=mounted&entry=dead%3A")
        panel = mounted.get(link).text
        assert 'data-cw-load="/ops/cw/jobs/explain?' in panel
        retry = form_with(panel_of(panel), "retry")
        assert retry.action == retry.hx_post == "/ops/cw/jobs/dead/retry"
        answer = submit(mounted, retry, js=False)
    assert answer.headers["location"] == "/ops/cw/jobs?status=Dead&selected=mounted"
    assert r.zscore(keys.DEAD, raw) is None and r.llen(keys.queue("default")) == 1
