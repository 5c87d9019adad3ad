"""The History tab's routes: the table (sort, filters, paging, fragments), one run's page and
its backtrace, the JSON endpoint, escaping of hostile values, unparseable entries and bad
parameters."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import redis
import web_support
from web_support import HX, inner_html

from cogworker import history, keys, wire
from cogworker.history import index as history_index

_dash = pytest.fixture(name="dash")(web_support.dashboard)
_client = pytest.fixture(name="client")(web_support.dashboard_client)

NOW = 1_767_323_045.0


def run(
    jid: str,
    finished_at: float,
    duration_ms: int = 100,
    *,
    status: str = "success",
    job_class: str = "Mailer",
    queue: str = "default",
    args: list[Any] | None = None,
    error: tuple[str, str] | None = None,
    backtrace: list[str] | None = None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "jid": jid,
        "class": job_class,
        "queue": queue,
        "args": args if args is not None else [1],
        "status": status,
        "started_at": finished_at - duration_ms / 1000,
        "finished_at": finished_at,
        "duration": duration_ms,
    }
    if error is not None:
        entry["error_class"], entry["error_message"] = error
        entry["backtrace"] = backtrace if backtrace is not None else []
    return entry


def record(r: redis.Redis, *entries: dict[str, Any]) -> None:
    """What the history middleware writes, index included."""
    pipe = r.pipeline(transaction=False)
    for entry in entries:
        history.store(pipe, history.Retention(), entry)
    pipe.execute()


def rows_of(html: str) -> list[str]:
    """The jids of the table's rows, in order."""
    body = inner_html(html, "history-table")
    return re.findall(r'<td class="mono jid">([^<]*)</td>', body)


def seed(r: redis.Redis) -> None:
    record(
        r,
        run("a1", NOW - 50, 120, job_class="Mailer"),
        run("a2", NOW - 40, 900, job_class="Billing", queue="critical"),
        run(
            "a3",
            NOW - 30,
            40,
            status="failed",
            job_class="Billing",
            error=("Timeout::Error", "took too long"),
            backtrace=["app/billing.rb:10:in `charge'", "app/worker.rb:3:in `perform'"],
        ),
        run("a4", NOW - 20, 5000, job_class="Report", args=["monthly"]),
        run("a5", NOW - 10, 300, job_class="Mailer", queue="mail"),
    )


def test_the_page_shows_runs_newest_first_with_the_filters_and_the_dialog(
    client: Any, r: redis.Redis
) -> None:
    seed(r)
    html = client.get("/history").text
    assert rows_of(html) == ["a5", "a4", "a3", "a2", "a1"]
    assert "5 runs" in html
    assert 'id="history-content" hx-get="/history"' in html
    assert '<dialog id="history-backtrace-dialog"' in html
    assert 'id="history-backtrace-content"' in html
    assert '<form id="history-filters"' in html
    assert "5s" in html and "900ms" in html  # durations in human units


def test_a_fragment_is_the_table_alone(client: Any, r: redis.Redis) -> None:
    seed(r)
    fragment = client.get("/history", headers=HX).text
    assert "<html" not in fragment and "history-filters" not in fragment
    assert rows_of(fragment) == ["a5", "a4", "a3", "a2", "a1"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("sort=duration&dir=desc", ["a4", "a2", "a5", "a1", "a3"]),
        ("sort=duration&dir=asc", ["a3", "a1", "a5", "a2", "a4"]),
        ("sort=finished_at&dir=asc", ["a1", "a2", "a3", "a4", "a5"]),
        ("sort=class&dir=asc", ["a3", "a2", "a5", "a1", "a4"]),
        ("sort=queue&dir=asc", ["a2", "a4", "a3", "a1", "a5"]),
        ("sort=jid&dir=desc", ["a5", "a4", "a3", "a2", "a1"]),
        ("sort=status&dir=asc", ["a3", "a5", "a4", "a2", "a1"]),
        # descending on a text column reads its set backwards: equal values oldest first
        ("sort=error&dir=desc", ["a3", "a1", "a2", "a4", "a5"]),
        ("class=billing", ["a3", "a2"]),
        ("queue=MAIL", ["a5"]),
        ("status=failed", ["a3"]),
        ("status=success&class=Billing", ["a2"]),
        ("min_ms=300", ["a5", "a4", "a2"]),
        ("min_ms=100&max_ms=900&sort=duration&dir=asc", ["a1", "a5", "a2"]),
        ("class=mailer&sort=duration&dir=desc", ["a5", "a1"]),
        ("jid=a2", ["a2"]),
        ("error=too+LONG", ["a3"]),
        ("args=monthly", ["a4"]),
        ("since=2026-01-02T03:03:25&until=2026-01-02T03:03:35", ["a3", "a2"]),
    ],
)
def test_sorts_and_filters(client: Any, r: redis.Redis, query: str, expected: list[str]) -> None:
    seed(r)
    html = client.get(f"/history?{query}").text
    assert rows_of(html) == expected


