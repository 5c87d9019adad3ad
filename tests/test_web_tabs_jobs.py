"""The Jobs tab's table: the sources in their order, paging on the server, the status filter,
the search and its bound, the detail panel (attempts, error, explanation), hostile strings and
entries that are not readable jobs. The actions are in test_web_tabs_jobs_actions.py."""

from __future__ import annotations

import html as html_module
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import web_support
from runtime_support import command_calls, commands_since
from web_support import (
    HX,
    add_to_set,
    client_for,
    forms,
    inner_html,
    jids,
    job,
    make_dash,
    panel_of,
    plant_process,
    plant_work,
    push,
    selection_link,
)

import cogworker
from cogworker import keys, wire
from cogworker.config import ConfigError
from cogworker.web import WebSettings

_dash = pytest.fixture(name="dash")(web_support.dashboard)
_client = pytest.fixture(name="client")(web_support.dashboard_client)

HOSTILE = '<script>alert("x")</script>&\''


@pytest.fixture
def small(config: cogworker.Config) -> Iterator[Any]:
    """A client on a dashboard that shows 3 rows a page and searches 1,000 entries at most."""
    dashboard = make_dash(config, jobs_page_size=3, jobs_search_limit=1000)
    try:
        with client_for(dashboard) as test_client:
            yield test_client
    finally:
        dashboard.close()


def count_line(html: str) -> str:
    found = re.search(r'<p class="count-line">(.*?)</p>', html, re.S)
    assert found is not None
    text = re.sub(r"<[^>]+>", "", found.group(1)).replace("\u2013", "-")  # ranges: an en dash
    return " ".join(text.split())


def test_all_lists_the_sources_one_after_the_other_each_in_its_own_order(
    client: Any, r: redis.Redis
) -> None:
    now = time.time()
    plant_process(r, "host:1:aaaaaaaaaaaa")
    plant_work(r, "host:1:aaaaaaaaaaaa", "t1", job(jid="running"), int(now))
    push(r, "alpha", jid="alpha-first")  # pushed first: a worker takes it next
    push(r, "alpha", jid="alpha-second")
    push(r, "beta", jid="beta-only")
    add_to_set(r, keys.SCHEDULE, now + 600, jid="due-later")
    add_to_set(r, keys.SCHEDULE, now + 60, jid="due-soon")
    add_to_set(r, keys.RETRY, now + 90, jid="retry-later")
    add_to_set(r, keys.RETRY, now + 30, jid="retry-soon")
    add_to_set(r, keys.DEAD, now - 600, jid="died-earlier")
    add_to_set(r, keys.DEAD, now - 60, jid="died-lately")
    html = client.get("/jobs").text
    assert jids(html) == [
        "running",
        "alpha-first",
        "alpha-second",
        "beta-only",
        "due-soon",
        "due-later",
        "retry-soon",
        "retry-later",
        "died-lately",
        "died-earlier",
    ]
    assert "1-10 of 10 jobs." in count_line(html)
    assert 'id="jobs-content" hx-get="/jobs"' in html
    enqueued = inner_html(html, "jobs-content")
    assert ">next</td>" in enqueued and ">1 ahead</td>" in enqueued


def test_a_status_shows_its_own_rows_and_every_status_its_count(
    client: Any, r: redis.Redis
) -> None:
    for number in range(3):
        add_to_set(r, keys.DEAD, time.time() - number, jid=f"dead{number}", retry_count=25)
    push(r, "default", jid="waiting")
    html = client.get("/jobs?status=Dead").text
    assert jids(html) == ["dead0", "dead1", "dead2"]  # latest death first
    assert "1-3 of 3 dead jobs · 4 jobs in all." in count_line(html)
    assert 'id="jobs-content" hx-get="/jobs?status=Dead"' in html
    assert re.search(r'aria-current="page">Dead <span class="seg-count">3<', html)
    assert re.search(r">Enqueued <span class=\"seg-count\">1<", html)
    assert '<span class="tag tag-danger">Dead</span>' in html and ">25 of 25<" in html
    assert "Reschedule" not in html and 'name="minutes"' not in html


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=dead", "status must be one of All, Enqueued, Running, Scheduled, Retrying, Dead"),
        ("page=0", "page must be a whole number from 1 (got '0')"),
        ("entry=dead:nothex:1", "entry must be <status>:<digest>:<where>"),
        ("entry=enqueued:" + "a" * 32 + ":3", "its queue is missing"),
    ],
)
def test_a_bad_parameter_is_refused_in_one_line(client: Any, query: str, message: str) -> None:
    answer = client.get(f"/jobs?{query}")
    assert answer.status_code == 400
    assert message in answer.text and "\n" not in answer.text


