"""Every tab of the example's web app, seeded with its demo data (``examples.seed``), in a real
browser (Debian's Chromium through Playwright), light and dark, with JavaScript and without:
each page answers 200 with its data, without a console error or a request leaving 127.0.0.1.
Screenshots of each go to ``$COGWORKER_SCREENSHOTS`` (else a temporary directory, printed)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from playwright.sync_api import Browser
from web_support import CHROMIUM, Served, open_page, screenshot_dir, serve_app

import cogworker
from cogworker import keys

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the examples are a package at the repository's root
    sys.path.insert(0, str(ROOT))

TABS = {
    "overview": ("/cogworker/overview", "Runs per day"),
    "overview-b": ("/cogworker/overview?layout=b&queue=default", "queued visitor"),
    "jobs": ("/cogworker/jobs", "23 jobs"),
    "jobs-retrying": ("/cogworker/jobs?status=Retrying", "FlakyJob"),
    "jobs-dead": ("/cogworker/jobs?status=Dead", "billing.ChargeCardJob"),
    "schedules": ("/cogworker/schedules", "4 of 4 shown"),
    "workers": ("/cogworker/workers", "demo-host:1234"),
    "job-status": ("/cogworker/status", "Job status"),
}


@contextlib.contextmanager
def serve_site(config: cogworker.Config) -> Iterator[Served]:
    """The example's web app (examples.web) under uvicorn in a thread on 127.0.0.1."""
    from examples.web import make_site

    site = make_site(config)
    dashboard = site.routes[1].app  # type: ignore[attr-defined]
    with serve_app(site, dashboard) as served:
        yield served


@pytest.fixture
def seeded(config: cogworker.Config, r: redis.Redis) -> Iterator[Served]:
    from examples.seed import seed

    seed(config)
    with serve_site(config) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """A Chromium of this module's own, stopped when it ends: this module runs before the
    other browser tests, and a running Playwright keeps an event loop on the main thread,
    where the tests in between call asyncio.run."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return screenshot_dir(tmp_path_factory)


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_every_tab_of_the_seeded_example_light_and_dark(
    browser: Browser, seeded: Served, r: redis.Redis, shots: Path, js: bool
) -> None:
    assert r.llen(keys.queue("default")) == 5
    for scheme in ("light", "dark"):
        watched = open_page(browser, seeded, js=js, scheme=scheme, width=1440, height=900)
        page = watched.page
        for name, (path, shown) in TABS.items():
            answer = page.goto(seeded.base + path)
            assert answer is not None and answer.status == 200, path
            page.wait_for_selector(f"text={shown}")
            suffix = "" if js else "-nojs"
            page.screenshot(
                path=str(shots / f"example-{name}-{scheme}{suffix}.png"), full_page=True
            )
        landing = page.goto(seeded.base + "/")
        assert landing is not None and page.url == seeded.base + "/cogworker/"
        watched.assert_clean()
        watched.close()
