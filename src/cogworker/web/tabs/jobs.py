"""The Jobs tab: one table over running, enqueued, scheduled, retrying and dead jobs, paged on
the server, with the status filter, the search, the detail panel and the actions.

Routes (relative to the mount):

* ``GET /jobs``: the view (``status``, ``q``, ``page``, ``selected``, ``entry``,
  ``selected_queue``, see ``jobs_data``); ``explain=1`` also draws the panel's explanation
  into the page (for a browser without JavaScript, whose page doesn't fetch it itself);
* ``GET /jobs/explain``: where the selected job is and why it waits (always a fragment);
* ``POST /jobs/<status>/<action>`` with ``raw`` (the exact stored entry, or ``raw_b64``) and
  the view's fields: ``enqueued/delete`` (with ``queue``), ``scheduled/delete | reschedule |
  add_to_queue | delete_all``, ``retrying/delete | retry_now | reschedule | kill | retry_all |
  delete_all``, ``dead/delete | retry | retry_all | delete_all``; ``reschedule`` takes
  ``minutes`` (1 to 10080);
* ``GET`` of a ``delete`` or ``delete_all`` route: its confirmation page (no JavaScript).

Every action acts on the exact stored entry, in one atomic step (see ``cogworker.api``), and
answers like every action of the dashboard (``actions.after_action``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker import api, wire
from cogworker.web import notices, urls
from cogworker.web.actions import Handler, action, after_action, audit, page, text_param
from cogworker.web.job_detail import explain_job
from cogworker.web.job_entries import delete_all, retry_all
from cogworker.web.job_sources import Status, score_hint
from cogworker.web.notices import Notice
from cogworker.web.rendering import is_hx
from cogworker.web.site import Site, Tab
from cogworker.web.tabs.jobs_confirm import confirm_delete, confirm_delete_all
from cogworker.web.tabs.jobs_data import View, jobs_page

MAX_MINUTES = 7 * 24 * 60
PLACES = {
    Status.SCHEDULED: "the scheduled set",
    Status.RETRYING: "the retry set",
    Status.DEAD: "the dead set",
}
ROUTES: dict[Status, tuple[str, ...]] = {
    Status.ENQUEUED: ("delete",),
    Status.SCHEDULED: ("delete", "reschedule", "add_to_queue", "delete_all"),
    Status.RETRYING: ("delete", "retry_now", "reschedule", "kill", "retry_all", "delete_all"),
    Status.DEAD: ("delete", "retry", "retry_all", "delete_all"),
}


def minutes_param(params: dict[str, Any]) -> int:
    text = str(params.get("minutes", "")).strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_MINUTES:
        raise urls.BadParameter(
            f"minutes must be a whole number from 1 to {MAX_MINUTES} (a week) (got {text!r})"
        )
    return int(text)


def entry_prefix(status: Status, raw: str) -> str:
    return f"{status.slug}:{urls.digest(raw)}"


def after_leaving(view: View, status: Status, raw: str, *, keep_jid: bool) -> View:
    """The view once the entry ``raw`` left its place: a panel open on it closes, or (when
    the job lives on elsewhere) shows the job by its jid alone."""
    if view.names(entry_prefix(status, raw)):
        return view.select(view.selected if keep_jid else "")
    return view


class JobsTab:
    def __init__(self, site: Site) -> None:
        self.site = site

    def routes(self) -> list[BaseRoute]:
        found: list[BaseRoute] = [
            Route("/jobs", page(self.show), methods=["GET"]),
            Route("/jobs/explain", page(self.explain), methods=["GET"]),
        ]
        for status, names in ROUTES.items():
            for name in names:
                path = f"/jobs/{status.slug}/{name}"
                found.append(Route(path, action(self.handler(status, name)), methods=["POST"]))
                if name == "delete":
                    confirm = self.confirmation(status, all_of_it=False)
                    found.append(Route(path, page(confirm), methods=["GET"]))
                elif name == "delete_all":
                    confirm = self.confirmation(status, all_of_it=True)
                    found.append(Route(path, page(confirm), methods=["GET"]))
        return found

    def handler(self, status: Status, name: str) -> Handler:
        if name == "delete":
            return self.delete(status)
        if name in ("retry_now", "retry", "add_to_queue"):
            return self.requeue(status)
        if name == "reschedule":
            return self.reschedule(status)
        if name == "kill":
            return self.kill
        if name == "retry_all":
            return self.retry_all(status)
        return self.delete_all(status)

    def confirmation(self, status: Status, *, all_of_it: bool) -> Handler:
        def show(request: Request, params: dict[str, Any]) -> Response:
            if all_of_it:
                return confirm_delete_all(self.site, request, params, status)
            return confirm_delete(self.site, request, params, status)

        return show

    # -- pages ---------------------------------------------------------------------------------

    def render(
        self, request: Request, view: View, shown: Notice | None, *, explain: bool = False
    ) -> Response:
        data = jobs_page(
            self.site.redis(),
            self.site.settings,
            view,
            orphan_threshold=self.site.config.orphan_threshold,
            explain=explain,
        )
        template = "jobs/content.html" if is_hx(request) else "jobs/page.html"
        return self.site.renderer.render(
            request, template, j=data, view=view, notice=shown, active="jobs"
        )

    def show(self, request: Request, params: dict[str, Any]) -> Response:
        shown = None if is_hx(request) else notices.take(request)
        explain = params.get("explain") == "1"
        return self.render(request, View.of(params), shown, explain=explain)

    def explain(self, request: Request, params: dict[str, Any]) -> Response:
        view = View.of(params)
        if not view.selected:
            raise urls.BadParameter("missing selected (the jid of the job to explain)")
        why = explain_job(self.site.redis(), view.selected, self.site.config.orphan_threshold)
        return self.site.renderer.render(request, "jobs/explain.html", why=why, view=view)

    # -- actions -------------------------------------------------------------------------------

    def answer(self, request: Request, view: View, shown: Notice) -> Response:
        def fragment(notice: Notice | None) -> Response:
            return self.render(request, view, notice)

        return after_action(request, shown, fragment, "jobs", view.pairs())

    def delete(self, status: Status) -> Handler:
        def handle(request: Request, params: dict[str, Any]) -> Response:
            view = View.of(params)
            raw = text_param(params, "raw")
            client = self.site.redis()
            record = api.JobRecord(raw)
            if status is Status.ENQUEUED:
                queue = text_param(params, "queue")
                removed = api.Queue(client, queue).delete(raw)
                place = f"queue {queue!r}"
            else:
                removed = int(api.JobSet(client, status.set_key).delete(raw))
                place = PLACES[status]
            if not removed:
                return self.answer(request, view, notices.notice("job_gone"))
            copies = "" if removed == 1 else f" ({removed} copies)"
            audit(
                request,
                f"deleted job {record.jid!r} ({record.job_class!r}) from {place}{copies}: "
                "it won't run",
            )
            shown = notices.notice("job_deleted", removed if removed > 1 else None)
            return self.answer(request, after_leaving(view, status, raw, keep_jid=False), shown)

        return handle

    def requeue(self, status: Status) -> Handler:
        def handle(request: Request, params: dict[str, Any]) -> Response:
            view = View.of(params)
            raw = text_param(params, "raw")
            outcome = api.JobSet(self.site.redis(), status.set_key).retry_now(raw)
            record = api.JobRecord(raw)
            if outcome == "invalid":
                return self.answer(request, view, notices.notice("not_requeueable"))
            if outcome != "requeued":
                return self.answer(request, view, notices.notice("entry_gone"))
            audit(
                request,
                f"put job {record.jid!r} ({record.job_class!r}) from {PLACES[status]} back on "
                f"queue {record.queue!r}: it runs after the jobs waiting there",
            )
            shown = notices.notice("job_requeued")
            return self.answer(request, after_leaving(view, status, raw, keep_jid=True), shown)

        return handle

    def reschedule(self, status: Status) -> Handler:
        def handle(request: Request, params: dict[str, Any]) -> Response:
            view = View.of(params)
            raw = text_param(params, "raw")
            minutes = minutes_param(params)
            due = wire.now() + minutes * 60
            if not api.JobSet(self.site.redis(), status.set_key).reschedule(raw, due):
                return self.answer(request, view, notices.notice("entry_gone"))
            record = api.JobRecord(raw)
            audit(
                request,
                f"rescheduled job {record.jid!r} ({record.job_class!r}) in {PLACES[status]}: "
                f"due in {minutes} minutes",
            )
            prefix = entry_prefix(status, raw)
            if view.names(prefix):  # the open panel follows it to its new due time
                view = view.select(view.selected, f"{prefix}:{score_hint(due)}")
            return self.answer(request, view, notices.notice("job_rescheduled", minutes))

        return handle

    def kill(self, request: Request, params: dict[str, Any]) -> Response:
        view = View.of(params)
        raw = text_param(params, "raw")
        if not api.retry_set(self.site.redis()).kill(raw):
            return self.answer(request, view, notices.notice("entry_gone"))
        record = api.JobRecord(raw)
        audit(
            request,
            f"moved job {record.jid!r} ({record.job_class!r}) from the retry set to the dead "
            "set: it is not retried again",
        )
        shown = notices.notice("job_killed")
        return self.answer(request, after_leaving(view, Status.RETRYING, raw, keep_jid=True), shown)

    def retry_all(self, status: Status) -> Handler:
        def handle(request: Request, params: dict[str, Any]) -> Response:
            view = View.of(params)
            done = retry_all(self.site.redis(), status)
            audit(
                request,
                f"put {done.requeued} jobs from {PLACES[status]} back on their queues "
                f"({done.left} that can't be requeued stayed): they run after the jobs "
                "waiting there",
            )
            if done.left:
                shown = notices.notice("set_retried_partly", done.requeued)
            elif done.requeued:
                shown = notices.notice("set_retried", done.requeued)
            else:
                shown = notices.notice("set_empty")
            return self.answer(request, view.at_page(1), shown)

        return handle

    def delete_all(self, status: Status) -> Handler:
        def handle(request: Request, params: dict[str, Any]) -> Response:
            view = View.of(params)
            removed = delete_all(self.site.redis(), status)
            audit(request, f"deleted all {removed} entries of {PLACES[status]}: they won't run")
            shown = notices.notice("set_cleared", removed if removed else None)
            if not removed:
                shown = notices.notice("set_empty")
            if view.entry.startswith(f"{status.slug}:"):
                view = view.unselected()
            return self.answer(request, view.at_page(1), shown)

        return handle


def routes(site: Site) -> Sequence[BaseRoute]:
    return JobsTab(site).routes()


TAB = Tab("Jobs", "jobs", routes)