# -- paging ----------------------------------------------------------------------------------


def test_pages_run_across_sources_and_read_only_what_they_show(small: Any, r: redis.Redis) -> None:
    for number in range(4):
        push(r, "default", jid=f"q{number}")
    for number in range(4):
        add_to_set(r, keys.SCHEDULE, time.time() + 60 + number, jid=f"s{number}")
    first = small.get("/jobs").text
    assert jids(first) == ["q0", "q1", "q2"] and "page 1 of 3" in first
    assert "Previous" not in first and 'href="/jobs?page=2" rel="next"' in first
    spanning = small.get("/jobs?page=2").text  # the last queued job, then the first scheduled
    assert jids(spanning) == ["q3", "s0", "s1"]
    before = command_calls(r)
    last = small.get("/jobs?page=3", headers=HX).text
    spent = commands_since(r, before)
    assert jids(last) == ["s2", "s3"] and 'rel="next"' not in last
    assert spent.get("zrange") == 1 and "lrange" not in spent  # the queue lies before the page
    beyond = small.get("/jobs?page=4").text
    assert jids(beyond) == [] and "Page 4 is past the end: this view has 3 pages now." in beyond
    assert 'href="/jobs?page=3">Go to page 3' in beyond


def test_a_deep_page_of_a_big_set_is_one_range_read(small: Any, r: redis.Redis) -> None:
    pipe = r.pipeline(transaction=False)
    for number in range(3000):
        pipe.zadd(keys.DEAD, {wire.dumps(job(jid=f"d{number:04}")): number})
    pipe.execute()
    before = command_calls(r)
    html = small.get("/jobs?status=Dead&page=500", headers=HX).text
    spent = commands_since(r, before)
    assert jids(html) == ["d1502", "d1501", "d1500"]
    assert spent.get("zrevrange") == 1 and "zrange" not in spent
    assert "1,498-1,500 of 3,000 dead jobs" in count_line(html)


# -- search ----------------------------------------------------------------------------------


def test_search_matches_class_jid_or_args_without_case(client: Any, r: redis.Redis) -> None:
    push(r, "default", jid="j-class", **{"class": "Billing::Invoice"})
    push(r, "default", jid="j-args", args=["Ada@Example.org"])
    push(r, "default", jid="xyz-jid")
    push(r, "default", jid="j-accent", args=["Crème brûlée"])
    add_to_set(r, keys.DEAD, jid="j-dead", args=[{"invoice": 7}])
    push(r, "invoices", jid="j-queue-only")  # the queue's name is not searched
    assert set(jids(client.get("/jobs?q=INVOICE").text)) == {"j-class", "j-dead"}
    assert jids(client.get("/jobs?q=%20ada@EXAMPLE%20").text) == ["j-args"]
    assert jids(client.get("/jobs?q=XYZ-j").text) == ["xyz-jid"]
    assert jids(client.get("/jobs?q=BRÛLÉE").text) == ["j-accent"]  # not ASCII: checked in full
    html = client.get("/jobs?status=Dead&q=invoice").text
    assert jids(html) == ["j-dead"]
    assert "1 match for invoice among 1 dead jobs, 1-1 shown." in count_line(html)
    assert 'hx-get="/jobs?status=Dead&amp;q=invoice"' in html
    assert 'name="q" value="invoice"' in html