def test_pages_with_plain_links(client: Any, r: redis.Redis) -> None:
    record(r, *(run(f"p{i:02d}", NOW - 100 + i) for i in range(25)))
    first = client.get("/history?per_page=10").text
    assert rows_of(first) == [f"p{i:02d}" for i in range(24, 14, -1)]
    assert "page 1 of 3" in first
    next_link = re.search(r'href="([^"]+)" rel="next"', first)
    assert next_link is not None
    second = client.get(next_link.group(1).replace("&amp;", "&")).text
    assert rows_of(second) == [f"p{i:02d}" for i in range(14, 4, -1)]
    past = client.get("/history?per_page=10&page=9").text
    assert "Page 9 is past the end: this view has 3 pages now." in past


def test_a_filtered_sort_keeps_its_filters_in_every_link(client: Any, r: redis.Redis) -> None:
    seed(r)
    html = client.get("/history?class=Billing&sort=duration&dir=asc").text
    links = re.findall(r'<th[^>]*><a href="([^"]+)"', html)
    assert links and all("class=Billing" in link for link in links)
    # the column sorted now flips its direction, another starts at its natural one
    assert "/history?class=Billing&amp;sort=duration&amp;dir=desc" in links
    assert "/history?class=Billing&amp;sort=class&amp;dir=asc" in links


def test_the_backtrace_link_opens_that_runs_own_backtrace(client: Any, r: redis.Redis) -> None:
    seed(r)
    record(
        r,
        run(
            "a3",
            NOW - 5,
            10,
            status="failed",
            error=("KeyError", "second attempt"),
            backtrace=["other.rb:1"],
        ),
    )
    html = client.get("/history?jid=a3").text
    assert "Filtered to job" in html
    links = re.findall(r'<a class="history-error-link" href="([^"]+)"', html)
    assert len(links) == 2
    newest = client.get(links[0].replace("&amp;", "&"), headers=HX).text
    assert newest.startswith("KeyError: second attempt\n\nother.rb:1")
    oldest = client.get(links[1].replace("&amp;", "&")).text  # a full page without JS
    assert "<html" in oldest and "Timeout::Error: took too long" in oldest
    assert "app/billing.rb:10:in `charge&#39;" in oldest


def test_a_run_without_a_backtrace_says_so(client: Any, r: redis.Redis) -> None:
    record(r, run("n1", NOW, status="failed", error=("RuntimeError", "no trace")))
    html = client.get("/history").text
    link = re.search(r'<a class="history-error-link" href="([^"]+)"', html)
    assert link is not None
    body = client.get(link.group(1).replace("&amp;", "&"), headers=HX).text
    assert body.startswith("RuntimeError: no trace\n\n(no backtrace)")


def test_a_run_gone_is_a_404_page(client: Any, r: redis.Redis) -> None:
    answer = client.get(f"/history/run?status=all&at={NOW}&ref=0123456789abcdef")
    assert answer.status_code == 404
    assert "no longer stored" in answer.text


