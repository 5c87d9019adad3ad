"""The Overview tab: layout A (counters, queues, Redis), layout B (one queue's jobs and
counters), and every queue action with and without JavaScript, through the page's own forms,
including queue names that need encoding and the no-JavaScript confirmation pages."""

from __future__ import annotations

import re
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
    get_once,
    inner_html,
    job,
    make_dash,
    plant_process,
    plant_work,
    post,
    push,
    submit,
)

import cogworker
from cogworker import keys, wire
from cogworker.web.queue_actions import share_of_set
from cogworker.web.tabs.overview_data import redis_info

JAN_2 = 1767323045.0  # 2026-01-02 03:04:05 UTC

_dash = pytest.fixture(name="dash")(web_support.dashboard)
_client = pytest.fixture(name="client")(web_support.dashboard_client)


def card(html: str, label: str) -> str:
    found = re.search(rf'card-label">{label}</span><span class="card-value">([\d,]+)<', html)
    assert found is not None, f"no card {label}"
    return found.group(1)


# -- layout A --------------------------------------------------------------------------------


def test_layout_a_shows_the_counters_queues_and_redis(client: Any, r: redis.Redis) -> None:
    r.set(keys.STATS_PROCESSED, 1234)
    r.set(keys.STATS_FAILED, 3)
    push(r, "default", enqueued_at=time.time() - 90)
    push(r, "default")
    push(r, "low")
    r.sadd(keys.PAUSED_QUEUES, "low")
    add_to_set(r, keys.SCHEDULE, time.time() + 60)
    add_to_set(r, keys.RETRY, time.time() + 60)
    for _ in range(4):
        add_to_set(r, keys.DEAD)
    html = client.get("/overview?layout=a").text
    assert (card(html, "Processed"), card(html, "Failed"), card(html, "Enqueued")) == (
        "1,234",
        "3",
        "3",
    )
    assert (card(html, "Scheduled"), card(html, "Retrying"), card(html, "Dead")) == ("1", "1", "4")
    queues = inner_html(html, "overview-content")
    assert queues.index(">default</a>") < queues.index(">low</a>")
    assert 'href="/overview?layout=b&amp;queue=low"' in queues
    assert re.search(r">low</a> <span class=\"tag tag-warning\">paused</span>", queues)
    assert re.search(r">1\.5m<", queues)  # the oldest default job waited 90 s
    assert form_with(html, "pause", "/overview/default/pause").values()["layout"] == "a"
    assert form_with(html, "resume", "/overview/low/resume").values()["layout"] == "a"
    assert '<svg class="bar' in queues
    redis_part = inner_html(html, "overview-redis-content")
    assert str(r.info()["redis_version"]) in redis_part and "Peak memory usage" in redis_part
    assert html.index('id="overview-content"') < html.index('id="overview-redis-content"')


def test_the_mount_root_is_the_overview(client: Any, r: redis.Redis) -> None:
    push(r, "default")
    root = client.get("/")
    assert root.status_code == 200
    assert 'id="overview-content" hx-get="/overview?layout=a"' in root.text
    assert 'hx-trigger="every 3s [window.cogworkerLiveUpdate]"' in root.text


def test_without_queues_the_overview_says_how_to_get_one(client: Any) -> None:
    for layout in ("a", "b"):
        assert (
            "No queues yet — push a job to create one."
            in client.get(f"/overview?layout={layout}").text
        )


def test_a_refresh_gets_only_the_content(client: Any, r: redis.Redis) -> None:
    push(r, "default")
    fragment = client.get("/overview?layout=a", headers=HX).text
    assert "<html" not in fragment and "cw-tabs" not in fragment
    assert "Queues" in fragment and "overview-redis-content" not in fragment
    redis_fragment = client.get("/overview/redis").text
    assert "<html" not in redis_fragment and "Version" in redis_fragment


def test_missing_redis_figures_show_as_not_available() -> None:
    class Silent:
        def info(self) -> dict[str, Any]:
            return {"redis_version": "7.9.9"}

    shown = dict(redis_info(Silent()))  # type: ignore[arg-type]
    assert shown["Version"] == "7.9.9"
    assert shown["Uptime (days)"] == shown["Peak memory usage"] == "n/a"