def test_unparseable_entries_can_be_found_by_what_the_table_shows(
    client: Any, r: redis.Redis
) -> None:
    r.zadd(keys.RETRY, {"{not json": 1})
    push(r, "default", jid="fine")
    found = jids(client.get("/jobs?q=unparseable").text)
    assert len(found) == 1 and found[0].startswith("unparseable-")
    assert jids(client.get(f"/jobs?q={found[0][-12:]}").text) == found


def test_search_results_are_paged(small: Any, r: redis.Redis) -> None:
    for number in range(5):
        push(r, "default", jid=f"match{number}", **{"class": "Wanted"})
        push(r, "default", jid=f"other{number}")
    second = small.get("/jobs?q=wanted&page=2").text
    assert jids(second) == ["match3", "match4"]
    assert "5 matches for wanted among 10 jobs, 4-5 shown." in count_line(second)
    assert 'href="/jobs?q=wanted" rel="prev"' in second


def test_a_search_reads_at_most_its_limit_and_says_what_it_left(small: Any, r: redis.Redis) -> None:
    pipe = r.pipeline(transaction=False)
    for number in range(1500):
        pipe.lpush(keys.queue("default"), wire.dumps(job(jid=f"q{number}")))
    pipe.sadd(keys.QUEUES, "default")
    pipe.execute()
    add_to_set(r, keys.DEAD, jid="needle", **{"class": "Findable"})
    everything = small.get("/jobs?q=findable").text
    assert jids(everything) == []
    line = count_line(everything)
    assert "0 matches for findable among 1,501 jobs." in line
    assert "Searched the first 1,000 of them only (the search limit)" in line
    assert "choose a status to search the rest of it" in line
    assert jids(small.get("/jobs?status=Dead&q=findable").text) == ["needle"]


# -- the detail panel ------------------------------------------------------------------------


def test_the_panel_shows_args_the_last_attempts_the_error_and_its_actions(
    client: Any, r: redis.Redis
) -> None:
    raw = add_to_set(
        r,
        keys.RETRY,
        time.time() + 60,
        jid="manyretryjid",
        args=[1, {"to": "ada@example.org"}],
        retry_count=8,
        error_class="Net::ReadTimeout",
        error_message="boom 7",
    )
    for number in range(8):
        attempt = {
            "attempt": number + 1,
            "failed_at": time.time() - 100 + number,
            "outcome": "retrying",
            "error_class": "Net::ReadTimeout",
            "error_message": f"boom {number}",
        }
        r.rpush(keys.job_attempts("manyretryjid"), wire.dumps(attempt))
    page = client.get("/jobs?status=Retrying").text
    html = client.get(selection_link(page, "manyretryjid")).text
    panel = panel_of(html)
    assert '<td class="job-cell"><a href="' in html and 'aria-current="true"' in html
    assert "&#34;to&#34;: &#34;ada@example.org&#34;" in panel  # pretty JSON, escaped
    assert panel.count("Attempt ") == 5 and "(last 5 of 8)" in panel
    assert "boom 7" in panel and "boom 0" not in panel
    assert "Net::ReadTimeout: boom 7" in panel and "8 of 25" in panel
    panel_forms = [f for f in forms(html) if f.hx_post and "jobs/retrying/" in f.hx_post]
    names = {f.button.strip() for f in panel_forms if f.values().get("raw") == raw}
    assert names == {"retry now", "delete", "reschedule", "kill"}
    reschedule = next(f for f in panel_forms if f.button.strip() == "reschedule")
    assert reschedule.values()["minutes"] == "5" and 'min="1" max="10080"' in panel
    assert 'aria-label="Close"' in panel and 'href="/jobs?status=Retrying"' in panel


def test_the_panel_finds_its_entry_again_after_the_queue_moved(client: Any, r: redis.Redis) -> None:
    for number in range(6):
        push(r, "default", jid=f"q{number}")
    link = selection_link(client.get("/jobs").text, "q3")
    assert "entry=enqueued" in link and "selected_queue=default" in link
    r.rpop(keys.queue("default"))  # workers take two jobs: q3 is now second in line
    r.rpop(keys.queue("default"))
    push(r, "default", jid="newcomer")
    panel = panel_of(client.get(link).text)
    assert ">q3<" in panel and "no longer where the page saw it" not in panel
    r.lrem(keys.queue("default"), 0, r.lindex(keys.queue("default"), -2))  # q3 ran
    gone = panel_of(client.get(link).text)
    assert "This entry is no longer where the page saw it" in gone


