"""The Metrics tab's routes: every class's row over the last hour or day, sorting, a page per
class with its charts and histogram, hostile class names escaped, bad parameters refused."""

from __future__ import annotations

import html as html_module
import re
import time
from typing import Any

import markupsafe
import pytest
import redis
import web_support
from web_support import HX, inner_html

from cogworker.metrics import by_class as metrics_by_class
from cogworker.metrics.by_class import Tallies
from cogworker.scripts import Batch
from cogworker.web.tabs.metrics_data import took

_dash = pytest.fixture(name="dash")(web_support.dashboard)
_client = pytest.fixture(name="client")(web_support.dashboard_client)

HOSTILE = '<img src=x onerror="alert(1)">&amp;Job'


def record(r: redis.Redis, runs: list[tuple[str, float, bool]], at: float | None = None) -> None:
    tallies = Tallies()
    for job_class, seconds, failed in runs:
        tallies.add_run(job_class, seconds, failed)
    batch = Batch(r)
    tallies.queue(batch, at)
    assert not any(isinstance(reply, Exception) for reply in batch.execute())


def class_rows(page: str) -> list[str]:
    return [
        html_module.unescape(name)
        for name in re.findall(r'<a class="mono job-class" href="[^"]*">([^<]*)</a>', page)
    ]


def test_the_tab_is_in_the_header_and_lists_each_class_with_its_figures(
    client: Any, r: redis.Redis
) -> None:
    record(r, [("Report", 0.010, False), ("Report", 0.020, True), ("Mailer", 0.5, False)])
    page = client.get("/class_metrics").text
    assert re.search(r'<a href="/class_metrics" aria-current="page">Metrics</a>', page)
    assert "2 classes" in page and "3 executions" in page and "1 failures" in page
    assert class_rows(page) == ["Mailer", "Report"]  # by total time, the default
    row = page[page.index(">Report<") :].split("</tr>")[0]
    cells = re.findall(r'<td class="num[^"]*">(.*?)</td>', row)
    assert cells[0] == "2"
    assert cells[1].startswith("1 ")  # a failure, and its share
    assert "50 %" in cells[1]
    assert cells[4] == "20.0 ms"  # the max is exact
    assert "within 9.1 %" in page


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        ("class", ["Alpha", "Beta", "Gamma"]),
        ("executions", ["Gamma", "Beta", "Alpha"]),
        ("failures", ["Beta", "Alpha", "Gamma"]),
        ("max", ["Alpha", "Gamma", "Beta"]),
        ("p95", ["Alpha", "Gamma", "Beta"]),
    ],
)
def test_rows_sort_by_the_asked_column(
    client: Any, r: redis.Redis, sort: str, expected: list[str]
) -> None:
    record(
        r,
        [("Alpha", 2.0, False)]
        + [("Beta", 0.001, True)] * 2
        + [("Gamma", 0.1, False)] * 3,
    )
    assert class_rows(client.get(f"/class_metrics?sort={sort}").text) == expected


def test_the_day_includes_older_hours_than_the_hour(client: Any, r: redis.Redis) -> None:
    record(r, [("Nightly", 1.0, False)], at=time.time() - 3 * 3600)
    record(r, [("Recent", 0.01, False)])
    assert class_rows(client.get("/class_metrics").text) == ["Recent"]
    assert class_rows(client.get("/class_metrics?period=day").text) == ["Nightly", "Recent"]


def test_nothing_recorded_says_so(client: Any) -> None:
    page = client.get("/class_metrics?period=day").text
    assert "No job ran in the last day" in page


def test_a_live_refresh_answers_the_content_alone(client: Any, r: redis.Redis) -> None:
    record(r, [("Report", 0.01, False)])
    fragment = client.get("/class_metrics?period=day&sort=class", headers=HX).text
    assert "<html" not in fragment and "Report" in fragment
    page = client.get("/class_metrics?period=day&sort=class").text
    assert 'hx-get="/class_metrics?period=day&amp;sort=class"' in page