# -- layout B --------------------------------------------------------------------------------


def test_layout_b_lists_the_first_queue_newest_first(client: Any, r: redis.Redis) -> None:
    push(r, "beta", jid="old", **{"class": "Old::Job"}, args=[1, "a"], enqueued_at=JAN_2)
    push(r, "beta", jid="new", **{"class": "New::Job"}, args=[{"k": "v"}])
    push(r, "gamma")
    html = client.get("/overview?layout=b").text
    content = inner_html(html, "overview-content")
    assert 'id="overview-content" hx-get="/overview?layout=b"' in html
    assert content.index(">new<") < content.index(">old<")
    assert "[1,&#34;a&#34;]" in content and "New::Job" in content
    assert 'datetime="2026-01-02T03:04:05Z" data-cw-time>2026-01-02 03:04:05<' in content
    assert form_with(html, "delete all", "/overview/beta/delete_all")
    assert "retry all" not in content  # nothing of beta is retrying


def test_layout_b_keeps_its_queue_in_the_refresh_url(client: Any, r: redis.Redis) -> None:
    push(r, "beta")
    html = client.get("/overview?layout=b&queue=beta").text
    assert 'id="overview-content" hx-get="/overview?layout=b&amp;queue=beta"' in html


def test_an_unknown_queue_is_still_shown(client: Any, r: redis.Redis) -> None:
    push(r, "beta")
    html = client.get("/overview?layout=b&queue=nosuch").text
    assert "not a known queue" in html and "This queue is empty." in html
    assert "delete all" not in inner_html(html, "overview-content")


def test_layout_b_counts_this_queues_running_retrying_and_dead_jobs(
    client: Any, r: redis.Redis
) -> None:
    push(r, "beta")
    plant_process(r, "host:1:aaa")
    plant_work(r, "host:1:aaa", "t1", job(queue="beta"), int(time.time()))
    plant_work(r, "host:1:aaa", "t2", job(queue="other"), int(time.time()))
    add_to_set(r, keys.RETRY, queue="beta")
    add_to_set(r, keys.RETRY, queue="other", args=[{"queue": "beta"}])  # nested: not beta's
    r.zadd(keys.RETRY, {'{"class": "Spaced", "queue": "beta", "jid": "s"}': 1})
    add_to_set(r, keys.DEAD, queue="beta")
    add_to_set(r, keys.DEAD, queue="betamax")
    r.zadd(keys.DEAD, {"{not json": 1, "[1, 2]": 2})
    html = client.get("/overview?layout=b&queue=beta").text
    assert (card(html, "Enqueued"), card(html, "Running")) == ("1", "1")
    assert (card(html, "Retrying"), card(html, "Dead")) == ("2", "1")
    assert form_with(html, "retry all", "/overview/beta/retry_all")


def test_the_share_of_a_large_set_is_counted_among_its_newest_entries(
    config: cogworker.Config, r: redis.Redis
) -> None:
    for i in range(150):
        add_to_set(r, keys.DEAD, score=i, queue="beta" if i % 2 else "other")
    share = share_of_set(r, keys.DEAD, "beta", 100)
    assert (share.count, share.scanned, share.total, share.complete) == (50, 100, 150, False)
    dashboard = make_dash(config, queue_scan_limit=100)
    html = get_once(dashboard, "/overview?layout=b&queue=beta").text
    assert "among the newest 100 of 150" in html


def test_layout_b_pages_through_a_long_queue(config: cogworker.Config, r: redis.Redis) -> None:
    for i in range(5):
        push(r, "beta", jid=f"job{i}")
    dashboard = make_dash(config, queue_page_size=2)
    try:
        with client_for(dashboard) as test_client:
            first = test_client.get("/overview?layout=b&queue=beta").text
            last = test_client.get("/overview?layout=b&queue=beta&page=3").text
            beyond = test_client.get("/overview?layout=b&queue=beta&page=9").text
            bad = test_client.get("/overview?layout=b&queue=beta&page=0")
    finally:
        dashboard.close()
    assert ">job4<" in first and ">job3<" in first and ">job2<" not in first
    assert "page 1 of 3" in first and 'href="/overview?layout=b&amp;queue=beta&amp;page=2"' in first
    assert ">job0<" in last and ">job1<" not in last and "Older" not in last
    assert ">job0<" in beyond  # past the end: the last page
    assert (
        bad.status_code == 400
        and bad.text == "Bad request: page must be a whole number from 1 (got '0')"
    )