def test_a_rescheduled_entry_is_not_the_entry_the_page_showed(client: Any, r: redis.Redis) -> None:
    raw = add_to_set(r, keys.SCHEDULE, time.time() + 60, jid="moving")
    link = selection_link(client.get("/jobs").text, "moving")
    assert "no longer" not in client.get(link).text
    r.zadd(keys.SCHEDULE, {raw: time.time() + 3600})
    assert "This entry is no longer where the page saw it" in client.get(link).text


def test_the_explanation_says_where_the_job_is_and_why_it_waits(
    client: Any, r: redis.Redis
) -> None:
    push(r, "default", jid="ahead")
    push(r, "default", jid="stuck", **{"class": "Stuck"})
    r.sadd(keys.PAUSED_QUEUES, "default")
    failed_run = {
        "jid": "stuck",
        "class": "Stuck",
        "queue": "default",
        "args": [],
        "status": "failed",
        "started_at": 1.0,
        "finished_at": 2.0,
        "error_class": "KeyError",
        "error_message": "'user'",
        "backtrace": ["Traceback (most recent call last):", '  File "jobs.py", line 3'],
    }
    r.zadd(keys.HISTORY_FAILED, {wire.dumps(failed_run): 2.0})
    r.zadd(keys.HISTORY_ALL, {wire.dumps(failed_run): 2.0})  # every writer records both
    page = client.get(selection_link(client.get("/jobs").text, "stuck")).text
    loader = re.search(r'data-cw-load="([^"]+)"', page)
    assert loader is not None and "Explain</a>" in page  # the page doesn't read it itself
    fragment = client.get(html_module.unescape(loader.group(1))).text
    assert "<html" not in fragment and "It waits on a queue." in fragment
    assert "<strong>Enqueued</strong> on default, 1 jobs ahead of it" in fragment
    assert "queue default is paused" in fragment
    assert "no worker process is running" in fragment
    assert "Backtrace of its last failed run" in fragment and "KeyError: &#39;user&#39;" in fragment
    assert "line 3" in fragment and ">show</a>" not in fragment  # it is the entry shown
    by_jid = client.get("/jobs/explain?selected=stuck").text  # a panel opened by jid alone
    show = re.search(r'<a href="([^"]+)">show</a>', by_jid)
    assert show is not None and "entry=enqueued%3A" in show.group(1)
    inline = client.get(
        html_module.unescape(loader.group(1)).replace("/jobs/explain", "/jobs") + "&explain=1"
    ).text
    assert "queue default is paused" in inline and "data-cw-loaded" in inline
    assert client.get("/jobs/explain").status_code == 400


def test_a_refresh_keeps_the_view_and_the_selection(client: Any, r: redis.Redis) -> None:
    raw = add_to_set(r, keys.DEAD, jid="kept", **{"class": "Keep"})
    link = selection_link(client.get("/jobs?status=Dead&q=keep").text, "kept")
    html = client.get(link).text
    poll = re.search(r'id="jobs-content" hx-get="([^"]+)"', html)
    assert poll is not None
    assert html_module.unescape(poll.group(1)) == link
    assert "status=Dead&q=keep&selected=kept&entry=dead%3A" in link
    fragment = client.get(link, headers=HX).text
    assert "<html" not in fragment and ">kept<" in panel_of(fragment)
    assert raw in html_module.unescape(fragment)


def test_running_jobs_show_their_process_and_start(client: Any, r: redis.Redis) -> None:
    plant_process(r, "host:1:aaaaaaaaaaaa")
    started = int(time.time()) - 30
    plant_work(r, "host:1:aaaaaaaaaaaa", "t1", job(jid="busy", retry_count=2), started)
    html = client.get("/jobs?status=Running").text
    assert jids(html) == ["busy"] and '<span class="tag tag-accent">Running</span>' in html
    assert ">3</td>" in html  # its third attempt
    assert not [f for f in forms(inner_html(html, "jobs-content")) if f.hx_post]
    panel = panel_of(client.get(selection_link(html, "busy")).text)
    assert ">busy<" in panel and "no longer" not in panel