SORT_REASON = "sort must be one of class, executions, failures, p50, p95, max, total (got '<b>')"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("/class_metrics?period=week", "period must be hour or day (got 'week')"),
        ("/class_metrics?period=", None),  # empty: the default, not an error
        ("/class_metrics?sort=%3Cb%3E", SORT_REASON),
        ("/class_metrics/class?class=X&period=Day", "period must be hour or day (got 'Day')"),
        ("/class_metrics/class", "missing class"),
        ("/class_metrics/class?class=", "missing class"),
        ("/class_metrics/class?class_b64=%%%", "class_b64 is not base64"),
    ],
)
def test_bad_parameters_are_refused_with_a_one_line_reason(
    client: Any, url: str, reason: str | None
) -> None:
    answer = client.get(url)
    if reason is None:
        assert answer.status_code == 200
        return
    assert answer.status_code == 400
    assert answer.text == f"Bad request: {reason}"


def test_a_hostile_class_name_is_escaped_in_the_list_and_on_its_page(
    client: Any, r: redis.Redis
) -> None:
    record(r, [(HOSTILE, 0.003, True)])
    page = client.get("/class_metrics").text
    assert "<img src=x" not in page
    assert class_rows(page) == [HOSTILE]
    link = re.search(r'<a class="mono job-class" href="([^"]*)">', page)
    assert link is not None
    detail = client.get(html_module.unescape(link.group(1))).text
    assert "<img src=x" not in detail
    assert f'<h1><span class="mono job-class">{markupsafe.escape(HOSTILE)}</span></h1>' in detail
    cards = inner_html(detail, "class-cards")
    assert re.search(r"Executions</span><span class=\"card-value\">1<", cards)
    assert re.search(r"Failures</span><span class=\"card-value\">1<", cards)


def test_a_class_name_that_is_not_form_safe_travels_as_base64(
    client: Any, r: redis.Redis
) -> None:
    odd = "Line\nBreak\x00Job"
    record(r, [(odd, 0.003, False)])
    page = client.get("/class_metrics").text
    link = re.search(r'<a class="mono job-class" href="([^"]*)">', page)
    assert link is not None and "class_b64=" in link.group(1)
    detail = client.get(html_module.unescape(link.group(1))).text
    assert re.search(r"Executions</span><span class=\"card-value\">1<", detail)


def test_a_class_page_charts_each_minute_and_lists_the_buckets(
    client: Any, r: redis.Redis
) -> None:
    now = time.time()
    record(r, [("Report", 0.004, False), ("Report", 0.004, True)], at=now - 120)
    record(r, [("Report", 0.030, False)], at=now)
    detail = client.get("/class_metrics/class?class=Report").text
    runs = inner_html(detail, "class-runs-chart")
    assert runs.count('class="chart-hit"') == 60
    assert "executions 2, failures 1" in runs and "executions 1, failures 0" in runs
    times = inner_html(detail, "class-times-chart")
    assert "p95 (ms)" in detail and 'data-series="p50 (ms)"' in times
    row = r'<td class="nowrap">([^<]* to [^<]*)</td><td class="num">(\d+)</td>'
    buckets = re.findall(row, detail)
    expected = []
    for seconds in (0.004, 0.030):
        low, high = metrics_by_class.bucket_bounds(metrics_by_class.bucket_of(int(seconds * 1e6)))
        expected.append(f"{took(low / 1e6)} to {took(high / 1e6)}")
    assert buckets == [(expected[0], "2"), (expected[1], "1")]
    day = client.get("/class_metrics/class?class=Report&period=day").text
    assert inner_html(day, "class-runs-chart").count('class="chart-hit"') == 24


def test_a_class_with_no_runs_shows_empty_charts_not_an_error(client: Any) -> None:
    detail = client.get("/class_metrics/class?class=Nobody")
    assert detail.status_code == 200
    assert "No run of this class in the last hour" in detail.text
    assert "nothing recorded in this time" in detail.text


def test_an_unreadable_stored_value_is_reported_not_a_500(client: Any, r: redis.Redis) -> None:
    hour = metrics_by_class.Period.HOUR
    for key in (hour.key(hour.starts()[-1]), hour.total_keys()[-1]):
        r.hset(key, "Broken", "garbage")
    page = client.get("/class_metrics")
    assert page.status_code == 200 and "Not read: 1 stored value" in page.text
    detail = client.get("/class_metrics/class?class=Broken")
    assert detail.status_code == 200 and "Not read: 1 stored value" in detail.text
