"""The Schedules tab in a real browser (Debian's Chromium through Playwright) against the
dashboard under uvicorn, the test Redis and a real worker process: disable a per-second entry
and see the worker skip its slots, enable it and see them resume; run an entry now and see it
run, and a second run of an ``until_executed`` entry refused while the first holds its lock;
a search kept across Live refreshes. With JavaScript and without it; waits are on page or Redis
conditions with deadlines."""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import wait_for
from playwright.sync_api import Browser, Page, expect
from runtime_support import Worker, holds
from web_support import Served, serve, visiting

import cogworker
from cogworker import keys
from cogworker.periodic import Entry

pytestmark = pytest.mark.browser

INTERVAL = 1.0  # the served dashboard's live_update_interval, seconds
LIVE_TIMEOUT_MS = 10_000  # ten refreshes
WORKER_TIMEOUT = 30.0  # a worker to boot, tick or run a job
TICK = 1.0  # a per-second entry's slot: the ticker wakes at each

APP = textwrap.dedent(
    '''
    """Cron entries for the Schedules browser tests; every run is recorded in test:runs."""
    import time

    import cogworker

    config = cogworker.default_config()


    class Beat(cogworker.Job):
        name = "Sched::Beat"

        def perform(self, *args):
            config.redis().rpush("test:runs", self.jid)


    class Hold(cogworker.Job):
        """Records its start, then runs until test:release exists (at most 60 s)."""

        name = "Sched::Hold"

        def perform(self, *args):
            client = config.redis()
            client.rpush("test:held", self.jid)
            deadline = time.monotonic() + 60
            while not client.exists("test:release") and time.monotonic() < deadline:
                time.sleep(0.02)


    config.periodic.register("* * * * * *", Beat, args=["every second"])
    config.periodic.register("0 0 1 1 *", Hold, unique="until_executed", queue="held")
    '''
)
FAST = "heartbeat_interval: 0.5\npoll_interval: 0.5\nconcurrency: 2\nshutdown_timeout: 5\n"
BEAT = Entry("* * * * * *", "Sched::Beat", ["every second"])
HOLD = Entry("0 0 1 1 *", "Sched::Hold", [], unique="until_executed", queue="held")


@pytest.fixture
def served(config: cogworker.Config) -> Iterator[Served]:
    with serve(config, live_update_interval=INTERVAL) as running:
        yield running


@pytest.fixture
def worker(tmp_path: Path, redis_url: str, r: redis.Redis) -> Iterator[Worker]:
    """A worker process ticking BEAT and HOLD (HOLD's yearly slot is marked as taken, so only
    run now starts it), serving the queues default and held."""
    (tmp_path / "sched_app.py").write_text(APP)
    (tmp_path / "worker.yml").write_text(FAST)
    r.set(keys.periodic_last_slot(HOLD.pjid), HOLD.schedule.slot(time.time()))
    command = [
        "run",
        "-r",
        "sched_app",
        "-C",
        str(tmp_path / "worker.yml"),
        "-q",
        "default",
        "-q",
        "held",
    ]
    started = Worker(
        command, tmp_path, {**os.environ, "REDIS_URL": redis_url}, tmp_path / "worker.out"
    )
    try:
        started.identity(r, timeout=WORKER_TIMEOUT)
        wait_for(lambda: r.hlen(keys.PERIODIC_SCHEDULE) == 2, timeout=WORKER_TIMEOUT)
        yield started
    finally:
        started.kill()
        print(f"--- worker {started.pid}:\n{started.output()}")


@pytest.fixture
def visit(browser: Browser, served: Served) -> Iterator[Any]:
    yield from visiting(browser, served)


def row(page: Page, job_class: str) -> Any:
    return page.locator("tr", has=page.locator(".job-class", has_text=job_class))


