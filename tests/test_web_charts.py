"""The Overview's charts, drawn on the server as SVG: 24-hour throughput from the hourly
counters and runs per day over a period from the daily history counters; the points drawn
match the counters in Redis, each column has a tooltip, a table lists the values, the
periods are links, and the JSON endpoints give the same figures."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
import web_support
from web_support import HX, form_with, inner_html, push, submit

from cogworker import history, keys
from cogworker.web.charts import Series, axis_max, line_chart

_dash = pytest.fixture(name="dash")(web_support.dashboard)
_client = pytest.fixture(name="client")(web_support.dashboard_client)


def this_hour() -> int:
    return int(time.time()) // 3600


def drawn_values(svg: str, series: str) -> list[int]:
    """The values a polyline of the chart stands for, read back from its y coordinates."""
    y_max = int(re.search(r'data-y-max="(\d+)"', svg).group(1))  # type: ignore[union-attr]
    top = float(re.search(r'data-plot-top="([\d.]+)"', svg).group(1))  # type: ignore[union-attr]
    bottom = float(re.search(r'data-plot-bottom="([\d.]+)"', svg).group(1))  # type: ignore[union-attr]
    found = re.search(rf'data-series="{series}" points="([^"]+)"', svg)
    assert found is not None, f"no line {series}"
    ys = [float(pair.split(",")[1]) for pair in found.group(1).split()]
    return [round((bottom - y) / (bottom - top) * y_max) for y in ys]


def chart_svg(html: str, key: str) -> str:
    found = re.search(rf'<svg class="chart" id="{key}-chart".*?</svg>', html, re.S)
    assert found is not None, f"no chart {key}"
    return found.group(0)


# -- throughput ------------------------------------------------------------------------------


def test_the_throughput_chart_draws_the_hourly_counters(client: Any, r: redis.Redis) -> None:
    hour = this_hour()
    counts = {hour: (12, 2), hour - 1: (40, 0), hour - 5: (3, 1), hour - 23: (7, 7)}
    for bucket, (processed, failed) in counts.items():
        r.hset(keys.throughput(bucket), mapping={"processed": processed, "failed": failed})
    r.hset(keys.throughput(hour - 24), mapping={"processed": 999})  # older than 24 h: not shown
    svg = chart_svg(client.get("/overview").text, "throughput")
    expected = [
        r.hmget(keys.throughput(h), ["processed", "failed"]) for h in range(hour - 23, hour + 1)
    ]
    assert drawn_values(svg, "Processed") == [int(p or 0) for p, _ in expected]
    assert drawn_values(svg, "Failed") == [int(f or 0) for _, f in expected]
    titles = re.findall(r"<rect class=\"chart-hit\"[^>]*><title>([^<]+)</title>", svg)
    assert len(titles) == 24
    moment = datetime.fromtimestamp(hour * 3600, UTC).strftime("%Y-%m-%d %H:00 UTC")
    assert titles[-1] == f"{moment}: processed 12, failed 2"
    assert 'data-y-max="40"' in svg
    assert re.search(r'class="chart-tick"[^>]*>40</text>', svg)


def test_the_values_are_also_in_a_table(client: Any, r: redis.Redis) -> None:
    r.hset(keys.throughput(this_hour()), mapping={"processed": 1234, "failed": 5})
    html = client.get("/overview").text
    section = inner_html(html, "overview-throughput")
    table = section.split('<details class="chart-values">')[1]
    moment = datetime.fromtimestamp(this_hour() * 3600, UTC).strftime("%Y-%m-%d %H:00 UTC")
    assert (
        f'<tr><td class="nowrap">{moment}</td><td class="num">1,234</td><td class="num">5</td></tr>'
        in table
    )
    assert "<summary>Values per hour</summary>" in table
    assert "Processed <strong>1,234</strong>" in section


def test_throughput_data_is_24_hours_oldest_first(client: Any, r: redis.Redis) -> None:
    r.hincrby(keys.throughput(this_hour()), "processed", 1)
    data = client.get("/overview/throughput_data").json()
    assert len(data["labels"]) == len(data["fullDates"]) == 24
    assert data["processed"][-1] == 1 and data["failed"] == [0] * 24
    assert data["labels"][-1] == datetime.now(UTC).strftime("%H:00")
    assert data["fullDates"][-1] == datetime.now(UTC).strftime("%Y-%m-%d %H:00 UTC")


# -- runs per day ----------------------------------------------------------------------------


def record_runs(r: redis.Redis, successes: int, failures: int = 0) -> None:
    retention = history.Retention()
    job = {"jid": "j1", "class": "Demo", "args": []}
    for _ in range(successes):
        history.record(r, retention, job, "default", time.time())
    for _ in range(failures):
        history.record(r, retention, job, "default", time.time(), RuntimeError("boom"))


def test_runs_per_day_covers_the_month_by_default(client: Any, r: redis.Redis) -> None:
    record_runs(r, 1)
    svg = chart_svg(client.get("/overview").text, "runs")
    assert drawn_values(svg, "Succeeded") == [0] * 29 + [1]
    assert drawn_values(svg, "Failed") == [0] * 30


@pytest.mark.parametrize(
    ("period", "days"), [("week", 7), ("month", 30), ("3months", 90), ("6months", 182)]
)
def test_each_period_is_a_link_and_draws_its_days(
    client: Any, r: redis.Redis, period: str, days: int
) -> None:
    old = (datetime.now(UTC) - timedelta(days=days - 1)).strftime("%Y-%m-%d")
    r.hset(keys.history_daily(old), mapping={"success": 4, "failed": 2})  # the period's first day
    html = client.get(f"/overview?period={period}").text
    svg = chart_svg(html, "runs")
    assert drawn_values(svg, "Succeeded") == [4] + [0] * (days - 1)
    assert drawn_values(svg, "Failed") == [2] + [0] * (days - 1)
    assert svg.count('class="chart-hit"') == days
    suffix = "" if period == "month" else f"&amp;period={period}"
    assert f'<a href="/overview?layout=a{suffix}" aria-current="page">' in html
    assert f'id="overview-runs" hx-get="/overview/runs?period={period}"' in html


def test_runs_data_is_the_period_with_today_last(client: Any, r: redis.Redis) -> None:
    record_runs(r, 2, 1)
    data = client.get("/overview/runs_data?period=week").json()
    today = datetime.now(UTC).date()
    assert data["fullDates"] == [(today - timedelta(days=n)).isoformat() for n in range(6, -1, -1)]
    assert data["labels"][-1] == today.strftime("%m-%d")
    assert (data["success"], data["failed"]) == ([0] * 6 + [2], [0] * 6 + [1])


def test_an_unknown_period_is_refused_naming_it(client: Any) -> None:
    for path in (
        "/overview?period=year",
        "/overview/runs?period=year",
        "/overview/runs_data?period=year",
    ):
        answer = client.get(path)
        assert answer.status_code == 400
        assert (
            answer.text
            == "Bad request: period must be week, month, 3months or 6months (got 'year')"
        )


def test_no_runs_recorded_says_where_they_come_from(client: Any) -> None:
    html = client.get("/overview").text
    assert "Runs are counted per day by the run history" in html
    assert "nothing counted in this time" in inner_html(html, "overview-runs")


# -- where the charts sit --------------------------------------------------------------------


def test_the_charts_refresh_on_their_own_outside_the_overview_container(
    client: Any, r: redis.Redis
) -> None:
    html = client.get("/overview").text
    assert '<svg class="chart"' not in inner_html(html, "overview-content")
    assert html.index('id="overview-content"') < html.index('id="overview-throughput"')
    assert html.index('id="overview-runs"') < html.index('id="overview-redis-content"')
    assert 'id="overview-throughput" hx-get="/overview/throughput" hx-trigger="every 3s' in html
    assert '<svg class="chart"' not in client.get("/overview", headers=HX).text
    assert (
        "<svg"
        not in client.get("/overview?layout=b")
        .text.split('id="overview-content"')[1]
        .split("</main>")[1]
    )
    fragment = client.get("/overview/throughput", headers=HX).text
    assert fragment.startswith('<p class="chart-legend">') and "<html" not in fragment
    r.hset(keys.throughput(this_hour()), "processed", 3)  # the next refresh draws it
    assert drawn_values(client.get("/overview/throughput").text, "Processed")[-1] == 3


def test_layout_b_has_no_charts(client: Any, r: redis.Redis) -> None:
    push(r, "default")
    html = client.get("/overview?layout=b").text
    assert "overview-throughput" not in html and "chart-values" not in html


def test_the_page_needs_no_inline_style_or_script(client: Any, r: redis.Redis) -> None:
    r.hset(keys.throughput(this_hour()), "processed", 3)
    html = client.get("/overview").text
    assert " style=" not in html
    assert re.findall(r"<script[^>]*>", html) == [
        re.search(r'<script src="[^"]+" defer>', html).group(0)
    ]  # type: ignore[union-attr]


def test_an_action_from_layout_a_keeps_the_period(client: Any, r: redis.Redis) -> None:
    push(r, "default")
    html = client.get("/overview?period=week").text
    form = form_with(html, "pause", "/overview/default/pause")
    assert form.values()["period"] == "week"
    answer = submit(client, form, js=False)
    assert answer.headers["location"] == "/overview?layout=a&period=week"


# -- layout ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("peak", "top", "step"),
    [
        (0, 1, 1),
        (1, 1, 1),
        (3, 3, 1),
        (5, 5, 1),
        (7, 8, 2),
        (12, 15, 5),
        (40, 40, 10),
        (1234, 1500, 500),
    ],
)
def test_the_axis_ends_on_a_round_number(peak: int, top: int, step: int) -> None:
    assert axis_max(peak) == (top, step)


def test_a_chart_puts_every_point_inside_its_plot_and_labels_the_last() -> None:
    values = [0, 5, 10, 3]
    chart = line_chart("t", ["a", "b", "c", "d"], ["A", "B", "C", "D"], [Series("S", "s", values)])
    (line,) = chart.lines
    assert all(chart.plot_left < x < chart.plot_right for x, _ in line.points)
    heights = [y for _, y in line.points]
    assert heights[2] == chart.plot_top  # the peak touches the top
    assert heights[0] == chart.plot_bottom
    assert chart.x_labels[-1][1] == "d"
    with pytest.raises(ValueError, match="one value per label"):
        line_chart("t", ["a"], ["A"], [Series("S", "s", [1, 2])])