HOSTILE = '<script>alert("x")</script>'


def test_hostile_values_are_escaped_everywhere(client: Any, r: redis.Redis) -> None:
    record(
        r,
        run(
            "h1",
            NOW,
            status="failed",
            job_class=HOSTILE,
            queue=HOSTILE,
            args=[HOSTILE, {"k": "</td><b>"}],
            error=(HOSTILE, "<img src=x onerror=alert(1)>"),
            backtrace=["<iframe>"],
        ),
    )
    html = client.get("/history").text
    assert "<script>alert" not in html and "<img src=x" not in html and "</td><b>" not in html
    assert "&lt;script&gt;alert" in html
    link = re.search(r'<a class="history-error-link" href="([^"]+)"', html)
    assert link is not None
    body = client.get(link.group(1).replace("&amp;", "&"), headers=HX).text
    assert "<iframe>" not in body and "&lt;iframe&gt;" in body
    assert "<script>" not in client.get("/history?class=" + HOSTILE).text


def test_an_unparseable_entry_renders_as_unparseable(client: Any, r: redis.Redis) -> None:
    seed(r)
    r.zadd(keys.HISTORY_ALL, {"{not json <b>": NOW - 1})
    r.zadd(keys.HISTORY_ALL, {"[1, 2]": NOW - 2})
    for path in ("/history", "/history?sort=class&dir=asc", "/history?error=zzz"):
        answer = client.get(path)
        assert answer.status_code == 200
    html = client.get("/history").text
    assert html.count("(unparseable)") == 2
    assert "{not json &lt;b&gt;" in html
    data = client.get("/history/data?start=0&end=2").json()
    assert data["rows"][0] == {"raw": "{not json <b>"}


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("status=bogus", "status must be one of all, success, failed (got 'bogus')"),
        ("page=0", "page must be a whole number from 1 (got '0')"),
        ("page=x", "page must be a whole number from 1 (got 'x')"),
        ("per_page=7", "per_page must be one of 10, 25, 50, 100 (got 7)"),
        ("sort=nope", "sort must be one of finished_at, class, queue, jid, status, args,"),
        ("dir=up", "dir must be one of asc, desc (got 'up')"),
        ("min_ms=-1", "min_ms must be a whole number from 0 (got '-1')"),
        ("since=yesterday", "since must be a UTC time as YYYY-MM-DDTHH:MM (got 'yesterday')"),
    ],
)
def test_bad_parameters_are_a_400_naming_them(client: Any, query: str, reason: str) -> None:
    answer = client.get(f"/history?{query}")
    assert answer.status_code == 400
    assert answer.text.startswith(f"Bad request: {reason}")
    assert "\n" not in answer.text.strip()


def test_bad_run_parameters_are_a_400(client: Any) -> None:
    for query, reason in (
        (f"status=x&at={NOW}&ref=0123456789abcdef", "status must be all, success or failed"),
        (f"at={NOW}&ref=XYZ", "ref must be 16 lowercase hex digits"),
        ("at=soon&ref=0123456789abcdef", "at must be a finish time in epoch seconds"),
    ):
        answer = client.get(f"/history/run?{query}")
        assert answer.status_code == 400
        assert reason in answer.text


# -- GET /history/data ----------------------------------------------------------------------