def last_slot(r: redis.Redis, entry: Entry) -> int:
    return int(r.get(keys.periodic_last_slot(entry.pjid)) or 0)


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_disable_skips_the_slots_and_enable_resumes_them(
    visit: Any, worker: Worker, r: redis.Redis, js: bool
) -> None:
    wait_for(lambda: r.llen("test:runs") >= 2, timeout=WORKER_TIMEOUT)  # it fires every second
    page = visit("/schedules", js=js)
    row(page, "Sched::Beat").get_by_role("button", name="Disable Sched::Beat (* * * * * *)").click()
    expect(row(page, "Sched::Beat").locator(".tag", has_text="Disabled")).to_have_count(1)
    assert r.sismember(keys.PERIODIC_DISABLED, BEAT.pjid)
    # a tick already past its check may still claim the slot of this second; no later one
    at_disable = int(r.time()[0])
    holds(lambda: last_slot(r, BEAT) <= at_disable + TICK, duration=4 * TICK)
    runs = r.llen("test:runs")
    holds(lambda: r.llen("test:runs") == runs, duration=3 * TICK)
    shown_last = row(page, "Sched::Beat").locator("time").last.get_attribute("datetime")
    row(page, "Sched::Beat").get_by_role("button", name="Enable Sched::Beat (* * * * * *)").click()
    expect(row(page, "Sched::Beat").locator(".tag", has_text="Enabled")).to_have_count(1)
    wait_for(lambda: r.llen("test:runs") >= runs + 2, timeout=WORKER_TIMEOUT)
    assert last_slot(r, BEAT) > at_disable + TICK  # a later slot: claimed after the enable
    if js:  # Live brings the new last run in
        last = row(page, "Sched::Beat").locator("time").last
        expect(last).not_to_have_attribute("datetime", shown_last or "", timeout=LIVE_TIMEOUT_MS)


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_run_now_runs_it_and_a_second_waits_for_the_first(
    visit: Any, worker: Worker, r: redis.Redis, js: bool
) -> None:
    page = visit("/schedules", js=js)
    if js:  # Live off: a refresh would take the action's notice away before it is read
        page.click("[data-cw-live-toggle]")
    row(page, "Sched::Hold").get_by_role("button", name="Run Sched::Hold now").click()
    expect(page.locator(".notice")).to_contain_text("Queued one run of the entry on its queue")
    wait_for(lambda: r.llen("test:held") == 1, timeout=WORKER_TIMEOUT)  # it runs, on queue held
    (jid,) = r.lrange("test:held", 0, -1)
    assert r.get(keys.periodic_running(HOLD.pjid)) == jid
    # the action's answer already shows the lock it took
    expect(row(page, "Sched::Hold").locator(".tag", has_text="run in progress")).to_have_count(1)
    row(page, "Sched::Hold").get_by_role("button", name="Run Sched::Hold now").click()
    expect(page.locator(".notice")).to_contain_text(
        "Not run: an earlier run of this until_executed"
    )
    assert r.llen(keys.queue("held")) == 0 and r.llen("test:held") == 1
    r.set("test:release", "1")
    wait_for(lambda: not r.exists(keys.periodic_running(HOLD.pjid)), timeout=WORKER_TIMEOUT)
    row(page, "Sched::Hold").get_by_role("button", name="Run Sched::Hold now").click()
    expect(page.locator(".notice")).to_contain_text("Queued one run of the entry on its queue")
    wait_for(lambda: r.llen("test:held") == 2, timeout=WORKER_TIMEOUT)
    assert r.get(keys.periodic_last_slot(HOLD.pjid)) == str(HOLD.schedule.slot(time.time()))


def test_a_search_survives_live_refreshes(visit: Any, r: redis.Redis) -> None:
    for job in ("Reports::Daily", "Reports::Weekly", "Sessions::Purge"):
        entry = Entry("0 3 * * *", job)
        r.hset(keys.PERIODIC_SCHEDULE, entry.pjid, entry.published())
    page = visit("/schedules", js=True)
    page.fill("#schedules-q", "reports")
    page.press("#schedules-q", "Enter")
    expect(page.locator("#schedules-content")).to_contain_text("2 of 3 shown")
    page.fill("#schedules-q", "reports::wee")  # being typed: a refresh must not take it away
    late = Entry("0 4 * * *", "Reports::Monthly")
    r.hset(keys.PERIODIC_SCHEDULE, late.pjid, late.published())
    expect(page.locator("#schedules-content")).to_contain_text(
        "3 of 4 shown", timeout=LIVE_TIMEOUT_MS
    )
    assert page.input_value("#schedules-q") == "reports::wee"
    expect(row(page, "Sessions::Purge")).to_have_count(0)
