"""An extension's tab in a real browser (Debian's Chromium through Playwright): it shows in the
header after the built-in tabs, its page opens in the dashboard's shell marked as current, its
form posts and redirects, and its page refreshes itself with Live, with and without
JavaScript, without a console error or a request leaving 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from playwright.sync_api import Browser, expect
from starlette.responses import Response
from web_support import Served, open_page, serve

import cogworker
from cogworker.web.extensions import Action, Routes

pytestmark = pytest.mark.browser

PAGE = """
<div class="page-head"><h1>Notes</h1></div>
<div class="poll" id="notes-content" hx-get="{{ url('notes') }}"
     hx-trigger="every 1s [window.cogworkerLiveUpdate]" hx-swap="innerHTML">
{{ body }}
</div>
<section class="panel">
  <form method="post" action="{{ url('notes/add') }}">
    <input name="text" aria-label="Note">
    <button class="btn btn-primary btn-sm" type="submit">Add</button>
  </form>
</section>
"""
BODY = (
    '<p class="count-line">{{ notes|length }} notes</p>'
    "<ul>{% for n in notes %}<li>{{ n }}</li>{% endfor %}</ul>"
)


class Notes:
    def registered(self, routes: Routes) -> None:
        @routes.get("/notes")
        def show(action: Action) -> Response:
            notes = action.redis().lrange("test:notes", 0, -1)
            body = action.render(BODY, notes=notes)
            if action.hx:
                return Response(str(body), media_type="text/html")
            return action.page("Notes", PAGE, body=body)

        @routes.post("/notes/add")
        def add(action: Action) -> Response:
            action.redis().rpush("test:notes", action.param("text") or "")
            return action.redirect("notes")


@pytest.fixture
def served(config: cogworker.Config) -> Iterator[Served]:
    with serve(config, live_update_interval=1) as running:
        running.dashboard.register(Notes(), name="notes", tab="Notes", index="notes")
        yield running


@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_an_extension_tab_shows_up_and_works(
    browser: Browser, served: Served, r: redis.Redis, shots: Path, js: bool
) -> None:
    watched = open_page(browser, served, js=js)
    page = watched.page
    page.goto(served.base + "/overview")
    tabs = page.locator("nav.cw-tabs a")
    expect(tabs).to_have_text(
        ["Overview", "Jobs", "Schedules", "Workers", "History", "Metrics", "Notes"]
    )  # the built-in tabs, then the extension's
    tabs.filter(has_text="Notes").click()
    page.wait_for_url(served.base + "/notes")
    expect(page.locator('nav.cw-tabs a[aria-current="page"]')).to_have_text("Notes")
    expect(page.locator("#notes-content")).to_contain_text("0 notes")
    page.fill("input[name=text]", "<b>hello</b>")
    page.click("button:text-is('Add')")
    page.wait_for_url(served.base + "/notes")
    expect(page.locator("#notes-content li")).to_have_text(["<b>hello</b>"])  # escaped, as text
    if js:  # its own refreshing container, on the page's script
        r.rpush("test:notes", "from elsewhere")
        expect(page.locator("#notes-content")).to_contain_text("2 notes", timeout=10_000)
        page.screenshot(path=str(shots / "extension-tab-light.png"), full_page=True)
    watched.assert_clean()
    watched.close()