# -- what is stored there --------------------------------------------------------------------


def test_hostile_strings_are_escaped_everywhere_on_the_tab(client: Any, r: redis.Redis) -> None:
    fields = {"class": HOSTILE, "args": [HOSTILE, {"k": HOSTILE}], "queue": HOSTILE}
    push(r, HOSTILE, jid=HOSTILE, **{k: v for k, v in fields.items() if k != "queue"})
    add_to_set(
        r, keys.RETRY, jid="r-" + HOSTILE, error_class=HOSTILE, error_message=HOSTILE, **fields
    )
    add_to_set(r, keys.DEAD, jid="d-" + HOSTILE, error_message=HOSTILE, **fields)
    r.rpush(keys.job_attempts("r-" + HOSTILE), wire.dumps({"attempt": 1, "error_message": HOSTILE}))
    pages = [client.get("/jobs").text]
    for status, jid in (("Retrying", "r-" + HOSTILE), ("Dead", "d-" + HOSTILE), ("", HOSTILE)):
        listing = client.get(f"/jobs?status={status}").text
        page = client.get(selection_link(listing, jid)).text
        loader = re.search(r'data-cw-load="([^"]+)"', page)
        assert loader is not None
        fragment = client.get(html_module.unescape(loader.group(1))).text
        assert "<script>alert" not in fragment
        pages.append(page)
    for shown in pages:
        assert "<script>alert" not in shown
        assert "&lt;script&gt;" in shown
    found = client.get("/jobs", params={"q": HOSTILE}).text
    assert len(jids(found)) == 3 and "<script>alert" not in found


def test_entries_that_are_not_readable_jobs_show_with_delete_only(
    client: Any, r: redis.Redis, redis_url: str
) -> None:
    r.zadd(keys.RETRY, {"{not json": 1})
    r.zadd(keys.DEAD, {"[1, 2]": 2})
    wrapper = {
        "class": "(unparseable)",
        "jid": "wrapped",
        "queue": "default",
        "raw_payload": "\x00",
    }
    r.zadd(keys.DEAD, {wire.dumps(wrapper): 3})
    raw_bytes = redis.Redis.from_url(redis_url)
    try:
        raw_bytes.lpush(keys.queue("default"), b"\xc3(not json")
        raw_bytes.sadd(keys.QUEUES, "default")
    finally:
        raw_bytes.close()
    html = client.get("/jobs").text
    assert html.count('<span class="tag tag-danger">(unparseable)</span>') == 4
    row_forms = [f for f in forms(inner_html(html, "jobs-content")) if f.hx_post]
    assert len(row_forms) == 4 and {f.button.strip() for f in row_forms} == {"delete"}
    assert any(f.values().get("raw_b64") for f in row_forms)  # the bytes travel exactly
    for listed in jids(html):
        panel = panel_of(client.get(selection_link(html, listed)).text)
        assert "Stored entry" in panel and "It can only be deleted." in panel
        buttons = {f.button.strip() for f in forms(panel.split('class="why"')[0]) if f.hx_post}
        assert buttons == {"delete"} and 'name="minutes"' not in panel


def test_a_key_of_another_type_is_left_out_with_a_note(client: Any, r: redis.Redis) -> None:
    r.sadd(keys.QUEUES, "broken", "default")
    r.set(keys.queue("broken"), "not a list")
    push(r, "default", jid="fine")
    html = client.get("/jobs").text
    assert jids(html) == ["fine"]
    assert "Not shown: cogworker:queue:broken holds another type of value" in html


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("jobs_page_size", 0),
        ("jobs_page_size", 501),
        ("jobs_search_limit", 999),
        ("jobs_page_size", "25"),
    ],
)
def test_the_jobs_settings_refuse_values_out_of_range(setting: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"^{setting} must be a whole number from "):
        WebSettings(**{setting: value})
