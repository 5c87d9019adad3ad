"""What an operator does, in a real browser (Debian's Chromium through Playwright) against the
dashboard under uvicorn, the test Redis and real worker processes: retry a dead job and watch
it run, pause and resume a queue, quiet a process, search the jobs table, and watch Live
bring a new job in without a reload. Each flow runs with JavaScript and without it; no request
may leave 127.0.0.1 and no console error may occur. Waits are on page conditions (Playwright's
expect with a timeout) or on Redis conditions (``wait_for``), never sleeps."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from conftest import wait_for
from playwright.sync_api import Browser, Page, expect
from runtime_support import StartWorker, holds, listening
from web_support import Served, add_to_set, push, serve, visiting
from web_workers_support import quiet_flag, start_worker

import cogworker
from cogworker import keys

# drives the system's chromium: dev.py leaves these out, saying so, where there is none
pytestmark = pytest.mark.browser

INTERVAL = 1.0  # the served dashboard's live_update_interval, seconds
LIVE_TIMEOUT_MS = 10_000  # ten refreshes
WORKER_TIMEOUT = 20.0  # a real worker process to boot, take a job or hear a command
_start_worker = start_worker  # the fixture, from the Workers tab's tests


@pytest.fixture
def served(config: cogworker.Config) -> Iterator[Served]:
    with serve(config, live_update_interval=INTERVAL) as running:
        yield running


@pytest.fixture
def visit(browser: Browser, served: Served) -> Iterator[Any]:
    """``visit(path, js=...)``: a watched page at ``path``; every page opened is checked for
    console errors and requests leaving 127.0.0.1 when the test ends."""
    yield from visiting(browser, served, local_only=True)


def row_of(page: Page, jid: str) -> Any:
    return page.locator("tr", has=page.locator(".jid", has_text=re.compile(f"^{jid}$")))


def reload_until(page: Page, condition: Any, timeout: float = WORKER_TIMEOUT) -> None:
    """Without JavaScript nothing refreshes: reload until the page shows ``condition``."""

    def shown() -> bool:
        page.reload()
        return bool(condition())

    wait_for(shown, timeout=timeout, interval=0.2)


def hold_job(jid: str, marker: str, **fields: Any) -> dict[str, Any]:
    """A job of the workers' ``HoldJob``: it runs until ``test:release`` is set."""
    return {"class": "HoldJob", "jid": jid, "args": [marker], **fields}


# -- retry a dead job and watch it run -------------------------------------------------------


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_retry_a_dead_job_and_watch_it_run(
    visit: Any, r: redis.Redis, start_worker: StartWorker, js: bool
) -> None:
    worker = start_worker()
    worker.identity(r, timeout=WORKER_TIMEOUT)
    add_to_set(r, keys.DEAD, time.time(), **hold_job("risen", "m-dead", retry_count=25))
    page = visit("/jobs?status=Dead", js=js)
    row_of(page, "risen").get_by_role("button", name="Retry job risen").click()
    if js:  # in place: the row goes, the page stays
        expect(row_of(page, "risen")).to_have_count(0)
        assert page.url.endswith("/jobs?status=Dead")
    else:
        expect(page.locator(".notice")).to_contain_text("The job is back on its queue")
    assert r.zcard(keys.DEAD) == 0
    wait_for(lambda: r.get("test:started:m-dead") == "1", timeout=WORKER_TIMEOUT)
    page.goto(page.url.split("/jobs")[0] + "/jobs?status=Running")
    expect(row_of(page, "risen")).to_have_count(1)
    expect(row_of(page, "risen").locator(".tag")).to_have_text("Running")
    r.set("test:release", "1")
    if js:  # Live takes it off the Running view once it finished
        expect(row_of(page, "risen")).to_have_count(0, timeout=LIVE_TIMEOUT_MS)
    else:
        reload_until(page, lambda: row_of(page, "risen").count() == 0)
    wait_for(lambda: r.get(keys.STATS_PROCESSED) == "1", timeout=WORKER_TIMEOUT)


# -- pause and resume a queue ----------------------------------------------------------------


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_pause_and_resume_a_queue(
    visit: Any, r: redis.Redis, start_worker: StartWorker, js: bool, config: cogworker.Config
) -> None:
    push(r, "default", **hold_job("waiting", "m-paused"))
    page = visit("/overview?layout=a", js=js)
    page.get_by_role("button", name="Pause queue default").click()
    expect(page.get_by_role("button", name="Resume queue default")).to_be_visible()
    expect(page.locator("td", has_text="default").locator(".tag")).to_have_text("paused")
    assert r.sismember(keys.PAUSED_QUEUES, "default")
    worker = start_worker()  # it reads the paused queues as it starts
    worker.identity(r, timeout=WORKER_TIMEOUT)
    holds(lambda: r.llen(keys.queue("default")) == 1, duration=8 * 0.2)  # 8 of its polls
    page.get_by_role("button", name="Resume queue default").click()
    expect(page.get_by_role("button", name="Pause queue default")).to_be_visible()
    assert not r.sismember(keys.PAUSED_QUEUES, "default")
    # a worker re-reads the paused queues every 5 s at most
    wait_for(lambda: r.get("test:started:m-paused") == "1", timeout=WORKER_TIMEOUT)
    r.set("test:release", "1")


