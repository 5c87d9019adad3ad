"""The Schedules tab: every published cron entry, its next and last run, its state, and run now,
disable and enable.

Routes (relative to the mount): ``GET /schedules`` (``q``: search class, cron and args;
``page``, of ``schedules_page_size`` entries);
``POST /schedules/<pjid>/run_now | disable | enable``. The entry is named by the ``pjid``
field when the form sends one, else by the path segment. Each action answers the view it
came from, search included (see ``actions.after_action``).

The search box sits outside the refreshing container, and the refresh URL carries ``q``, so
a Live refresh keeps both the text being typed and the filtered list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker import keys
from cogworker.periodic import admin
from cogworker.periodic.run_now import Outcome, run_now
from cogworker.web import notices, urls
from cogworker.web.actions import Handler, action, after_action, audit, page
from cogworker.web.notices import Notice
from cogworker.web.rendering import is_hx
from cogworker.web.site import Site, Tab
from cogworker.web.tabs.schedules_data import schedules

RUN_NOTICES = {
    Outcome.QUEUED: "schedule_run",
    Outcome.HELD: "schedule_held",
    Outcome.GONE: "schedule_gone",
    Outcome.UNREADABLE: "schedule_unreadable",
    Outcome.REFUSED: "schedule_refused",
}


@dataclass(frozen=True)
class View:
    """The search and the page: what every link, refresh, action and redirect keeps."""

    q: str = ""
    page: int = 1

    @classmethod
    def of(cls, params: dict[str, Any]) -> View:
        text = str(params.get("page") or "1")
        if not text.isdigit() or int(text) < 1:
            raise urls.BadParameter(f"page must be a whole number from 1 (got {text!r})")
        return cls(urls.read_carried(params, "q") or "", int(text))

    def at_page(self, page: int) -> View:
        return replace(self, page=page)

    def pairs(self) -> list[tuple[str, str]]:
        pairs = [urls.carried("q", self.q)] if self.q else []
        return pairs + ([("page", str(self.page))] if self.page > 1 else [])


def pjid_of(params: dict[str, Any]) -> str:
    """The entry an action names: its ``pjid`` field, else the path segment."""
    pjid = urls.read_carried(params, "pjid")
    if pjid is None:
        pjid = str(params.get("name", ""))
    if not pjid:
        raise urls.BadParameter("missing pjid (the entry's id)")
    return pjid


class SchedulesTab:
    def __init__(self, site: Site) -> None:
        self.site = site

    def routes(self) -> list[BaseRoute]:
        entry = "/schedules/{name:path}/"
        return [
            Route("/schedules", page(self.show), methods=["GET"]),
            Route(entry + "run_now", action(self.run_now), methods=["POST"]),
            Route(entry + "disable", action(self.switch(disabled=True)), methods=["POST"]),
            Route(entry + "enable", action(self.switch(disabled=False)), methods=["POST"]),
        ]

    def render(self, request: Request, view: View, shown: Notice | None) -> Response:
        settings = self.site.settings
        data = schedules(
            self.site.redis(), view.q, settings.time_format, view.page, settings.schedules_page_size
        )
        template = "schedules/content.html" if is_hx(request) else "schedules/page.html"
        return self.site.renderer.render(
            request, template, s=data, view=view, notice=shown, active="schedules"
        )

    def show(self, request: Request, params: dict[str, Any]) -> Response:
        shown = None if is_hx(request) else notices.take(request)
        return self.render(request, View.of(params), shown)

    def answer(self, request: Request, view: View, shown: Notice) -> Response:
        return after_action(
            request, shown, lambda n: self.render(request, view, n), "schedules", view.pairs()
        )

    def run_now(self, request: Request, params: dict[str, Any]) -> Response:
        pjid = pjid_of(params)
        done = run_now(self.site.config, self.site.redis(), pjid)
        if done.outcome is Outcome.QUEUED:
            audit(
                request,
                f"ran periodic entry {pjid!r} now: pushed {done.job_class!r} jid={done.jid} onto "
                f"queue {done.queue!r}, where it waits its turn",
            )
        elif done.outcome is Outcome.HELD:
            audit(
                request,
                f"run now of periodic entry {pjid!r} refused: jid={done.holder} holds its "
                "running lock; nothing pushed",
            )
        return self.answer(request, View.of(params), notices.notice(RUN_NOTICES[done.outcome]))

    def switch(self, *, disabled: bool) -> Handler:
        def handle(request: Request, params: dict[str, Any]) -> Response:
            pjid = pjid_of(params)
            client = self.site.redis()
            view = View.of(params)
            if not disabled:  # enabling an entry that is gone still clears the stale flag
                admin.enable(client, pjid)
                audit(request, f"enabled periodic entry {pjid!r}: workers run its next slot")
                return self.answer(request, view, notices.notice("schedule_enabled"))
            if not client.hexists(keys.PERIODIC_SCHEDULE, pjid):
                return self.answer(request, view, notices.notice("schedule_gone"))
            admin.disable(client, pjid)
            audit(request, f"disabled periodic entry {pjid!r}: workers skip its slots")
            return self.answer(request, view, notices.notice("schedule_disabled"))

        return handle


def routes(site: Site) -> Sequence[BaseRoute]:
    return SchedulesTab(site).routes()


TAB = Tab("Schedules", "schedules", routes)
