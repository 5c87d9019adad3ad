"""The Schedules tab: what it shows of each published cron entry (class, cron, args, queue, next
and last run in the browser's and the entry's zone, unique mode, state), the search and its
survival across Live refreshes, the pages, the empty states, and hostile and unparseable
entries. Its actions are in test_web_tabs_schedules_actions."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
import web_support
from web_schedules_support import publish, row_of, three
from web_support import HX, client_for, form_with, forms, inner_html, make_dash, submit

import cogworker
from cogworker import keys, wire
from cogworker.periodic import Entry, Schedule

_dash = pytest.fixture(name="dash")(web_support.dashboard)
_client = pytest.fixture(name="client")(web_support.dashboard_client)

HOSTILE = '<script>alert("x")</script>'
DASH = "\u2013"  # between the first and last row of a page


# -- what the tab shows ----------------------------------------------------------------------


def test_nothing_published_shows_how_entries_get_there(client: Any, r: redis.Redis) -> None:
    html = client.get("/schedules").text
    content = inner_html(html, "schedules-content")
    assert "0 of 0 shown" in content
    assert "Nothing registered yet: periodic entries are published by a worker's ticker" in content
    assert "<table" not in content
    assert 'id="schedules-content" hx-get="/schedules" hx-trigger="every 3s' in html
    assert '<a href="/schedules" aria-current="page">Schedules</a>' in html


def test_an_entry_shows_class_cron_args_queue_unique_state_and_runs(
    client: Any, r: redis.Redis
) -> None:
    slot = int(time.time()) // 300 * 300
    entry = publish(
        r,
        "*/5 * * * *",
        "DailyReportJob",
        args=[{"section": "daily"}],
        unique="until_executed",
        queue="reports",
        last_slot=slot,
    )
    row = row_of(client.get("/schedules").text, "DailyReportJob")
    assert '<td class="mono cron-cell">*/5 * * * *<span' in row
    assert "[{&#34;section&#34;:&#34;daily&#34;}]" in row
    assert '<td class="mono">reports</td>' in row
    assert '<span class="tag tag-warning">until_executed</span>' in row
    assert '<span class="tag tag-success">Enabled</span>' in row
    upcoming = Schedule("*/5 * * * *").next_after(time.time())
    stamp = datetime.fromtimestamp(upcoming, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f'<time datetime="{stamp}" data-cw-time>' in row
    last = datetime.fromtimestamp(slot, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f'<time datetime="{last}" data-cw-time>' in row
    assert ">never<" not in row
    assert form_with(row, "run now").values()["pjid"] == entry.pjid
    assert form_with(row, "disable").action == f"/schedules/{entry.pjid}/disable"


def test_never_run_and_times_in_the_zone_the_cron_names(client: Any, r: redis.Redis) -> None:
    publish(r, "0 9 * * * Europe/Berlin", "Berlin::Morning")
    row = row_of(client.get("/schedules").text, "Berlin::Morning")
    assert '<em class="muted">never</em>' in row
    upcoming = Schedule("0 9 * * * Europe/Berlin").next_after(time.time())
    in_berlin = datetime.fromtimestamp(upcoming, ZoneInfo("Europe/Berlin"))
    assert in_berlin.hour == 9
    shown = in_berlin.strftime("%Y-%m-%d %H:%M:%S %Z")
    assert f'<span class="zoned" title="In Europe/Berlin">{shown}</span>' in row


def test_a_cron_without_a_zone_says_whose_clock_it_is_shown_on(client: Any, r: redis.Redis) -> None:
    publish(r, "0 * * * *", "Hourly")
    row = row_of(client.get("/schedules").text, "Hourly")
    assert re.search(r">host time \(\w+\)</span>", row)
    assert "each worker uses its own local one" in row
    assert re.search(r'<span class="zoned" title="In host time \(\w+\)">', row)


def test_entries_are_listed_by_class_then_cron(client: Any, r: redis.Redis) -> None:
    publish(r, "0 3 * * *", "Zeta")
    publish(r, "0 2 * * *", "Alpha")
    publish(r, "0 1 * * *", "Alpha")
    content = inner_html(client.get("/schedules").text, "schedules-content")
    order = [content.index(text) for text in ("0 1 * * *", "0 2 * * *", "0 3 * * *")]
    assert order == sorted(order)
    assert "3 of 3 shown" in content


def test_a_running_lock_shows_as_a_run_in_progress(client: Any, r: redis.Redis) -> None:
    entry = publish(r, "* * * * *", "Locked", unique="until_executed")
    r.set(keys.periodic_running(entry.pjid), "cronjid", ex=60)
    row = row_of(client.get("/schedules").text, "Locked")
    assert "title=\"jid cronjid holds the entry's running lock" in row
    assert ">run in progress</span>" in row


def test_the_fragment_is_only_the_refreshing_content(client: Any, r: redis.Redis) -> None:
    publish(r, "* * * * *", "Frag")
    answer = client.get("/schedules", headers=HX)
    assert answer.status_code == 200
    assert "<html" not in answer.text and "cw-tabs" not in answer.text
    assert "1 of 1 shown" in answer.text and "Frag" in answer.text
    assert 'name="q"' not in answer.text  # the search box stays outside


# -- hostile and unreadable values -----------------------------------------------------------


def test_hostile_class_cron_args_and_unique_are_escaped(client: Any, r: redis.Redis) -> None:
    value = {
        "cron": "<img src=x onerror=alert(1)>",
        "class": HOSTILE,
        "args": ["</script><b>", {"k": "'&\""}],
        "unique": "<i>mode</i>",
        "queue": "<u>q</u>",
    }
    r.hset(keys.PERIODIC_SCHEDULE, "hostile", json.dumps(value))
    html = client.get("/schedules").text
    for raw in (HOSTILE, "<img src=x", "</script><b>", "<i>mode</i>", "<u>q</u>"):
        assert raw not in html
    row = row_of(html, "&lt;script&gt;")
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in row
    assert "&lt;img src=x onerror=alert(1)&gt;" in row
    assert '<span class="tag tag-danger">invalid cron</span>' in row  # and why, escaped
    assert "cron &#39;&lt;img src=x onerror=alert(1)&gt;&#39;" in row
    assert "[&#34;&lt;/script&gt;&lt;b&gt;&#34;,{&#34;k&#34;:&#34;&#39;&amp;\\&#34;&#34;}]" in row
    assert '<span class="tag tag-warning">&lt;i&gt;mode&lt;/i&gt;</span>' in row


def test_unparseable_values_show_as_rows_without_run_now(client: Any, r: redis.Redis) -> None:
    r.hset(keys.PERIODIC_SCHEDULE, mapping={"broken": "{not json", "listed": "[1, 2]"})
    publish(r, "* * * * *", "Fine")
    answer = client.get("/schedules")
    assert answer.status_code == 200
    for pjid, shown in (("broken", "{not json"), ("listed", "[1, 2]")):
        row = row_of(answer.text, f'title="pjid {pjid}"')
        assert '<span class="tag tag-danger">(unparseable)</span>' in row
        assert f'<span class="mono">{shown}</span>' in row
        assert [f.button for f in forms(row)] == ["disable"]
    assert "not a JSON object (a list)" in row_of(answer.text, 'title="pjid listed"')
    assert "3 of 3 shown" in answer.text


def test_a_huge_unparseable_value_is_cut(client: Any, r: redis.Redis) -> None:
    r.hset(keys.PERIODIC_SCHEDULE, "huge", "x" * 100_000)
    row = row_of(client.get("/schedules").text, 'title="pjid huge"')
    assert "x" * 200 + "… (99,800 more characters)" in row
    assert "x" * 201 not in row


def test_keys_of_another_type_are_named_not_a_500(client: Any, r: redis.Redis) -> None:
    r.set(keys.PERIODIC_SCHEDULE, "a string")
    r.set(keys.PERIODIC_DISABLED, "another")
    answer = client.get("/schedules")
    assert answer.status_code == 200
    assert "Not read: periodic:schedule, periodic:disabled hold another type" in answer.text


def test_a_bad_last_slot_reads_as_never(client: Any, r: redis.Redis) -> None:
    entry = publish(r, "* * * * *", "Slotless")
    r.set(keys.periodic_last_slot(entry.pjid), "soon")
    assert '<em class="muted">never</em>' in row_of(client.get("/schedules").text, "Slotless")


def test_wire_round_trip_of_published_entries_matches_what_is_shown(
    client: Any, r: redis.Redis
) -> None:
    # a Ruby process publishes {cron, class, retry, unique, args} with no queue: default
    value = {"cron": "0 * * * *", "class": "Ruby::Job", "retry": 0, "unique": None, "args": []}
    r.hset(keys.PERIODIC_SCHEDULE, "rubypjid", wire.dumps(value))
    row = row_of(client.get("/schedules").text, "Ruby::Job")
    assert '<td class="mono">default</td>' in row and '<span class="muted">—</span>' in row


# -- search ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("q", "found"),
    [
        ("reports", "Reports::Daily"),  # class, case ignored
        ("0 3 *", "Sessions::Purge"),  # cron
        ("WAREHOUSE", "Inventory::Sync"),  # args
        ('"section":"fin', "Reports::Daily"),  # args as compact JSON
    ],
)
def test_search_matches_class_cron_or_args(client: Any, r: redis.Redis, q: str, found: str) -> None:
    three(r)
    content = inner_html(client.get("/schedules", params={"q": q}).text, "schedules-content")
    assert "1 of 3 shown" in content
    assert found in content
    assert sum(name in content for name in ("Daily", "Purge", "Sync")) == 1


def test_a_search_with_no_match_says_so(client: Any, r: redis.Redis) -> None:
    three(r)
    content = inner_html(client.get("/schedules?q=nothing-like-it").text, "schedules-content")
    assert "No schedules match that search." in content and "0 of 3 shown" in content


def test_the_search_survives_live_refreshes(client: Any, r: redis.Redis) -> None:
    three(r)
    html = client.get("/schedules?q=purge").text
    # the box is outside the refreshing container, and the refresh asks for the same search
    assert 'value="purge"' in html.split('id="schedules-content"')[0]
    assert 'id="schedules-content" hx-get="/schedules?q=purge"' in html
    refreshed = client.get("/schedules?q=purge", headers=HX).text
    assert "Sessions::Purge" in refreshed and "Reports::Daily" not in refreshed
    publish(r, "0 4 * * *", "Purge::Again")  # a later refresh shows a new match, still filtered
    refreshed = client.get("/schedules?q=purge", headers=HX).text
    assert "2 of 4 shown" in refreshed and "Inventory::Sync" not in refreshed


# -- pages -----------------------------------------------------------------------------------


@pytest.fixture
def paged(config: cogworker.Config) -> Iterator[Any]:
    dashboard = make_dash(config, schedules_page_size=3)
    try:
        with client_for(dashboard) as test_client:
            yield test_client
    finally:
        dashboard.close()


def seven(r: redis.Redis) -> list[Entry]:
    return [publish(r, f"{n} 3 * * *", f"Paged::Job{n}") for n in range(7)]


def test_many_entries_are_paged(paged: Any, r: redis.Redis) -> None:
    seven(r)
    first = inner_html(paged.get("/schedules").text, "schedules-content")
    assert f"1{DASH}3 of 7" in first and "page 1 of 3" in first
    assert [f"Paged::Job{n}" in first for n in range(7)] == [True] * 3 + [False] * 4
    assert 'href="/schedules?page=2" rel="next"' in first
    last = paged.get("/schedules?page=3").text
    assert f"7{DASH}7 of 7" in last and "Paged::Job6" in last and 'rel="prev"' in last
    assert 'id="schedules-content" hx-get="/schedules?page=3"' in last
    beyond = inner_html(paged.get("/schedules?page=9").text, "schedules-content")
    assert "page 3 of 3" in beyond  # past the end: the last page
    assert (
        paged.get("/schedules?page=0").text
        == "Bad request: page must be a whole number from 1 (got '0')"
    )


def test_a_search_pages_its_matches(paged: Any, r: redis.Redis) -> None:
    seven(r)
    publish(r, "0 1 * * *", "Other")
    content = inner_html(paged.get("/schedules?q=paged&page=2").text, "schedules-content")
    assert f"4{DASH}6 of 7 matching (8 in all)" in content
    assert 'href="/schedules?q=paged&amp;page=3" rel="next"' in content


def test_an_action_stays_on_its_page(paged: Any, r: redis.Redis) -> None:
    entries = seven(r)
    row = row_of(paged.get("/schedules?page=2").text, "Paged::Job4")
    form = form_with(row, "disable")
    assert form.values()["page"] == "2"
    fragment = submit(paged, form, js=True).text
    assert f"4{DASH}6 of 7" in fragment and "Paged::Job4" in fragment
    assert r.sismember(keys.PERIODIC_DISABLED, entries[4].pjid)
    answer = submit(paged, form_with(row_of(fragment, "Paged::Job4"), "enable"), js=False)
    assert answer.headers["location"] == "/schedules?page=2"
