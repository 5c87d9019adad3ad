"""Smoke tests in a real browser: Debian's Chromium driven by Playwright, against the
dashboard served by uvicorn on 127.0.0.1 and the test Redis. Each page loads with JavaScript
on and off without a console error and without a request leaving 127.0.0.1; actions work in
place with JavaScript and through the confirmation page without it; Live refreshes a tab;
times show in the browser's zone. Screenshots of each page, light and dark, are saved under
``$COGWORKER_SCREENSHOTS`` (else a temporary directory, printed)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
import redis
from conftest import wait_for
from playwright.sync_api import Browser
from web_support import (
    Served,
    open_page,
    plant_process,
    plant_work,
    push,
    serve,
)

import cogworker
from cogworker import keys, wire
from cogworker.web.job_sources import score_hint
from cogworker.web.urls import digest

# drives the system's chromium: dev.py leaves these out, saying so, where there is none
pytestmark = pytest.mark.browser

JUNE_15_NOON = 1781524800.0  # 2026-06-15 12:00:00 UTC
RETRY_ENTRY = wire.dumps(
    {
        "class": "Billing::Charge",
        "jid": "r1",
        "queue": "default",
        "args": [{"customer": 42, "amount": "19.90"}],
        "retry_count": 3,
        "error_class": "Net::ReadTimeout",
        "error_message": "timed out after 5s talking to the payment gateway",
    }
)
PANEL = urlencode(
    {
        "status": "Retrying",
        "selected": "r1",
        "entry": f"retrying:{digest(RETRY_ENTRY)}:{score_hint(1e10)}",
    }
)
PAGES = {
    "overview-a": "/overview?layout=a",
    "overview-b": "/overview?layout=b&queue=default",
    "workers": "/workers",
    "jobs": "/jobs",
    "jobs-dead": "/jobs?status=Dead",
    "jobs-panel": f"/jobs?{PANEL}",
    "jobs-search": "/jobs?q=invoice",
    "confirm": "/overview/default/delete_all?queue=default&layout=b",
}


@pytest.fixture
def served(config: cogworker.Config) -> Iterator[Served]:
    """The dashboard under uvicorn in a thread (Live refreshes every second)."""
    with serve(config, live_update_interval=1) as running:
        yield running


def seed(r: redis.Redis) -> None:
    r.set(keys.STATS_PROCESSED, 48_213)
    r.set(keys.STATS_FAILED, 37)
    push(r, "default", jid="a" * 24, args=[1, "two", {"three": 3}], enqueued_at=JUNE_15_NOON)
    for number in range(6):
        push(r, "default", args=[number], **{"class": "Billing::Invoice"})
    push(r, "mailers", **{"class": "Mail::Deliver"}, args=["x@example.org"])
    push(r, "low priority/batch", args=[])
    r.sadd(keys.PAUSED_QUEUES, "mailers")
    r.lpush(keys.queue("default"), "{not json")
    r.zadd(keys.RETRY, {RETRY_ENTRY: 1e10})
    for number in range(3):
        attempt = {
            "attempt": number + 1,
            "failed_at": JUNE_15_NOON + 60 * number,
            "outcome": "retrying",
            "error_class": "Net::ReadTimeout",
            "error_message": "timed out after 5s",
        }
        r.rpush(keys.job_attempts("r1"), wire.dumps(attempt))
    r.zadd(
        keys.SCHEDULE, {wire.dumps({"class": "Report::Nightly", "jid": "s1", "queue": "low"}): 2e9}
    )
    dead = {
        "class": "D",
        "jid": "d1",
        "queue": "mailers",
        "error_class": "KeyError",
        "error_message": "'user'",
    }
    r.zadd(keys.DEAD, {wire.dumps(dead): JUNE_15_NOON, "[1, 2]": JUNE_15_NOON - 60})
    plant_process(r, "web-1:4242:0123456789ab", concurrency=10, queues=["default", "mailers"])
    plant_process(r, "web-2:4343:ba9876543210", concurrency=5, quiet=True, rss_kb=None)
    started = int(time.time()) - 75
    payload = {"class": "Billing::Invoice", "jid": "b" * 24, "queue": "default", "args": [7]}
    plant_work(r, "web-1:4242:0123456789ab", "tid-1", payload, started)


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_every_page_loads_cleanly_and_stays_local(
    browser: Browser, served: Served, r: redis.Redis, shots: Path, js: bool
) -> None:
    seed(r)
    for scheme in ("light", "dark"):
        watched = open_page(browser, served, js=js, scheme=scheme)
        page = watched.page
        for name, path in PAGES.items():
            answer = page.goto(served.base + path)
            assert answer is not None and answer.status == 200, path
            page.wait_for_load_state("load")
            # the script shows the Live toggle; without it the toggle stays hidden
            assert page.is_visible("[data-cw-live-toggle]") is js
            if name == "jobs-panel" and js:  # the panel's explanation, fetched on its own
                page.wait_for_selector(".why .why-place")
            suffix = "" if js else "-nojs"
            page.screenshot(path=str(shots / f"{name}-{scheme}{suffix}.png"), full_page=True)
        watched.assert_clean()
        assert all(url.startswith(served.base) for url in watched.requests)
        watched.close()


def test_times_show_in_the_browsers_zone(browser: Browser, served: Served, r: redis.Redis) -> None:
    push(r, "default", enqueued_at=JUNE_15_NOON)
    watched = open_page(browser, served, js=True)
    watched.page.goto(served.base + "/overview?layout=b")
    shown = watched.page.locator("time[data-cw-time]").first
    wait_for(lambda: shown.inner_text() == "2026-06-15 07:00:00")
    assert watched.page.evaluate("window.COGWORKER_TIME_FORMAT") == "%Y-%m-%d %H:%M:%S"
    formatted = watched.page.evaluate(
        "window.cogworkerFormatTime(new Date(Date.UTC(2026, 0, 2, 3, 4, 5)), '%d.%m.%Y %I%p %%')"
    )
    assert formatted == "01.01.2026 10PM %"  # 03:04 UTC is 22:04 the day before in UTC-5
    watched.page.context.close()
    plain = open_page(browser, served, js=False)
    plain.page.goto(served.base + "/overview?layout=b")
    assert plain.page.locator("time[data-cw-time]").first.inner_text() == "2026-06-15 12:00:00"
    plain.page.context.close()


def test_actions_work_in_place_with_javascript(
    browser: Browser, served: Served, r: redis.Redis, shots: Path
) -> None:
    for _ in range(3):
        push(r, "default")
    watched = open_page(browser, served, js=True)
    page = watched.page
    page.goto(served.base + "/overview?layout=b&queue=default")
    page.click("button:text-is('pause')")
    page.wait_for_selector("button:text-is('resume')")
    assert r.sismember(keys.PAUSED_QUEUES, "default")
    assert page.url.endswith("/overview?layout=b&queue=default")
    page.click("button:text-is('delete all')")
    dialog = page.locator("#cw-confirm")
    wait_for(dialog.is_visible)
    assert "Delete all 3 jobs waiting on queue default?" in dialog.inner_text()
    page.screenshot(path=str(shots / "confirm-dialog-light.png"))
    page.click("#cw-confirm button:text-is('Cancel')")
    wait_for(lambda: not dialog.is_visible())
    assert r.llen(keys.queue("default")) == 3
    page.click("button:text-is('delete all')")
    page.click("#cw-confirm [data-cw-confirm-ok]")
    page.wait_for_selector("text=This queue is empty.")
    assert r.llen(keys.queue("default")) == 0
    assert page.url.endswith("/overview?layout=b&queue=default")
    assert watched.errors == [] and watched.foreign == []
    page.context.close()


def test_actions_work_without_javascript(browser: Browser, served: Served, r: redis.Redis) -> None:
    for _ in range(2):
        push(r, "default")
    watched = open_page(browser, served, js=False)
    page = watched.page
    page.goto(served.base + "/overview?layout=b&queue=default")
    page.click("button:text-is('delete all')")
    page.wait_for_selector("text=Delete all 2 jobs waiting on queue default?")
    assert r.llen(keys.queue("default")) == 2
    page.click("button:text-is('Delete all')")
    page.wait_for_selector("text=Deleted 2 jobs of the queue.")
    assert r.llen(keys.queue("default")) == 0
    assert page.url.endswith("/overview?layout=b&queue=default")
    page.context.close()


def test_live_refreshes_the_tab_until_switched_off(
    browser: Browser, served: Served, r: redis.Redis
) -> None:
    push(r, "default")
    watched = open_page(browser, served, js=True)
    page = watched.page
    page.goto(served.base + "/overview?layout=a")
    toggle = page.locator("[data-cw-live-toggle]")
    assert toggle.get_attribute("aria-pressed") == "true"
    push(r, "arrived-later")
    page.wait_for_selector("a:text-is('arrived-later')", timeout=10_000)
    toggle.click()
    assert toggle.get_attribute("aria-pressed") == "false"
    assert page.evaluate("window.cogworkerLiveUpdate") is False
    assert page.evaluate("window.localStorage.getItem('cogworkerLiveUpdate')") == "false"
    wide = page.locator("[data-cw-wide-toggle]")
    wide.click()
    assert wide.get_attribute("aria-pressed") == "true"
    assert page.locator("#cw-main.cw-main--wide").count() == 1
    page.goto(served.base + "/workers")  # both settings last across pages
    assert page.locator("[data-cw-live-toggle]").get_attribute("aria-pressed") == "false"
    assert page.locator("#cw-main.cw-main--wide").count() == 1
    assert watched.errors == [] and watched.foreign == []
    page.context.close()