# -- actions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_pause_and_resume(client: Any, r: redis.Redis, js: bool) -> None:
    push(r, "beta")
    page = client.get("/overview?layout=b&queue=beta").text
    answer = submit(client, form_with(page, "pause"), js=js)
    assert r.sismember(keys.PAUSED_QUEUES, "beta")
    if js:
        assert answer.status_code == 200 and "<html" not in answer.text
        assert "Queue paused" in answer.text and 'tag-warning">paused' in answer.text
        page = answer.text
    else:
        assert answer.status_code == 303
        assert answer.headers["location"] == "/overview?layout=b&queue=beta"
        page = client.get(answer.headers["location"]).text
        assert "Queue paused" in page
    answer = submit(client, form_with(page, "resume"), js=js)
    assert not r.sismember(keys.PAUSED_QUEUES, "beta")
    shown = answer.text if js else client.get(answer.headers["location"]).text
    assert "Queue resumed" in shown and form_with(shown, "pause")


def test_each_action_is_one_log_line(client: Any, r: redis.Redis) -> None:
    push(r, "beta", jid="j-1")
    page = client.get("/overview?layout=b&queue=beta").text
    with cogworker_log_records() as records:
        submit(client, form_with(page, "pause"), js=True)
        submit(client, form_with(page, "delete"), js=True)
    lines = [record.getMessage() for record in records]
    assert lines == [
        "Web: paused queue 'beta': workers take no jobs from it until resumed (from testclient)",
        "Web: deleted job 'j-1' from queue 'beta': it won't run (from testclient)",
    ]


def test_an_action_from_layout_a_answers_layout_a(client: Any, r: redis.Redis) -> None:
    push(r, "beta")
    page = client.get("/overview?layout=a").text
    answer = submit(client, form_with(page, "pause"), js=True)
    assert 'aria-current="page">A · Metrics first' in answer.text
    assert submit(client, form_with(page, "pause"), js=False).headers["location"] == (
        "/overview?layout=a"
    )


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_delete_removes_every_copy_of_exactly_that_job(
    client: Any, r: redis.Redis, js: bool
) -> None:
    raw = push(r, "beta", jid="twice")
    r.lpush(keys.queue("beta"), raw)
    keep = push(r, "beta", jid="keep")
    page = client.get("/overview?layout=b&queue=beta").text
    delete = [f for f in forms(page) if f.hx_post == "/overview/beta/delete"]
    target = next(f for f in delete if "twice" in (f.confirm or ""))
    assert target.confirm == (
        "Delete job twice (Demo::Job) from queue beta? It will not run. This can't be undone."
    )
    answer = submit(client, target, js=js)
    if not js:  # the button leads to a confirmation page, whose form posts
        assert answer.status_code == 200 and "Delete job twice (Demo::Job)" in answer.text
        answer = submit(client, form_with(answer.text, "Delete job"), js=False)
        assert answer.status_code == 303
        answer = client.get(answer.headers["location"])
    assert "Deleted the job (2 copies)." in answer.text
    assert r.lrange(keys.queue("beta"), 0, -1) == [keep]


