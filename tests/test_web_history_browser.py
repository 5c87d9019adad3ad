"""The History tab in a real browser (Debian's Chromium through Playwright) against the
dashboard under uvicorn and the test Redis: sort and filter in place and open a backtrace
(JavaScript), page with plain links (no JavaScript), a Live refresh that brings a new run,
and screenshots of the seeded example's History, light and dark. Waits are on page
conditions with deadlines."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from playwright.sync_api import Browser, Page, expect
from web_support import Served, Watched, open_page, serve

import cogworker
from cogworker import history

pytestmark = pytest.mark.browser

INTERVAL = 1.0  # the served dashboard's live_update_interval, seconds
LIVE_TIMEOUT_MS = 10_000  # ten refreshes
NOW = 1_767_323_045.0


def entry(jid: str, at: float, ms: int, job_class: str, **extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "jid": jid,
        "class": job_class,
        "queue": "default",
        "args": [jid],
        "status": "success",
        "started_at": at - ms / 1000,
        "finished_at": at,
        "duration": ms,
    }
    found.update(extra)
    return found


def record(r: redis.Redis, *entries: dict[str, Any]) -> None:
    pipe = r.pipeline(transaction=False)
    for found in entries:
        history.store(pipe, history.Retention(), found)
    pipe.execute()


@pytest.fixture
def served(config: cogworker.Config) -> Iterator[Served]:
    with serve(config, live_update_interval=INTERVAL) as running:
        yield running


@pytest.fixture
def visit(browser: Browser, served: Served) -> Iterator[Any]:
    opened: list[Watched] = []

    def open_at(path: str, *, js: bool, scheme: str = "light") -> Page:
        watched = open_page(browser, served, js=js, scheme=scheme, width=1440, height=900)
        opened.append(watched)
        watched.page.goto(served.base + path)
        return watched.page

    yield open_at
    for watched in opened:
        try:
            watched.assert_clean()
        finally:
            watched.close()


def jids(page: Page) -> Any:
    return page.locator("#history-table td.jid")


def test_sort_and_filter_in_place_and_open_a_backtrace(
    visit: Any, r: redis.Redis, shots: Path
) -> None:
    record(
        r,
        entry("fast1", NOW - 30, 20, "Mailer"),
        entry("slow1", NOW - 20, 4000, "Billing"),
        entry(
            "boom1",
            NOW - 10,
            300,
            "Billing",
            status="failed",
            error_class="Timeout::Error",
            error_message="<b>took too long</b>",
            backtrace=["app/billing.rb:10:in `charge'", "<script>x</script>"],
        ),
    )
    page = visit("/history", js=True)
    expect(jids(page)).to_have_text(["boom1", "slow1", "fast1"])
    page.get_by_role("link", name="Duration").click()
    expect(jids(page)).to_have_text(["slow1", "boom1", "fast1"])
    assert "sort=duration" in page.url  # the address follows the view
    page.get_by_label("Class").fill("billing")
    expect(jids(page)).to_have_text(["slow1", "boom1"])  # the sort is kept
    page.get_by_label("Failed").check(force=True)
    expect(jids(page)).to_have_text(["boom1"])
    page.locator("a.history-error-link").click()
    dialog = page.locator("#history-backtrace-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#history-backtrace-title")).to_have_text("Billing · boom1")
    content = page.locator("#history-backtrace-content")
    expect(content).to_have_text(
        "Timeout::Error: <b>took too long</b>\n\n"
        "app/billing.rb:10:in `charge'\n<script>x</script>\n"
    )
    style = dialog.evaluate(
        "d => [getComputedStyle(d).borderTopStyle, getComputedStyle(d).color,"
        " getComputedStyle(document.body).color]"
    )
    assert style[0] == "none" and style[1] == style[2]
    page.screenshot(path=str(shots / "history-backtrace-light.png"))
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_be_hidden()
    pill = page.locator("#history-table .tag").first
    row_height = page.locator("#history-table tbody tr").first.bounding_box()
    pill_box = pill.bounding_box()
    assert row_height is not None and pill_box is not None
    assert pill_box["height"] < 0.6 * row_height["height"]
    seg, main = page.locator(".seg").bounding_box(), page.locator("#cw-main").bounding_box()
    assert seg is not None and main is not None and seg["width"] < 0.5 * main["width"]


def test_live_refresh_brings_a_new_run_keeping_the_view(visit: Any, r: redis.Redis) -> None:
    record(r, entry("old1", NOW - 30, 20, "Mailer"), entry("old2", NOW - 20, 50, "Report"))
    page = visit("/history?class=mailer", js=True)
    expect(jids(page)).to_have_text(["old1"])
    record(r, entry("new1", NOW - 5, 10, "Mailer"), entry("new2", NOW - 4, 10, "Report"))
    expect(jids(page)).to_have_text(["new1", "old1"], timeout=LIVE_TIMEOUT_MS)


def test_page_with_javascript_off(visit: Any, r: redis.Redis, shots: Path) -> None:
    record(r, *(entry(f"p{i:02d}", NOW - 100 + i, 10 + i, "Mailer") for i in range(23)))
    page = visit("/history?per_page=10", js=False)
    expect(jids(page)).to_have_count(10)
    expect(jids(page).first).to_have_text("p22")
    page.get_by_role("link", name="Next →").click()
    expect(jids(page).first).to_have_text("p12")
    assert "page=2" in page.url
    page.get_by_role("link", name="Last »").click()
    expect(jids(page)).to_have_text(["p02", "p01", "p00"])
    page.get_by_role("link", name="Duration").click()  # a sort link, plain
    expect(jids(page).first).to_have_text("p22")
    page.get_by_label("Class").fill("nothing-like-this")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator(".history-table .empty")).to_have_text("No runs match these filters.")
    # without JavaScript the error cell is a link to the run's own page
    record(
        r,
        entry(
            "err1",
            NOW,
            5,
            "Mailer",
            status="failed",
            error_class="KeyError",
            error_message="gone",
            backtrace=["x.py:1"],
        ),
    )
    page.goto(page.url.split("/history")[0] + "/history")
    page.locator("a.history-error-link").click()
    expect(page.locator("pre.history-backtrace")).to_contain_text("KeyError: gone\n\nx.py:1")
    page.screenshot(path=str(shots / "history-run-nojs-light.png"), full_page=True)


def test_the_seeded_example_history_light_and_dark(
    browser: Browser, config: cogworker.Config, shots: Path
) -> None:
    from examples.seed import seed

    seed(config)
    with serve(config) as running:
        for scheme in ("light", "dark"):
            for js in (True, False):
                watched = open_page(browser, running, js=js, scheme=scheme, width=1440, height=900)
                page = watched.page
                page.goto(running.base + "/history")
                expect(jids(page)).to_have_count(25)
                suffix = "" if js else "-nojs"
                page.screenshot(path=str(shots / f"history-{scheme}{suffix}.png"), full_page=True)
                if js:
                    page.locator("a.history-error-link").first.click()
                    # the first failure listed depends on the clock: any of the seeded errors
                    backtrace = page.locator("#history-backtrace-content")
                    expect(backtrace).to_contain_text("Traceback (most recent call last)")
                    page.screenshot(path=str(shots / f"history-dialog-{scheme}.png"))
                watched.assert_clean()
                watched.close()
