"""The Overview's charts in a real browser (Debian's Chromium through Playwright): the points
drawn match the counters in Redis, light and dark, with and without JavaScript; the colours
follow the theme; a column's tooltip names its values; and Live redraws the throughput chart
in place as a real worker runs a job."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import wait_for
from playwright.sync_api import Browser, Page
from runtime_support import StartWorker
from web_support import READ_LINE, Served, open_page, serve
from web_workers_support import start_worker

import cogworker
from cogworker import keys

pytestmark = pytest.mark.browser

INTERVAL = 1.0
WORKER_TIMEOUT = 20.0
_start_worker = start_worker  # the fixture, from the Workers tab's tests



@pytest.fixture
def served(config: cogworker.Config) -> Iterator[Served]:
    with serve(config, live_update_interval=INTERVAL) as running:
        yield running


def hourly(r: redis.Redis) -> tuple[list[int], list[int]]:
    hour = int(time.time()) // 3600
    found = [
        r.hmget(keys.throughput(h), ["processed", "failed"]) for h in range(hour - 23, hour + 1)
    ]
    return [int(p or 0) for p, _ in found], [int(f or 0) for _, f in found]


def daily(r: redis.Redis, days: int) -> tuple[list[int], list[int]]:
    today = datetime.now(UTC).date()
    dates = [(today - timedelta(days=n)).isoformat() for n in range(days - 1, -1, -1)]
    found = [r.hmget(keys.history_daily(d), ["success", "failed"]) for d in dates]
    return [int(s or 0) for s, _ in found], [int(f or 0) for _, f in found]


def seed_counters(r: redis.Redis) -> None:
    hour = int(time.time()) // 3600
    for back in range(24):
        r.hset(
            keys.throughput(hour - back),
            mapping={"processed": (back * 37) % 90, "failed": back % 4},
        )
    today = datetime.now(UTC).date()
    for back in range(30):
        day = keys.history_daily((today - timedelta(days=back)).isoformat())
        r.hset(day, mapping={"success": 50 + (back * 13) % 40, "failed": back % 3})


def stroke(page: Page, selector: str) -> str:
    return str(page.eval_on_selector(selector, "(e) => getComputedStyle(e).stroke"))


def accent(page: Page, variable: str) -> str:
    """The colour a CSS variable resolves to, as the browser writes computed colours."""
    return str(
        page.evaluate(
            """(name) => { const probe = document.createElement("span");
            probe.style.color = `var(${name})`; document.body.append(probe);
            const colour = getComputedStyle(probe).color; probe.remove(); return colour; }""",
            variable,
        )
    )


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_the_points_drawn_are_the_counters_in_light_and_dark(
    browser: Browser, served: Served, r: redis.Redis, shots: Path, js: bool
) -> None:
    seed_counters(r)
    colours = {}
    for scheme in ("light", "dark"):
        watched = open_page(browser, served, js=js, scheme=scheme)
        page = watched.page
        page.goto(served.base + "/overview")
        throughput = page.evaluate(READ_LINE, "throughput")
        assert (throughput["Processed"], throughput["Failed"]) == hourly(r)
        runs = page.evaluate(READ_LINE, "runs")
        assert (runs["Succeeded"], runs["Failed"]) == daily(r, 30)
        box = page.locator("svg#throughput-chart").bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 80
        last_hour = page.locator("svg#throughput-chart rect.chart-hit title").last.text_content()
        processed, failed = hourly(r)
        assert last_hour is not None and last_hour.endswith(
            f"processed {processed[-1]}, failed {failed[-1]}"
        )
        line = stroke(page, "#throughput-chart .chart-line-processed")
        assert line == accent(page, "--accent")
        assert stroke(page, "#throughput-chart .chart-line-failed") == accent(page, "--danger")
        colours[scheme] = line
        if js:
            page.screenshot(path=str(shots / f"charts-{scheme}.png"), full_page=True)
        watched.assert_clean()
        watched.close()
    assert colours["light"] != colours["dark"]


def test_a_period_link_redraws_the_days(browser: Browser, served: Served, r: redis.Redis) -> None:
    seed_counters(r)
    watched = open_page(browser, served, js=True)
    page = watched.page
    page.goto(served.base + "/overview")
    assert len(page.evaluate(READ_LINE, "runs")["Succeeded"]) == 30
    page.click(".chart-head nav a:text-is('6 Months')")
    page.wait_for_url("**/overview?layout=a&period=6months")
    runs = page.evaluate(READ_LINE, "runs")
    assert (runs["Succeeded"], runs["Failed"]) == daily(r, 182)
    watched.assert_clean()
    watched.close()


def test_live_redraws_the_throughput_chart_as_a_worker_runs_a_job(
    browser: Browser, served: Served, r: redis.Redis, start_worker: StartWorker
) -> None:
    worker = start_worker()
    worker.identity(r, timeout=WORKER_TIMEOUT)
    watched = open_page(browser, served, js=True)
    page = watched.page
    page.goto(served.base + "/overview")
    assert page.evaluate(READ_LINE, "throughput")["Processed"][-1] == 0
    r.set("test:release", "1")
    cogworker.Client(cogworker.default_config()).push({"class": "HoldJob", "args": ["chart"]})
    wait_for(lambda: page.evaluate(READ_LINE, "throughput")["Processed"][-1] == 1, timeout=15)
    assert hourly(r)[0][-1] == 1
    assert page.url == served.base + "/overview"  # redrawn in place, no reload
    watched.assert_clean()
    watched.close()


def test_the_values_table_opens_without_javascript(
    browser: Browser, served: Served, r: redis.Redis
) -> None:
    seed_counters(r)
    watched = open_page(browser, served, js=False)
    page = watched.page
    page.goto(served.base + "/overview")
    table = page.locator("#overview-throughput details.chart-values")
    assert not table.locator("table").is_visible()
    table.locator("summary").click()
    assert table.locator("table").is_visible()
    rows: Any = table.locator("tbody tr")
    assert rows.count() == 24
    watched.close()