def test_deleting_a_job_that_is_gone_says_so(client: Any, r: redis.Redis) -> None:
    raw = push(r, "beta")
    page = client.get("/overview?layout=b&queue=beta").text
    delete = form_with(page, "delete", "/overview/beta/delete")
    r.lrem(keys.queue("beta"), 0, raw)
    assert "That job was no longer there" in submit(client, delete, js=True).text
    gone = submit(client, delete, js=False)
    assert gone.status_code == 404 and "Job not found" in gone.text


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_delete_all_empties_the_queue_and_keeps_its_name(
    client: Any, r: redis.Redis, js: bool
) -> None:
    for _ in range(3):
        push(r, "beta")
    page = client.get("/overview?layout=b&queue=beta").text
    answer = submit(client, form_with(page, "delete all"), js=js)
    if not js:
        assert "Delete all 3 jobs waiting on queue beta?" in answer.text
        answer = client.get(
            submit(client, form_with(answer.text, "Delete all"), js=False).headers["location"]
        )
    assert r.llen(keys.queue("beta")) == 0 and r.sismember(keys.QUEUES, "beta")
    assert "Deleted 3 jobs of the queue." in answer.text
    assert "This queue is empty." in answer.text and "delete all" not in answer.text


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_retry_all_requeues_only_this_queues_retries(client: Any, r: redis.Redis, js: bool) -> None:
    push(r, "beta")
    mine = job(queue="beta", jid="mine", retry_count=2, error_class="E", error_message="boom")
    r.zadd(keys.RETRY, {wire.dumps(mine): time.time() + 600})
    other = add_to_set(r, keys.RETRY, time.time() + 600, queue="other")
    r.zadd(keys.RETRY, {"{not json": 1})
    page = client.get("/overview?layout=b&queue=beta").text
    answer = submit(client, form_with(page, "retry all"), js=js)
    shown = answer.text if js else client.get(answer.headers["location"]).text
    assert "1 retrying jobs went back on the queue." in shown
    assert (
        "retry all" not in inner_html(shown, "overview-content")
        if not js
        else "retry all" not in shown
    )
    assert r.zrange(keys.RETRY, 0, -1) == ["{not json", other]
    requeued = wire.loads(r.lindex(keys.queue("beta"), 0))
    assert {k: v for k, v in requeued.items() if k != "enqueued_at"} == {
        k: v for k, v in mine.items() if k != "enqueued_at"
    }


def test_actions_answer_400_on_a_missing_raw(client: Any, r: redis.Redis) -> None:
    push(r, "beta")
    answer = post(client, "/overview/beta/delete", {"layout": "b"})
    assert answer.status_code == 400 and answer.text == "Bad request: missing raw"
    assert r.llen(keys.queue("beta")) == 1


# -- queue names that need encoding ----------------------------------------------------------

AWKWARD = ["with space", "a+b", "a/b", "50%", "..", ".", "x/pause", "ünï", "a?b#c&d=e"]


@pytest.mark.parametrize("name", AWKWARD)
@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_every_action_works_on_a_queue_name_that_needs_encoding(
    client: Any, r: redis.Redis, name: str, js: bool
) -> None:
    push(r, name)
    push(r, name)
    r.zadd(keys.RETRY, {wire.dumps(job(queue=name)): time.time() + 600})
    listing = client.get("/overview?layout=a").text
    link = re.search(r'<a class="mono" href="([^"]+)">', listing)
    assert link is not None
    page = client.get(link.group(1).replace("&amp;", "&")).text
    assert 'id="queue-title"' in page

    def act(button: str, confirm_button: str | None = None) -> str:
        answer = submit(client, form_with(page, button), js=js)
        if confirm_button is not None and not js:
            answer = submit(client, form_with(answer.text, confirm_button), js=False)
        if not js:
            assert answer.status_code == 303, answer.text
            answer = client.get(answer.headers["location"])
        assert answer.status_code == 200
        return answer.text

    page = act("pause")
    assert r.sismember(keys.PAUSED_QUEUES, name)
    page = act("resume")
    assert not r.sismember(keys.PAUSED_QUEUES, name)
    page = act("retry all")
    assert r.zcard(keys.RETRY) == 0 and r.llen(keys.queue(name)) == 3
    first_delete = next(f for f in forms(page) if f.button == "delete")
    answer = submit(client, first_delete, js=js)
    if not js:
        answer = client.get(
            submit(client, form_with(answer.text, "Delete job"), js=False).headers["location"]
        )
    assert r.llen(keys.queue(name)) == 2
    page = answer.text
    page = act("delete all", "Delete all")
    assert r.llen(keys.queue(name)) == 0


def test_times_follow_the_configured_format(config: cogworker.Config, r: redis.Redis) -> None:
    push(r, "beta", enqueued_at=JAN_2)
    dashboard = make_dash(config, time_format="%d.%m.%Y")
    html = get_once(dashboard, "/overview?layout=b").text
    assert 'datetime="2026-01-02T03:04:05Z" data-cw-time>02.01.2026</time>' in html
    assert 'data-cw-time-format="%d.%m.%Y"' in html