# -- quiet a process -------------------------------------------------------------------------


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_quiet_and_resume_a_process(
    visit: Any, r: redis.Redis, start_worker: StartWorker, js: bool
) -> None:
    worker = start_worker()
    identity = worker.identity(r, timeout=WORKER_TIMEOUT)
    wait_for(lambda: listening(r, identity), timeout=WORKER_TIMEOUT)
    page = visit("/workers", js=js)
    state = page.locator("tr", has_text=identity).locator(".tag").first
    expect(state).to_have_text("Active")
    page.get_by_role("button", name=f"Quiet process {identity}").click()
    wait_for(lambda: quiet_flag(r, identity) == "true", timeout=WORKER_TIMEOUT)
    if js:  # the tab's own refresh shows what the process reported
        expect(state).to_have_text("Quiet", timeout=LIVE_TIMEOUT_MS)
        assert page.url.endswith("/workers")
    else:
        expect(page.locator(".notice")).to_contain_text("Asked the process to go quiet")
        reload_until(page, lambda: state.inner_text() == "Quiet")
    page.get_by_role("button", name=f"Resume process {identity}").click()
    wait_for(lambda: quiet_flag(r, identity) == "false", timeout=WORKER_TIMEOUT)
    if js:
        expect(state).to_have_text("Active", timeout=LIVE_TIMEOUT_MS)
    else:
        reload_until(page, lambda: state.inner_text() == "Active")
    assert worker.alive()


# -- search the jobs table -------------------------------------------------------------------


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_search_the_jobs_table(visit: Any, r: redis.Redis, js: bool) -> None:
    for number in range(3):
        push(r, "default", jid=f"invoice-{number}", **{"class": "Billing::Invoice"})
    push(r, "mailers", jid="mail-0", **{"class": "Mail::Deliver"}, args=["ada@example.org"])
    add_to_set(r, keys.DEAD, jid="dead-invoice", **{"class": "Billing::Invoice"})
    page = visit("/jobs", js=js)
    expect(page.locator("tbody tr")).to_have_count(5)
    page.get_by_role("searchbox", name="Search class, jid or args").fill("INVOICE")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/jobs\?q=INVOICE$"))
    expect(page.locator("tbody tr")).to_have_count(4)
    expect(page.locator(".count-line")).to_contain_text("4 matches for INVOICE among 5 jobs")
    page.get_by_role("link", name=re.compile(r"^Dead")).click()
    expect(page).to_have_url(re.compile(r"/jobs\?status=Dead&q=INVOICE$"))
    expect(page.locator("tbody tr")).to_have_count(1)
    expect(row_of(page, "dead-invoice")).to_have_count(1)
    page.get_by_role("link", name="Clear").click()
    expect(page).to_have_url(re.compile(r"/jobs\?status=Dead$"))
    expect(page.get_by_role("searchbox", name="Search class, jid or args")).to_have_value("")


# -- Live ------------------------------------------------------------------------------------


def test_live_brings_a_new_job_in_and_keeps_the_panel(visit: Any, r: redis.Redis) -> None:
    push(r, "default", jid="first", **{"class": "Billing::Invoice"})
    page = visit("/jobs", js=True)
    page.get_by_role("link", name=re.compile("first")).click()
    expect(page.locator(".why .why-place")).to_have_text("It waits on a queue.")
    # markers a reload, or reading the explanation again, would lose
    page.evaluate("window.cwStayed = true; document.querySelector('.why').dataset.mark = 'kept'")
    push(r, "default", jid="arrived-later")
    expect(row_of(page, "arrived-later")).to_have_count(1, timeout=LIVE_TIMEOUT_MS)
    assert page.evaluate("window.cwStayed") is True
    assert page.evaluate("document.querySelector('.why').dataset.mark") == "kept"
    expect(page.locator(".job-detail .jid-line")).to_have_text("first")
    page.locator("[data-cw-live-toggle]").click()
    expect(page.locator("[data-cw-live-toggle]")).to_have_attribute("aria-pressed", "false")
    push(r, "default", jid="while-off")
    holds(lambda: row_of(page, "while-off").count() == 0, duration=3 * INTERVAL)
    page.locator("[data-cw-live-toggle]").click()
    expect(row_of(page, "while-off")).to_have_count(1, timeout=LIVE_TIMEOUT_MS)


def test_without_javascript_a_reload_shows_new_jobs_and_keeps_the_view(
    visit: Any, r: redis.Redis
) -> None:
    push(r, "default", jid="first")
    page = visit("/jobs", js=False)
    expect(page.locator("[data-cw-live-toggle]")).to_be_hidden()
    page.get_by_role("link", name=re.compile("first")).click()
    opened = page.url
    assert "selected=first" in opened
    push(r, "default", jid="arrived-later")
    expect(row_of(page, "arrived-later")).to_have_count(0)  # nothing refreshes by itself
    page.get_by_role("link", name="Explain").click()
    expect(page.locator(".why .why-place")).to_have_text("It waits on a queue.")
    page.goto(opened)
    expect(row_of(page, "arrived-later")).to_have_count(1)
    expect(page.locator(".job-detail .jid-line")).to_have_text("first")
