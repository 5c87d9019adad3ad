"""The Metrics tab in a real browser (Debian's Chromium through Playwright): a class's charts
draw the counts stored in Redis minute by minute, light and dark, with and without
JavaScript; the time chart's tooltips give each minute's p95 and p50; Live redraws the chart
in place when new runs land. Screenshots of the tab and a class page, light and dark."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import wait_for
from playwright.sync_api import Browser
from web_support import READ_LINE, Served, open_page, serve

import cogworker
from cogworker.metrics import by_class as metrics_by_class
from cogworker.metrics.by_class import Period, Tallies, Tally

pytestmark = pytest.mark.browser

INTERVAL = 1.0


CLASSES = ["ReportJob", "MailerJob", "ThumbnailJob", "Nightly::ExportJob"]


@pytest.fixture
def served(config: cogworker.Config) -> Iterator[Served]:
    with serve(config, live_update_interval=INTERVAL) as running:
        yield running


def seed(r: redis.Redis, now: float) -> None:
    """An hour of runs of a few classes, a different mix each minute."""
    for back in range(60):
        tallies = Tallies()
        for number, job_class in enumerate(CLASSES):
            for run in range((back * 7 + number * 3) % 11 + 1):
                seconds = 0.002 * (number + 1) * (1 + (run * 5 + back) % 9)
                tallies.add_run(job_class, seconds, failed=(run + back + number) % 7 == 0)
        tallies.write(r, now - back * 60)


def stored(r: redis.Redis, job_class: str, now: float) -> list[Tally]:
    """The class's tally of each minute of the last hour, read straight from Redis."""
    points = []
    for start in Period.HOUR.starts(now):
        text = r.hget(Period.HOUR.key(start), job_class)
        points.append(Tally.decode(text) if text else Tally())
    return [point or Tally() for point in points]


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_a_class_chart_draws_the_buckets_in_light_and_dark(
    browser: Browser, served: Served, r: redis.Redis, shots: Path, js: bool
) -> None:
    now = time.time()
    seed(r, now)
    for scheme in ("light", "dark"):
        watched = open_page(browser, served, js=js, scheme=scheme)
        page = watched.page
        page.goto(served.base + "/class_metrics")
        assert page.locator("table.class-metrics tbody tr").count() == len(CLASSES)
        if js:
            page.screenshot(path=str(shots / f"metrics-{scheme}.png"), full_page=True)
        page.click("a.job-class:text-is('ReportJob')")
        page.wait_for_url("**/class_metrics/class?class=ReportJob&period=hour")
        points = stored(r, "ReportJob", time.time())
        runs = page.evaluate(READ_LINE, "class-runs")
        assert runs["Executions"] == [p.executions for p in points]
        assert runs["Failures"] == [p.failures for p in points]
        tips = page.locator("svg#class-times-chart rect.chart-hit title").all_text_contents()
        assert len(tips) == 60
        unit, scale = ("µs", 1e6) if max(p.p95 for p in points) < 0.01 else ("ms", 1e3)
        for tip, point in zip(tips, points, strict=True):
            p95, p50 = round(point.p95 * scale), round(point.p50 * scale)
            assert tip.endswith(f"p95 ({unit}) {p95:,}, p50 ({unit}) {p50:,}"), tip
        cards = page.locator("#class-cards").inner_text()
        assert f"{sum(p.executions for p in points):,}" in cards
        box = page.locator("svg#class-runs-chart").bounding_box()
        assert box is not None and box["width"] > 250 and box["height"] > 60
        if js:
            page.screenshot(path=str(shots / f"metrics-class-{scheme}.png"), full_page=True)
        watched.assert_clean()
        watched.close()


def test_live_redraws_the_class_chart_when_runs_land(
    browser: Browser, served: Served, r: redis.Redis
) -> None:
    watched = open_page(browser, served, js=True)
    page = watched.page
    page.goto(served.base + "/class_metrics/class?class=LiveJob")
    assert page.evaluate(READ_LINE, "class-runs")["Executions"][-1] == 0
    tallies = Tallies()
    for _ in range(3):
        tallies.add_run("LiveJob", 0.01, failed=False)
    tallies.write(r)

    def drawn() -> int:  # the last two minutes: the write may fall just before a new one
        return sum(page.evaluate(READ_LINE, "class-runs")["Executions"][-2:])

    wait_for(lambda: drawn() == 3, timeout=15)
    assert metrics_by_class.detail(r, "LiveJob", Period.HOUR).total.executions == 3
    assert page.url.endswith("/class_metrics/class?class=LiveJob")  # in place, no reload
    watched.assert_clean()
    watched.close()