def test_data_slices_sorts_and_filters(client: Any, r: redis.Redis) -> None:
    seed(r)
    answer = client.get("/history/data?start=2&end=4")
    assert answer.headers["content-type"].startswith("application/json")
    body = answer.json()
    assert ([row["jid"] for row in body["rows"]], body["total"]) == (["a3", "a2"], 5)
    sort = json.dumps([{"colId": "duration", "sort": "asc"}])
    body = client.get("/history/data", params={"sort": sort, "start": 0, "end": 2}).json()
    assert [row["jid"] for row in body["rows"]] == ["a3", "a1"]
    contains = json.dumps({"class": {"filterType": "text", "type": "contains", "filter": "BILL"}})
    body = client.get("/history/data", params={"filter": contains, "start": 0, "end": 10}).json()
    assert ([row["jid"] for row in body["rows"]], body["total"]) == (["a3", "a2"], 2)
    over = json.dumps({"duration": {"filterType": "number", "type": "greaterThan", "filter": 600}})
    body = client.get("/history/data", params={"filter": over, "start": 0, "end": 10}).json()
    assert [row["jid"] for row in body["rows"]] == ["a4", "a2"]
    body = client.get("/history/data?status=failed&start=0&end=10").json()
    assert [row["jid"] for row in body["rows"]] == ["a3"]
    body = client.get("/history/data?jid=a4&start=0&end=10").json()
    assert [row["jid"] for row in body["rows"]] == ["a4"]


def test_data_takes_malformed_json_as_none_and_refuses_bad_numbers(
    client: Any, r: redis.Redis
) -> None:
    seed(r)
    for params in ({"filter": "[1]"}, {"sort": "{oops"}, {"filter": "nope", "sort": "7"}):
        answer = client.get("/history/data", params={**params, "start": 0, "end": 10})
        assert answer.status_code == 200
        assert answer.json()["total"] == 5
    bad = client.get("/history/data?start=one&end=2")
    assert bad.status_code == 400
    assert bad.text == "Bad request: start must be a whole number (got 'one')"
    capped = client.get("/history/data?start=0&end=5000").json()
    assert capped["total"] == 5  # the cap (MAX_LIMIT) bounds the slice, not the total


def test_data_keeps_bytes_that_are_not_utf8(client: Any, r: redis.Redis) -> None:
    raw = b'{"jid":"b1","class":"\xff","queue":"q","args":[],"status":"success",'
    raw += b'"started_at":1.0,"finished_at":2.0}'
    r.zadd(keys.HISTORY_ALL, {raw: 2.0})
    body = client.get("/history/data?start=0&end=5").json()
    assert body["rows"][0]["jid"] == "b1"
    assert client.get("/history").status_code == 200


# -- a Ruby process's runs -----------------------------------------------------------------


def test_a_run_a_ruby_process_wrote_shows_and_its_trim_is_followed(
    client: Any, r: redis.Redis
) -> None:
    seed(r)
    ruby = run("ruby1", NOW + 1, 77, job_class="RubyOnly")
    del ruby["duration"]  # a Ruby process stores only the two stamps
    raw = wire.dumps(ruby)
    r.zadd(keys.HISTORY_ALL, {raw: NOW + 1})
    r.zadd(keys.HISTORY_SUCCESS, {raw: NOW + 1})
    html = client.get("/history?class=rubyonly").text  # an index path: it catches up first
    assert rows_of(html) == ["ruby1"]
    assert "77ms" in html
    assert rows_of(client.get("/history?sort=duration&dir=asc").text)[1] == "ruby1"
    # a Ruby process trims history:all by age or count: its oldest runs go, so does the index
    r.zremrangebyrank(keys.HISTORY_ALL, 0, 2)
    html = client.get("/history?sort=class&dir=asc").text
    assert rows_of(html) == ["a5", "a4", "ruby1"]
    assert r.zcard(keys.HISTORY_INDEX_TIME) == 3
    assert not r.exists(keys.history_index_by("class", "billing"))
    assert history_index.values(r, "class") == ["mailer", "report", "rubyonly"]


def test_the_table_says_when_the_index_is_still_catching_up(
    client: Any, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history_index, "SYNC_CAP", 3)
    for i in range(5):
        r.zadd(keys.HISTORY_ALL, {wire.dumps(run(f"c{i}", NOW + i)): NOW + i})
    html = client.get("/history?sort=duration").text
    assert "The index is still reading runs stored before it existed" in html
    assert "(3 per refresh)" in html
    html = client.get("/history?sort=duration").text
    assert "still reading" not in html and len(rows_of(html)) == 5
